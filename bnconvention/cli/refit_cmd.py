"""``bnconvention refit``: refit a weights file's BatchNorm running statistics on a pool, at bit-identical weights."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from bnconvention.architectures.build import build_model
from bnconvention.architectures.factories import allow_user_factory
from bnconvention.authoring.declaration import make_transform
from bnconvention.cli.commands import summary
from bnconvention.cli.device_option import add_device_option, chosen_device
from bnconvention.cli.progress import add_progress_option, show_progress
from bnconvention.data.pools import iter_batches, load_dataset, split_by_classes
from bnconvention.errors import UntrustedInputError, UsageError, WeightsChangedError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.canonical import canonical_json, loads_strict
from bnconvention.formats.checkpoint_files import open_checkpoint
from bnconvention.formats.digests import checkpoint_digests
from bnconvention.refitting import refit
from bnconvention.refitting.files import model_dtype, read_npz_pool
from bnconvention.refitting.weights import load_checkpoint_weights, save_refit_weights, stored_declaration
from bnconvention.standard.models import DatasetRef, DataSplit, Transform, to_dict

EPILOG = """\
examples:
  # exact refit on the inputs stored in an .npz (array "x"), described as the retained split
  bnconvention refit model.safetensors --arch zoo/convnet-bn --pool retain.npz --pool-key x --role retain \\
      --out model.refit.safetensors --report refit.json

  # the digits dataset's retain split (class 3 forgotten) under the training transform, update_bn's rule
  bnconvention refit model.safetensors --arch zoo/convnet-bn --pool digits --split retain --forget-classes 3 \\
      --transform train --seed 0 --rule cumulative --batch-size 128 --out refit.safetensors --report refit.json

  # your own architecture, named on your own command line
  bnconvention refit w.safetensors --allow-factory mypkg.models:build --arch mypkg.models:build \\
      --arch-kwargs '{"width": 32}' --pool pool.npz --out w.refit.safetensors --report refit.json

  # a sharded checkpoint (transformers' save_pretrained(max_shard_size=...)): the same shards, refit
  bnconvention refit resnet/model.safetensors.index.json --arch mypkg.models:build --allow-factory \\
      mypkg.models:build --pool pool.npz --out resnet-refit/ --report refit.json

POOL is an .npz file (array --pool-key, N x C x H x W; uint8 is scaled by 1/255) or, with --split, a dataset:
"digits", "npz:PATH" or "folder:PATH" (see bnconvention.data.pools). WEIGHTS may be sharded, stored in float16 or
bfloat16 (refit in float32, statistics written back in the file's dtype), or carry a wrapper prefix (module.).
The output has the input's layout (one file, or the same shards and index) and keeps every tensor of the input
byte for byte except the running statistics (the report proves it with digests), keeps the input's metadata, and
carries the refit's declaration under __metadata__["bnconvention.record"] (in every shard). The input is never
overwritten unless --out names it (a sharded input never: write it to another folder).
Exit status: 0 refit written, 1 refit failed (nothing written), 2 unreadable input or bad usage.
"""

RULES = ("exact", "cumulative", "ema")
ROLES = ("train", "retain", "forget", "test", "proxy", "other")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "refit",
        help=summary("refit"),
        description="Replace the BatchNorm running statistics of a .safetensors checkpoint by statistics recomputed "
                    "on a pool of inputs, at bit-identical trainable tensors, and write a report that is a "
                    "declaration of the standard (digests before/after, staleness of the previous statistics).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("weights", type=Path, metavar="WEIGHTS",
                        help="a .safetensors file, a sharded checkpoint's .safetensors.index.json, or a folder "
                             "holding one checkpoint")
    add_arch_arguments(parser)
    add_pool_arguments(parser)
    parser.add_argument("--rule", choices=RULES, default="exact", help="accumulation rule (default exact)")
    parser.add_argument("--batch-size", type=int, default=128, metavar="N", help="pool batch size (default 128)")
    parser.add_argument("--method", choices=("auto", "traced", "hooks"), default="auto",
                        help="exact rule: layer-major traced pass, per-layer hook passes, or auto (default)")
    parser.add_argument("--out", required=True, type=Path, metavar="OUT",
                        help="the refit checkpoint: a .safetensors file, or for a sharded input a folder (or its "
                             ".safetensors.index.json) that receives the same shards")
    parser.add_argument("--report", required=True, type=Path, metavar="REPORT.json")
    add_device_option(parser)
    add_progress_option(parser)
    parser.set_defaults(func=run)


def add_arch_arguments(parser: argparse.ArgumentParser) -> None:
    """``--arch``, ``--arch-kwargs`` and ``--allow-factory``: the float model a weights file is loaded into."""
    parser.add_argument("--arch", required=True, metavar="FACTORY",
                        help="allowlisted architecture, e.g. zoo/convnet-bn or torchvision/resnet18")
    parser.add_argument("--arch-kwargs", default="{}", metavar="JSON", help="keyword arguments of the factory")
    parser.add_argument("--allow-factory", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="allow your own factory for this run (repeatable)")


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pool`` and the options that choose and describe it (an .npz, or a dataset's split); ``--batch-size``
    is the caller's own."""
    parser.add_argument("--pool", required=True, metavar="SOURCE", help="an .npz file, or a dataset with --split")
    parser.add_argument("--pool-key", default="x", metavar="KEY", help="array of the .npz holding the inputs")
    parser.add_argument("--role", choices=ROLES, default=None,
                        help="which split an .npz pool is (default: other); with --split, the split itself")
    parser.add_argument("--split", choices=("train", "retain", "forget", "test"), default=None,
                        help="use this split of the dataset SOURCE as the pool")
    parser.add_argument("--forget-classes", type=int, nargs="+", default=None, metavar="CLASS",
                        help="classes whose train records form the forget split (for --split retain/forget)")
    parser.add_argument("--transform", choices=("eval", "train"), default="eval",
                        help="dataset transform applied to the pool (with --split; default eval)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the train transform's randomness (recorded as data.sampling_seed)")


def check_pool_usage(args: argparse.Namespace) -> None:
    """UsageError for pool options that contradict each other (checked before anything is loaded)."""
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if args.split is None and (args.forget_classes is not None or args.transform != "eval"):
        raise UsageError("--forget-classes and --transform select from a dataset: use them with --split")
    if args.split is not None and args.role is not None:
        raise UsageError("--role describes an .npz pool; with --split the split is the role")


def build_arch(args: argparse.Namespace) -> torch.nn.Module:
    """The model ``--arch`` names, built with ``--arch-kwargs`` (``--allow-factory`` targets allowed first)."""
    try:
        kwargs = loads_strict(args.arch_kwargs.encode("utf-8"), source="--arch-kwargs")
    except UntrustedInputError as exc:
        raise UsageError(f"--arch-kwargs is not valid JSON: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise UsageError(f"--arch-kwargs must be a JSON object, got {args.arch_kwargs!r}")
    for target in args.allow_factory:
        allow_user_factory(target)
    return build_model(args.arch, kwargs)


def run(args: argparse.Namespace) -> int:
    check_pool_usage(args)
    weights, out, report_path = args.weights.resolve(), args.out.resolve(), args.report.resolve()
    if report_path in (weights, out):
        raise UsageError(f"--report {args.report} names a weights file; give the report its own path")
    model = build_arch(args)
    device = chosen_device(args)
    loaded = load_checkpoint_weights(model, weights, factory=f"factory {args.arch!r}")
    before = checkpoint_digests(loaded.files)
    dtype = model_dtype(model)
    pool, data, transform = pool_from_args(args, dtype)
    model.to(device)  # the pool's batches follow the model; θ's bytes survive the round trip exactly
    report = refit(model, pool, rule=args.rule, data=data, transform=transform, method=args.method,
                   progress=show_progress(args.progress))
    model.to("cpu")
    record = to_dict(stored_declaration(report.declaration, loaded, model, before=before))
    written = save_refit_weights(model, loaded, out, record_text=canonical_json(record))
    _check_theta_written(written, before=before.trainable_sha256)
    atomic_write_text(report_path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    staleness = report.staleness
    print(f"refit {args.weights} -> {written} ({report.declaration.convention.name}, {report.path}, "
          f"{report.seconds:.2f} s); staleness of the previous statistics: mean {staleness.mean_distance:.4f}, "
          f"variance {staleness.var_distance:.4f}; report {args.report}")
    for warning in [*report.warnings, *loaded.notes]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _check_theta_written(written: Path, *, before: str) -> None:
    """The written checkpoint's trainable digest must be the source's: θ bytes unchanged, in every shard."""
    after = checkpoint_digests(open_checkpoint(written)).trainable_sha256
    if after != before:
        raise WeightsChangedError(f"{written}: the written trainable tensors have digest {after}, the source's "
                                  f"{before}; this is a bug, please report it")


def pool_from_args(args: argparse.Namespace, dtype: torch.dtype) -> tuple[list[Any], DataSplit, Transform]:
    """The pool's batches, its DataSplit (how a report describes it) and its Transform."""
    if args.split is None:
        npz = read_npz_pool(args.pool, key=args.pool_key, dtype=dtype)
        data = DataSplit(role=args.role or "other", dataset=DatasetRef(id=f"npz:{npz.path.name}",
                                                                         revision=f"sha256:{npz.file_sha256}"),
                         subset=f"array {npz.key!r} of {npz.path.name}", record_count=npz.record_count)
        return list(npz.x.split(args.batch_size)), data, make_transform(mode="eval")



    dataset = load_dataset(args.pool)
    if args.forget_classes:
        subset = split_by_classes(dataset, forget_classes=args.forget_classes)[args.split]
    elif args.split in ("train", "test"):
        mask = dataset.is_test.clone() if args.split == "test" else ~dataset.is_test
        subset = dataset.subset(args.split, mask, f"{args.split} split")
    else:
        raise UsageError(f"--split {args.split} needs --forget-classes to say which records are forgotten")
    chosen = dataset.train_transform if args.transform == "train" else dataset.eval_transform
    generator = torch.Generator().manual_seed(args.seed)
    x = subset.x.to(dtype)
    pool = list(iter_batches(x, batch_size=args.batch_size, transform=chosen, generator=generator))
    seed = args.seed if args.transform == "train" else None
    return pool, subset.data_split(sampling_seed=seed), chosen.standard()
