"""``bnconvention declare``: build a declaration for a weights file from flags, from a recorder's observation, or from
a saved observation alone (``--from-observation``: no model factory)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from safetensors.torch import load_file

from bnconvention.architectures.factories import allow_user_factory
from bnconvention.audit.measure import ModelChoice, build_architecture, check_fits, model_shapes
from bnconvention.authoring.declaration import declare, make_convention, make_transform
from bnconvention.authoring.observation import convention_from_observation, with_author
from bnconvention.authoring.recorder_declaration import declaration_from_saved
from bnconvention.authoring.saved_observation import check_weights, read_saved_observation
from bnconvention.cli.commands import summary
from bnconvention.errors import BnConventionError, JSONInputError, RecordError, UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.digests import bn_layer_names, file_digests
from bnconvention.formats.name_prefix import PrefixMapping
from bnconvention.formats.running_values import ensure_possible_statistics
from bnconvention.formats.safetensors_header import read_header
from bnconvention.formats.text import first_validation_error, plural
from bnconvention.standard.models import Observation, to_dict
from bnconvention.validation.records import ensure_valid_record

# The standard's Literal aliases, spelled out so that building the parser does not import pydantic (every command
# would pay ~0.2 s); tests/test_declare.py proves they equal typing.get_args of bnconvention.standard.models' aliases.
CHOICES: dict[str, tuple[str, ...]] = {
    "BufferUpdateMode": ("train", "frozen", "mixed", "refit", "untouched", "unknown"),
    "SplitRole": ("train", "retain", "forget", "test", "proxy", "other"),
    "TransformMode": ("train", "eval"),
    "AccumulationRule": ("ema", "cumulative", "exact"),
    "VarianceEstimator": ("unbiased", "biased"),
    "Precision": ("float16", "bfloat16", "float32", "float64"),
    "DropoutMode": ("off", "on", "absent"),
    "DistributedMode": ("none", "sync_batchnorm", "all_reduce", "rank0_broadcast"),
}

MAX_OBSERVATION_BYTES = 16 * 1024 * 1024
NOT_DECLARED = ("nothing was declared: a record cannot describe a shipped state that cannot be evaluated (refit the "
                "statistics, or declare the state they had before they broke)")

EPILOG = """\
examples:
  # from recorder.save_observation("observation.json"): no --arch, the file holds the layers and digests
  bnconvention declare --from-observation observation.json --weights model.safetensors \\
      --dataset-id sklearn/digits --subset "all classes except 3" --transform-mode train -o record.json

  # from a recorder's observation (mode, rule, momentum, batch size and updates as measured)
  bnconvention declare --arch zoo/convnet-bn --weights model.safetensors --observation observation.json \\
      --dataset-id sklearn/digits --subset "all classes except 3" --transform-mode train \\
      --transform-reference train.py:train_transform --augmentation "shift 1px" -o record.json

  # from flags alone (nothing measured: every field is the author's word)
  bnconvention declare --arch torchvision/resnet18 --arch-kwargs '{"num_classes": 10}' --weights w.safetensors \\
      --mode frozen --role train --dataset-id imagenet-1k --subset "full train split" --transform-mode train \\
      --rule ema --momentum 0.1 --batch-size 256 -o record.json

With --from-observation the weights must be the tensors the recorder saw (their digests are checked; a mismatch is
an error and nothing is written), and the record equals what recorder.declaration(...) gives with the same values.
With --observation or --from-observation, --mode/--role/--rule/--momentum are what you believe: the record keeps
the observed mode and rule, and any disagreement is listed under observation.contradictions (--strict makes it an
error, exit 1). To correct the observed mode, say who and why: --mode train --override "the last forwards were a
gradient probe" --override-by "A. Author" puts train in the convention and records the override beside the
observed mode (validate reports it).
The digests are those of the file's tensors; stamp the record with `bnconvention stamp`.
"""


def _choices(alias: str) -> list[str]:
    return list(CHOICES[alias])


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "declare",
        help=summary("declare"),
        description="Build a declaration of how a weights file's BatchNorm running statistics were fitted, bound "
                    "to its tensors by digests, from flags or from a BNRecorder observation, and write it as JSON.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = parser.add_argument_group("model")
    model.add_argument("--arch", metavar="FACTORY",
                       help="allowlisted architecture, e.g. zoo/convnet-bn or torchvision/resnet18 (required "
                            "unless --from-observation)")
    model.add_argument("--arch-kwargs", default="{}", metavar="JSON",
                       help="keyword arguments of the factory as a JSON object of plain values")
    model.add_argument("--allow-factory", metavar="MODULE:FUNCTION",
                       help="allow your own factory for this run (then pass it as --arch MODULE:FUNCTION)")
    model.add_argument("--weights", required=True, type=Path, metavar="W.safetensors",
                       help="the weights file the record describes")

    evidence = parser.add_argument_group("evidence")
    evidence.add_argument("--observation", type=Path, metavar="OBS.json",
                          help="a BNRecorder observation (JSON of recorder.observation()); the mode is taken from it")
    evidence.add_argument("--from-observation", type=Path, metavar="SAVED.json",
                          help="a file written by recorder.save_observation(): declare without --arch")
    evidence.add_argument("--mode", choices=_choices("BufferUpdateMode"),
                          help="buffer-update mode (required without --observation; checked against it with one)")
    evidence.add_argument("--strict", action="store_true", help="fail when the observation contradicts the flags")
    evidence.add_argument("--override", metavar="REASON",
                          help="with --mode and --override-by: put --mode in place of the observed mode, recorded "
                               "as an override (who, why, and the observed mode beside it)")
    evidence.add_argument("--override-by", metavar="WHO", help="who overrides the observed mode (with --override)")

    data = parser.add_argument_group("data split")
    data.add_argument("--role", choices=_choices("SplitRole"),
                      help="split that fitted the statistics (default with --observation: its last split tag)")
    data.add_argument("--dataset-id", required=True, help="dataset identity, e.g. sklearn/digits")
    data.add_argument("--dataset-revision", help="dataset revision (commit sha, version tag)")
    data.add_argument("--subset", required=True, help="how the subset is defined, e.g. 'all classes except 3'")
    data.add_argument("--record-count", type=int, help="number of records in the fitting pool")
    data.add_argument("--ids-sha256", help="sha256 of the sorted record ids (bnconvention.standard.record_ids_sha256)")
    data.add_argument("--sampling-seed", type=int, help="seed used to draw the subset")

    transform = parser.add_argument_group("transform")
    transform.add_argument("--transform-mode", required=True, choices=_choices("TransformMode"),
                           help="'train' (with augmentation) or 'eval' transform")
    transform.add_argument("--transform-reference", help="where it is defined, e.g. train.py:train_transform")
    transform.add_argument("--resize", help="resize step, e.g. '224 bilinear'")
    transform.add_argument("--crop", help="crop step, e.g. 'random 32 pad 4'")
    transform.add_argument("--augmentation", action="append", default=[], metavar="TEXT",
                           help="a random augmentation, in order (repeat the flag)")
    transform.add_argument("--normalize-mean", type=float, nargs="+", metavar="M")
    transform.add_argument("--normalize-std", type=float, nargs="+", metavar="S")

    accumulation = parser.add_argument_group("accumulation")
    accumulation.add_argument("--rule", choices=_choices("AccumulationRule"),
                              help="accumulation rule (required without --observation, unless observed)")
    accumulation.add_argument("--momentum", type=float, help="EMA momentum (rule ema)")
    accumulation.add_argument("--batch-size", type=int)
    accumulation.add_argument("--num-batches", type=int)
    accumulation.add_argument("--variance-estimator", choices=_choices("VarianceEstimator"), default="unbiased")
    accumulation.add_argument("--precision", choices=_choices("Precision"))
    accumulation.add_argument("--dropout", choices=_choices("DropoutMode"),
                              help="dropout during fitting (default: observed, else off)")
    accumulation.add_argument("--distributed", choices=_choices("DistributedMode"),
                              help="multi-process BatchNorm (default: sync_batchnorm when observed, else none)")

    out = parser.add_argument_group("output")
    out.add_argument("--reporting-line", help="the one sentence the release adds about its deployed state")
    out.add_argument("-o", "--output", type=Path, metavar="RECORD.json",
                     help="write the record here (atomically); default: standard output")
    parser.set_defaults(func=run)


def read_observation(path: Path) -> Any:
    """A recorder observation from JSON (untrusted: strict JSON, checked against the model)."""
    size = path.stat().st_size
    if size > MAX_OBSERVATION_BYTES:
        raise JSONInputError(f"{path}: {size} bytes, over the {MAX_OBSERVATION_BYTES}-byte limit for an observation",
                             source=path)
    data = loads_strict(path.read_bytes(), source=str(path))
    if isinstance(data, dict) and data.get("kind") == "declaration" and isinstance(data.get("observation"), dict):
        data = data["observation"]  # a whole record written by rec.declaration(): its evidence
    try:
        return Observation.model_validate(data)
    except ValidationError as exc:
        raise JSONInputError(
            f"{path}: not a recorder observation: {first_validation_error(exc)}; write it with "
            "to_dict(recorder.observation())", source=path) from exc


def load_declared_model(arch: str, kwargs_json: str, weights: Path) -> tuple[Any, Any]:
    """The allowlisted model with the file's tensors loaded strictly, and the digests of the file's tensors."""
    try:
        kwargs = loads_strict(kwargs_json, source="--arch-kwargs")
    except ValueError as exc:
        raise UsageError(f"--arch-kwargs is not a JSON object: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise UsageError(f"--arch-kwargs must be a JSON object such as '{{\"num_classes\": 10}}', got {kwargs_json!r}")
    if not weights.is_file():
        raise FileNotFoundError(f"weights file {str(weights)!r} does not exist or is not a file")
    header = read_header(weights)  # our strict parser first: a clear message for a malformed file
    ensure_possible_statistics((weights, header), consequence=NOT_DECLARED)
    choice = ModelChoice(factory=arch, kwargs=kwargs, source="--arch")
    model = build_architecture(choice)
    check_fits(weights, header, choice, model_shapes(model))
    model.load_state_dict(load_file(str(weights)), strict=True)
    return model, file_digests(weights, bn_layers=bn_layer_names(model), header=header)


def run(args: argparse.Namespace) -> int:
    if args.from_observation is not None:
        clash = [flag for flag, value in (("--arch", args.arch), ("--observation", args.observation),
                                          ("--allow-factory", args.allow_factory)) if value is not None]
        if clash:
            raise UsageError(f"--from-observation declares without a model: drop {', '.join(clash)}")
        record = _declare_from_saved(args)
    elif args.arch is None:
        raise UsageError("give --arch FACTORY (the model to load the weights into), or --from-observation "
                         "SAVED.json written by recorder.save_observation()")
    else:
        record = _declare_from_model(args)
    return _write_record(args, record)


def _transform(args: argparse.Namespace) -> Any:
    return make_transform(
        mode=args.transform_mode, reference=args.transform_reference, resize=args.resize, crop=args.crop,
        augmentations=args.augmentation, normalize_mean=args.normalize_mean, normalize_std=args.normalize_std)


def _declare_from_saved(args: argparse.Namespace) -> Any:
    """The record ``recorder.declaration(...)`` gives, from its saved observation, after binding it to --weights."""
    if Path(args.weights).is_file():
        ensure_possible_statistics(args.weights, consequence=NOT_DECLARED)
    saved = check_weights(read_saved_observation(args.from_observation), args.weights)  # before anything is written
    mapping = saved.observation.name_mapping
    if mapping is not None:
        described = PrefixMapping(mapping.observed_prefix, mapping.weights_prefix).describe()
        print(f"note: layer names mapped: {described} ({args.weights}; kept as observation.name_mapping)",
              file=sys.stderr)
    try:
        return declaration_from_saved(
            saved, dataset_id=args.dataset_id, subset=args.subset, transform=_transform(args), role=args.role,
            declared_mode=args.mode, rule=args.rule, momentum=args.momentum, batch_size=args.batch_size,
            num_batches=args.num_batches, precision=args.precision, dropout=args.dropout,
            distributed=args.distributed, record_count=args.record_count, ids_sha256=args.ids_sha256,
            sampling_seed=args.sampling_seed, dataset_revision=args.dataset_revision,
            reporting_line=args.reporting_line, strict=args.strict, variance_estimator=args.variance_estimator,
            override_by=args.override_by, override_reason=args.override)
    except ValueError as exc:
        _reraise_flag_error(exc)
        raise


def _declare_from_model(args: argparse.Namespace) -> Any:
    if args.allow_factory:
        allow_user_factory(args.allow_factory)
    observation = read_observation(args.observation) if args.observation else None
    if observation is None:
        missing = [flag for flag, value in (("--mode", args.mode), ("--role", args.role), ("--rule", args.rule))
                   if value is None]
        if args.override or args.override_by:
            raise UsageError("--override replaces an observed mode: give --observation or --from-observation")
        if missing:
            raise UsageError(f"without --observation, give {', '.join(missing)}: nothing was measured, so the "
                             "record states only what the flags say")
    common: dict[str, Any] = dict(
        dataset_id=args.dataset_id, subset=args.subset, transform=_transform(args), batch_size=args.batch_size,
        num_batches=args.num_batches, variance_estimator=args.variance_estimator, precision=args.precision,
        distributed=args.distributed or "none", record_count=args.record_count, ids_sha256=args.ids_sha256,
        sampling_seed=args.sampling_seed, dataset_revision=args.dataset_revision)
    try:
        if observation is not None:
            observation = with_author(observation, declared_mode=args.mode, role=args.role, rule=args.rule,
                                      momentum=args.momentum, override_by=args.override_by,
                                      override_reason=args.override)
            if args.strict and observation.contradictions:
                listing = "; ".join(f"[{c.code}] {c.message}" for c in observation.contradictions)
                raise RecordError(f"{args.observation}: the observation contradicts the flags: {listing}")
            convention = convention_from_observation(observation, role=args.role, rule=args.rule,
                                                     momentum=args.momentum, dropout=args.dropout, **common)
        else:
            convention = make_convention(buffer_update_mode=args.mode, role=args.role, rule=args.rule,
                                         momentum=args.momentum, dropout=args.dropout or "off", **common)
    except ValueError as exc:
        _reraise_flag_error(exc)
        raise
    model, digests = load_declared_model(args.arch, args.arch_kwargs, args.weights)
    return declare(model, convention, reporting_line=args.reporting_line, observation=observation, digests=digests)


def _reraise_flag_error(exc: ValueError) -> None:
    """A pydantic ``ValidationError`` (a ValueError): a flag value out of range (momentum 0, batch size 0, bad
    hex) becomes a usage error naming the flag; our own errors (a RecordError) pass through."""
    if not isinstance(exc, BnConventionError):
        raise UsageError(f"a flag value is not valid in a record: {_first_error(exc)}") from exc


def _write_record(args: argparse.Namespace, record: Any) -> int:
    data = to_dict(record)
    ensure_valid_record(loads_strict(json.dumps(data), source="record"), source="declared record")
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    atomic_write_text(args.output, text)
    contradictions = len(record.observation.contradictions) if record.observation else 0
    note = f", {plural(contradictions, 'contradiction')} recorded" if contradictions else ""
    print(f"wrote {args.output}: {record.convention.name}{note}", file=sys.stderr)
    return 0


def _first_error(exc: ValueError) -> str:
    """The first pydantic error, named by the flag that set the field (``--batch-size 0: ...``)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        fields = [part for part in first["loc"] if isinstance(part, str) and part not in ("ema", "cumulative", "exact")]
        flag = "--" + fields[-1].replace("_", "-") if fields else "a flag"
        return f"{flag} {first.get('input')!r}: {first['msg']}"
    return str(exc)
