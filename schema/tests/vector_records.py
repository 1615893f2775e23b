"""Base records of the conformance vectors: a few valid declarations and annotations built with the production
builder (``bnconvention.authoring.declaration``). ``generate.py`` derives every vector from these with one labelled change.
Digests here are sha256 values of fixed labels (vectors bind to no file).
"""

from __future__ import annotations

import copy
from typing import Any

from bnconvention.formats.canonical import sha256_hex
from bnconvention.authoring.declaration import make_convention, make_transform
from bnconvention.standard.models import SPEC_VERSION, to_dict
from bnconvention.standard.naming import record_ids_sha256

Record = dict[str, Any]


def fake(label: str) -> str:
    """A stand-in digest: the sha256 of a label (vectors bind to no file)."""
    return sha256_hex(f"bnconvention vector: {label}".encode())


def layer(name: str, num_features: int, *, momentum: float | None = 0.1, affine: bool = True,
          track: bool = True, type_: str = "BatchNorm2d") -> Record:
    out: Record = {"name": name, "type": type_, "num_features": num_features, "eps": 1e-05, "affine": affine,
                   "track_running_stats": track}
    if momentum is not None:
        out["momentum"] = momentum
    if track:
        out["running_sha256"] = fake(f"layer {name}")
    return out


def producer() -> Record:
    return {"tool": "bnconvention", "version": "0.1.0"}


def declaration(convention: Any, layers: list[Record], *, running: str | None = "combined", **extra: Any) -> Record:
    out: Record = {
        "spec_version": SPEC_VERSION,
        "kind": "declaration",
        "convention": to_dict(convention),
        "deployed_state": [{"kind": "batchnorm", "layers": layers}],
        "digests": {"algorithm": "bnconvention-tensors/1", "trainable_sha256": fake("trainable")},
        "producer": producer(),
    }
    if running == "combined":
        out["digests"]["running_sha256"] = fake("running")
    elif running is not None:
        out["digests"]["running_sha256"] = running
    out.update(extra)
    return out


TRAIN_TRANSFORM = make_transform(mode="train", reference="train.py:train_transform", resize="16x16 bilinear",
                                 augmentations=["shift 1px p=1.0"], normalize_mean=[0.5], normalize_std=[0.25])
EVAL_TRANSFORM = make_transform(mode="eval", reference="train.py:eval_transform", resize="16x16 bilinear",
                                normalize_mean=[0.5], normalize_std=[0.25])
TWO_LAYERS = [layer("features.1", 8), layer("features.4", 16)]


def staleness(values: list[tuple[str, float, float]]) -> Record:
    n = len(values)
    return {
        "mean_distance": sum(v[1] for v in values) / n if n else 0.0,
        "var_distance": sum(v[2] for v in values) / n if n else 0.0,
        "layers": [{"name": name, "mean_distance": m, "var_distance": v} for name, m, v in values],
    }


def base_ema() -> Record:
    convention = make_convention(buffer_update_mode="train", role="train", dataset_id="sklearn/digits",
                                 subset="all training records", transform=TRAIN_TRANSFORM, rule="ema", momentum=0.1,
                                 batch_size=64, num_batches=300, record_count=1437, sampling_seed=0)
    return declaration(convention, copy.deepcopy(TWO_LAYERS),
                       reporting_line="deployed state as shipped: buffers updated by training-mode forwards")


def base_exact_refit() -> Record:
    convention = make_convention(
        buffer_update_mode="refit", role="retain", dataset_id="sklearn/digits", dataset_revision="1.9.1",
        subset="training records of every class except 3", transform=TRAIN_TRANSFORM, rule="exact",
        batch_size=128, num_batches=11, record_count=1291, ids_sha256=record_ids_sha256(range(1291)),
        sampling_seed=7)
    record = declaration(convention, copy.deepcopy(TWO_LAYERS),
                         reporting_line="refit on the retained split under the training transform of train.py")
    record["refit"] = {
        "trainable_sha256_before": fake("trainable"),
        "trainable_sha256_after": fake("trainable"),
        "running_sha256_before": fake("running before refit"),
        "running_sha256_after": fake("running"),
        "staleness": staleness([("features.1", 0.25, 0.5), ("features.4", 0.75, 1.5)]),
        "seconds": 0.84,
        "forward_passes": 22,
        "warnings": [],
    }
    return record


def base_channel_absent() -> Record:
    convention = make_convention(buffer_update_mode="untouched", role="train", dataset_id="sklearn/digits",
                                 subset="all training records", transform=TRAIN_TRANSFORM, rule="ema", momentum=0.1)
    return declaration(convention, [], running=None,
                       reporting_line="no running statistics (GroupNorm): channel absent, refit is the identity")


def cell(metric: str, split: str | None, shipped: float, values: list[float], *, margin: float = 1.2,
         outcome: str = "displaced", p_value: float | None = 0.0009765625, method: str = "exact-sign-test") -> Record:
    shifts = [round((v - shipped) * 100, 10) for v in values]
    out: Record = {
        "metric": metric,
        "shipped": shipped,
        "refit": sum(values) / len(values),
        "shift_pp": sum(shifts) / len(shifts),
        "replicate_values": values,
        "replicate_shifts_pp": shifts,
        "margin_pp": margin,
        "decision": {"outcome": outcome, "method": method},
    }
    if split is not None:
        out["split"] = split
    if p_value is not None:
        out["decision"]["p_value"] = p_value
    return out


def base_annotation() -> Record:
    convention = make_convention(
        buffer_update_mode="refit", role="retain", dataset_id="sklearn/digits", subset="training records of every "
        "class except 3", transform=TRAIN_TRANSFORM, rule="exact", batch_size=128, num_batches=11)
    return {
        "spec_version": SPEC_VERSION,
        "kind": "refit_annotation",
        "subject": {"filename": "model.safetensors", "repo": "digits-lab/convnet-bn-ga", "revision": "main",
                    "trainable_sha256": fake("trainable"), "running_sha256": fake("running"),
                    "declared_convention": "train/train/train-transform/ema-m0.1"},
        "convention": to_dict(convention),
        "channel": "present",
        "replicates": 4,
        "margin_pp": 1.2,
        "anchoring": {"tolerance": 0.02, "anchored": True, "cells": [
            {"metric": "df", "published": 0.125, "shipped": 0.125, "abs_diff": 0.0},
            {"metric": "dt", "published": 0.875, "shipped": 0.8671875, "abs_diff": 0.0078125},
        ]},
        "cells": [
            cell("df", "forget", 0.125, [0.625, 0.5, 0.75, 0.625]),
            cell("dt", "test", 0.8671875, [0.875, 0.859375, 0.8671875, 0.875], outcome="equivalent", p_value=0.03125,
                 method="tost-90"),
            cell("abs(df - dt)", None, 0.7421875, [0.25, 0.359375, 0.1171875, 0.25], outcome="undetermined",
                 p_value=None),
        ],
        "verdicts": [{"criterion": "abs(df - dt) <= 0.05", "shipped": False, "refit": False, "flipped": False,
                      "refit_pass_replicates": 0},
                     {"criterion": "df <= 0.2", "shipped": True, "refit": False, "flipped": True,
                      "direction": "pass_to_fail", "refit_pass_replicates": 0},
                     {"criterion": "abs(df - dt) <= 0.5", "shipped": False, "refit": True, "flipped": True,
                      "direction": "fail_to_pass", "refit_pass_replicates": 4}],
        "staleness": {**staleness([("features.1", 1.5, 2.5), ("features.4", 0.5, 0.5)]),
                      "reference_band": {"mean_distance": 0.125, "var_distance": 0.25}, "exceeds_band": True},
        "provenance": {"pool_size": 512, "exchanged": 64, "mean_distance": 0.0625, "var_distance": 0.125,
                       "forget_shift_pp": 3.5},
        "recoverability": {"images": 10, "source": "proxy", "rule": "cumulative", "forget_accuracy_shipped": 0.125,
                           "forget_accuracy_after": 0.5, "shift_pp": 37.5},
        "producer": producer(),
        "reporting_line": "refit on the retained split under the training transform: df moves +50.00pp",
    }


def base_annotation_absent() -> Record:
    convention = make_convention(buffer_update_mode="refit", role="retain", dataset_id="sklearn/digits",
                                 subset="training records of every class except 3", transform=TRAIN_TRANSFORM,
                                 rule="exact")
    return {
        "spec_version": SPEC_VERSION, "kind": "refit_annotation",
        "subject": {"filename": "model.safetensors", "trainable_sha256": fake("trainable gn")},
        "convention": to_dict(convention), "channel": "absent", "replicates": 2, "margin_pp": 1.2,
        "cells": [cell("df", "forget", 0.25, [0.25, 0.25], outcome="equivalent", p_value=None,
                       method="channel-absent")],
        "producer": producer(),
        "reporting_line": "no running statistics (GroupNorm): channel absent, every shift is 0.00pp",
    }


def annotation_minimal() -> Record:
    record = base_annotation()
    for key in ("anchoring", "verdicts", "staleness", "provenance", "recoverability"):
        record.pop(key)
    record["subject"] = {"filename": "weights/model.safetensors", "trainable_sha256": fake("trainable")}
    record["cells"] = record["cells"][:1]
    return record
