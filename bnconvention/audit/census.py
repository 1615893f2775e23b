"""Audit a local population of checkpoints and count what moves (the census of seed 001 / the table of seed 000).

:func:`run_census` finds every checkpoint under the given paths (``.safetensors`` files and sharded checkpoints'
``*.safetensors.index.json``), checks all of them (readable header,
allowlisted architecture whose tensors fit, published cells if anchoring is asked for) and the spec's data *before*
auditing any, then audits each checkpoint and writes, in ``out_dir``:

* ``journal/<weights key>-<measurement key>.json`` — one finished :class:`~bnconvention.audit.result.AuditResult`
  per checkpoint, written atomically the moment it is done. The key binds it to the exact tensors (trainable and
  running digests) and to what the spec measures (:func:`~bnconvention.audit.sweeps.measurement_sha256`: not the
  margin, q, sweeps or controls), so an interrupted census resumes without redoing finished checkpoints, a changed
  margin or q re-decides from the journal without a refit, and a changed measurement or file is audited afresh;
* ``replicates/`` — every replicate stored by checkpoint, refit design, pool size and index
  (:mod:`bnconvention.audit.sweeps`): a pool-size sweep refits only the replicates no run stored;
* ``checkpoints/<name>/`` — each checkpoint's annotation, summary and plots (:mod:`bnconvention.audit.outputs`);
* ``census.json`` and ``census.md`` — per checkpoint the decisions and flips, and the population counts:
  anchored, displaced per cell after Benjamini–Yekutieli at ``fdr_q`` across the census (per cell), equivalent,
  flips by direction, the largest shift; the controls' table (:mod:`bnconvention.audit.controls`: known answers,
  outside the multiplicity family), the margin/q and pool-size sweeps, the detection floor and the recalibration
  budget (:mod:`bnconvention.audit.detection`).

``workers > 1`` audits checkpoints in separate processes (spawned, each with the parent's torch thread count). Every
audit depends only on its checkpoint and the spec (seeded per replicate), so the numbers are the same either way;
results are collected in discovery order.
"""

from __future__ import annotations

# torch is imported inside the functions that use it: importing this module does not import torch.
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bnconvention.audit.census_annotations import write_by_annotations
from bnconvention.audit.census_sections import census_sections
from bnconvention.audit.checkpoint import (
    ModelChoice,
    build_architecture,
    checkpoint_name,
    choose_model,
    published_cells,
    read_sidecar,
)
from bnconvention.audit.controls import control_label, controls_table
from bnconvention.audit.data import AuditData, load_audit_data
from bnconvention.audit.markdown import census_markdown
from bnconvention.audit.markdown_census import census_sections_markdown
from bnconvention.audit.outputs import ANNOTATION_FILE, write_audit_outputs, write_json
from bnconvention.audit.pool_sweep import SweepCheckpoint, check_pool_sizes, pool_size_sweep
from bnconvention.audit.readings import census_readings
from bnconvention.audit.result import AuditResult
from bnconvention.audit.runner import check_data_fits, prepare_audit, run_audit, weights_key
from bnconvention.audit.spec import AuditSpec, parse_spec
from bnconvention.audit.stats import by_adjust
from bnconvention.audit.sweeps import REPLICATES_DIR, ReplicateStore, measurement_sha256, redecide
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.standard.models import Cell

CENSUS_FORMAT = "bnconvention-census/1"
JOURNAL_DIR = "journal"
CHECKPOINTS_DIR = "checkpoints"

OnResult = Callable[[str, AuditResult], None]  # called after each checkpoint audited (and journaled) in this run


@dataclass(frozen=True)
class CensusItem:
    path: Path
    name: str  # output folder name (the file name, disambiguated when two files share it)
    weights_key: str
    choice: ModelChoice


@dataclass
class CensusOutcome:
    summary: dict[str, Any]
    results: list[AuditResult]
    audits_run: int
    audits_reused: int
    out_dir: Path


def discover_checkpoints(paths: Iterable[str | Path]) -> list[Path]:
    """Checkpoints named directly (a ``.safetensors`` file or a shard index) or found (recursively, sorted) under
    directories: shard indexes and the ``.safetensors`` files no index claims; duplicates dropped."""
    found: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = _checkpoints_under(path)
        elif path.is_file():
            candidates = [path]
        else:
            raise FileNotFoundError(f"checkpoint path {str(path)!r} does not exist")
        for candidate in candidates:
            resolved = candidate.resolve()
            if resolved not in seen:
                seen.add(resolved)
                found.append(candidate)
    if not found:
        raise UsageError("no checkpoints given; pass .safetensors files, shard indexes or folders holding them")
    return found


def _checkpoints_under(folder: Path) -> list[Path]:
    """Every checkpoint under ``folder``: by folder, the rule of :func:`checkpoint_files`, then the shards each index
    names are dropped (shards may carry any name)."""
    from bnconvention.formats.checkpoint_files import pickle_in_folder, read_local_index
    from bnconvention.formats.safetensors_index import INDEX_SUFFIX, checkpoint_files

    names = sorted(p for p in folder.rglob("*.safetensors*") if p.is_file() and not p.name.startswith("."))
    by_folder: dict[Path, list[str]] = {}
    for item in names:
        by_folder.setdefault(item.parent, []).append(item.name)
    found: list[Path] = []
    for parent, files in sorted(by_folder.items()):
        indexes, singles = checkpoint_files(files)
        claimed = {shard for index in indexes for shard in read_local_index(parent / index).shards}
        found += [parent / name for name in indexes] + [parent / name for name in singles if name not in claimed]
    if not found:
        raise pickle_in_folder(folder) or UsageError(
            f"{folder} holds no .safetensors files (nor a {INDEX_SUFFIX}); pass checkpoint files or folders of them")
    return found


def preflight(paths: Sequence[Path], spec: AuditSpec, data: AuditData) -> list[CensusItem]:
    """Check every checkpoint before any audit: headers (every shard), architecture (allowlisted, tensors fit under
    the name mapping the audit uses), published cells."""
    from bnconvention.formats.checkpoint_files import open_checkpoint
    from bnconvention.formats.digests import checkpoint_digests
    from bnconvention.refit.weights import fit_model

    check_data_fits(spec, data)
    models: dict[str, Any] = {}
    items: list[CensusItem] = []
    names: set[str] = set()
    for path in paths:
        files = open_checkpoint(path)
        sidecar = read_sidecar(path) if (spec.model is None or spec.published_source == "sidecar") else None
        choice = choose_model(path, spec, sidecar)
        published_cells(path, spec, sidecar)
        key = f"{choice.factory}|{sorted(choice.kwargs.items())!r}"
        if key not in models:
            models[key] = build_architecture(choice)
        fit_model(models[key], files, factory=f"factory {choice.factory!r} (from {choice.source})")
        digests = checkpoint_digests(files)
        weights = weights_key(digests.trainable_sha256, digests.running_sha256)
        name = checkpoint_name(path)
        if name in names:
            name = f"{name}-{weights[:8]}"
        names.add(name)
        items.append(CensusItem(path=path, name=name, weights_key=weights, choice=choice))
    return items


def journal_path(out_dir: Path, weights: str, measurement: str) -> Path:
    return out_dir / JOURNAL_DIR / f"{weights[:24]}-{measurement[:24]}.json"


def read_journal(path: Path, *, weights: str, measurement_sha256: str) -> AuditResult | None:
    """A finished result for these weights and this measurement, or None (absent, unreadable, for something else,
    or without the shipped cells a re-decision needs)."""
    try:
        result = AuditResult.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    if (result.weights_key != weights or result.measurement_sha256 != measurement_sha256
            or result.shipped_base_cells is None):
        return None
    return result


def _audit_in_worker(path: str, spec_data: dict[str, Any], allowed_factories: list[str], threads: int) -> str:
    """Run one audit in a spawned worker process; returns the result as JSON text."""
    import torch

    from bnconvention.architectures.factories import allow_user_factory

    torch.set_num_threads(threads)
    for target in allowed_factories:
        allow_user_factory(target)
    spec = parse_spec(spec_data)
    return run_audit(prepare_audit(path, spec)).model_dump_json()


def run_census(paths: Iterable[str | Path], spec: AuditSpec, out_dir: str | Path, *, workers: int = 1,
               progress: bool = False, allowed_factories: Sequence[str] = (),
               on_result: OnResult | None = None) -> CensusOutcome:
    """Audit every checkpoint (resuming from the journal) and write the census; see the module docstring."""
    import torch
    from tqdm.auto import tqdm

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers!r}")
    out = Path(out_dir)
    measurement = measurement_sha256(spec)
    checkpoints = discover_checkpoints(paths)
    data = load_audit_data(spec, repo_dir=checkpoints[0].parent)  # prepare_audit rebinds it to each checkpoint
    items = preflight(checkpoints, spec, data)
    check_pool_sizes(spec, data)
    store = ReplicateStore(out / REPLICATES_DIR)

    results = _reuse_journal(items, spec, out, measurement)
    reused = len(results)
    todo = [item for item in items if item.name not in results]
    ran = refits = 0

    def finish(item: CensusItem, result: AuditResult) -> None:
        nonlocal ran, refits
        write_json(journal_path(out, item.weights_key, measurement), result.model_dump(mode="json"))
        store.keep(item.weights_key, spec, result.replicate_records)
        write_audit_outputs(result, out / CHECKPOINTS_DIR / item.name)
        results[item.name] = result
        ran += 1
        refits += result.refits_run
        if on_result is not None:
            on_result(item.name, result)

    (out / JOURNAL_DIR).mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(items), initial=reused, desc="census", unit="checkpoint", disable=not progress)
    try:
        if workers == 1 or len(todo) <= 1:
            for item in todo:
                result = run_audit(prepare_audit(item.path, spec, data=data), progress=progress)
                finish(item, result)
                bar.update(1)
        else:
            _run_parallel(todo, spec, workers=workers, threads=torch.get_num_threads(),
                          allowed=list(allowed_factories), finish=finish, bar=bar)
    finally:
        bar.close()

    ordered = [results[item.name] for item in items]
    names = [item.name for item in items]
    summary = summarize(ordered, names, spec)
    decided = set(summary["decided"])
    swept = [SweepCheckpoint(path=item.path, weights_key=item.weights_key, result=results[item.name])
             for item in items if item.name in decided]
    summary["sweeps"]["pool_sizes"], sweep_refits = pool_size_sweep(swept, spec, store, data=data)
    summary["invocation"] = {"audits_run": ran, "audits_reused": reused, "refits_run": refits + sweep_refits}
    summary["timing"] = _timing(ordered, audits_run=ran, audits_reused=reused)
    write_by_annotations(out, [r.annotation for r in ordered], summary)  # spec 1.1: by_p_value in each annotation
    write_json(out / "census.json", summary)
    atomic_write_text(out / "census.md", census_markdown(summary) + census_sections_markdown(summary))
    return CensusOutcome(summary=summary, results=ordered, audits_run=ran, audits_reused=reused, out_dir=out)


def _reuse_journal(items: Sequence[CensusItem], spec: AuditSpec, out: Path, measurement: str
                   ) -> dict[str, AuditResult]:
    """The journaled results of this measurement, re-decided under this spec's margin and q (no refit); the
    checkpoint outputs of a re-decided one are written again."""
    results: dict[str, AuditResult] = {}
    for item in items:
        entry = read_journal(journal_path(out, item.weights_key, measurement), weights=item.weights_key,
                             measurement_sha256=measurement)
        if entry is None:
            continue
        again = redecide(entry, spec)
        if again is not entry:
            write_audit_outputs(again, out / CHECKPOINTS_DIR / item.name)
        results[item.name] = again
    return results


def _run_parallel(todo: list[CensusItem], spec: AuditSpec, *, workers: int, threads: int, allowed: list[str],
                  finish: Callable[[CensusItem, AuditResult], None], bar: Any) -> None:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    spec_data = spec.model_dump(mode="json")
    context = multiprocessing.get_context("spawn")  # no forked torch thread pools
    executor = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context)
    try:
        pending = {executor.submit(_audit_in_worker, str(item.path), spec_data, allowed, threads): item
                   for item in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                item = pending.pop(future)
                finish(item, AuditResult.model_validate_json(future.result()))
                bar.update(1)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _timing(results: Sequence[AuditResult], *, audits_run: int, audits_reused: int) -> dict[str, Any]:
    seconds = [r.seconds for r in results]
    return {
        "per_checkpoint_seconds": {r.checkpoint: r.seconds for r in results},
        "median_seconds": statistics.median(seconds) if seconds else 0.0,
        "total_seconds": math.fsum(seconds),
        "audits_run": audits_run,
        "audits_reused": audits_reused,
    }


def summarize(results: Sequence[AuditResult], names: Sequence[str], spec: AuditSpec, *,
              annotations: Sequence[str] | None = None) -> dict[str, Any]:
    """Population counts with Benjamini–Yekutieli across the census, per cell (deterministic: no timings).

    ``annotations`` are the paths of the checkpoints' annotation files relative to the output folder (default: the
    census layout, ``checkpoints/<name>/annotation.json``); the summary links them. Only the eligible checkpoints
    (anchored, or with nothing to anchor to) enter the counts and the multiplicity family."""
    if annotations is None:
        annotations = [f"{CHECKPOINTS_DIR}/{name}/{ANNOTATION_FILE}" for name in names]
    metrics = [cell.text for cell in spec.cell_expressions()]
    labels = [control_label(name, result, spec) for name, result in zip(names, results, strict=True)]
    eligible = [i for i, r in enumerate(results) if r.anchored is not False and labels[i] is None]
    adjusted = {metric: adjusted_p_values(results, eligible, metric) for metric in metrics}
    counts = population_counts(results, [i for i, r in enumerate(results) if r.anchored is not False])
    counts.update({"controls": sum(label is not None for label in labels), "decided": len(eligible)})
    summary: dict[str, Any] = {
        "format": CENSUS_FORMAT,
        "spec_name": spec.name,
        "spec_sha256": spec.sha256(),
        "replicates": spec.replicates,
        "margin_pp": spec.margin_pp,
        "fdr_q": spec.fdr_q,
        "counts": counts,
        "cells": {metric: cell_counts([results[i] for i in eligible], metric,
                                      [adjusted[metric][i] for i in eligible], fdr_q=spec.fdr_q)
                  for metric in metrics},
        "verdicts": {criterion.text: verdict_tally([results[i] for i in eligible], criterion.text)
                     for criterion in spec.criterion_expressions()},
        "largest_shift": largest_shift([(names[i], results[i]) for i in eligible], metrics),
        "checkpoints": [checkpoint_row(result, name, annotation, metrics, fdr_q=spec.fdr_q,
                                       by_p_values={metric: adjusted[metric].get(i) for metric in metrics})
                        for i, (result, name, annotation) in enumerate(zip(results, names, annotations, strict=True))],
        "readings": census_readings(results, names, headline=spec.headline_cell().text),
        **census_sections([results[i] for i in eligible], [names[i] for i in eligible], spec,
                          controls=controls_table(results, names, labels)),
    }
    for row in summary["checkpoints"]:
        row["mechanism"] = summary["readings"]["mechanism"]["per_checkpoint"][row["checkpoint"]]
    return summary


def adjusted_p_values(results: Sequence[AuditResult], eligible: Sequence[int], metric: str) -> dict[int, float]:
    """Benjamini–Yekutieli adjusted sign-test p-values of one cell over the eligible checkpoints, by index."""
    p_values = [results[i].sign_tests[metric].p_value for i in eligible]
    return dict(zip(eligible, by_adjust(p_values), strict=True))


def population_counts(results: Sequence[AuditResult], eligible: Sequence[int]) -> dict[str, int]:
    return {
        "checkpoints": len(results),
        "anchoring_checked": sum(r.anchored is not None for r in results),
        "anchored": sum(r.anchored is True for r in results),
        "eligible": len(eligible),
        "channel_absent": sum(r.annotation.channel == "absent" for r in results),
        "staleness_exceeds_band": sum(bool(r.annotation.staleness and r.annotation.staleness.exceeds_band)
                                      for r in results),
    }


def cell_counts(eligible: Sequence[AuditResult], metric: str, by_p_values: Sequence[float], *,
                fdr_q: float) -> dict[str, int]:
    """Decisions on one cell over the eligible checkpoints; ``displaced_by`` counts the displaced ones whose
    adjusted p-value (``by_p_values``, one per checkpoint) is at most ``fdr_q``."""
    counts = {"displaced": 0, "displaced_by": 0, "equivalent": 0, "undetermined": 0}
    for result, p_by in zip(eligible, by_p_values, strict=True):
        outcome = _cell(result, metric).decision.outcome
        counts[outcome] += 1
        if outcome == "displaced" and p_by <= fdr_q:
            counts["displaced_by"] += 1
    return counts


def verdict_tally(eligible: Sequence[AuditResult], criterion: str) -> dict[str, int]:
    """Flips of one criterion by direction, and how many flip on every replicate."""
    tally = {"flips": 0, "pass_to_fail": 0, "fail_to_pass": 0, "flips_on_every_replicate": 0}
    for result in eligible:
        verdict = next(v for v in result.annotation.verdicts if v.criterion == criterion)
        if verdict.flipped and verdict.direction is not None:
            tally["flips"] += 1
            tally[verdict.direction] += 1
            every = (verdict.refit_pass_replicates == result.annotation.replicates if verdict.refit
                     else verdict.refit_pass_replicates == 0)
            tally["flips_on_every_replicate"] += int(every)
    return tally


def largest_shift(eligible: Sequence[tuple[str, AuditResult]], metrics: Sequence[str]) -> dict[str, Any] | None:
    """The largest absolute mean shift over the eligible checkpoints and cells (the first one on a tie)."""
    largest: dict[str, Any] | None = None
    for name, result in eligible:
        for metric in metrics:
            shift = _cell(result, metric).shift_pp
            if largest is None or abs(shift) > abs(largest["shift_pp"]):
                largest = {"checkpoint": name, "cell": metric, "shift_pp": shift}
    return largest


def checkpoint_row(result: AuditResult, name: str, annotation: str, metrics: Sequence[str], *,
                   by_p_values: Mapping[str, float | None], fdr_q: float) -> dict[str, Any]:
    """One checkpoint's line of the census: its cells with every p-value, flips, staleness, recoverability."""
    a = result.annotation
    return {
        "checkpoint": name,
        "file": a.subject.filename,
        "path": result.weights_path,
        "factory": result.factory,
        "trainable_sha256": a.subject.trainable_sha256,
        "channel": a.channel,
        "anchored": result.anchored,
        "cells": {metric: _cell_row(result, metric, by_p_values[metric], fdr_q=fdr_q) for metric in metrics},
        "flips": [{"criterion": v.criterion, "direction": v.direction,
                   "refit_pass_replicates": v.refit_pass_replicates} for v in a.verdicts if v.flipped],
        "staleness": None if a.staleness is None else {
            "mean_distance": a.staleness.mean_distance, "var_distance": a.staleness.var_distance,
            "exceeds_band": a.staleness.exceeds_band,
            "band_p_value": None if result.staleness_null is None else result.staleness_null.p_value},
        "recoverability_shift_pp": None if a.recoverability is None else a.recoverability.shift_pp,
        "reporting_line": a.reporting_line,
        "annotation": annotation,
    }


def _cell_row(result: AuditResult, metric: str, p_by: float | None, *, fdr_q: float) -> dict[str, Any]:
    cell = _cell(result, metric)
    sign = result.sign_tests[metric]
    return {
        "shipped": cell.shipped, "refit": cell.refit, "shift_pp": cell.shift_pp,
        "min_shift_pp": min(cell.replicate_shifts_pp), "max_shift_pp": max(cell.replicate_shifts_pp),
        "outcome": cell.decision.outcome, "method": cell.decision.method,
        "p_value": cell.decision.p_value, "sign_p_value": sign.p_value, "sign_beyond": sign.beyond,
        "by_p_value": p_by,
        "displaced_by": bool(cell.decision.outcome == "displaced" and p_by is not None and p_by <= fdr_q),
    }


def _cell(result: AuditResult, metric: str) -> Cell:
    return next(c for c in result.annotation.cells if c.metric == metric)
