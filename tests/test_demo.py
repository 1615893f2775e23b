"""The demo end to end (one CLI run per session, shared with test_browser.py) and its pieces.

The BN illusion must show on the published organisation: the eval-mode distillation release displaced with a
verdict flip, the GroupNorm twins channel absent at exactly 0.00, the undeclared releases and the release whose
declaration no longer matches its weights flagged. A rerun reuses the zoo, the published organisation, the census,
the audits and the pull requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.demo_run import DemoRun, observed_zoo_dir, run_demo_cli, serve_demo_cli, shared_demo_run
from helpers.shown_output import missing_output

ORG = "digits-lab"
EXPECTED_CLASSES = {
    "convnet-bn-base": "declared_consistent",
    "convnet-bn-retrain": "declared_consistent",
    "convnet-gn-base": "channel_absent",
    "digits-model-card": "no_weights",
    # published by timm's and transformers' own code: no bnconvention record, like a real author's
    "timm-resnet10t-retrain": "undeclared",
    "transformers-resnet-retrain": "undeclared",
    "unlearn-badteacher-eval": "declared_consistent",
    "unlearn-badteacher-eval-gn": "channel_absent",
    # the stale record still names the right layers; the census catches it by the running buffers' digests (a few
    # KB of ranged reads), validation (which downloads the tensors) by every digest
    "unlearn-finetune": "declared_inconsistent",
    "unlearn-ga-train": "declared_consistent",
    "unlearn-relabel-eval": "undeclared",
    "unlearn-relabel-eval-gn": "channel_absent",
    "unlearn-relabel-train": "undeclared",
}
GROUPNORM = ("convnet-gn-base", "unlearn-badteacher-eval-gn", "unlearn-relabel-eval-gn")
LIBRARY_RELEASES = {"timm-resnet10t-retrain": "timm/resnet10t",
                    "transformers-resnet-retrain": "transformers/ResNetForImageClassification"}
AUDITED = sorted(name for name, cls in EXPECTED_CLASSES.items() if cls != "no_weights")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return shared_demo_run(tmp_path_factory.mktemp("demo"))


def _annotation(demo: DemoRun, name: str) -> dict:
    path = demo.out / "crawl" / "audits" / ORG / name / "model" / "annotation.json"
    return json.loads(path.read_text("utf-8"))


def _cell(annotation: dict, metric: str) -> dict:
    return next(c for c in annotation["cells"] if c["metric"] == metric)


@pytest.mark.slow
def test_census_classifies_every_release(demo: DemoRun) -> None:
    census = json.loads((demo.out / "crawl" / "org-census.json").read_text("utf-8"))
    found = {r["repo_id"].split("/", 1)[1]: r["status"] for r in census["repos"]}
    assert found == EXPECTED_CLASSES
    assert census["counts"] == {"no_weights": 1, "channel_absent": 3, "declared_consistent": 4,
                                "declared_inconsistent": 1, "undeclared": 4, "unreadable": 0}
    stale = next(r for r in census["repos"] if r["repo_id"] == f"{ORG}/unlearn-finetune")
    assert stale["reason"].startswith("the declaration is stale: the running buffers of layer ")


@pytest.mark.slow
def test_eval_mode_distillation_is_displaced_with_a_verdict_flip(demo: DemoRun) -> None:
    annotation = _annotation(demo, "unlearn-badteacher-eval")
    df = _cell(annotation, "df")
    assert df["shipped"] <= 0.05
    assert df["shift_pp"] > 50
    assert all(s > annotation["margin_pp"] for s in df["replicate_shifts_pp"])
    assert df["decision"] == {"outcome": "displaced", "p_value": 0.0009765625, "method": "exact-sign-test"}
    flips = {v["criterion"]: v["direction"] for v in annotation["verdicts"] if v["flipped"]}
    assert flips == {"df <= 0.05": "pass_to_fail"}
    assert annotation["subject"]["declared_convention"] == "frozen/train/train-transform/ema-m0.1"
    assert annotation["recoverability"]["forget_accuracy_after"] > 0.5
    assert "headline: digits-lab/unlearn-badteacher-eval ships df" in demo.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", GROUPNORM)
def test_groupnorm_twins_are_channel_absent_at_exactly_zero(demo: DemoRun, name: str) -> None:
    annotation = _annotation(demo, name)
    assert annotation["channel"] == "absent"
    for cell in annotation["cells"]:
        assert cell["shift_pp"] == 0.0
        assert cell["replicate_shifts_pp"] == [0.0] * annotation["replicates"]
        # every replicate reproduces the shipped value exactly (their float mean may differ in the last bit)
        assert cell["replicate_values"] == [cell["shipped"]] * annotation["replicates"]
    assert not any(v["flipped"] for v in annotation["verdicts"])


@pytest.mark.slow
def test_undeclared_and_inconsistent_releases_are_flagged(demo: DemoRun) -> None:
    issues = json.loads((demo.out / "crawl" / "validation.json").read_text("utf-8"))
    errors = {(i["file"], i["code"]) for i in issues if i["severity"] == "error"}
    stale = f"{ORG}/unlearn-finetune/model.safetensors"
    assert {(stale, "digests.trainable_mismatch"), (stale, "digests.running_mismatch")} <= errors
    assert {file for file, _ in errors} == {stale}  # every other release validates
    warnings = {i["file"] for i in issues if i["severity"] == "warning" and i["code"] == "declaration.missing"}
    assert warnings == {f"{ORG}/{name}/model.safetensors" for name in ("unlearn-relabel-eval", "unlearn-relabel-train",
                                                                       *LIBRARY_RELEASES)}
    flagged_block = demo.stdout.split("flagged releases (5):\n", 1)[1].split("\n\n", 1)[0]
    lines = {line.split()[0]: line for line in flagged_block.splitlines()}
    assert sorted(lines) == sorted(f"{ORG}/{name}" for name in ("unlearn-finetune", "unlearn-relabel-eval",
                                                                "unlearn-relabel-train", *LIBRARY_RELEASES))
    assert "census: declared_inconsistent: the declaration is stale" in lines.pop(f"{ORG}/unlearn-finetune")
    assert all("census: undeclared" in line for line in lines.values())


@pytest.mark.slow
def test_the_stale_release_is_not_anchored(demo: DemoRun) -> None:
    # its weights changed after the accuracies in config.json were published: the audit says so and leaves it out
    annotation = _annotation(demo, "unlearn-finetune")
    assert annotation["anchoring"]["anchored"] is False
    population = json.loads((demo.out / "crawl" / "population.json").read_text("utf-8"))
    assert population["counts"]["checkpoints"] == len(AUDITED)
    assert population["counts"]["eligible"] == len(AUDITED) - 1
    assert population["counts"]["channel_absent"] == len(GROUPNORM)


@pytest.mark.slow
def test_pull_requests_carry_the_annotations(demo: DemoRun) -> None:
    from huggingface_hub import HfApi

    from bnconvention.hubserver import LocalHub

    with LocalHub(demo.out / "hub", durable=False) as hub:
        api = HfApi(endpoint=hub.endpoint, token=False)
        for name in AUDITED:
            repo_id = f"{ORG}/{name}"
            prs = list(api.get_repo_discussions(repo_id, discussion_type="pull_request"))
            assert [(p.status, p.author) for p in prs] == [("open", "auditor")], repo_id
            files = api.list_repo_files(repo_id, revision=f"refs/pr/{prs[0].num}")
            annotations = [f for f in files if f.startswith("bnconvention/refit-") and f.endswith(".json")]
            assert len(annotations) == 1, files
            assert not any(f.startswith("bnconvention/") for f in api.list_repo_files(repo_id))  # main untouched
    assert f"{ORG}/unlearn-badteacher-eval pull request #1 (refs/pr/1) validates: exit 0" in demo.stdout


@pytest.mark.slow
def test_report_annotations_validate(demo: DemoRun) -> None:
    from bnconvention.validation import validate_paths

    annotations = sorted((demo.out / "report" / "annotations").glob("*.json"))
    assert len(annotations) == len(AUDITED)
    report = validate_paths(annotations)
    assert report.exit_code == 0, [i.to_dict() for i in report.issues]


@pytest.mark.slow
def test_huggingface_hub_writes_only_inside_the_demo_output(demo: DemoRun) -> None:
    assert not (demo.home / ".cache" / "huggingface").exists()


@pytest.mark.slow
def test_observed_zoo_has_the_shared_zoo_bytes(demo: DemoRun, zoo) -> None:  # noqa: ANN001 - session fixture
    # observing training with the recorder changes nothing: the weights are the shared fixture's, byte for byte
    from bnconvention.zoo import read_manifest

    observed = read_manifest(demo.zoo)
    for name in zoo.variants:
        assert observed.files[f"{name}.safetensors"] == zoo.files[f"{name}.safetensors"], name
        assert observed.observation_path(name) is not None


@pytest.mark.slow
def test_the_population_census_tells_its_story_from_the_data(demo: DemoRun, tiny_population) -> None:  # noqa: ANN001
    census = json.loads((demo.out / "population-census" / "census.json").read_text("utf-8"))
    assert census["counts"]["checkpoints"] == len(tiny_population.names)
    assert census["families"] is not None and census["twin_gaps"] is not None
    from bnconvention.audit.population import CensusResult
    from bnconvention.audit.population.story import population_story

    # what the summary and the page say is what census.json holds
    story = population_story(CensusResult.model_validate(census))
    assert f"  headline: {story[0]}" in demo.stdout
    page = (demo.out / "report" / "population.html").read_text("utf-8")
    assert all(f'id="{section}"' in page for section in ("forest-plot", "margin-sweep-plot", "detection-floor-table",
                                                           "recoverability-plot", "twin-gap-plot", "staleness-scatter"))
    index = demo.report.read_text("utf-8")
    assert 'href="population.html"' in index and 'id="population"' in index


@pytest.mark.slow
def test_rerun_reuses_everything(demo: DemoRun) -> None:
    done = run_demo_cli(demo.out, demo.home, demo.zoo)
    assert done.returncode == 0, done.stderr[-4000:]
    last = done.stdout.strip().splitlines()[-1]
    assert "reused: zoo, publish, 13 census, 12 audits, 12 pushes, 14 population audits" in last
    assert "pull requests with refit annotations: 12 (0 opened in this run, 12 from an earlier run)" in done.stdout
    # the same findings: census, audits, headline, flagged releases
    def findings(text: str) -> str:
        return text.split("\n", 1)[1].split("pull requests with refit annotations")[0]

    assert findings(done.stdout) == findings(demo.stdout)


# --- demo --serve: the quickstarts' starting point ----------------------------------------------------------------


def _exports(stdout: str) -> list[tuple[str, str, str]]:
    """``(variable, value, comment)`` of every ``export`` line demo --serve printed."""
    found = []
    for line in stdout.splitlines():
        words = line.strip()
        if words.startswith("export "):
            assignment, _, comment = words.removeprefix("export ").partition("#")
            name, _, value = assignment.strip().partition("=")
            found.append((name, value, comment.strip()))
    return found


@pytest.mark.slow
def test_serve_keeps_the_published_organisation_up_until_ctrl_c(tmp_path: Path, repo_root: Path) -> None:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from bnconvention.demo import AUDITOR, AUTHOR, DEMO_ORG, RELEASES

    home = tmp_path / "home"
    home.mkdir()
    with serve_demo_cli(tmp_path / "out", home, observed_zoo_dir()) as serving:
        exports = _exports(serving.stdout)
        assert [name for name, _, _ in exports] == ["HF_ENDPOINT", "HF_TOKEN", "HF_TOKEN"]
        endpoint, auditor, author = (value for _, value, _ in exports)
        assert "auditor" in exports[1][2] and AUTHOR in exports[2][2]
        api = HfApi(endpoint=endpoint, token=auditor)
        assert api.whoami()["name"] == AUDITOR
        assert HfApi(endpoint=endpoint, token=author).whoami()["name"] == AUTHOR
        # the organisation as its authors published it: every release, no pull request yet
        assert sorted(m.id for m in api.list_models(author=DEMO_ORG)) == sorted(r.repo_id for r in RELEASES)
        assert list(api.get_repo_discussions(f"{DEMO_ORG}/unlearn-badteacher-eval")) == []
        # the auditor may not publish to the organisation; its author may
        with pytest.raises(HfHubHTTPError):
            api.create_repo(f"{DEMO_ORG}/auditor-attempt")
        HfApi(endpoint=endpoint, token=author).create_repo(f"{DEMO_ORG}/author-attempt")
        code, stderr = serving.stop()
    assert code == 0, stderr[-4000:]
    assert "stopped" in stderr
    # docs/index.md shows what it prints
    index = (repo_root / "docs" / "index.md").read_text("utf-8")
    shown = [block for block in index.split("```") if block.startswith("text\nbnconvention demo --serve:")]
    assert len(shown) == 1
    assert missing_output(shown[0].removeprefix("text\n"), serving.stdout) == []


def test_serve_says_what_it_builds_without_progress_bars(tmp_path: Path) -> None:
    """What a redirected ``demo --serve`` (no terminal: no bars) writes while it builds: a line per stage."""
    import io

    from bnconvention.demo import serve_demo

    stream = io.StringIO()
    with serve_demo(tmp_path / "out", zoo_dir=observed_zoo_dir(), progress=False, stage_lines=True, stream=stream):
        lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[demo 1/2] zoo: digits zoo") and lines[1].startswith("[demo 1/2] zoo: done in")
    assert lines[2].startswith("[demo 2/2] publish: ") and lines[3].startswith("[demo 2/2] publish: done in")


@pytest.mark.slow
def test_serve_starts_over_from_the_published_state(tmp_path: Path) -> None:
    # what one session published (a new repo) is gone at the next start; a full demo's crawl is not touched
    from huggingface_hub import HfApi

    from bnconvention.demo import DEMO_ORG, DemoPaths, serve_demo

    paths = DemoPaths.under(tmp_path / "out", zoo=observed_zoo_dir())
    paths.claim()
    (paths.crawl).mkdir()
    (paths.crawl / "keep.txt").write_text("a full demo's crawl")
    for _ in range(2):
        with serve_demo(paths.root, zoo_dir=paths.zoo, progress=False) as served:
            api = HfApi(endpoint=served.endpoint, token=served.environment("author")["HF_TOKEN"])
            names = {m.id for m in api.list_models(author=DEMO_ORG)}
            assert f"{DEMO_ORG}/scratch" not in names
            api.create_repo(f"{DEMO_ORG}/scratch")
    assert (paths.crawl / "keep.txt").read_text() == "a full demo's crawl"


def test_a_full_demo_waits_for_the_serve_in_its_folder(tmp_path: Path) -> None:
    from bnconvention.demo import run_demo, serve_demo
    from bnconvention.errors import UsageError

    with serve_demo(tmp_path / "out", zoo_dir=observed_zoo_dir(), progress=False), \
            pytest.raises(UsageError, match="stop its --serve"):
        run_demo(tmp_path / "out", zoo_dir=observed_zoo_dir(), progress=False)


def test_serve_refuses_a_port_in_use(tmp_path: Path) -> None:
    import socket

    from bnconvention.cli.main import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["demo", "--serve", "--port", str(port), "--out", str(tmp_path / "out"), "--zoo",
                     str(observed_zoo_dir()), "--no-progress"])
    assert code == 2


def test_port_needs_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bnconvention.cli.main import main

    assert main(["demo", "--port", "8900", "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "--port applies to --serve only" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- pieces -----------------------------------------------------------------------------------------------------


def test_demo_spec_is_the_example_spec(repo_root: Path) -> None:
    from bnconvention.audit.spec import load_spec
    from bnconvention.demo import demo_spec

    assert demo_spec() == load_spec(repo_root / "examples" / "audit" / "digits-zoo.yaml")


def test_demo_refuses_a_folder_it_did_not_create(tmp_path: Path) -> None:
    from bnconvention.demo import DemoPaths
    from bnconvention.errors import UsageError

    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(UsageError, match="did not create"):
        DemoPaths.under(tmp_path).claim()
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_cli_refuses_a_foreign_folder_with_exit_2(tmp_path: Path) -> None:
    from bnconvention.cli.main import main

    (tmp_path / "notes.md").write_text("mine")
    assert main(["demo", "--out", str(tmp_path), "--no-progress"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md"]


def test_wipe_keeps_a_zoo_outside_the_output(tmp_path: Path) -> None:
    from bnconvention.demo import DemoPaths

    outside = tmp_path / "shared-zoo"
    outside.mkdir()
    paths = DemoPaths.under(tmp_path / "out", zoo=outside)
    paths.claim()
    for folder in (paths.hub, paths.crawl, paths.report, paths.releases):
        folder.mkdir()
    paths.published.write_text("{}")
    paths.wipe()
    assert sorted(p.name for p in paths.root.iterdir()) == [".bnconvention-demo"]
    assert outside.is_dir()


def test_a_second_demo_in_the_same_folder_is_refused(tmp_path: Path) -> None:
    from filelock import FileLock

    from bnconvention.demo import DemoPaths, run_demo
    from bnconvention.errors import UsageError

    paths = DemoPaths.under(tmp_path / "out")
    paths.claim()
    with FileLock(str(paths.lock)), pytest.raises(UsageError, match="another bnconvention demo is running"):
        run_demo(paths.root, progress=False)
    assert sorted(p.name for p in paths.root.iterdir()) == [".bnconvention-demo", ".bnconvention-demo.lock"]
