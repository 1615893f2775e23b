"""Sweeps from stored replicates: what a refit depends on keys it, so margins and q levels re-decide without refits.

A replicate's refit and evaluation depend on the checkpoint (its trainable and running digests), the data and
splits, the refit convention (rule, transform, batch size), the pool size, the root seed and the replicate index
(its pool and augmentation come from ``SeedSequence(seed, spawn_key=(0, r))``) — never on the margin, the q level,
the number of replicates R, the cells or the criteria. So:

* :func:`measurement_sha256` — the census journal key: the spec without its decision-only fields
  (:data:`DECISION_FIELDS`). A census rerun with another ``margin_pp`` or ``fdr_q`` reuses every journaled audit
  and re-decides it (:func:`bnconvention.audit.run.redecide.redecide`) from the stored shipped and replicate
  cells;
* :func:`replicate_key` and :class:`ReplicateStore` — one file per replicate under ``OUT/replicates/``, keyed by
  checkpoint, design (:data:`REPLICATE_FIELDS`, with the pool size) and index: a pool-size sweep
  (:mod:`bnconvention.audit.run.pool_sweep`) refits only the replicates no earlier run stored;
* :func:`margin_sweep` — the census counts at every margin of ``sweeps.margins_pp`` and every level of
  ``sweeps.fdr_qs``, from the stored shifts alone (with the activation-scales cells' decisions at each margin when
  the census audited scales: :func:`scales_outcomes`).

Everything here decides from stored numbers (no model, no torch): the population's readings run the margin sweep on
a torch-free path (the HTML report).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bnconvention.audit.core.files import write_json
from bnconvention.audit.core.result import AuditResult, ReplicateRecord
from bnconvention.audit.core.section import Section
from bnconvention.audit.measure.decisions import decide_cell
from bnconvention.audit.measure.stats import by_adjust
from bnconvention.audit.scales.decisions import redecide_scales_cell
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.audit.spec.expressions import parse_cell
from bnconvention.formats.canonical import canonical_sha256, loads_strict

# ``rules`` are not measured: a checkpoint is audited with the sections its matching rules set (its spec then has no
# rules), or with the spec as written when none matches; editing a rule that does not match it changes nothing.
DECISION_FIELDS = ("name", "margin_pp", "margin", "fdr_q", "sweeps", "controls", "rules")
REPLICATE_FIELDS = ("dataset", "splits", "transform", "model", "refit", "seed", "eval_batch_size")
REPLICATES_DIR = "replicates"
REPLICATE_FORMAT = "bnconvention-replicate/1"
OUTCOMES = ("displaced", "equivalent", "undetermined")


class SweepCell(Section):
    """One cell's decisions in one row of a sweep, displaced after BY at each swept q (keyed by q)."""

    displaced: int
    equivalent: int
    undetermined: int
    displaced_by: dict[str, int]


class MarginRow(Section):
    """The census re-decided at one margin: decisions per cell, flips per criterion, the scales cells if any."""

    margin_pp: float
    cells: dict[str, SweepCell]
    flips: dict[str, int]
    scales: dict[str, dict[str, int]] | None = None


class PoolSizeRow(Section):
    """The census re-decided at one refit pool size: the refits the sweep added, decisions per cell, flips."""

    pool_size: int
    refits_added: int
    cells: dict[str, SweepCell]
    flips: dict[str, int]


def measurement_sha256(spec: AuditSpec) -> str:
    """Digest of everything in the spec that changes what an audit measures (not how it decides)."""
    data = spec.model_dump(mode="json")
    return canonical_sha256({k: v for k, v in data.items() if k not in DECISION_FIELDS})


def replicate_key(weights: str, spec: AuditSpec, *, pool_size: int, index: int) -> str:
    """The identity of one stored replicate: checkpoint, refit design at ``pool_size``, replicate index."""
    data = spec.model_dump(mode="json")
    design = {k: data[k] for k in REPLICATE_FIELDS}
    design["refit"] = {**design["refit"], "pool_size": pool_size}
    return canonical_sha256({"design": design, "replicate": index, "weights_key": weights})


def with_pool_size(spec: AuditSpec, pool_size: int) -> AuditSpec:
    return spec.model_copy(update={"refit": spec.refit.model_copy(update={"pool_size": pool_size})})


class ReplicateStore:
    """Stored replicates, one JSON file each (written atomically); an unreadable or foreign file is a miss."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, key: str) -> Path:
        return self.folder / f"{key[:32]}.json"

    def get(self, key: str) -> ReplicateRecord | None:
        try:
            entry = loads_strict(self._path(key).read_bytes(), source=str(self._path(key)))
            if not isinstance(entry, dict) or entry.get("key") != key or entry.get("format") != REPLICATE_FORMAT:
                return None
            return ReplicateRecord.model_validate(entry.get("record"))
        except (OSError, ValueError, ValidationError):
            return None

    def put(self, key: str, record: ReplicateRecord) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self._path(key), {"format": REPLICATE_FORMAT, "key": key,
                                     "record": record.model_dump(mode="json")})

    def keep(self, weights: str, spec: AuditSpec, records: Sequence[ReplicateRecord]) -> None:
        """Store an audit's replicates (at the spec's pool size) unless already stored."""
        for record in records:
            key = replicate_key(weights, spec, pool_size=spec.refit.pool_size, index=record.index)
            if self.get(key) is None:
                self.put(key, record)


CellOutcomes = dict[str, tuple[str, float]]  # cell -> (outcome, sign-test p) of one checkpoint


def cell_outcomes(result: AuditResult, spec: AuditSpec) -> CellOutcomes:
    """Each cell of a decided checkpoint re-decided at ``spec``'s margin from its stored replicate values."""
    a = result.annotation
    outcomes: CellOutcomes = {}
    metrics = {c.text for c in spec.cell_expressions()}  # the diagnostics' typed cells are outside the family
    for cell in (c for c in a.cells if c.metric in metrics):
        record, sign = decide_cell(parse_cell(cell.metric), cell.shipped, list(cell.replicate_values), spec=spec,
                                   anchored=result.anchored is not False, channel=a.channel, published=None)
        outcomes[cell.metric] = (record.decision.outcome, sign.p_value)
    return outcomes


def design_counts(outcomes: Sequence[CellOutcomes], *, fdr_qs: Sequence[float]) -> dict[str, SweepCell]:
    """Decisions per cell over one family of decided checkpoints, displaced after BY at each q: the cells of one row
    of a sweep."""
    cells: dict[str, SweepCell] = {}
    for metric in (outcomes[0] if outcomes else {}):
        decided = [o[metric] for o in outcomes]
        adjusted = by_adjust([p for _, p in decided])
        counts = {outcome: sum(d == outcome for d, _ in decided) for outcome in OUTCOMES}
        cells[metric] = SweepCell(**counts, displaced_by={
            _q_key(q): sum(d == "displaced" and p <= q for (d, _), p in zip(decided, adjusted, strict=True))
            for q in fdr_qs})
    return cells


def flip_counts(results: Sequence[AuditResult], spec: AuditSpec) -> dict[str, int]:
    """Flips per criterion (criteria compare cell values: no margin enters)."""
    return {c.text: sum(v.flipped for r in results for v in r.annotation.verdicts if v.criterion == c.text)
            for c in spec.criterion_expressions()}


def margin_sweep(decided: Sequence[AuditResult], spec: AuditSpec) -> list[MarginRow]:
    """The census counts at each margin of the sweep (and the spec's own), re-decided from stored shifts."""
    flips = flip_counts(decided, spec)
    rows = []
    for margin in sorted({*spec.sweeps.margins_pp, spec.margin_pp}):
        at = spec.model_copy(update={"margin_pp": margin})
        cells = design_counts([cell_outcomes(r, at) for r in decided], fdr_qs=sweep_qs(spec))
        rows.append(MarginRow(margin_pp=margin, cells=cells, flips=flips,
                              scales=scales_outcomes(decided, margin_pp=margin) or None))
    return rows


def scales_outcomes(decided: Sequence[AuditResult], *, margin_pp: float) -> dict[str, dict[str, int]]:
    """Decisions per scales cell at ``margin_pp`` over the decided checkpoints whose scales were audited, each
    re-decided from its stored recalibration shifts (per checkpoint, outside the BY family, as in the census's scales
    counts); empty when none was."""
    annotations = [r.scales.annotation for r in decided if r.scales is not None and r.scales.annotation is not None]
    if not annotations:
        return {}
    counts: dict[str, dict[str, int]] = {}
    for annotation in annotations:
        for cell in annotation.cells:
            outcome = redecide_scales_cell(cell, margin_pp=margin_pp).decision.outcome
            counts.setdefault(cell.metric, dict.fromkeys(OUTCOMES, 0))[outcome] += 1
    return counts


def sweep_qs(spec: AuditSpec) -> list[float]:
    return sorted({*spec.sweeps.fdr_qs, spec.fdr_q})


def _q_key(q: float) -> str:
    return f"{q:g}"


def counts_at(row: Mapping[str, Any], metric: str, q: float) -> int:
    """Displaced-after-BY count of one sweep row at level ``q``."""
    return int(row["cells"][metric]["displaced_by"][_q_key(q)])
