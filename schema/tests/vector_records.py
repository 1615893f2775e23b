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
         outcome: str = "displaced", p_value: float | None, method: str = "exact-sign-test") -> Record:
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
        "replicates": 6,
        "margin_pp": 1.2,
        "anchoring": {"tolerance": 0.02, "anchored": True, "cells": [
            {"metric": "df", "published": 0.125, "shipped": 0.125, "abs_diff": 0.0},
            {"metric": "dt", "published": 0.875, "shipped": 0.8671875, "abs_diff": 0.0078125},
        ]},
        # The decisions are the rules' (docs/statistics.md), worked out by hand: six replicates beyond the margin
        # in one direction give the one-sided sign-test p = 0.5**6 = 0.015625 <= 0.05 (displaced); dt's shifts
        # (mean 0.1953 pp, sd 0.5924 pp, se 0.2419 pp) give TOST p = P(t_5 < (0.1953 - 1.2) / 0.2419) = 0.0044371
        # (equivalent).
        "cells": [
            cell("df", "forget", 0.125, [0.625, 0.5, 0.75, 0.625, 0.5625, 0.6875], p_value=0.015625),
            cell("dt", "test", 0.8671875, [0.875, 0.859375, 0.8671875, 0.875, 0.87109375, 0.8671875],
                 outcome="equivalent", p_value=0.004437115077114705, method="tost-90"),
            cell("abs(df - dt)", None, 0.7421875, [0.25, 0.359375, 0.1171875, 0.25, 0.30859375, 0.1796875],
                 p_value=0.015625),
        ],
        "verdicts": [{"criterion": "abs(df - dt) <= 0.05", "shipped": False, "refit": False, "flipped": False,
                      "refit_pass_replicates": 0},
                     {"criterion": "df <= 0.2", "shipped": True, "refit": False, "flipped": True,
                      "direction": "pass_to_fail", "refit_pass_replicates": 0},
                     {"criterion": "abs(df - dt) <= 0.5", "shipped": False, "refit": True, "flipped": True,
                      "direction": "fail_to_pass", "refit_pass_replicates": 6}],
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
                       method="channel-absent")],  # zero spread: an exact equality, no p-value
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


def annotation_v11() -> Record:
    """The full annotation as spec version 1.1, with every field 1.1 adds (docs/standard.md, "What changed in 1.1").

    The BY p-values are those of a family of m = 12 checkpoints in which this one has the smallest p (0.015625):
    0.015625 * 12 * c(12) / 1 with c(12) = sum 1/j = 3.1032 (the others at 0.5 adjust higher).
    """
    record = base_annotation()
    record["spec_version"] = "1.1"
    # An undetermined cell: dr's shifts (mean 0, sd 2.7951 pp) give TOST p = P(t_5 > 1.2 / 1.1411) = 0.17056 and
    # only 2/6 replicates beyond the margin.
    record["cells"].append(cell("dr", "retain", 0.96875, [1.0, 0.9375, 1.0, 0.9375, 0.96875, 0.96875],
                                outcome="undetermined", p_value=0.17055822997970438, method="none"))
    for cell_record in record["cells"]:
        if cell_record["decision"]["outcome"] == "displaced":
            cell_record["decision"]["by_p_value"] = 0.5818520021645022
            cell_record["decision"]["by_family_size"] = 12
    record["family"] = {"name": "gradient-ascent", "variant": "train-mode", "removal": "instances 5%", "seed": 1}
    band = {"lower": -1.5, "upper": 1.75, "level": 0.95}
    record["provenance_arms"] = [
        {"arm": "deployment-share", "pool_size": 512, "exchanged": 26, "forget_shift_pp": [0.5, -0.25, 1.0],
         "null_band": band, "outside_null": False},
        {"arm": "ceiling", "pool_size": 512, "exchanged": 90, "forget_shift_pp": [6.25, 4.5, 5.75],
         "null_band": band, "outside_null": True},
    ]
    record["recoverability_curves"] = [
        {"source": "test", "rule": "cumulative", "seeds": [0, 1], "forget_accuracy_shipped": 0.125,
         "points": [{"images": 1, "forget_accuracy": [0.125, 0.25]}, {"images": 10, "forget_accuracy": [0.5, 0.625]},
                    {"images": 100, "forget_accuracy": [0.625, 0.625]}]},
        {"source": "other", "description": "gaussian noise", "rule": "cumulative", "seeds": [0, 1],
         "forget_accuracy_shipped": 0.125, "points": [{"images": 10, "forget_accuracy": [0.125, 0.1875]}]},
    ]
    record["twin"] = {"filename": "twin-frozen/model.safetensors", "trainable_sha256": fake("trainable"),
                      "running_sha256": fake("twin running"), "buffer_update_mode": "frozen", "metric": "df",
                      "gap_pp": 33.75}
    return record


def annotation_v11_encoder() -> Record:
    """A 1.1 annotation with encoder-level diagnostics (docs/statistics.md): a linear-probe cell against its retrain
    reference with the decomposition, an attack-AUC cell with the attack protocol, and relearning.

    Hand arithmetic (six replicates): LP_M = 0.5, LP_Mcal = 0.75 on every replicate, LP_retr = 0.625, so the
    BN-residual is 50 - 75 = -25 pp on each replicate (interval of zero width) and the NC-residual 75 - 62.5 =
    +12.5 pp; the lp cell's six shifts of +25 pp clear the 1.2 pp margin: displaced at p = 0.5^6 = 0.015625.
    The AUC cell stays at 0.5625 on every replicate: equivalent by exact equality (zero spread).
    """
    record = base_annotation()
    record["spec_version"] = "1.1"
    reference = {"arm": "retrain", "filename": "c3-s0-retrain/c3-s0-retrain.safetensors",
                 "trainable_sha256": fake("retrain trainable"), "running_sha256": fake("retrain running")}
    lp = cell("lp_forget", "forget", 0.5, [0.75] * 6, p_value=0.015625)
    lp["unit"] = "fraction"
    lp["reference"] = {**reference, "value": 0.625}
    auc = cell("mia_auc", "forget", 0.5625, [0.5625] * 6, outcome="equivalent", p_value=None,
               method="exact-equality")
    auc["unit"] = "auc"
    record["cells"] += [lp, auc]
    zero_width = {"level": 0.95, "method": "t-replicates"}
    record["linear_probe"] = {
        "metric": "lp_forget",
        "protocol": {"probe": "sklearn-logistic-regression", "solver": "lbfgs", "max_iter": 1000,
                     "inverse_regularization": 1.0, "standardized": True, "feature_layer": "head",
                     "train_split": "test", "per_class": 8, "classes": 10, "test_split": "forget", "test_records": 8,
                     "seed": 0, "refit_rule": "exact"},
        "bn_residual_pp": {"estimate": -25.0, "lower": -25.0, "upper": -25.0, **zero_width},
        "nc_residual_pp": {"estimate": 12.5, "lower": 12.5, "upper": 12.5, **zero_width},
    }
    record["membership_inference"] = {
        "metric": "mia_auc",
        "protocol": {"attack": "loss-threshold", "members": "forget", "nonmembers": "test", "class_matched": True,
                     "records_per_side": 8,
                     "seed": 0, "bootstrap": 200},
        "auc_shipped": {"estimate": 0.5625, "lower": 0.3125, "upper": 0.8125, "level": 0.95,
                        "method": "bootstrap-percentile"},
        "auc_refit": {"estimate": 0.5625, "lower": 0.3125, "upper": 0.8125, "level": 0.95,
                      "method": "bootstrap-percentile"},
        "shift_pp": {"estimate": 0.0, "lower": 0.0, "upper": 0.0, "level": 0.95, "method": "bootstrap-percentile"},
    }
    record["relearning"] = {
        "protocol": {"optimizer": "sgd", "learning_rate": 0.05, "batch_size": 8, "records": 8, "max_steps": 20,
                     "target_forget_accuracy": 0.9, "evaluated_on": "forget", "batchnorm": "frozen", "seed": 0},
        "steps_shipped": 7, "steps_refit": [2, 3, None],
    }
    return record


def scales_site(name: str, scale: float, zero_point: int, *, stored: bool = True) -> Record:
    out: Record = {"name": name, "scale": scale, "zero_point": zero_point}
    if stored:
        out["tensors_sha256"] = fake(f"scales {name}")
    return out


def annotation_scales() -> Record:
    """A 1.1 annotation whose cells were refit on the activation scales: df and dt measured with the
    activations fake-quantized at the shipped scales and at each replicate's retain-only refit, θ and φ the
    subject's own (its convention is the declared one: the buffers were not refit). The cells and their
    hand-worked decisions are the full annotation's (df displaced at p = 0.5^6, dt equivalent by TOST)."""
    record = base_annotation()
    record["spec_version"] = "1.1"
    for key in ("anchoring", "verdicts", "staleness", "provenance", "recoverability"):
        record.pop(key)
    record["convention"] = base_ema()["convention"]
    record["cells"] = record["cells"][:2]
    record["refit_state"] = {
        "kind": "activation_scales", "observer": "minmax",
        "calibration": {"role": "retain", "dataset": {"id": "sklearn/digits"},
                        "subset": "256 records of the retain split per replicate", "record_count": 256},
        "calibration_seeds": [100, 101, 102, 103, 104, 105],
        "shipped_scales_sha256": fake("scales"),
        "refit_scales_sha256": [fake(f"refit scales {r}") for r in range(6)],
        "median_abs_log_ratio": 0.03125,
    }
    record["reporting_line"] = "activation scales refit on retained records: df moves +50.00pp, dt equivalent"
    return record


def declaration_scales() -> Record:
    """A 1.1 declaration whose deployed state also holds static activation scales (minmax, quint8, two sites)
    calibrated on 256 retained records: the deployed-state kind 1.1 adds (docs/standard.md, "What changed in 1.1")."""
    record = base_ema()
    record["spec_version"] = "1.1"
    record["deployed_state"].append({
        "kind": "activation_scales", "dtype": "quint8", "qscheme": "per_tensor_affine", "quant_min": 0,
        "quant_max": 255, "observer": "minmax",
        "calibration": {"role": "retain", "dataset": {"id": "sklearn/digits"}, "subset": "all classes except 3",
                        "record_count": 256, "sampling_seed": 0},
        "sites": [scales_site("features.0.activation_post_process", 0.0234375, 113),
                  scales_site("features.1.activation_post_process", 0.015625, 0)],
        "scales_sha256": fake("scales"),
    })
    return record
