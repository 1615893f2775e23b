"""Every command in the docs runs: the fenced blocks of each ``docs/*.md`` are executed in order, in a fresh folder
per document, against a local Hub the test starts; and ``docs/cli.md`` is the reference the parsers generate.

How a document's fenced blocks are treated:

* ```` ```bash ```` blocks run with ``bash -e -o pipefail``; the block's exit status must be 0, or the number a line
  ``# exit code: N`` in the block names (for blocks that demonstrate a failure);
* any block whose first line is ``# file: NAME`` is written to ``NAME`` instead (a script, a spec, a config the
  following commands use, e.g. ``python train.py``);
* other blocks (``text``, ``json``, ``yaml``, and ``python`` snippets that are not files) are shown, not run.
  Shell-like fences (``sh``, ``console``, ``shell``) are refused, so no command can hide from this test.

The environment the docs rely on: ``$BNC_HUB`` (also ``HF_ENDPOINT``) is the local Hub's endpoint, ``HF_TOKEN``
a token of user ``alice``, a member of the organisation ``my-lab``, which holds two releases from the digits zoo
(``my-lab/unlearned-badteacher`` with BatchNorm, undeclared, and its GroupNorm twin) and a card-only repo. The
working folder holds a copy of the repository's ``examples/`` and of the digits zoo in ``zoo/``.

The README's two commands, shown in ``docs/index.md`` as text, are exercised elsewhere: the demo by test_demo.py
(``python -m bnconvention demo``), the test command by running this suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"
FENCE = re.compile(r"^(`{3,})([\w+-]*)[^\n]*$")
FILE_MARK = re.compile(r"^#\s*file:\s*(\S+)\s*$")
EXIT_MARK = re.compile(r"^#\s*exit code:\s*(\d+)\s*$", re.MULTILINE)
REFUSED_FENCES = {"sh", "shell", "console", "zsh", "shell-session"}
TOKEN = "docs-test-token-for-alice"
BLOCK_TIMEOUT_S = 300


@dataclass(frozen=True)
class Block:
    info: str
    body: str
    line: int  # 1-based line of the opening fence

    @property
    def file(self) -> str | None:
        first = self.body.split("\n", 1)[0]
        match = FILE_MARK.match(first)
        return match.group(1) if match else None

    @property
    def expected_exit(self) -> int:
        match = EXIT_MARK.search(self.body)
        return int(match.group(1)) if match else 0


def fenced_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order."""
    blocks: list[Block] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        fence, info, start = match.group(1), match.group(2).lower(), index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].startswith(fence):
            body.append(lines[index])
            index += 1
        blocks.append(Block(info=info, body="\n".join(body) + "\n", line=start + 1))
        index += 1
    return blocks


def runnable(block: Block) -> bool:
    return block.file is not None or block.info == "bash"


RUN_DOCS = sorted(p.name for p in DOCS.glob("*.md") if any(runnable(b) for b in fenced_blocks(p.read_text("utf-8"))))


def test_fenced_block_parser() -> None:
    text = ("a\n```bash\n# exit code: 2\nfalse\n```\n````text\n```bash\nnot a fence end\n````\n"
            "```python\n# file: x.py\n```\n")
    blocks = fenced_blocks(text)
    assert [(b.info, b.line, b.expected_exit, b.file) for b in blocks] == [
        ("bash", 2, 2, None), ("text", 6, 0, None), ("python", 10, 0, "x.py")]
    assert blocks[1].body == "```bash\nnot a fence end\n"


def test_every_quickstart_has_commands() -> None:
    assert {"quickstart-author.md", "quickstart-auditor.md", "quickstart-pipeline.md", "faq.md"} <= set(RUN_DOCS)


@pytest.mark.parametrize("name", sorted(p.name for p in DOCS.glob("*.md")))
def test_no_shell_fence_escapes_the_test(name: str) -> None:
    blocks = fenced_blocks((DOCS / name).read_text("utf-8"))
    assert [b.line for b in blocks if b.info in REFUSED_FENCES] == []


@pytest.mark.parametrize("name", sorted(p.name for p in DOCS.glob("*.md")))
def test_relative_links_resolve(name: str) -> None:
    text = (DOCS / name).read_text("utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path = (DOCS / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{name}: link to {target} does not resolve"


def test_cli_reference_is_current() -> None:
    from bnconvention.cli.reference import render_reference

    current = (DOCS / "cli.md").read_text("utf-8")
    assert current == render_reference(), "docs/cli.md is out of date: python -m bnconvention.cli.reference docs/cli.md"


def test_cli_reference_covers_every_command() -> None:
    from bnconvention.cli.main import build_parser

    text = (DOCS / "cli.md").read_text("utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices  # noqa: SLF001
    for name in commands:
        assert f"### bnconvention {name}\n" in text, name


# --- running the docs --------------------------------------------------------------------------------------------


@pytest.fixture
def docs_hub(zoo, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]  # noqa: ANN001
    """The local Hub one document talks to (a fresh one per document), with the organisation ``my-lab`` seeded."""
    from bnconvention.hubserver import LocalHub

    card = "---\nlicense: mit\ntags:\n- digits\n---\n# {name}\n\nA digits classifier (class 3 forgotten).\n"
    with LocalHub(tmp_path_factory.mktemp("docs-hub"), tokens={TOKEN: "alice"}, orgs={"my-lab": ["alice"]},
                  durable=False) as hub:
        for repo, variant in (("unlearned-badteacher", "bn-badteacher-eval"),
                              ("unlearned-badteacher-gn", "gn-badteacher-eval")):
            hub.store.commit(f"my-lab/{repo}", author="alice", message="release", files={
                "model.safetensors": zoo.weights_path(variant).read_bytes(),
                "config.json": zoo.config_path(variant).read_bytes(),
                "README.md": card.format(name=repo).encode()})
        hub.store.commit("my-lab/model-card-only", author="alice", message="card",
                         files={"README.md": card.format(name="model-card-only").encode()})
        yield hub


def _workdir(base: Path, zoo) -> Path:  # noqa: ANN001
    work = base / "work"
    shutil.copytree(REPO_ROOT / "examples", work / "examples")
    shutil.copytree(zoo.root, work / "zoo")
    (base / "home").mkdir()
    return work


def _env(base: Path, endpoint: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HF_HUB_OFFLINE", None)
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "BNC_HUB": endpoint, "HF_ENDPOINT": endpoint, "HF_TOKEN": TOKEN, "HF_HOME": str(base / "hf-home"),
        "HOME": str(base / "home"), "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1", "NO_COLOR": "1",
    })
    return env


@pytest.mark.parametrize("name", RUN_DOCS)
def test_doc_commands_run(name: str, docs_hub, zoo,  # type: ignore[no-untyped-def]  # noqa: ANN001
                          tmp_path: Path) -> None:
    work = _workdir(tmp_path, zoo)
    env = _env(tmp_path, docs_hub.endpoint)
    for block in fenced_blocks((DOCS / name).read_text("utf-8")):
        if block.file is not None:
            target = work / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body, "utf-8")
            continue
        if block.info != "bash":
            continue
        command = ["bash", "-e", "-o", "pipefail", "-c", block.body]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
                              check=False)
        assert done.returncode == block.expected_exit, (
            f"docs/{name} line {block.line}: exit {done.returncode}, expected {block.expected_exit}\n"
            f"--- block ---\n{block.body}--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}")
