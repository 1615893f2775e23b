"""``bnconvention migrate``: upgrade a record of an older spec version, or a card's bnconvention block, to the
latest (the versions are the table in ``bnconvention/standard/versions.py``; registering the command imports no
pydantic, so its help names no version)."""

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
            "Upgrade a record of an older spec version (a .json declaration or refit annotation, or the "
            "bnconvention block of a model card) to the latest (docs/standard.md, \"Versioning and migration\"). "
            "Only spec_version changes: every older record means the same in the latest version, since each "
            "version only adds optional fields. The record must be valid first; a card keeps every byte outside its "
            "block. The write is atomic; on failure the original is left as it was. A record already at the latest "
            "version is left alone."),
        epilog="examples:\n  bnconvention migrate bnconvention/refit-0123456789ab.json\n"
               "  bnconvention migrate README.md\n"
               "  bnconvention migrate record.json --out record-latest.json",
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
