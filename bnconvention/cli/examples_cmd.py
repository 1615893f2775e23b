"""``bnconvention examples write``: write the example audit spec and releases the docs use into a folder."""

from __future__ import annotations

import argparse
import os

from bnconvention.cli.commands import summary
from bnconvention.errors import UsageError
from bnconvention.examples import write_examples


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "examples",
        help=summary("examples"),
        description="The examples shipped with bnconvention: audit/digits-zoo.yaml (the audit spec of the digits "
                    "zoo), releases/ (a declared BatchNorm release and its GroupNorm twin) and broken/ (an "
                    "undeclared release, a stale record, a card that disagrees with its weights).",
        epilog="examples:\n"
               "  bnconvention examples write                # into ./examples\n"
               "  bnconvention examples write /tmp/examples --force",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="examples_action", metavar="ACTION")
    write = actions.add_parser(
        "write",
        help="write every example file into a folder (identical files are left alone)",
        description="Write the example files into DIR (created if missing). Files already there with the same "
                    "bytes are left alone; a file with other bytes is refused (nothing is written) unless --force.",
        epilog="example:\n  bnconvention examples write examples && bnconvention validate examples/releases",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    write.add_argument("dir", nargs="?", default="examples", metavar="DIR",
                       help="folder to write into (default: ./examples)")
    write.add_argument("--force", action="store_true", help="replace example files that were changed in DIR")
    write.set_defaults(func=run)
    parser.set_defaults(func=_missing_action)


def _missing_action(args: argparse.Namespace) -> int:
    raise UsageError("bnconvention examples needs an action: bnconvention examples write [DIR] [--force]")


def run(args: argparse.Namespace) -> int:
    done = write_examples(args.dir, force=args.force)
    total = len(done.written) + len(done.unchanged)
    print(f"{done.folder}{os.sep}: {len(done.written)} of {total} example files written, "
          f"{len(done.unchanged)} already up to date")
    for name in done.written:
        print(f"  {name}")
    return 0
