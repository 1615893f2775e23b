"""The demo's HTML report in a real browser: headless Chromium (Debian's ``chromium`` package) driven by Playwright.

It opens ``report/index.html`` from disk (``file://``) with a fresh profile and the network features off, and
checks that every image loaded, that the page logged no console error, raised no page error and fetched nothing that
failed, and that the census table has one row per repo of the demo organisation. A screenshot of the whole page is
saved as a test artifact in ``artifacts/demo-report.png``.

Skipped, with the reason, where Chromium is not installed (``scripts/test.sh`` installs it with apt-get when it
can) or Playwright is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.demo_run import DemoRun, shared_demo_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # the demo run it opens takes about a minute

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EXPECTED_ROWS = [
    ("digits-lab/convnet-bn-base", "declared_consistent"),
    ("digits-lab/convnet-bn-retrain", "declared_consistent"),
    ("digits-lab/convnet-gn-base", "channel_absent"),
    ("digits-lab/digits-model-card", "no_weights"),
    ("digits-lab/timm-resnet10t-retrain", "undeclared"),
    ("digits-lab/transformers-resnet-retrain", "undeclared"),
    ("digits-lab/unlearn-badteacher-eval", "declared_consistent"),
    ("digits-lab/unlearn-badteacher-eval-gn", "channel_absent"),
    ("digits-lab/unlearn-finetune", "declared_inconsistent"),
    ("digits-lab/unlearn-ga-train", "declared_consistent"),
    ("digits-lab/unlearn-relabel-eval", "undeclared"),
    ("digits-lab/unlearn-relabel-eval-gn", "channel_absent"),
    ("digits-lab/unlearn-relabel-train", "undeclared"),
]


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if not CHROMIUM.is_file():
        pytest.skip(f"Chromium is not installed at {CHROMIUM}: install Debian's chromium package "
                    "(scripts/test.sh does it with apt-get when run as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
            headless=True, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return shared_demo_run(tmp_path_factory.mktemp("demo"))


def test_report_renders_in_chromium(browser_page, demo: DemoRun,  # type: ignore[no-untyped-def]
                                    repo_root: Path) -> None:
    page = browser_page.new_page()
    console: list[str] = []
    failures: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: failures.append(f"page error: {error}"))
    page.on("requestfailed", lambda request: failures.append(f"request failed: {request.url}"))
    response = page.goto(demo.report.as_uri(), wait_until="load")
    assert response is None or response.ok
    page.wait_for_function("Array.from(document.images).every(i => i.complete)")

    images = page.evaluate("Array.from(document.images).map(i => [i.getAttribute('src'), i.naturalWidth])")
    assert len(images) == 24  # cells and staleness plots of twelve audited checkpoints
    assert [src for src, width in images if width <= 0] == []

    rows = page.evaluate("Array.from(document.querySelectorAll('#census tbody tr'))"
                         ".map(r => [r.dataset.repo, r.dataset.class])")
    assert [tuple(row) for row in rows] == EXPECTED_ROWS
    assert page.title() == "The BatchNorm illusion on digits-lab: census, audits and refit annotations"

    artifacts = repo_root / "artifacts"
    artifacts.mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "demo-report.png"), full_page=True)
    shutil.copyfile(demo.report, artifacts / "demo-report.html")
    page.close()
    assert [line for line in console if line.startswith("error")] == []
    assert failures == []
