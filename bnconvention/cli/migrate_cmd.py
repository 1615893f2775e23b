"""``bnconvention migrate``: upgrade a spec_version 1.0 record, or a card's bnconvention block, to 1.1."""

from __future__ import annotations

import argparse
from pathlib import Path

from bnconvention.authoring.migrate import migrate_file
from bnconvention.cli.commands import summary


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help=summary("migrate"),
        description=(
            "Upgrade a record of spec version 1.0 (a .json declaration or refit annotation, or the bnconvention "
            "block of a model card) to 1.1. Only spec_version changes: every 1.0 record means the same in 1.1, "
            "which adds optional fields. The record must be valid first; a card keeps every byte outside its "
            "block. The write is atomic; on failure the original is left as it was. A record already at 1.1 is "
            "left alone."),
        epilog="examples:\n  bnconvention migrate bnconvention/refit-0123456789ab.json\n"
               "  bnconvention migrate README.md\n"
               "  bnconvention migrate record.json --out record-1.1.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("record", type=Path, metavar="RECORD.json|README.md", help="the record or model card")
    parser.add_argument("--out", type=Path, metavar="PATH", help="write the migrated file here (default: in place)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = migrate_file(args.record, out=args.out)
    if result.written is None:
        print(f"{args.record}: already spec_version {result.version_after}; nothing written")
    else:
        print(f"{args.record}: spec_version {result.version_before} -> {result.version_after}, wrote "
              f"{result.written}")
    return 0
