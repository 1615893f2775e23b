"""``bnconvention audit``: refit cells of one checkpoint with replicate-backed decisions, verdicts and diagnostics."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bnconvention.architectures.factories import allow_user_factory
from bnconvention.audit.core import ANNOTATION_FILE
from bnconvention.audit.measure import checkpoint_name
from bnconvention.audit.render import write_audit_outputs
from bnconvention.audit.run import prepare_audit, run_audit
from bnconvention.audit.spec import load_spec
from bnconvention.cli.commands import summary
from bnconvention.cli.device_option import add_device_option, chosen_device
from bnconvention.cli.progress import add_progress_option, show_progress
from bnconvention.formats.text import plural, signed

EPILOG = """examples:
  bnconvention audit zoo/bn-badteacher-eval.safetensors --spec examples/audit/digits-zoo.yaml
  bnconvention audit model.safetensors --spec audit.yaml --out audit-model --replicates 3
  bnconvention audit model.safetensors --spec audit.yaml --allow-factory mypkg.models:resnet_small
  bnconvention audit resnet/model.safetensors.index.json --spec audit.yaml     # sharded, e.g. save_pretrained

Checkpoints may be sharded (the index and its shards), stored in float16 or bfloat16 (evaluated and refit as an
exact float32 copy; digests over the file's own bytes, docs/statistics.md), or carry timm/transformers name
prefixes (module., a transformers base_model_prefix), which are mapped; pickles (pytorch_model.bin) are refused.

The spec (YAML or JSON, schema/v1/audit-spec.schema.json) names the data, the splits, the architecture, the cells
and criteria. Outputs in --out: annotation.json (a refit_annotation record; check it with bnconvention validate),
summary.md, cells.png, staleness.png and result.json. Nothing is written when the spec or the checkpoint is invalid.

Exit codes: 0 audit written (displaced cells and verdict flips are findings, not failures), 1 the audit could not
run (the checkpoint does not fit the model, the model factory failed, a dependency is missing), 2 invalid spec,
unreadable checkpoint, a factory that cannot be loaded, or bad usage, 130 interrupted.
"""


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", required=True, metavar="SPEC", help="audit spec (.yaml, .yml or .json)")
    parser.add_argument("--replicates", type=int, metavar="R", help="number of replicates (overrides the spec)")
    parser.add_argument("--allow-factory", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="allow your own model factory for this run (repeatable); the spec names it as "
                             "model: {factory: MODULE:FUNCTION}")
    add_device_option(parser)
    add_progress_option(parser)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "audit",
        help=summary("audit"),
        description="Audit one checkpoint: shipped cells, R refits on redrawn retained pools at bit-identical "
                    "weights, displaced/equivalent/undetermined per cell, verdict flips, staleness, "
                    "recoverability, and the reporting line.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("weights", metavar="WEIGHTS",
                        help="the checkpoint: a .safetensors file, a sharded checkpoint's .safetensors.index.json, "
                             "or a folder holding one")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: ./audit-<checkpoint name>)")
    add_common_options(parser)
    parser.set_defaults(func=run)


def allow_factories(targets: list[str]) -> None:
    for target in targets:
        allow_user_factory(target)


def run(args: argparse.Namespace) -> int:
    allow_factories(args.allow_factory)
    device = chosen_device(args)
    spec = load_spec(args.spec, replicates=args.replicates)
    weights = Path(args.weights)
    prepared = prepare_audit(weights, spec, device=device)  # every check, before any computation or output
    result = run_audit(prepared, progress=show_progress(args.progress))
    out = Path(args.out) if args.out else Path(f"audit-{checkpoint_name(weights)}")
    written = write_audit_outputs(result, out)
    print(result.annotation.reporting_line)
    for cell in result.annotation.cells:
        print(f"  {cell.metric:<16} shipped {cell.shipped:.4f}  refit {cell.refit:.4f}  shift {signed(cell.shift_pp)}pp"
              f"  {cell.decision.outcome}")
    for verdict in result.annotation.verdicts:
        flip = f"  FLIP {verdict.direction.replace('_', ' ')}" if verdict.direction else ""
        print(f"  {verdict.criterion}: shipped {'pass' if verdict.shipped else 'fail'}, refit "
              f"{'pass' if verdict.refit else 'fail'}{flip}")
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {written[ANNOTATION_FILE]} and {plural(len(written) - 1, 'more file')} in {out}")
    return 0
