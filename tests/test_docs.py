"""Every command in the docs runs, from the starting point a reader has, and prints what the docs show; and
``docs/cli.md`` is the reference the parsers generate.

The starting point, the one the pages tell the reader to set up: an empty working folder, and in another shell
``bnconvention demo --serve``, the organisation ``digits-lab`` as its authors published it (no census, audit or pull
request yet) on a local Hub, with the lines it prints pasted: ``HF_ENDPOINT`` and ``HF_TOKEN`` (the auditor's; the
author's, a member of ``digits-lab``, for quickstart-author.md). The fixture runs the same code as that command
(:func:`bnconvention.demo.serve_demo`), afresh for each page, over the session's observed zoo; the environment is the
one the command prints (:meth:`ServedDemo.environment`). Everything else a page uses it makes itself (``bnconvention
examples write examples``, ``bnconvention zoo build --out zoo``). One shortcut: a page that runs ``bnconvention zoo
build --out zoo`` finds ``zoo/`` holding the session's zoo build, which the command verifies and reuses (same seed,
same code) instead of training for a minute.

How a document's fenced blocks are treated:

* ```` ```bash ```` blocks run with ``bash -e -u -o pipefail``; the block's exit status must be 0, or the number a
  line ``# exit code: N`` in the block names (for blocks that demonstrate a failure);
* a ```` ```text output ```` block right after a bash block shows (part of) its output, stdout and stderr as a
  terminal shows them: every line it shows must appear in the output, in this order (other lines may come
  between; runs of spaces compare as one; ``...`` on a line of its own marks omitted lines for the reader, and
  inside a line matches any text, such as a commit id or a number that depends on the machine);
* any block whose first line is ``# file: NAME`` is written to ``NAME`` instead (a script, a spec, a config the
  following commands use, e.g. ``python train.py``);
* other blocks (``text``, ``json``, ``yaml``, and ``python`` snippets that are not files) are shown, not run.
  Shell-like fences (``sh``, ``console``, ``shell``) are refused, so no command can hide from this test.

The README's two commands, shown in ``docs/index.md`` as text, are exercised elsewhere: the demo by test_demo.py
(``python -m bnconvention demo``, and ``demo --serve``), the test command by running this suite.
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
from helpers.shown_output import missing_output

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"
FENCE = re.compile(r"^(`{3,})([\w+-]*)([^\n]*)$")
FILE_MARK = re.compile(r"^#\s*file:\s*(\S+)\s*$")
EXIT_MARK = re.compile(r"^#\s*exit code:\s*(\d+)\s*$", re.MULTILINE)
REFUSED_FENCES = {"sh", "shell", "console", "zsh", "shell-session"}
BLOCK_TIMEOUT_S = 300
AUTHOR_PAGES = {"quickstart-author.md"}  # the pages that publish to digits-lab: they need the author's token
ZOO_BUILD = "bnconvention zoo build --out zoo"


@dataclass(frozen=True)
class Block:
    info: str
    body: str
    line: int  # 1-based line of the opening fence
    tags: tuple[str, ...] = ()  # the words after the language on the fence line (``output``)

    @property
    def shows_output(self) -> bool:
        return self.info == "text" and "output" in self.tags

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
        tags = tuple(match.group(3).split())
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].startswith(fence):
            body.append(lines[index])
            index += 1
        blocks.append(Block(info=info, body="\n".join(body) + "\n", line=start + 1, tags=tags))
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


# --- shown output ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("shown", "output", "missing"), [
    pytest.param("a b\n...\nc ... e\n", "x\na   b\nq\nc d e\n", [], id="gaps-spaces-wildcards"),
    pytest.param("a\nb\n", "b\na\n", ["b"], id="order-matters"),
    pytest.param("c d\n", "c d e\n", ["c d"], id="whole-line"),
    pytest.param("done 3/3\n", "run 1/3\rrun 3/3\rdone 3/3\n", [], id="carriage-returns"),
    pytest.param("p = 0.12 (x)\n", "p = 0312 (x)\n", ["p = 0.12 (x)"], id="no-regex"),
])
def test_shown_output_matching(shown: str, output: str, missing: list[str]) -> None:
    assert missing_output(shown, output) == missing


@pytest.mark.parametrize("name", RUN_DOCS)
def test_output_blocks_follow_commands(name: str) -> None:
    blocks = fenced_blocks((DOCS / name).read_text("utf-8"))
    orphans = [b.line for i, b in enumerate(blocks)
               if b.shows_output and (i == 0 or blocks[i - 1].info != "bash" or blocks[i - 1].file is not None)]
    assert orphans == [], f"docs/{name}: output blocks that follow no command, at lines {orphans}"


@pytest.mark.parametrize("name", RUN_DOCS)
def test_hub_pages_say_where_the_hub_comes_from(name: str) -> None:
    # a reader can only follow a page that talks to the Hub after starting the one the test starts
    blocks = fenced_blocks((DOCS / name).read_text("utf-8"))
    runs = "".join(b.body for b in blocks if b.info == "bash" and b.file is None)
    if re.search(r"bnconvention (hub|publish)\b", runs):
        shown = "".join(b.body for b in blocks if b.info == "text")
        assert "bnconvention demo --serve" in shown, f"docs/{name} talks to the Hub but never shows demo --serve"


def test_pages_use_the_demo_organisation() -> None:
    # one organisation everywhere: the one demo --serve publishes
    from bnconvention.demo import DEMO_ORG

    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "cli.md")  # cli.md: generated from the help texts
    stray = {name: sorted(set(re.findall(r"\b(my-lab|my-org|BNC_HUB)\b", (DOCS / name).read_text("utf-8"))))
             for name in pages}
    assert {name: found for name, found in stray.items() if found} == {}
    assert all(DEMO_ORG in (DOCS / name).read_text("utf-8") for name in ("quickstart-auditor.md",
                                                                          "quickstart-author.md",
                                                                          "quickstart-pipeline.md"))


# --- running the docs --------------------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """``bnconvention demo --serve`` for one page: digits-lab as published, on a fresh local Hub (the command's own
    code, over the observed zoo the demo tests share)."""
    from helpers.demo_run import observed_zoo_dir

    from bnconvention.demo import serve_demo

    with serve_demo(tmp_path_factory.mktemp("docs-demo") / "demo-output", zoo_dir=observed_zoo_dir(),
                    progress=False) as running:
        yield running


def _workdir(base: Path, blocks: list[Block], zoo) -> Path:  # noqa: ANN001
    """An empty working folder (and a home), with ``zoo/`` prebuilt for pages that build it (see the module doc)."""
    work = base / "work"
    work.mkdir()
    if any(ZOO_BUILD in b.body for b in blocks if b.info == "bash"):
        shutil.copytree(zoo.root, work / "zoo")
    (base / "home").mkdir()
    return work


def _env(base: Path, hub_env: dict[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "BNC_HUB", "HF_TOKEN",
                                                                         "HF_ENDPOINT")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "HF_HOME": str(base / "hf-home"), "HOME": str(base / "home"), "HF_HUB_DISABLE_TELEMETRY": "1",
        "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1",
    })
    env.update(hub_env)  # exactly what demo --serve prints to paste
    return env


def _run_block(block: Block, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = ["bash", "-e", "-u", "-o", "pipefail", "-c", block.body]
    return subprocess.run(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=BLOCK_TIMEOUT_S, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN_DOCS)
def test_doc_commands_run(name: str, served, zoo,  # type: ignore[no-untyped-def]  # noqa: ANN001
                          tmp_path: Path) -> None:
    blocks = fenced_blocks((DOCS / name).read_text("utf-8"))
    work = _workdir(tmp_path, blocks, zoo)
    env = _env(tmp_path, served.environment("author" if name in AUTHOR_PAGES else "auditor"))
    output = ""
    previous: Block | None = None
    for block in blocks:
        if block.file is not None:
            target = work / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body, "utf-8")
        elif block.info == "bash":
            done = _run_block(block, work, env)
            output = done.stdout
            assert done.returncode == block.expected_exit, (
                f"docs/{name} line {block.line}: exit {done.returncode}, expected {block.expected_exit}\n"
                f"--- block ---\n{block.body}--- output ---\n{output[-6000:]}")
        elif block.shows_output and previous is not None and previous.info == "bash" and previous.file is None:
            missing = missing_output(block.body, output)
            assert missing == [], (
                f"docs/{name} line {block.line}: the output shown is not what the command above prints; first "
                f"line not found (in order): {missing[0]!r}\n--- shown ---\n{block.body}--- output ---\n"
                f"{output[-6000:]}")
        previous = block
