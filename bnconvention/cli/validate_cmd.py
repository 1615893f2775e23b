"""``bnconvention validate``: offline check of records, safetensors headers, model cards and release folders.

Importing this module does not import torch: the validator is the core install's (the pre-commit hook's), and the
CLI imports this module alone when ``validate`` runs (:mod:`bnconvention.cli.commands`).
"""

from __future__ import annotations

import argparse
import sys

from bnconvention.cli.commands import summary
from bnconvention.validation import render, validate_paths

EPILOG = """\
examples:
  bnconvention validate examples/releases              # every release under a folder
  bnconvention validate model.safetensors README.md    # one release's files, cross-checked
  bnconvention validate record.json --format json      # machine-readable issues
  bnconvention validate . --format github --require-declaration   # in a CI workflow
  bnconvention validate --skip-non-records config.json record.json  # as the pre-commit hook: records only

exit codes: 0 no errors (warnings allowed), 1 errors found, 2 unreadable input or bad usage.
Issue codes and their meaning: docs/standard.md ("Validation issue codes").
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help=summary("validate"),
        description=(
            "Validate bnconvention records offline. PATH may be a record (.json), a .safetensors file (only the "
            "header is parsed; tensors are streamed for the digests), a model card (.md) or a folder holding model "
            "releases. Every problem is reported with a stable code, severity, file and JSON-pointer path. Input "
            "files are never modified."),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="records, weights files, cards or folders")
    parser.add_argument("--format", choices=("text", "json", "github"), default="text",
                        help="text for people (default), json for programs, github for workflow annotations")
    parser.add_argument("--require-declaration", action="store_true",
                        help="a weights file with BatchNorm running buffers and no declaration is an error "
                             "(by default a warning)")
    parser.add_argument("--skip-non-records", action="store_true",
                        help="validate a .json file named only when its content is a record (a JSON object with "
                             "spec_version or a record kind, whatever its name), as in a folder; pass over the "
                             "others (config.json, tokenizer.json). The pre-commit hook passes it with every .json "
                             "file; without it a .json file named is always validated as a record")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = validate_paths(args.paths, require_declaration=args.require_declaration,
                            skip_non_records=args.skip_non_records)
    sys.stdout.write(render(report, args.format))
    sys.stdout.flush()
    return report.exit_code
