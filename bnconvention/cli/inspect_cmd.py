"""``bnconvention inspect``: what a weights file, a model card or a release folder declares."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bnconvention.authoring.inspection import inspect_path, inspection_text
from bnconvention.cli.commands import summary
from bnconvention.formats.text import one_line
from bnconvention.validation import best_issue

EPILOG = """\
examples:
  bnconvention inspect model.safetensors          # header facts, BatchNorm layers, the stamped record, digests
  bnconvention inspect README.md                  # the card's record (and the weights next to it)
  bnconvention inspect release/ --format json     # every file of a release folder, machine-readable

BatchNorm layers are read from the header alone; digests are checked by streaming the tensors. A weights file is
cross-checked with the README.md next to it. Exit codes (the validator's): 0 nothing wrong (warnings allowed),
1 errors (digest mismatch, card and header disagree, invalid record), 2 unreadable input.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help=summary("inspect"),
        description="Show the BatchNorm layers of a safetensors file (from its header), the declared convention "
                    "and its canonical name, whether the digests match the tensors and whether card and header "
                    "agree. Files are only read.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", type=Path, metavar="PATH", help="a .safetensors file, a model card or a folder")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inspection = inspect_path(args.path)
    if args.format == "json":
        sys.stdout.write(json.dumps(inspection.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(inspection_text(inspection))
    code = inspection.exit_code
    if code:
        errors = inspection.report.errors or inspection.report.issues
        best = best_issue(errors)
        label = "unreadable input" if code == 2 else "inspection found errors"
        if best is not None:
            print(f"bnconvention: {label}: {best.code}: {one_line(best.message)}", file=sys.stderr)
    return code
