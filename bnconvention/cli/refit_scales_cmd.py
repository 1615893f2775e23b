"""``bnconvention refit-scales``: recalibrate a quantized release's activation scales on a pool, at bit-identical
weights and BatchNorm buffers (the second deployed state; ``bnconvention refit`` is the first)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from bnconvention.authoring.activation_scales import (
    check_binds_weights,
    read_declaration,
    refit_scales_declaration,
    scales_state_of,
    shipped_scales,
)
from bnconvention.cli.commands import summary
from bnconvention.cli.device_option import add_device_option, chosen_device
from bnconvention.cli.progress import add_progress_option, show_progress
from bnconvention.cli.refit_cmd import (
    add_arch_arguments,
    add_pool_arguments,
    build_arch,
    check_pool_usage,
    pool_from_args,
)
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.digests import checkpoint_digests
from bnconvention.refitting.files import model_dtype
from bnconvention.refitting.observers import prepare_static
from bnconvention.refitting.scales import ScalesRefit, refit_scales, save_scales
from bnconvention.refitting.weights import load_checkpoint_weights
from bnconvention.standard.models import SCALES_FILENAME, DataSplit, Transform, to_dict
from bnconvention.validation.records import ensure_valid_record

EPILOG = """\
examples:
  # recalibrate the scales of a quantized zoo variant on the digits retain split (class 3 forgotten)
  bnconvention refit-scales zoo-q8/bn-base-q8/model.safetensors --arch zoo/convnet-bn \\
      --declaration zoo-q8/bn-base-q8/declaration.json --pool digits --split retain --forget-classes 3 \\
      --out bn-base-q8.retain-scales.safetensors --report bn-base-q8.retain-scales.json

  # scales stored under another name, calibration inputs in an .npz described as the retained split
  bnconvention refit-scales model.safetensors --arch torchvision/resnet18 --declaration declaration.json \\
      --scales q8/scales.safetensors --pool retain.npz --role retain --out retain-scales.safetensors \\
      --report retain-scales.json

The float model (--arch, loaded from WEIGHTS) is prepared with the observer the declaration's activation_scales
state names; the shipped scales (--scales, default: the declared filename beside WEIGHTS) are checked against the
declaration (sites, values, scales_sha256) and the declaration against WEIGHTS (θ and φ digests) before anything
runs. Every site is then recalibrated on the pool by a fresh observer of the same type, in eval mode, at
bit-identical weights and BatchNorm buffers (their digests before and after prove it). --out receives the refit
scales (atomically; never WEIGHTS or the shipped scales file) and --report a 1.1 declaration of them: the input
declaration with its activation_scales state replaced (calibration set = the pool, filename = --out relative to
WEIGHTS' folder), valid for bnconvention validate. WEIGHTS is never written.
Exit status: 0 written, 1 refused or failed (nothing written), 2 unreadable input or bad usage.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "refit-scales",
        help=summary("refit-scales"),
        description="Recalibrate the static activation-quantization scales declared for a .safetensors checkpoint "
                    "on a pool of inputs (e.g. the retained split), at bit-identical trainable tensors and "
                    "BatchNorm buffers, and write the new scales file and a 1.1 declaration of them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("weights", type=Path, metavar="WEIGHTS",
                        help="the float weights: a .safetensors file, a sharded checkpoint's index, or a folder")
    add_arch_arguments(parser)
    parser.add_argument("--declaration", required=True, type=Path, metavar="DECL.json",
                        help="the 1.1 declaration naming the activation_scales state (observer, sites, digests)")
    parser.add_argument("--scales", type=Path, default=None, metavar="FILE",
                        help="the shipped scales file (default: the declaration's filename beside WEIGHTS)")
    add_pool_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=128, metavar="N", help="pool batch size (default 128)")
    parser.add_argument("--out", required=True, type=Path, metavar="NEW_SCALES.safetensors",
                        help="the refit scales file (safetensors: <site>.scale and <site>.zero_point)")
    parser.add_argument("--report", required=True, type=Path, metavar="REPORT.json",
                        help="the 1.1 declaration of the refit scales")
    add_device_option(parser)
    add_progress_option(parser)
    parser.set_defaults(func=run)


def _check_paths(args: argparse.Namespace) -> None:
    """UsageError when an output names an input: the weights, the declaration and the shipped scales stay intact."""
    out, report = args.out.resolve(), args.report.resolve()
    inputs = {args.weights.resolve(): "WEIGHTS", args.declaration.resolve(): "--declaration"}
    if args.scales is not None:
        inputs[args.scales.resolve()] = "--scales"
    for path, option in ((out, "--out"), (report, "--report")):
        if path in inputs:
            raise UsageError(f"{option} {path} names the input {inputs[path]}; write the refit to its own path")
    if out == report:
        raise UsageError(f"--out and --report both name {out}; give each its own path")


def run(args: argparse.Namespace) -> int:
    check_pool_usage(args)
    _check_paths(args)
    record = read_declaration(args.declaration)
    state = scales_state_of(record)
    weights_folder = args.weights if args.weights.is_dir() else args.weights.parent
    scales_path = args.scales or weights_folder / (state.filename or SCALES_FILENAME)
    if scales_path.resolve() in (args.out.resolve(), args.report.resolve()):
        raise UsageError(f"--out/--report name the shipped scales file {scales_path}; write the refit to its own path")
    shipped = shipped_scales(state, scales_path, source=str(args.declaration))
    model = build_arch(args)
    device = chosen_device(args)
    loaded = load_checkpoint_weights(model, args.weights.resolve(), factory=f"factory {args.arch!r}")
    found = checkpoint_digests(loaded.files)
    check_binds_weights(record, trainable_sha256=found.trainable_sha256, running_sha256=found.running_sha256,
                        source=str(args.declaration))
    prepared = prepare_static(model, shipped.spec).to(device)
    pool, data, transform = pool_from_args(args, model_dtype(model))
    result = refit_scales(prepared, pool, shipped=shipped, progress=show_progress(args.progress))
    report = refit_scales_declaration(record, result.refit, calibration=data,
                                      filename=_relative(args.out, weights_folder),
                                      reporting_line=_reporting_line(result, data, transform))
    text = json.dumps(to_dict(report), indent=2, ensure_ascii=False) + "\n"
    ensure_valid_record(json.loads(text), source=str(args.report))  # before anything is written
    for path in (args.out, args.report):
        path.parent.mkdir(parents=True, exist_ok=True)
    save_scales(args.out, result.refit)
    atomic_write_text(args.report, text)
    print(f"refit-scales {args.weights}: {len(result.refit.sites)} sites ({shipped.spec.observer}) recalibrated on "
          f"{result.samples} records; median |ln ratio| {_median_shift(result):.4f}; θ and BatchNorm buffers "
          f"bit-identical; wrote {args.out} and {args.report}")
    return 0


def _relative(path: Path, folder: Path) -> str:
    """``path`` relative to ``folder`` in POSIX form: where the standard's ``filename`` is read from."""
    return Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()


def _median_shift(result: ScalesRefit) -> float:
    return statistics.median(abs(v) for v in result.shipped.log_ratios(result.refit).values())


def _reporting_line(result: ScalesRefit, data: DataSplit, transform: Transform) -> str:
    return (f"activation scales ({result.refit.spec.observer}) refit on the {data.role} split "
            f"({data.record_count} records, {data.subset}, transform {transform.mode}) at "
            "bit-identical weights and BatchNorm buffers")
