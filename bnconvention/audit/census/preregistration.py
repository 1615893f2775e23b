"""A census fixed before its refits: the preregistration record and its amendments.

``bnconvention census --preregister`` checks the population and the spec, derives the margin when the spec says
``margin: auto`` (:mod:`bnconvention.audit.population.margin`), and writes ``OUT/preregistration.json`` before anything
is refit or evaluated: the spec's digest, the margin and how it was derived, the listing of the population (each
checkpoint's name, path and weights digest) and the time. A later census into the same ``OUT`` is checked against
it: a different spec, a different listing (a checkpoint added, removed or with other weights) or a different
derived margin stops the census with one line naming every change, unless the run gives a reason with
``--amend``, which appends the change to ``OUT/amendments.json`` (the preregistration itself is never rewritten).
The census then decides at the preregistered margin (or the latest amended one), and ``census.json`` carries the
record and every amendment.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bnconvention.errors import PreregistrationError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.canonical import canonical_sha256, loads_strict

PREREGISTRATION_FILE = "preregistration.json"
AMENDMENTS_FILE = "amendments.json"
FORMAT: Final = "bnconvention-preregistration/1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListedCheckpoint(_Model):
    name: str
    path: str
    weights_key: str


class CensusPlan(_Model):
    """What a census is fixed to: the spec, the margin it decides at and the population it audits."""

    spec_sha256: str = Field(description="Digest of the spec as given (margin: auto unresolved).")
    margin_pp: float
    margin_source: Literal["spec", "auto"]
    margin_derivation: dict[str, Any] | None = Field(default=None, description="With margin: auto, how.")
    listing_sha256: str
    checkpoints: list[ListedCheckpoint]


class Preregistration(_Model):
    format: Literal["bnconvention-preregistration/1"] = FORMAT
    created: str = Field(description="UTC time the record was written (ISO 8601).")
    plan: CensusPlan


class Amendment(_Model):
    time: str
    reason: str
    changes: list[str]
    plan: CensusPlan


def listing_sha256(checkpoints: Sequence[ListedCheckpoint]) -> str:
    return canonical_sha256([c.model_dump() for c in checkpoints])


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_preregistration(out_dir: Path) -> Preregistration | None:
    path = out_dir / PREREGISTRATION_FILE
    if not path.is_file():
        return None
    try:
        return Preregistration.model_validate_json(path.read_bytes())
    except (ValidationError, ValueError) as exc:
        raise PreregistrationError(f"{path} is not a preregistration record ({exc.__class__.__name__}); it is "
                                   "kept as it is: move it away to census without one") from None


def read_amendments(out_dir: Path) -> list[Amendment]:
    path = out_dir / AMENDMENTS_FILE
    if not path.is_file():
        return []
    try:
        raw = path.read_bytes()
        return [Amendment.model_validate(item) for item in _json_list(raw)]
    except (ValidationError, ValueError) as exc:
        raise PreregistrationError(f"{path} is not a list of amendments ({exc.__class__.__name__})") from None


def _json_list(raw: bytes) -> list[Any]:
    decoded = loads_strict(raw, source=AMENDMENTS_FILE)
    if not isinstance(decoded, list):
        raise ValueError("not a list")
    return decoded


def differences(fixed: CensusPlan, now: CensusPlan) -> list[str]:
    """What changed from the fixed plan, one phrase each (empty: nothing)."""
    changes = []
    if fixed.spec_sha256 != now.spec_sha256:
        changes.append(f"spec {fixed.spec_sha256[:12]} -> {now.spec_sha256[:12]}")
    before = {c.name: c for c in fixed.checkpoints}
    after = {c.name: c for c in now.checkpoints}
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    moved = sorted(n for n in set(before) & set(after) if before[n].weights_key != after[n].weights_key)
    for words, names in (("added", added), ("removed", removed), ("with other weights", moved)):
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            changes.append(f"{len(names)} checkpoint{'s' if len(names) != 1 else ''} {words} ({shown})")
    if fixed.margin_pp != now.margin_pp or fixed.margin_source != now.margin_source:
        changes.append(f"margin ±{fixed.margin_pp:.4g} pp ({fixed.margin_source}) -> ±{now.margin_pp:.4g} pp "
                       f"({now.margin_source})")
    return changes


def preregister(out_dir: Path, plan: CensusPlan, *, created: str | None = None) -> tuple[Preregistration, bool]:
    """Write the record (atomically); an identical plan already registered is kept (False: nothing written), a
    different one refused."""
    existing = read_preregistration(out_dir)
    if existing is not None:
        changes = differences(existing.plan, plan)
        if changes:
            raise PreregistrationError(f"{out_dir / PREREGISTRATION_FILE} already preregisters another census ("
                                       f"{'; '.join(changes)}); census into another folder, or run the census "
                                       "with --amend REASON to record the change")
        return existing, False
    record = Preregistration(created=created or _now(), plan=plan)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / PREREGISTRATION_FILE, record.model_dump_json(indent=2) + "\n")
    return record, True


def check_plan(out_dir: Path, plan: CensusPlan, *, amend: str | None = None,
               time: str | None = None) -> tuple[Preregistration | None, list[Amendment], CensusPlan]:
    """The census's plan against its preregistration: the plan to run (the preregistered margin, or the latest
    amendment's), with the amendments. A change without ``amend`` raises :class:`PreregistrationError`; with it,
    the change is appended to the amendments file."""
    record = read_preregistration(out_dir)
    amendments = read_amendments(out_dir)
    if record is None:
        if amend is not None:
            raise PreregistrationError(f"--amend given but {out_dir} holds no preregistration to amend; "
                                       "preregister first with --preregister")
        return None, [], plan
    fixed = amendments[-1].plan if amendments else record.plan
    changes = differences(fixed, plan)
    if not changes:
        return record, amendments, fixed
    if amend is None or not amend.strip():
        raise PreregistrationError(f"this census differs from its preregistration ({out_dir / PREREGISTRATION_FILE},"
                                   f" {record.created}): {'; '.join(changes)}; rerun with --amend REASON to record "
                                   "the change as an amendment")
    amendment = Amendment(time=time or _now(), reason=amend.strip(), changes=changes, plan=plan)
    amendments = [*amendments, amendment]
    atomic_write_text(out_dir / AMENDMENTS_FILE,
                      "[\n" + ",\n".join(a.model_dump_json(indent=2) for a in amendments) + "\n]\n")
    return record, amendments, plan


def census_section(record: Preregistration | None, amendments: Sequence[Amendment]) -> dict[str, Any]:
    """``census.json``'s ``preregistration``: the record and its amendments, or that there was none."""
    if record is None:
        return {"preregistered": False}
    return {"preregistered": True, "file": PREREGISTRATION_FILE, "created": record.created,
            "spec_sha256": record.plan.spec_sha256, "margin_pp": record.plan.margin_pp,
            "margin_source": record.plan.margin_source, "listing_sha256": record.plan.listing_sha256,
            "checkpoints": len(record.plan.checkpoints),
            "amendments": [{"time": a.time, "reason": a.reason, "changes": a.changes} for a in amendments]}


__all__ = ["AMENDMENTS_FILE", "PREREGISTRATION_FILE", "Amendment", "CensusPlan", "ListedCheckpoint",
           "Preregistration", "census_section", "check_plan", "differences", "listing_sha256", "preregister",
           "read_amendments", "read_preregistration"]
