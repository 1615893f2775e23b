"""Shared, computed-once material for the audit tests (imported by tests/test_audit_*.py).

One small census of five zoo checkpoints (R = 3, pools of 256) serves the paper-pattern tests, the census tests and
the resume test; it is computed once per test process and cached here.
"""

from __future__ import annotations

from pathlib import Path

from bnconvention.audit.census.run import CensusOutcome, run_census
from bnconvention.audit.core.result import AuditResult, PopulationMetadata
from bnconvention.audit.spec.audit_spec import AuditSpec, parse_spec

PATTERN_CHECKPOINTS = ("bn-badteacher-eval", "bn-relabel-train", "bn-ga-train", "bn-retrain", "gn-badteacher-eval")
PATTERN_SPEC = {
    "spec_version": "1.0",
    "kind": "audit_spec",
    "name": "pattern",
    "splits": {"forget_classes": [3]},
    "cells": ["df", "dr", "dt"],
    "criteria": ["df <= 0.05", "dr >= 0.95"],
    "published_source": "sidecar",
    "replicates": 3,
    "refit": {"pool_size": 256},
    "staleness_band": {"refits": 9},  # the smallest N that reaches the default level 0.1: 6 refits beyond R
    "recoverability": {"images": 10, "source": "test"},
    "provenance": {"pool_size": 256, "exchanged": 26, "draws": 2},
}


def pattern_spec() -> AuditSpec:
    return parse_spec(PATTERN_SPEC)


def checkpoint_paths(zoo_root: Path, names: tuple[str, ...] = PATTERN_CHECKPOINTS) -> list[Path]:
    return [Path(zoo_root) / f"{name}.safetensors" for name in names]


_CACHE: dict[Path, CensusOutcome] = {}


def pattern_census(zoo_root: Path, tmp_path_factory) -> CensusOutcome:  # type: ignore[no-untyped-def]
    """The pattern census, computed on the first call in this process and reused afterwards."""
    key = Path(zoo_root)
    if key not in _CACHE:
        _CACHE[key] = run_census(checkpoint_paths(key), pattern_spec(), tmp_path_factory.mktemp("pattern-census"))
    return _CACHE[key]


def without_timing(value):  # type: ignore[no-untyped-def]
    """A result or census dict with wall-clock fields removed, for comparing runs."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items()
                if k not in ("seconds", "seconds_shipped_eval", "timing", "invocation")}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def fake_result(name: str, shifts: list[float], *, anchored: bool | None = True, direction: str | None = None,
                shipped: float = 0.1, population: PopulationMetadata | None = None) -> AuditResult:
    """A hand-made audit result of one cell ``df`` shipped at ``shipped`` (for exact counting tests): decided by the
    rules from ``shifts``, its verdict ``df <= 0.05`` flipped in ``direction`` (None: not flipped)."""
    from bnconvention.audit.measure.stats import decide, sign_test
    from bnconvention.authoring.declaration import make_convention, make_transform
    from bnconvention.standard.models import (
        SPEC_VERSION,
        AuditedFile,
        Cell,
        CellDecision,
        Producer,
        RefitAnnotation,
        Verdict,
    )

    decision = decide(shifts, margin_pp=1.2)
    sign = sign_test(shifts, margin_pp=1.2)
    values = [shipped + s / 100 for s in shifts]
    verdict = Verdict(criterion="df <= 0.05", shipped=direction == "pass_to_fail",
                      refit=direction == "fail_to_pass", flipped=direction is not None, direction=direction,
                      refit_pass_replicates=len(shifts) if direction == "fail_to_pass" else 0)
    annotation = RefitAnnotation(
        spec_version=SPEC_VERSION, kind="refit_annotation",
        subject=AuditedFile(filename=f"{name}.safetensors", trainable_sha256="0" * 64),
        convention=make_convention(buffer_update_mode="refit", role="retain", dataset_id="d", subset="s",
                                   transform=make_transform(mode="train"), rule="exact"),
        channel="present", replicates=len(shifts), margin_pp=1.2,
        cells=[Cell(metric="df", split="forget", shipped=shipped, refit=sum(values) / len(values),
                    shift_pp=sum(shifts) / len(shifts), replicate_values=values, replicate_shifts_pp=shifts,
                    margin_pp=1.2, decision=CellDecision(outcome=decision.outcome, p_value=decision.p_value,
                                                         method=decision.method))],
        verdicts=[verdict], producer=Producer(tool="t", version="0"), reporting_line="line")
    return AuditResult(checkpoint=name, weights_path=name, weights_key="k", spec_sha256="s", factory="f",
                       anchored=anchored, annotation=annotation,
                       sign_tests={"df": {"p_value": sign.p_value, "beyond": sign.beyond,
                                          "direction": sign.direction}},
                       replicate_records=[], refits_run=len(shifts), seconds=1.0, seconds_shipped_eval=0.1,
                       population=population)
