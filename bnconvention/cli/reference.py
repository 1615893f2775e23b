"""Generate ``docs/cli.md``, the CLI reference, from the argparse parsers themselves, so it cannot drift:

    .venv/bin/python -m bnconvention.cli.reference docs/cli.md          # rewrite it
    .venv/bin/python -m bnconvention.cli.reference docs/cli.md --check  # exit 1 when it is out of date

Every command and subcommand gets a section with its ``--help`` text (formatted at a fixed width of 100 columns, so
the output does not depend on the terminal).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from bnconvention.cli.main import build_parser
from bnconvention.formats.atomic import sync_generated_file

WIDTH = 100
INTRO = """# CLI reference

Every command of `bnconvention`, with its options and examples, as `bnconvention COMMAND --help` prints them.
Generated from the parsers by `python -m bnconvention.cli.reference docs/cli.md` (a test checks that this file is
current). The quickstarts show the commands at work: [author](quickstart-author.md),
[auditor](quickstart-auditor.md), [pipeline](quickstart-pipeline.md).

Exit codes (every command): **0** success / no errors, **1** errors found or the operation failed, **2** unreadable
input or bad usage, **130** interrupted. Errors are one line on stderr (`bnconvention: <kind>: <message>`); add
`--traceback` (or `BNC_TRACEBACK=1`) for the full traceback. A model factory that cannot be imported names the
module and the fix (`cannot load factory`, exit 2); one that raises is `model factory failed` (exit 1). An
exception of a type we did not anticipate is still one line, `bnconvention: internal error: TypeName: message
(rerun with --traceback and report it)`, exit 1: it is a bug, and the traceback is what to report.

Installation: `pip install bnconvention` is enough for `validate`, `inspect`, `stamp`, `card`, `schema`, `publish`,
`hub census`, `hub validate`, `hub publish` and `hubserver` (no torch; this is what the pre-commit hook installs).
`declare`, `refit` and `zoo build` need `pip install 'bnconvention[refit]'` (torch, torchvision, numpy,
scikit-learn); `audit`, `census`, `demo`, `hub audit` and `hub push` need `pip install 'bnconvention[audit]'` (the
refit extra plus scipy and matplotlib). Without them these commands stop with one line naming the extra
(`bnconvention: missing dependency: ...`, exit 1).

Progress bars go to stderr only when stderr is a terminal; `--progress` forces them (e.g. under a terminal that
is not detected as one), `--no-progress` hides them. Piped or CI output never holds bar redraws.
"""


@contextlib.contextmanager
def _fixed_width(columns: int) -> Iterator[None]:
    """argparse wraps help at the terminal width (``COLUMNS`` - 2): pin it while formatting."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns + 2)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """``(name, parser, one-line help)`` of the parser's subcommands, in registration order."""
    found = []
    for action in parser._actions:  # noqa: SLF001 - argparse exposes subparsers only this way
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}  # noqa: SLF001
            found += [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
    return found


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str, str]]:
    for name, sub, summary in _subcommands(parser):
        here = (*path, name)
        yield here, summary, sub.format_help()
        yield from _walk(sub, here)


def _anchor(words: Sequence[str]) -> str:
    return "-".join(words)


def render_reference() -> str:
    """The whole of ``docs/cli.md``."""
    with _fixed_width(WIDTH):
        parser = build_parser()
        top = parser.format_help()
        entries = list(_walk(parser, ("bnconvention",)))
    lines = [INTRO, "## Commands", ""]
    lines += [f"- [`{' '.join(path)}`](#{_anchor(path)}): {summary}" for path, summary, _ in entries]
    lines += ["", "## bnconvention", "", "```text", top.rstrip(), "```", ""]
    for path, _, text in entries:
        lines += [f"{'#' * min(len(path) + 1, 4)} {' '.join(path)}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bnconvention.cli.reference",
                                     description="Write (or check) the CLI reference generated from the parsers.")
    parser.add_argument("path", type=Path, help="the Markdown file, e.g. docs/cli.md")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    return sync_generated_file(args.path, render_reference(), check=args.check,
                               command=f"python -m bnconvention.cli.reference {args.path}")


__all__ = ["WIDTH", "main", "render_reference"]

if __name__ == "__main__":
    raise SystemExit(main())
