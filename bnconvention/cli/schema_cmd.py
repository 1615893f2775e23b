"""``bnconvention schema``: print (or write) the JSON Schema of the standard."""

from __future__ import annotations

import argparse
from pathlib import Path

from bnconvention.cli.commands import summary
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.standard.schema import schema_text


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "schema",
        help=summary("schema"),
        description="Print the Draft 2020-12 JSON Schema of a version-1 record, generated from the models.",
        epilog="examples:\n  bnconvention schema > bnconvention.schema.json\n"
               "  bnconvention schema --write   # refresh schema/v1/ in a checkout",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--write", nargs="?", const="schema/v1/bnconvention.schema.json", metavar="PATH",
                        help="write the schema to PATH (default: schema/v1/bnconvention.schema.json)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = schema_text()
    if args.write:
        atomic_write_text(Path(args.write), text)
        print(f"wrote {args.write}")
    else:
        print(text, end="")
    return 0
