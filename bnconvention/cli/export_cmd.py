"""``bnconvention export``: a release's record as an SPDX document or a CycloneDX model card."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bnconvention.authoring.sbom import export, read_release
from bnconvention.cli.commands import summary

EPILOG = """\
examples:
  bnconvention export release --format cyclonedx > release.cdx.json
  bnconvention export release/model.safetensors --format spdx --output release.spdx.json
  bnconvention export release --format spdx-2.3 > release.spdx2.json

Each weights file becomes an SPDX 3.0.1 AI package (spdx; spdx-2.3 writes an SPDX 2.3 package for the tools that
read 2.3 only) or a CycloneDX 1.6 machine-learning-model component with a modelCard: its sha256, the convention
of its stamped declaration, its digests, and the refit cells of the annotations under bnconvention/. The field
mapping: docs/standard.md ("Export to SPDX and CycloneDX").

Exit codes: 0 written, 1 a record is invalid, 2 unreadable input.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "export", help=summary("export"),
        description="Write a release's bnconvention records (convention, digests, refit cells) into an SPDX 3 "
                    "document (AI profile) or a CycloneDX BOM with a model card.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("release", metavar="RELEASE", type=Path, help="a release folder or a .safetensors file")
    parser.add_argument("--format", required=True, choices=("spdx", "spdx-2.3", "cyclonedx"),
                        help="the document to write: spdx (SPDX 3.0.1), spdx-2.3 or cyclonedx (1.6)")
    parser.add_argument("--name", default=None, help="the model's name (default: the release folder's name)")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE", help="write here (default: stdout)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.release.exists():
        raise FileNotFoundError(f"{args.release} does not exist (the release to export)")
    text = export(read_release(args.release, name=args.name), args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
        print(f"{args.output}: {args.format} document of {args.release}")
    return 0
