"""Write the conformance vectors of the bnconvention standard (versions 1.0 and 1.1) and their manifest.

    .venv/bin/python schema/tests/generate.py          # rewrite valid/, invalid/ and manifest.json
    .venv/bin/python schema/tests/generate.py --check  # exit 1 if the committed files differ from this script

Every vector is built from a base record (``vector_records.py``) and one labelled change. The labels (the
expected issue codes and JSON-pointer paths, and whether the schema itself rejects the vector) are written by hand
below; they are *not* computed by the validator, so the tests that compare the validator's output with them mean
something. Digests in vectors are not bound to any file: they are sha256 values of fixed strings, chosen so that the
record-level digest rules hold (or break, where a vector says so). Deterministic, torch-free.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # run from a checkout without installing
sys.path.insert(0, str(HERE))  # the base records live next to this script

from vector_records import (  # noqa: E402
    EVAL_TRANSFORM,
    TRAIN_TRANSFORM,
    TWO_LAYERS,
    Record,
    annotation_minimal,
    annotation_scales,
    annotation_v11,
    annotation_v11_encoder,
    base_annotation,
    base_annotation_absent,
    base_channel_absent,
    base_ema,
    base_exact_refit,
    declaration,
    declaration_scales,
    fake,
    layer,
)

from bnconvention.authoring.declaration import make_convention, make_transform  # noqa: E402
from bnconvention.standard.models import SPEC_VERSIONS  # noqa: E402

# --- the vectors -----------------------------------------------------------------------------------------------------

Change = Callable[[Record], None]
VECTORS: list[dict[str, Any]] = []


def vector(name: str, description: str, base: Callable[[], Record], change: Change | None = None, *,
           level: str | None = None, issues: list[tuple[str, str]] = (), warnings: list[tuple[str, str]] = ()) -> None:
    """Register a vector: ``level`` None (valid), "schema" or "semantic"; ``issues`` the expected (code, path)."""
    record = base()
    if change is not None:
        change(record)
    expected = [{"code": c, "path": p, "severity": "error"} for c, p in issues]
    expected += [{"code": c, "path": p, "severity": "warning"} for c, p in warnings]
    VECTORS.append({"name": name, "description": description, "data": record, "level": level, "issues": expected})


def raw_vector(name: str, description: str, data: bytes, code: str) -> None:
    """A document that is not valid JSON at all (exit code 2)."""
    VECTORS.append({"name": name, "description": description, "raw": data, "level": "parse",
                    "issues": [{"code": code, "path": "", "severity": "error"}]})


def _set(path: str, value: Any) -> Change:
    tokens = path.strip("/").split("/")

    def change(record: Record) -> None:
        target: Any = record
        for token in tokens[:-1]:
            target = target[int(token)] if isinstance(target, list) else target[token]
        last = tokens[-1]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return change


def _del(path: str) -> Change:
    tokens = path.strip("/").split("/")

    def change(record: Record) -> None:
        target: Any = record
        for token in tokens[:-1]:
            target = target[int(token)] if isinstance(target, list) else target[token]
        del target[tokens[-1]]
    return change


def _all(*changes: Change) -> Change:
    def change(record: Record) -> None:
        for c in changes:
            c(record)
    return change


def _convention(**kwargs: Any) -> Callable[[], Record]:
    """A declaration of the base shape under another convention (for enum coverage)."""
    def build() -> Record:
        args = {"buffer_update_mode": "train", "role": "train", "dataset_id": "sklearn/digits",
                "subset": "all training records", "transform": TRAIN_TRANSFORM, "rule": "ema", "momentum": 0.1}
        args.update(kwargs)
        return declaration(make_convention(**args), copy.deepcopy(TWO_LAYERS))
    return build


def register_valid() -> None:
    vector("declaration-ema-train", "Buffers updated by training-mode forwards, EMA momentum 0.1 (PyTorch default).",
           base_ema)
    vector("declaration-exact-refit", "A retain refit with the exact rule, a full data split (revision, record "
           "count, ids fingerprint, seed) and refit details with staleness.", base_exact_refit)
    vector("declaration-cumulative-refit", "A refit with the cumulative rule (momentum None, as update_bn).",
           _convention(buffer_update_mode="refit", role="retain", rule="cumulative", momentum=None, batch_size=32,
                       num_batches=40))
    vector("declaration-channel-absent", "A GroupNorm model: an empty layer list (channel absent), no running "
           "digest, buffer-update mode untouched.", base_channel_absent)
    vector("declaration-frozen-eval-biased", "Buffers frozen (eval-mode BN) during unlearning; eval transform, "
           "biased variance, float64.", _convention(buffer_update_mode="frozen", transform=EVAL_TRANSFORM,
                                                   variance_estimator="biased", precision="float64"))
    vector("declaration-mixed-proxy-sync", "Mixed buffer updates fitted on a proxy split with SyncBatchNorm, "
           "float16, dropout on, momentum 0.01.",
           _convention(buffer_update_mode="mixed", role="proxy", momentum=0.01, distributed="sync_batchnorm",
                       precision="float16", dropout="on"))
    vector("declaration-unknown-test-allreduce", "Unknown provenance, test split, cumulative rule, all-reduce, "
           "bfloat16, no dropout in the model.",
           _convention(buffer_update_mode="unknown", role="test", rule="cumulative", momentum=None,
                       transform=EVAL_TRANSFORM, distributed="all_reduce", precision="bfloat16", dropout="absent"))
    vector("declaration-other-rank0-m1", "Role other, rank-0 broadcast, EMA momentum exactly 1 (the upper bound).",
           _convention(role="other", momentum=1.0, distributed="rank0_broadcast"))
    vector("declaration-transform-steps", "A transform described from a torchvision pipeline "
           "(describe_transform): every step's class and parameters in steps, hashed with the rest.",
           _convention(transform=make_transform(
               mode="train", reference="train.py:train_transform",
               crop="torchvision.transforms.RandomCrop(fill=0, pad_if_needed=false, padding=4, "
                    "padding_mode=\"constant\", size=[32,32])",
               augmentations=["torchvision.transforms.RandomHorizontalFlip(p=0.5)"],
               normalize_mean=[0.5], normalize_std=[0.25],
               steps=["torchvision.transforms.RandomCrop(fill=0, pad_if_needed=false, padding=4, "
                      "padding_mode=\"constant\", size=[32,32])",
                      "torchvision.transforms.RandomHorizontalFlip(p=0.5)", "torchvision.transforms.ToTensor()",
                      "torchvision.transforms.Normalize(inplace=false, mean=[0.5], std=[0.25])"])))
    vector("declaration-forget-split", "Buffers refit on the forget split (an attack), exact rule.",
           _convention(buffer_update_mode="refit", role="forget", rule="exact", momentum=None))

    def single_running_layer() -> Record:
        record = base_ema()
        layers = [layer("bn1", 8, momentum=None, affine=False), layer("bn2", 8, track=False)]
        record["deployed_state"][0]["layers"] = layers
        record["digests"]["running_sha256"] = layers[0]["running_sha256"]  # one running layer: digests are equal
        return record
    vector("declaration-untracked-layer", "A cumulative-momentum non-affine layer and a layer that tracks no "
           "running statistics (no running_sha256); with one running layer the combined digest equals it.",
           single_running_layer)
    vector("declaration-explicit-nulls", "Optional fields written as null mean the same as absent.", base_ema,
           _all(_set("/reporting_line", None), _set("/convention/data/dataset/revision", None),
                _set("/convention/transform/description/crop", None),
                _set("/deployed_state/0/layers/0/momentum", None)))
    vector("declaration-integral-float", "16.0 is an integer in JSON Schema (and in canonical JSON it is 16).",
           base_ema, _set("/deployed_state/0/layers/1/num_features", 16.0))
    vector("declaration-observation", "A declaration with the recorder's evidence (no contradiction).", base_ema,
           _set("/observation", {"train_forwards": 300, "eval_forwards": 12, "buffer_updates": 300,
                                 "buffers_changed": True, "batch_size_min": 64, "batch_size_max": 64,
                                 "split_tags": ["train"], "last_update_split": "train"}))
    vector("declaration-channel-absent-train-mode", "Valid with a warning: a model without running statistics "
           "declared with buffer-update mode 'train'.", base_channel_absent,
           _all(_set("/convention/buffer_update_mode", "train"),
                _set("/convention/name", "train/train/train-transform/ema-m0.1")),
           warnings=[("record.channel_mode", "/convention/buffer_update_mode")])
    vector("declaration-refit-details-mode-train", "Valid with a warning: refit details on a declaration whose "
           "buffer-update mode is not 'refit'.", base_exact_refit,
           _all(_set("/convention/buffer_update_mode", "train"),
                _set("/convention/name", "train/retain/train-transform/exact")),
           warnings=[("record.refit_mode_mismatch", "/convention/buffer_update_mode")])
    vector("refit-annotation-full", "An auditor's annotation with every section: anchoring, three cells over six "
           "replicates (two displaced at p = 0.5^6, one equivalent by TOST), verdicts with a "
           "flip, staleness, provenance, recoverability.", base_annotation)
    vector("refit-annotation-v11", "Spec version 1.1: the full annotation with every field 1.1 adds (BY-adjusted "
           "p-values, an undetermined cell, family, two provenance arms with a null band, recoverability curves, a "
           "frozen twin).",
           annotation_v11)
    vector("refit-annotation-v11-encoder", "Spec version 1.1 with the encoder-level diagnostics: a linear-probe "
           "cell (unit fraction) against its retrain reference with the BN/NC decomposition, an attack-AUC cell "
           "(unit auc) with its protocol and bootstrap intervals, relearning steps shipped and refit.",
           annotation_v11_encoder)
    vector("refit-annotation-v11-relearning-area", "Spec version 1.1: the relearning section with its optional "
           "areas, the mean forget accuracy over steps 0..max_steps shipped and per refit replicate (a censored "
           "refit still has an area).", annotation_v11_encoder,
           _all(_set("/relearning/area_shipped", 0.625), _set("/relearning/area_refit", [0.875, 0.75, 0.375])))
    vector("refit-annotation-v11-confidence-pp", "Spec version 1.1: a confidence-threshold attack, and a cell whose "
           "unit is pp (shifts refit - shipped, not 100 x): 3.0 -> 1.0 pp on six replicates, displaced at 0.5^6.",
           annotation_v11_encoder, _all(_set("/membership_inference/protocol/attack", "confidence-threshold"),
                                        _append_pp_cell))
    vector("declaration-v11", "Spec version 1.1 declares the same fields as 1.0.", base_ema,
           _set("/spec_version", "1.1"))
    vector("declaration-v11-observation-override", "Spec 1.1: the author's 'train' in place of the observed 'mixed' "
           "(a gradient probe the recorder took for frozen steps), recorded as an override: valid with a warning.",
           base_ema, _all(_set("/spec_version", "1.1"), _set("/observation", _observation(mode="mixed", override={
               "mode": "train", "observed": "mixed", "by": "A. Author",
               "reason": "the last forwards were a gradient probe"}))),
           warnings=[("record.mode_override", "/observation/override")])
    vector("declaration-v11-observation-splits", "Spec 1.1: the recorder watched a wrapper ('net.' before each "
           "layer name) and matched the buffer-writing batches by content: 70 % retain, 25 % forget, 5 % from "
           "before the run.", base_ema,
           _all(_set("/spec_version", "1.1"), _set("/observation", _observation(
               mode="train", name_mapping={"observed_prefix": "net.", "weights_prefix": ""},
               split_matching={"splits": [{"split": "retain", "records": 2100, "share": 0.7},
                                          {"split": "forget", "records": 900, "share": 0.25}],
                               "unmatched_records": 0, "unmatched_share": 0.0, "initial_share": 0.05}))))
    vector("refit-annotation-channel-absent", "Channel absent: every shift is exactly 0.", base_annotation_absent)
    vector("refit-annotation-minimal", "Only the required fields of an annotation.", annotation_minimal)


def _observation(**extra: Any) -> Record:
    """A recorder observation of a 300-step training run, with ``extra`` fields."""
    return {"train_forwards": 300, "eval_forwards": 12, "buffer_updates": 300, "buffers_changed": True,
            "split_tags": ["train"], "last_update_split": "train", **extra}


def _append_pp_cell(record: Record) -> None:
    record["cells"].append({"metric": "calibration_error_pp", "unit": "pp", "shipped": 3.0, "refit": 1.0,
                            "shift_pp": -2.0, "replicate_values": [1.0] * 6, "replicate_shifts_pp": [-2.0] * 6,
                            "margin_pp": 1.2, "decision": {"outcome": "displaced", "p_value": 0.015625,
                                                           "method": "exact-sign-test"}})


def register_schema_invalid() -> None:
    vector("invalid-root-array", "A record is a JSON object, not an array.", lambda: [], level="schema",
           issues=[("schema.type", "")])
    vector("invalid-kind-missing", "Without kind the record cannot be read.", base_ema, _del("/kind"),
           level="schema", issues=[("schema.required", "")])
    vector("invalid-kind-unknown", "An unknown record kind is its own code, not 'no branch matched'.", base_ema,
           _set("/kind", "annotation"), level="schema", issues=[("schema.discriminator", "/kind")])
    vector("invalid-spec-version-2", "A version this validator does not read.", base_ema,
           _set("/spec_version", "2.0"), level="schema", issues=[("schema.spec_version", "/spec_version")])
    vector("invalid-spec-version-number", "spec_version is the string \"1.0\", not the number 1.0.", base_ema,
           _set("/spec_version", 1.0), level="schema", issues=[("schema.spec_version", "/spec_version")])
    vector("invalid-convention-missing-data", "The data split is required.", base_ema, _del("/convention/data"),
           level="schema", issues=[("schema.required", "/convention")])
    vector("invalid-additional-property", "A misspelt property is not silently ignored.", base_ema,
           _set("/convention/bufer_update_mode", "train"), level="schema",
           issues=[("schema.additional_property", "/convention")])
    vector("invalid-rule-unknown", "Only ema, cumulative and exact; the branch of an unknown rule is not guessed.",
           base_ema, _set("/convention/accumulation/rule", "emma"), level="schema",
           issues=[("schema.discriminator", "/convention/accumulation/rule")])
    vector("invalid-ema-without-momentum", "The ema rule needs its momentum.", base_ema,
           _del("/convention/accumulation/momentum"), level="schema",
           issues=[("schema.required", "/convention/accumulation")])
    vector("invalid-cumulative-with-momentum", "cumulative means momentum None: a momentum is not allowed.",
           _convention(rule="cumulative", momentum=None), _set("/convention/accumulation/momentum", 0.1),
           level="schema", issues=[("schema.additional_property", "/convention/accumulation")])
    vector("invalid-momentum-zero", "EMA momentum must be greater than 0.", base_ema,
           _set("/convention/accumulation/momentum", 0), level="schema",
           issues=[("schema.range", "/convention/accumulation/momentum")])
    vector("invalid-role", "The data role is one of train, retain, forget, test, proxy, other.", base_ema,
           _set("/convention/data/role", "validation"), level="schema",
           issues=[("schema.enum", "/convention/data/role")])
    vector("invalid-buffer-update-mode", "An unknown buffer-update mode.", base_ema,
           _set("/convention/buffer_update_mode", "trained"), level="schema",
           issues=[("schema.enum", "/convention/buffer_update_mode")])
    vector("invalid-distributed", "An unknown distributed mode.", base_ema, _set("/convention/distributed", "ddp"),
           level="schema", issues=[("schema.enum", "/convention/distributed")])
    vector("invalid-precision-and-estimator", "Every problem is reported, not the first: precision and variance "
           "estimator are both unknown.", base_ema,
           _all(_set("/convention/accumulation/precision", "float8"),
                _set("/convention/accumulation/variance_estimator", "population")), level="schema",
           issues=[("schema.enum", "/convention/accumulation/precision"),
                   ("schema.enum", "/convention/accumulation/variance_estimator")])
    vector("invalid-dropout-and-transform-mode", "Dropout mode and transform mode out of their enums.", base_ema,
           _all(_set("/convention/other_modules/dropout", "yes"), _set("/convention/transform/mode", "test")),
           level="schema", issues=[("schema.enum", "/convention/other_modules/dropout"),
                                   ("schema.enum", "/convention/transform/mode")])
    vector("invalid-sha256-uppercase", "Digests are lowercase hex.", base_ema,
           _set("/digests/trainable_sha256", fake("trainable").upper()), level="schema",
           issues=[("schema.pattern", "/digests/trainable_sha256")])
    vector("invalid-sha256-trailing-newline", "64 hex digits and a newline: Python's re lets $ match before it, "
           "the length bound does not.", base_ema, _set("/digests/trainable_sha256", fake("trainable") + "\n"),
           level="schema", issues=[("schema.length", "/digests/trainable_sha256")])
    vector("invalid-deployed-state-empty", "deployed_state needs at least one entry (a batchnorm entry with an "
           "empty layer list says channel absent).", base_ema, _set("/deployed_state", []), level="schema",
           issues=[("schema.items", "/deployed_state")])
    vector("invalid-deployed-state-unknown-kind", "An unknown deployed-state kind (1.0 knows batchnorm, 1.1 adds "
           "activation_scales).", base_ema, _set("/deployed_state/0/kind", "weight_scales"), level="schema",
           issues=[("schema.discriminator", "/deployed_state/0/kind")])
    vector("invalid-num-features-zero", "A layer has at least one feature.", base_ema,
           _set("/deployed_state/0/layers/0/num_features", 0), level="schema",
           issues=[("schema.range", "/deployed_state/0/layers/0/num_features")])
    vector("invalid-num-features-fraction", "num_features is an integer.", base_ema,
           _set("/deployed_state/0/layers/0/num_features", 8.5), level="schema",
           issues=[("schema.type", "/deployed_state/0/layers/0/num_features")])
    vector("invalid-eps-string", "The YAML 1.1 trap: 1e-5 read as a string.", base_ema,
           _set("/deployed_state/0/layers/0/eps", "1e-5"), level="schema",
           issues=[("schema.type", "/deployed_state/0/layers/0/eps")])
    vector("invalid-affine-string-and-empty-name", "A boolean written as a string, and an empty layer name.",
           base_ema, _all(_set("/deployed_state/0/layers/1/affine", "true"),
                          _set("/deployed_state/0/layers/1/name", "")),
           level="schema", issues=[("schema.type", "/deployed_state/0/layers/1/affine"),
                                   ("schema.length", "/deployed_state/0/layers/1/name")])
    vector("invalid-digest-algorithm", "The digest algorithm is bnconvention-tensors/1.", base_ema,
           _set("/digests/algorithm", "sha256"), level="schema", issues=[("schema.const", "/digests/algorithm")])
    vector("invalid-record-count-boolean", "A boolean is not an integer.", base_ema,
           _set("/convention/data/record_count", True), level="schema",
           issues=[("schema.type", "/convention/data/record_count")])
    vector("invalid-normalization", "Normalization std must be positive and mean non-empty.", base_ema,
           _all(_set("/convention/transform/description/normalize/std", [0]),
                _set("/convention/transform/description/normalize/mean", [])), level="schema",
           issues=[("schema.range", "/convention/transform/description/normalize/std/0"),
                   ("schema.items", "/convention/transform/description/normalize/mean")])
    vector("invalid-annotation-channel", "channel is present or absent.", base_annotation,
           _set("/channel", "partial"), level="schema", issues=[("schema.enum", "/channel")])
    vector("invalid-annotation-cell", "A cell's decision outcome, p-value and replicate list out of bounds.",
           base_annotation, _all(_set("/cells/0/decision/outcome", "flipped"), _set("/cells/0/decision/p_value", 1.5),
                                 _set("/cells/1/replicate_values", [])), level="schema",
           issues=[("schema.enum", "/cells/0/decision/outcome"), ("schema.range", "/cells/0/decision/p_value"),
                   ("schema.items", "/cells/1/replicate_values")])
    vector("invalid-annotation-missing-reporting-line", "An annotation always says its reporting line.",
           base_annotation, _del("/reporting_line"), level="schema", issues=[("schema.required", "")])
    vector("invalid-annotation-verdict-direction", "direction is pass_to_fail or fail_to_pass.", base_annotation,
           _set("/verdicts/1/direction", "down"), level="schema", issues=[("schema.enum", "/verdicts/1/direction")])
    vector("invalid-annotation-margin-zero", "The margin is positive.", base_annotation, _set("/margin_pp", 0),
           level="schema", issues=[("schema.range", "/margin_pp")])


def register_semantic_invalid() -> None:
    vector("semantic-observation-mode-mismatch", "The convention says 'train' where the recorder observed 'mixed', "
           "and no override says who changed it and why.", base_ema, _set("/observation", _observation(mode="mixed")),
           level="semantic", issues=[("record.observation_mode_mismatch", "/convention/buffer_update_mode")])
    vector("semantic-v11-override-of-another-record", "The override names an observed mode the observation does not "
           "hold.", base_ema, _all(_set("/spec_version", "1.1"), _set("/observation", _observation(
               mode="frozen", override={"mode": "train", "observed": "mixed", "by": "A", "reason": "probe"}))),
           level="semantic", issues=[("record.observation_mode_mismatch", "/observation/override")])
    vector("semantic-name-mismatch", "The name is derived from the fields: ema-m0.1 is not ema-m0.01.", base_ema,
           _set("/convention/name", "train/train/train-transform/ema-m0.01"), level="semantic",
           issues=[("record.name_mismatch", "/convention/name")])
    vector("semantic-name-after-field-change", "The rule changed but the name was not re-derived.",
           _convention(rule="cumulative", momentum=None),
           _set("/convention/accumulation", {"rule": "exact", "variance_estimator": "unbiased",
                                             "precision": "float64"}),
           level="semantic", issues=[("record.name_mismatch", "/convention/name")])
    vector("semantic-transform-sha256", "The transform hash must be the hash of its description.", base_ema,
           _set("/convention/transform/description/augmentations", ["shift 2px p=1.0"]), level="semantic",
           issues=[("record.transform_sha256_mismatch", "/convention/transform/sha256")])
    vector("semantic-duplicate-layer", "Each layer appears once.", base_ema,
           _set("/deployed_state/0/layers/1/name", "features.1"), level="semantic",
           issues=[("record.duplicate_layer", "/deployed_state/0/layers/1/name")])
    vector("semantic-duplicate-state-kind", "Each deployed-state kind appears once.", base_ema,
           lambda r: r["deployed_state"].append(copy.deepcopy(r["deployed_state"][0])), level="semantic",
           issues=[("record.duplicate_state_kind", "/deployed_state/1/kind")])
    vector("semantic-layer-digest-missing", "A tracking layer needs its running digest.", base_ema,
           _del("/deployed_state/0/layers/0/running_sha256"), level="semantic",
           issues=[("record.layer_digest_missing", "/deployed_state/0/layers/0")])
    vector("semantic-layer-digest-unexpected", "A layer without running statistics has no running digest.",
           base_ema, _all(lambda r: r["deployed_state"][0]["layers"].append(layer("head.bn", 4)),
                          _set("/deployed_state/0/layers/1/track_running_stats", False)), level="semantic",
           issues=[("record.layer_digest_unexpected", "/deployed_state/0/layers/1/running_sha256")])
    vector("semantic-channel-absent-running-digest", "No running layer, yet a running digest.", base_channel_absent,
           _set("/digests/running_sha256", fake("running")), level="semantic",
           issues=[("record.running_digest_inconsistent", "/digests/running_sha256")])
    vector("semantic-running-digest-missing", "Running layers, yet no combined running digest.", base_ema,
           _del("/digests/running_sha256"), level="semantic",
           issues=[("record.running_digest_inconsistent", "/digests")])
    vector("semantic-single-layer-digest", "With one running layer the combined digest equals the layer's.",
           base_ema, lambda r: r["deployed_state"][0]["layers"].pop(), level="semantic",
           issues=[("record.running_digest_inconsistent", "/digests/running_sha256")])
    vector("semantic-refit-weights-changed", "A refit never changes the trainable tensors.", base_exact_refit,
           _set("/refit/trainable_sha256_before", fake("other weights")), level="semantic",
           issues=[("record.refit_weights_changed", "/refit/trainable_sha256_after")])
    vector("semantic-refit-after-digest", "The refit's result is the declared running state.", base_exact_refit,
           _set("/refit/running_sha256_after", fake("another refit")), level="semantic",
           issues=[("record.refit_digest_mismatch", "/refit/running_sha256_after")])
    vector("semantic-staleness-average", "The staleness distance is the layer average.", base_exact_refit,
           _set("/refit/staleness/mean_distance", 0.75), level="semantic",
           issues=[("record.staleness_average", "/refit/staleness/mean_distance")])
    vector("semantic-channel-absent-shift", "Channel absent: a refit is the identity, the shift is 0.00.",
           base_annotation_absent,
           _all(_set("/cells/0/replicate_values", [0.25, 0.5]), _set("/cells/0/replicate_shifts_pp", [0.0, 25.0]),
                _set("/cells/0/refit", 0.375), _set("/cells/0/shift_pp", 12.5)), level="semantic",
           issues=[("record.channel_absent_shift", "/cells/0/shift_pp")])
    vector("semantic-replicate-count", "One value per replicate.", base_annotation,
           _all(_set("/cells/0/replicate_values", [0.625, 0.5, 0.75]), _set("/cells/0/refit", 0.625)),
           level="semantic", issues=[("record.replicate_count", "/cells/0/replicate_values")])
    vector("semantic-cell-mean", "refit is the mean of the replicate values.", base_annotation,
           _set("/cells/0/refit", 0.75), level="semantic", issues=[("record.cell_mean", "/cells/0/refit")])
    vector("semantic-verdict-flip", "flipped says whether shipped and refit outcomes differ.", base_annotation,
           _set("/verdicts/0/flipped", True), level="semantic", issues=[("record.verdict_flip", "/verdicts/0/flipped")])
    vector("semantic-anchoring", "anchored says whether every cell is within the tolerance.", base_annotation,
           _set("/anchoring/tolerance", 0.005), level="semantic",
           issues=[("record.anchoring_inconsistent", "/anchoring/anchored")])


def register_version_invalid() -> None:
    vector("invalid-v10-observation-override", "A 1.0 observation carrying the 1.1 override.", base_ema,
           _set("/observation", _observation(mode="mixed", override={
               "mode": "train", "observed": "mixed", "by": "A", "reason": "probe"})), level="schema",
           issues=[("schema.additional_property", "/observation")])
    vector("invalid-v11-split-share-range", "A split's share of the statistics is a fraction.", base_ema,
           _all(_set("/spec_version", "1.1"), _set("/observation", _observation(split_matching={
               "splits": [{"split": "retain", "records": 10, "share": 1.5}], "unmatched_records": 0,
               "unmatched_share": 0.0, "initial_share": 0.0}))), level="schema",
           issues=[("schema.range", "/observation/split_matching/splits/0/share")])
    vector("invalid-v10-family", "A 1.0 record carrying a 1.1 field: 1.0 stays strict.", base_annotation,
           _set("/family", {"name": "gradient-ascent"}), level="schema",
           issues=[("schema.additional_property", "")])
    vector("invalid-v10-by-p-value", "A 1.0 cell decision carrying the 1.1 by_p_value.", base_annotation,
           _set("/cells/0/decision/by_p_value", 0.5), level="schema",
           issues=[("schema.additional_property", "/cells/0/decision")])
    vector("invalid-v11-by-p-value-range", "by_p_value is a probability.", annotation_v11,
           _set("/cells/0/decision/by_p_value", 1.5), level="schema",
           issues=[("schema.range", "/cells/0/decision/by_p_value")])
    vector("invalid-v11-provenance-arms-empty", "provenance_arms, when present, has an arm.", annotation_v11,
           _set("/provenance_arms", []), level="schema", issues=[("schema.items", "/provenance_arms")])
    vector("invalid-v10-cell-unit", "A 1.0 cell carrying the 1.1 unit.", base_annotation,
           _set("/cells/0/unit", "fraction"), level="schema",
           issues=[("schema.additional_property", "/cells/0")])
    vector("invalid-v10-linear-probe", "A 1.0 record carrying the 1.1 linear_probe.", base_annotation,
           _set("/linear_probe", annotation_v11_encoder()["linear_probe"]), level="schema",
           issues=[("schema.additional_property", "")])
    vector("invalid-v11-cell-unit", "A cell's unit is fraction, pp or auc.", annotation_v11_encoder,
           _set("/cells/3/unit", "percent"), level="schema", issues=[("schema.enum", "/cells/3/unit")])
    vector("invalid-v11-reference-arm", "The reference arm of a cell is the retrain checkpoint.",
           annotation_v11_encoder, _set("/cells/3/reference/arm", "base"), level="schema",
           issues=[("schema.const", "/cells/3/reference/arm")])
    vector("invalid-v11-probe-solver", "The linear probe's solver is lbfgs (docs/statistics.md).", annotation_v11_encoder,
           _set("/linear_probe/protocol/solver", "adam"), level="schema",
           issues=[("schema.const", "/linear_probe/protocol/solver")])
    vector("invalid-v11-probe-one-class", "A probe is trained on at least two classes.", annotation_v11_encoder,
           _set("/linear_probe/protocol/classes", 1), level="schema",
           issues=[("schema.range", "/linear_probe/protocol/classes")])
    vector("invalid-v11-attack-kind", "The attack is a loss or confidence threshold.", annotation_v11_encoder,
           _set("/membership_inference/protocol/attack", "shadow-models"), level="schema",
           issues=[("schema.enum", "/membership_inference/protocol/attack")])
    vector("invalid-v11-relearning-empty", "relearning.steps_refit has a value per refit measured.",
           annotation_v11_encoder, _set("/relearning/steps_refit", []), level="schema",
           issues=[("schema.items", "/relearning/steps_refit")])
    vector("invalid-v11-relearning-area-range", "A relearning area is a mean accuracy: a fraction in [0, 1].",
           annotation_v11_encoder, _set("/relearning/area_shipped", 1.5), level="schema",
           issues=[("schema.range", "/relearning/area_shipped")])
    vector("invalid-v11-relearning-area-empty", "relearning.area_refit, when given, has an area per refit measured.",
           annotation_v11_encoder, _set("/relearning/area_refit", []), level="schema",
           issues=[("schema.items", "/relearning/area_refit")])
    vector("semantic-v11-twin-weights", "A twin has bit-identical trainable tensors.", annotation_v11,
           _set("/twin/trainable_sha256", fake("other weights")), level="semantic",
           issues=[("record.twin_weights_differ", "/twin/trainable_sha256")])


def _scales(path: str) -> str:
    return "/deployed_state/1" + path


def register_scales() -> None:
    """The activation-scales deployed-state kind of 1.1: valid forms, and each rule it adds."""
    def percentile(record: Record) -> None:
        state = record["deployed_state"][1]
        state.update(dtype="qint8", qscheme="per_tensor_symmetric", quant_min=-128, quant_max=127,
                     observer="percentile", percentile=99.99)
        state.pop("scales_sha256")
        for site in state["sites"]:
            site.update(zero_point=0)
            site.pop("tensors_sha256")

    vector("declaration-v11-activation-scales", "Spec 1.1: static activation scales beside the BatchNorm state, "
           "minmax observer, quint8, two stored sites calibrated on 256 retained records.", declaration_scales)
    vector("declaration-v11-activation-scales-percentile", "Symmetric qint8 scales from a 99.99th-percentile "
           "observer, not stored (no digests): zero points fixed at 0.", declaration_scales, percentile)
    for observer in ("absmax", "mse", "histogram"):
        vector(f"declaration-v11-activation-scales-{observer}", f"Scales from the {observer} observer.",
               declaration_scales, _set(_scales("/observer"), observer))
    vector("invalid-v10-activation-scales", "Version 1.0 knows only the batchnorm kind: activation_scales needs "
           "spec 1.1.", declaration_scales, _set("/spec_version", "1.0"), level="schema",
           issues=[("schema.discriminator", "/deployed_state/1/kind")])
    vector("invalid-v11-scale-zero", "A scale is positive: zero would map every activation to the zero point.",
           declaration_scales, _set(_scales("/sites/0/scale"), 0), level="schema",
           issues=[("schema.range", _scales("/sites/0/scale"))])
    vector("invalid-v11-observer-unknown", "The observer is minmax, absmax, percentile, mse or histogram.",
           declaration_scales, _set(_scales("/observer"), "kl"), level="schema",
           issues=[("schema.enum", _scales("/observer"))])
    vector("invalid-v11-sites-empty", "An activation-scales state has at least one site.", declaration_scales,
           _set(_scales("/sites"), []), level="schema", issues=[("schema.items", _scales("/sites"))])
    vector("semantic-v11-zero-point-range", "A zero point lies in the quantized range.", declaration_scales,
           _set(_scales("/sites/0/zero_point"), 256), level="semantic",
           issues=[("record.quant_range", _scales("/sites/0/zero_point"))])
    vector("semantic-v11-duplicate-site", "Each site appears once.", declaration_scales,
           _set(_scales("/sites/1/name"), "features.0.activation_post_process"), level="semantic",
           issues=[("record.duplicate_site", _scales("/sites/1/name"))])
    vector("semantic-v11-percentile-missing", "The percentile observer says its percentile.", declaration_scales,
           _set(_scales("/observer"), "percentile"), level="semantic",
           issues=[("record.observer_percentile", _scales("/percentile"))])
    vector("semantic-v11-scales-digest", "Stored scales give every site's digest and the combined one.",
           declaration_scales, lambda r: r["deployed_state"][1].pop("scales_sha256"), level="semantic",
           issues=[("record.scales_digest_inconsistent", _scales(""))])


def register_decision_invalid() -> None:
    """Each way a cell's decision can contradict its own replicate shifts."""
    def four_replicates(record: Record) -> None:
        record["replicates"] = 4
        record["cells"] = [record["cells"][0]]
        df = record["cells"][0]
        df["replicate_values"] = df["replicate_values"][:4]
        df["replicate_shifts_pp"] = df["replicate_shifts_pp"][:4]
        df["refit"] = 0.625
        df["shift_pp"] = 50.0
        df["decision"]["p_value"] = 0.0625
        for key in ("verdicts", "anchoring"):
            record.pop(key)

    vector("semantic-decision-displaced-level", "Four agreeing replicates give p = 0.0625: the sign test does not "
           "reach 0.05, so the cell is not displaced.", base_annotation, four_replicates, level="semantic",
           issues=[("record.decision_inconsistent", "/cells/0/decision/outcome")])
    vector("semantic-decision-p-value", "Six replicates give p = 0.5^6, not the papers' 0.5^10.", base_annotation,
           _set("/cells/0/decision/p_value", 0.0009765625), level="semantic",
           issues=[("record.decision_inconsistent", "/cells/0/decision/p_value")])
    vector("semantic-decision-undetermined", "Six shifts all <= -38 pp are displaced, not undetermined.",
           base_annotation, _all(_set("/cells/2/decision", {"outcome": "undetermined", "method": "none",
                                                           "p_value": 1.0})), level="semantic",
           issues=[("record.decision_inconsistent", "/cells/2/decision/outcome")])
    vector("semantic-decision-method", "An equivalent cell is decided by TOST, not the sign test.", base_annotation,
           _set("/cells/1/decision/method", "exact-sign-test"), level="semantic",
           issues=[("record.decision_inconsistent", "/cells/1/decision/method")])
    vector("semantic-decision-zero-spread", "Zero spread is an exact equality, not TOST with p = 0.", base_annotation,
           _all(_set("/cells/1/replicate_values", [0.8671875] * 6), _set("/cells/1/replicate_shifts_pp", [0.0] * 6),
                _set("/cells/1/refit", 0.8671875), _set("/cells/1/shift_pp", 0.0),
                _set("/cells/1/decision/p_value", 0.0)), level="semantic",
           issues=[("record.decision_inconsistent", "/cells/1/decision/method")])
    vector("semantic-decision-not-anchored", "A checkpoint that does not anchor is not decided.", base_annotation,
           _set("/cells/0/decision", {"outcome": "displaced", "method": "not-anchored"}), level="semantic",
           issues=[("record.decision_inconsistent", "/cells/0/decision/outcome")])


def register_parse_invalid() -> None:
    raw_vector("parse-duplicate-key", "A JSON object with a repeated key (loaders would silently keep the last).",
               b'{"spec_version": "1.0", "kind": "declaration", "kind": "refit_annotation"}\n', "json.duplicate_key")
    raw_vector("parse-nan", "NaN is not JSON.", b'{"spec_version": "1.0", "kind": "declaration", "x": NaN}\n',
               "json.invalid")
    raw_vector("parse-not-utf8", "Records are UTF-8.", b'{"spec_version": "1.0", "kind": "d\xe9claration"}\n',
               "json.not_utf8")
    raw_vector("parse-truncated", "A record cut short.", b'{"spec_version": "1.0", "kind": "decl', "json.invalid")


def register_scales_refit() -> None:
    """A refit annotation whose cells were refit on the activation scales (1.1 ``refit_state``)."""
    vector("refit-annotation-v11-scales", "Spec 1.1: cells refit on the activation scales (minmax, six retain-only "
           "calibration draws of 256 records), θ and φ the subject's: shipped and refit scales digests.",
           annotation_scales)
    vector("refit-annotation-v11-batchnorm-state", "Spec 1.1: refit_state 'batchnorm' says what an absent one "
           "means (the running statistics were refit).", annotation_v11, _set("/refit_state", {"kind": "batchnorm"}))
    vector("invalid-v10-refit-state", "A 1.0 annotation has no refit_state: its cells are always BatchNorm refits.",
           annotation_scales, _set("/spec_version", "1.0"), level="schema",
           issues=[("schema.additional_property", "")])
    vector("invalid-v11-refit-state-kind", "The state refit is batchnorm or activation_scales.", annotation_scales,
           _set("/refit_state/kind", "weights"), level="schema",
           issues=[("schema.discriminator", "/refit_state/kind")])
    vector("invalid-v11-refit-scales-empty", "A scales refit gives each replicate's refit digest.",
           annotation_scales, _set("/refit_state/refit_scales_sha256", []), level="schema",
           issues=[("schema.items", "/refit_state/refit_scales_sha256")])
    vector("semantic-v11-refit-scales-count", "One refit scales digest per replicate.", annotation_scales,
           lambda r: r["refit_state"]["refit_scales_sha256"].pop(), level="semantic",
           issues=[("record.replicate_count", "/refit_state/refit_scales_sha256")])
    vector("semantic-v11-refit-percentile-missing", "A percentile-observer refit says its percentile.",
           annotation_scales, _set("/refit_state/observer", "percentile"), level="semantic",
           issues=[("record.observer_percentile", "/refit_state/percentile")])
    vector("semantic-v11-refit-scales-decision", "A scales cell's decision is checked against its replicate "
           "shifts like any cell's: df's six shifts beyond the margin are not 'equivalent'.", annotation_scales,
           _set("/cells/0/decision/outcome", "equivalent"), level="semantic",
           issues=[("record.decision_inconsistent", "/cells/0/decision/outcome")])


def build() -> tuple[dict[str, bytes], bytes]:
    """Every vector file's bytes by relative path, and the manifest's bytes."""
    VECTORS.clear()
    register_valid()
    register_schema_invalid()
    register_semantic_invalid()
    register_version_invalid()
    register_scales()
    register_scales_refit()
    register_decision_invalid()
    register_parse_invalid()
    files: dict[str, bytes] = {}
    entries = []
    for v in VECTORS:
        folder = "valid" if v["level"] is None else "invalid"
        rel = f"{folder}/{v['name']}.json"
        if rel in files:
            raise ValueError(f"two vectors are named {v['name']!r}")
        if "raw" in v:
            files[rel] = v["raw"]
        else:
            files[rel] = (json.dumps(v["data"], indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        errors = [i for i in v["issues"] if i["severity"] == "error"]
        entries.append({
            "file": rel,
            "description": v["description"],
            "valid": v["level"] is None,
            "level": v["level"],
            "exit_code": 2 if v["level"] == "parse" else (1 if errors else 0),
            "issues": sorted(v["issues"], key=lambda i: (i["path"], i["code"])),
        })
    manifest = {
        "spec_versions": list(SPEC_VERSIONS),
        "schema": "../v1/bnconvention.schema.json",
        "about": ("Conformance vectors of the bnconvention standard. valid: both the schema and the semantic "
                  "rules accept the record (it may still carry warnings). level 'schema': the JSON Schema rejects "
                  "it. level 'semantic': the JSON Schema accepts it and the semantic rules of docs/standard.md "
                  "reject it. level 'parse': not valid JSON. issues: the (code, path) pairs bnconvention reports; "
                  "paths are JSON pointers into the record. exit_code: of `bnconvention validate <file>`."),
        "vectors": entries,
    }
    return files, (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    files, manifest = build()
    files["manifest.json"] = manifest
    stale = sorted(rel for rel, data in files.items()
                   if not (HERE / rel).is_file() or (HERE / rel).read_bytes() != data)
    extra = sorted(str(p.relative_to(HERE)) for folder in ("valid", "invalid") if (HERE / folder).is_dir()
                   for p in (HERE / folder).glob("*.json") if str(p.relative_to(HERE)) not in files)
    if args.check:
        for rel in stale + extra:
            print(f"out of date: schema/tests/{rel}", file=sys.stderr)
        return 1 if stale or extra else 0
    for folder in ("valid", "invalid"):
        (HERE / folder).mkdir(exist_ok=True)
    for rel in extra:
        (HERE / rel).unlink()
    for rel in stale:
        (HERE / rel).write_bytes(files[rel])
    print(f"wrote {len(stale)} of {len(files)} files, removed {len(extra)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
