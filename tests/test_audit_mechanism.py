"""Corruption, misalignment or neither (bnconvention.audit.diagnostics.mechanism), from metadata and from the base's
digests."""

from __future__ import annotations

import json

import pytest

from bnconvention.audit.core.result import MechanismEvidence
from bnconvention.audit.diagnostics.mechanism import (
    combine,
    from_base,
    from_convention,
    from_metadata,
    from_observation,
)


def _convention(mode: str, role: str) -> dict:
    return {"buffer_update_mode": mode, "data": {"role": role}}


@pytest.mark.parametrize(("mode", "role", "expected"), [
    pytest.param("train", "forget", "corruption", id="train-mode-on-forget"),
    pytest.param("train", "retain", "neither", id="train-mode-on-retain"),
    pytest.param("frozen", "train", "misalignment", id="frozen"),
    pytest.param("refit", "retain", "neither", id="refit"),
    pytest.param("train", "train", "neither", id="no-removal-base"),
    pytest.param("unknown", "train", None, id="unknown"),
])
def test_a_declared_convention(mode, role, expected):
    assert from_convention(_convention(mode, role))[0] == expected


@pytest.mark.parametrize(("observation", "expected"), [
    pytest.param({"mode": "train", "buffers_changed": True, "split_tags": ["retain", "forget"]}, "corruption",
                 id="updated-on-forget"),
    pytest.param({"mode": "train", "buffers_changed": True, "split_tags": ["retain"]}, "neither", id="on-retain"),
    pytest.param({"mode": "train", "buffers_changed": True, "split_tags": []}, None, id="untagged"),
    pytest.param({"mode": "frozen", "buffers_changed": False, "trainable_changed": True}, "misalignment",
                 id="frozen-theta-moved"),
    pytest.param({"mode": "frozen", "buffers_changed": False, "trainable_changed": False}, "neither",
                 id="nothing-moved"),
])
def test_an_observation(observation, expected):
    assert from_observation(observation)[0] == expected


def test_the_observation_comes_before_the_declaration_and_the_sidecar():
    record = {"kind": "declaration", "convention": _convention("train", "retain"),
              "observation": {"mode": "train", "buffers_changed": True, "split_tags": ["forget"]}}
    evidence = from_metadata(record=record, sidecar={"convention": _convention("frozen", "train"), "parent": "base"})
    assert (evidence.mechanism, evidence.source, evidence.base) == ("corruption", "observation", "base")
    untagged = {**record, "observation": {"mode": "train", "buffers_changed": True}}
    assert from_metadata(record=untagged, sidecar=None).source == "declaration"
    nothing = from_metadata(record=None, sidecar=None)
    assert (nothing.mechanism, nothing.reason) == (None, "no declaration, observation or sidecar convention")


@pytest.mark.parametrize(("theta", "phi", "expected"), [
    (("a", "a"), ("x", "x"), "identical"), (("a", "b"), ("x", "x"), "frozen"),
    (("a", "b"), ("x", "y"), "updated"), (("a", "a"), ("x", "y"), "buffers_only")])
def test_against_the_base(theta, phi, expected):
    assert from_base(trainable=theta[1], running=phi[1], base_trainable=theta[0], base_running=phi[0]) == expected


def test_combine_prefers_the_metadata_and_flags_disagreement():
    declared = MechanismEvidence(mechanism="corruption", source="sidecar", reason="r", base="b")
    assert combine(declared, "updated", channel="present")["consistent"] is True
    frozen = combine(declared, "frozen", channel="present")
    assert (frozen["mechanism"], frozen["consistent"]) == ("corruption", False)
    silent = MechanismEvidence(mechanism=None, source=None, reason="r", base="b")
    assert combine(silent, "frozen", channel="present")["mechanism"] == "misalignment"
    assert combine(silent, "updated", channel="present")["mechanism"] is None  # the data is not known
    assert combine(None, None, channel="absent")["mechanism"] is None


@pytest.mark.parametrize(("name", "expected"), [
    ("bn-ga-train", "corruption"), ("bn-relabel-train", "corruption"), ("bn-badteacher-eval", "misalignment"),
    ("bn-relabel-eval", "misalignment"), ("bn-finetune", "neither"), ("bn-base", "neither")])
def test_the_digits_zoo_sidecars(zoo, name, expected):
    sidecar = json.loads((zoo.root / f"{name}.json").read_text())
    assert from_metadata(record=None, sidecar=sidecar).mechanism == expected
