"""A census fixed before its refits (bnconvention.audit.census.preregistration): the record is written once and never
rewritten, a changed spec, listing or margin is refused with every change named, an amendment records it, and a
malformed record or amendments file is refused without being touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bnconvention.audit.census.preregistration import (
    AMENDMENTS_FILE,
    PREREGISTRATION_FILE,
    CensusPlan,
    ListedCheckpoint,
    census_section,
    check_plan,
    listing_sha256,
    preregister,
)
from bnconvention.errors import PreregistrationError


def _plan(*, spec="a" * 64, margin=1.2, names=("r05-s0", "r05-s1"), weights="w") -> CensusPlan:
    listed = [ListedCheckpoint(name=n, path=f"/p/{n}.safetensors", weights_key=f"{weights}{n}") for n in names]
    return CensusPlan(spec_sha256=spec, margin_pp=margin, margin_source="spec", listing_sha256=listing_sha256(listed),
                      checkpoints=listed)


def test_a_census_runs_at_its_preregistered_plan_and_refuses_a_change(tmp_path: Path):
    record, written = preregister(tmp_path, _plan(), created="2026-12-01T00:00:00+00:00")
    assert written and (tmp_path / PREREGISTRATION_FILE).is_file()
    before = (tmp_path / PREREGISTRATION_FILE).read_bytes()
    assert preregister(tmp_path, _plan())[1] is False  # the same plan again: kept, not rewritten
    again, amendments, plan = check_plan(tmp_path, _plan())
    assert again == record and amendments == [] and plan == record.plan
    changed = _plan(spec="b" * 64, margin=2.0, names=("r05-s0", "r05-s2"), weights="v")
    with pytest.raises(PreregistrationError) as caught:
        check_plan(tmp_path, changed)
    message = str(caught.value)
    for part in ("spec aaaaaaaaaaaa -> bbbbbbbbbbbb", "1 checkpoint added (r05-s2)", "1 checkpoint removed (r05-s1)",
                 "1 checkpoint with other weights (r05-s0)", "margin ±1.2 pp (spec) -> ±2 pp (spec)", "--amend"):
        assert part in message
    assert "\n" not in message
    with pytest.raises(PreregistrationError, match="already preregisters another census"):
        preregister(tmp_path, changed)
    assert (tmp_path / PREREGISTRATION_FILE).read_bytes() == before and not (tmp_path / AMENDMENTS_FILE).exists()


def test_an_amendment_is_recorded_beside_the_record_and_then_holds(tmp_path: Path):
    preregister(tmp_path, _plan(), created="2026-12-01T00:00:00+00:00")
    before = (tmp_path / PREREGISTRATION_FILE).read_bytes()
    changed = _plan(margin=1.5)
    record, amendments, plan = check_plan(tmp_path, changed, amend="a wider margin after the pilot",
                                          time="2026-12-02T00:00:00+00:00")
    assert plan == changed and [a.reason for a in amendments] == ["a wider margin after the pilot"]
    assert amendments[0].changes == ["margin ±1.2 pp (spec) -> ±1.5 pp (spec)"]
    assert (tmp_path / PREREGISTRATION_FILE).read_bytes() == before  # the record itself is never rewritten
    assert check_plan(tmp_path, changed)[2] == changed  # the amended plan holds from now on
    with pytest.raises(PreregistrationError):
        check_plan(tmp_path, _plan())  # going back is a change too
    section = census_section(record, amendments)
    assert section["preregistered"] and section["margin_pp"] == 1.2
    assert section["amendments"] == [{"time": "2026-12-02T00:00:00+00:00", "reason": "a wider margin after the pilot",
                                      "changes": ["margin ±1.2 pp (spec) -> ±1.5 pp (spec)"]}]
    assert census_section(None, []) == {"preregistered": False}


def test_amend_without_a_preregistration_and_an_empty_reason_are_refused(tmp_path: Path):
    with pytest.raises(PreregistrationError, match="no preregistration to amend"):
        check_plan(tmp_path, _plan(), amend="why")
    assert check_plan(tmp_path, _plan()) == (None, [], _plan())
    preregister(tmp_path, _plan())
    with pytest.raises(PreregistrationError, match="--amend REASON"):
        check_plan(tmp_path, _plan(margin=3.0), amend="  ")


@pytest.mark.parametrize(("name", "content"), [
    (PREREGISTRATION_FILE, b"{not json"),
    (PREREGISTRATION_FILE, json.dumps({"format": "bnconvention-preregistration/1"}).encode()),
    (AMENDMENTS_FILE, b'{"a": 1}'),
    (AMENDMENTS_FILE, b"[{}]"),
])
def test_a_malformed_record_is_refused_and_left_as_it_is(tmp_path: Path, name: str, content: bytes):
    if name == AMENDMENTS_FILE:
        preregister(tmp_path, _plan())
    (tmp_path / name).write_bytes(content)
    with pytest.raises(PreregistrationError):
        check_plan(tmp_path, _plan())
    assert (tmp_path / name).read_bytes() == content


def test_an_amendment_that_cannot_be_written_leaves_the_record_and_the_earlier_amendments(tmp_path: Path,
                                                                                          monkeypatch):
    import os

    preregister(tmp_path, _plan())
    check_plan(tmp_path, _plan(margin=1.5), amend="first")
    before = {name: (tmp_path / name).read_bytes() for name in (PREREGISTRATION_FILE, AMENDMENTS_FILE)}

    def refuse(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        check_plan(tmp_path, _plan(margin=2.0), amend="second")
    monkeypatch.undo()
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [AMENDMENTS_FILE, PREREGISTRATION_FILE]  # no temp left
    assert check_plan(tmp_path, _plan(margin=1.5))[2] == _plan(margin=1.5)  # the first amendment still holds
