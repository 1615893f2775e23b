"""``bnconvention reproduce``: re-run the audit a refit annotation records and check its cells come back."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bnconvention.audit.run import Reproduction, reproduce_local, reproduction_lines
from bnconvention.audit.spec import load_spec
from bnconvention.cli.audit_cmd import allow_factories
from bnconvention.cli.commands import summary
from bnconvention.cli.device_option import add_device_option, chosen_device
from bnconvention.errors import UsageError
from bnconvention.standard.decision_rules import REPRODUCTION_TOLERANCE as TOLERANCE

EPILOG = """examples:
  bnconvention reproduce audit-model/annotation.json --spec audit.yaml --weights model.safetensors
  bnconvention reproduce audit-model --spec audit.yaml            # weights from the folder's result.json
  bnconvention reproduce annotation.json --spec audit.yaml --weights model.safetensors --format json
  bnconvention hub reproduce my-org/model --pr 3 --spec audit.yaml  # the annotation of a Hub pull request

The annotation keeps the refit convention (rule, transform, pool size, seed, dataset id and revision), R and the
margin, not the whole spec: --spec is the audit's spec, and every field the annotation keeps must agree with it.
The weights must have the annotation's trainable and running digests; a Hub dataset is read at the revision the
annotation recorded; with the original result.json beside the annotation, each replicate's pool must hold the same
records. A cell reproduces when its shipped value is the annotated one within the tolerance, every reproduced
replicate value lies in the annotation's replicate range (min..max) widened by the tolerance and every annotated
one in the reproduction's, and its decision is the same; every verdict and flip must be the same
(docs/statistics.md, "Reproducing an annotation").

Exit codes: 0 reproduced; 1 not reproduced (the cells and criteria that differ are named); 2 unreadable or
unavailable input (named: the annotation, a spec that is not the annotation's, weights whose digests differ, a
pool or dataset revision that no longer exists) or bad usage; 130 interrupted.
"""


def add_reproduce_options(parser: argparse.ArgumentParser) -> None:
    """The options ``reproduce`` and ``hub reproduce`` share."""
    parser.add_argument("--spec", required=True, metavar="SPEC", help="the audit spec the annotation was computed "
                                                                      "under (.yaml, .yml or .json)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, metavar="T",
                        help=f"widening of the replicate ranges, in the cells' unit (default: {TOLERANCE:g})")
    parser.add_argument("--allow-factory", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="allow your own model factory for this run (repeatable), as the audit did")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    add_device_option(parser)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help=summary("reproduce"),
        description="Reproduce a refit annotation: check the spec and the weights' digests against it, read the "
                    "annotated pool, re-run the audit, and compare each cell with the annotation's own replicate "
                    "range and each decision and verdict with the annotation's.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("annotation", metavar="ANNOTATION",
                        help="the annotation.json, or the audit output folder holding it")
    parser.add_argument("--weights", metavar="WEIGHTS",
                        help="the annotated checkpoint (default: the weights_path of the result.json beside the "
                             "annotation)")
    add_reproduce_options(parser)
    parser.set_defaults(func=run)


def checked_tolerance(args: argparse.Namespace) -> float:
    if not args.tolerance >= 0:
        raise UsageError(f"--tolerance must not be negative, got {args.tolerance:g}")
    return float(args.tolerance)


def report(results: list[Reproduction], fmt: str) -> int:
    """Print the reproductions; the exit code is 0 when all reproduced, else 1."""
    if fmt == "json":
        sys.stdout.write(json.dumps([{**r.model_dump(mode="json"), "reproduced": r.reproduced,
                                      "differing": r.differing} for r in results], indent=2) + "\n")
    else:
        for result in results:
            print("\n".join(reproduction_lines(result)))
    return max((r.exit_code for r in results), default=0)


def run(args: argparse.Namespace) -> int:
    tolerance = checked_tolerance(args)
    allow_factories(args.allow_factory)
    device = chosen_device(args)
    spec = load_spec(args.spec)
    result = reproduce_local(args.annotation, spec, spec_source=args.spec,
                             weights=Path(args.weights) if args.weights else None, tolerance=tolerance,
                             device=device)
    return report([result], args.format)
