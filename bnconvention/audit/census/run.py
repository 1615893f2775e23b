"""Audit a local population of checkpoints and count what moves (the census of Shen and Li).

How a census decides: docs/statistics.md#across-a-census-benjaminiyekutieli.

:func:`run_census` finds every checkpoint under the given paths (``.safetensors`` files and sharded checkpoints'
``*.safetensors.index.json``), checks all of them (readable header,
allowlisted architecture whose tensors fit, published cells if anchoring is asked for) and the spec's data *before*
auditing any, then audits each checkpoint and writes, in ``out_dir``:

* ``journal/<weights key>-<measurement key>.json`` — one finished :class:`~bnconvention.audit.core.result.AuditResult`
  per checkpoint, written atomically the moment it is done. The key binds it to the exact tensors (trainable and
  running digests) and to what the spec measures (:func:`~bnconvention.audit.run.sweeps.measurement_sha256`: not the
  margin, q, sweeps or controls), so an interrupted census resumes without redoing finished checkpoints, a changed
  margin or q re-decides from the journal without a refit, and a changed measurement or file is audited afresh;
* ``replicates/`` — every replicate stored by checkpoint, refit design, pool size and index
  (:mod:`bnconvention.audit.run.sweeps`): a pool-size sweep refits only the replicates no run stored;
* ``checkpoints/<name>/`` — each checkpoint's annotation, summary and plots (:mod:`bnconvention.audit.render.outputs`);
* ``census.json`` and ``census.md`` — per checkpoint the decisions and flips, and the population counts:
  anchored, displaced per cell after Benjamini–Yekutieli at ``fdr_q`` across the census (per cell), equivalent,
  flips by direction, the largest shift; the controls' table (:mod:`bnconvention.audit.population.controls`: known
  answers, outside the multiplicity family), the margin/q and pool-size sweeps, the detection floor and the
  recalibration budget (:mod:`bnconvention.audit.population.detection`).

A spec's ``rules`` apply locally too (:func:`local_spec`): each checkpoint is matched by its two last folders, as a
repo id, so one spec gives every part of a local population its own splits (the population's removals).

``workers > 1`` audits checkpoints in separate processes (spawned, each with the parent's torch thread count). Every
audit depends only on its checkpoint and the spec (seeded per replicate), so the numbers are the same either way;
results are collected in discovery order.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from tqdm.auto import tqdm

from bnconvention.architectures.factories import allow_user_factory
from bnconvention.audit.census.annotation_fields import annotation_fields
from bnconvention.audit.census.annotations import annotation_family, write_by_annotations
from bnconvention.audit.census.preregistration import (
    CensusPlan,
    ListedCheckpoint,
    Preregistration,
    census_section,
    check_plan,
    listing_sha256,
    preregister,
)
from bnconvention.audit.core.files import ANNOTATION_FILE, write_json
from bnconvention.audit.core.result import AuditResult, PopulationMetadata, population_metadata
from bnconvention.audit.diagnostics.encoder import reference_file
from bnconvention.audit.measure.checkpoint import (
    ModelChoice,
    build_architecture,
    check_shipped_statistics,
    choose_model,
    published_cells,
    read_sidecar,
)
from bnconvention.audit.measure.data import AuditData, load_audit_data
from bnconvention.audit.population.encoder_report import encoder_census_markdown
from bnconvention.audit.population.margin import MarginEntry, seed_spread_margin
from bnconvention.audit.population.model import (
    CensusResult,
    Invocation,
    MarginDerivation,
    PreregistrationSection,
    Timing,
)
from bnconvention.audit.population.scales_report import scales_census_markdown
from bnconvention.audit.population.summary import (  # re-exported: the census's public summary
    CHECKPOINTS_DIR,
    CensusRun,
    decided_names,
    summarize,
)
from bnconvention.audit.render.census import census_sections_markdown
from bnconvention.audit.render.families import families_markdown
from bnconvention.audit.render.markdown import census_markdown
from bnconvention.audit.render.outputs import write_audit_outputs
from bnconvention.audit.run.pool_sweep import SweepCheckpoint, check_pool_sizes, pool_size_sweep
from bnconvention.audit.run.redecide import redecide
from bnconvention.audit.run.runner import check_data_fits, prepare_audit, run_audit, split_records, weights_key
from bnconvention.audit.run.shipped_store import SHIPPED_DIR, ShippedStore
from bnconvention.audit.run.sweeps import REPLICATES_DIR, ReplicateStore, measurement_sha256
from bnconvention.audit.scales.stage import plan_scales
from bnconvention.audit.spec.audit_spec import AuditSpec, parse_spec
from bnconvention.audit.spec.rules import apply_rules
from bnconvention.errors import UntrustedInputError, UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.checkpoint_files import checkpoint_name, open_checkpoint, pickle_in_folder, read_local_index
from bnconvention.formats.digests import checkpoint_digests
from bnconvention.formats.quantized import is_scales_file
from bnconvention.formats.safetensors_header import read_header
from bnconvention.formats.safetensors_index import INDEX_SUFFIX, checkpoint_files
from bnconvention.refitting.allocator import tune_malloc
from bnconvention.refitting.devices import Device
from bnconvention.refitting.weights import fit_model

JOURNAL_DIR = "journal"

OnResult = Callable[[str, AuditResult], None]  # called after each checkpoint audited (and journaled) in this run


@dataclass(frozen=True)
class CensusItem:
    path: Path
    name: str  # its row and output folder: file stem, or folder for a generic stem; unique by path (census_name)
    weights_key: str
    choice: ModelChoice
    spec: AuditSpec  # the spec this checkpoint is audited with (its rules applied: local_spec)
    published: dict[str, float] | None = None  # the published cells anchoring compares with
    population: PopulationMetadata | None = None  # its place in a structured population (read for margin: auto)


def local_spec(spec: AuditSpec, path: Path) -> AuditSpec:
    """The spec a local checkpoint is audited with: the spec's rules matched against ``<parent>/<folder>``, the
    checkpoint's two last folders (a repo id's shape: ``population/r05/r05-s0-base/…`` is ``r05/r05-s0-base``).
    Local rules match by repo pattern only (a ``config`` condition needs the Hub's config.json)."""
    if not spec.rules:
        return spec
    folder = path.resolve().parent
    ruled, _ = apply_rules(spec, repo_id=f"{folder.parent.name}/{folder.name}", config=None)
    return ruled  # the spec itself when no rule matches (journal keys as without rules)


@dataclass
class CensusOutcome:
    summary: CensusResult
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
    names = sorted(p for p in folder.rglob("*.safetensors*") if p.is_file() and not p.name.startswith("."))
    by_folder: dict[Path, list[str]] = {}
    for item in names:
        by_folder.setdefault(item.parent, []).append(item.name)
    found: list[Path] = []
    for parent, files in sorted(by_folder.items()):
        indexes, singles = checkpoint_files(files)
        claimed = {shard for index in indexes for shard in read_local_index(parent / index).shards}
        found += [parent / name for name in indexes] + [parent / name for name in singles
                                                        if name not in claimed and not _scales_file(parent / name)]
    if not found:
        raise pickle_in_folder(folder) or UsageError(
            f"{folder} holds no .safetensors files (nor a {INDEX_SUFFIX}); pass checkpoint files or folders of them")
    return found


def _scales_file(path: Path) -> bool:
    """A file of activation scales beside a checkpoint (the checkpoint's deployed state, not a checkpoint); an
    unreadable header is left for the preflight to report."""
    try:
        header = read_header(path)
    except (UntrustedInputError, OSError):
        return False
    return is_scales_file({name: tuple(info.shape) for name, info in header.tensors.items()})


def preflight(paths: Sequence[Path], spec: AuditSpec, data: AuditData) -> list[CensusItem]:
    """Check every checkpoint before any audit: headers (every shard), architecture (allowlisted, tensors fit under
    the name mapping the audit uses), published cells."""
    check_data_fits(spec, data)
    models: dict[str, Any] = {}
    items: list[CensusItem] = []
    names: set[str] = set()
    for path in paths:
        files = open_checkpoint(path)
        check_shipped_statistics(path, files)  # NaN or negative variances: refused before any audit
        own = local_spec(spec, path)
        needs_sidecar = own.model is None or own.published_source == "sidecar" or own.margin == "auto"
        sidecar = read_sidecar(path) if needs_sidecar else None
        choice = choose_model(path, own, sidecar)
        published = published_cells(path, own)
        key = f"{choice.factory}|{sorted(choice.kwargs.items())!r}"
        if key not in models:
            models[key] = build_architecture(choice, files)  # sized against the header first
        fit_model(models[key], files, factory=f"factory {choice.factory!r} (from {choice.source})")
        digests = checkpoint_digests(files)
        weights = weights_key(digests.trainable_sha256, digests.running_sha256)
        reference_file(own, path, name=checkpoint_name(path))  # the diagnostics' retrain reference, if any
        plan_scales(own, data, path, model=models[key], digests=digests)  # shipped activation scales, checked
        name = census_name(path, names)
        names.add(name)
        items.append(CensusItem(path=path, name=name, weights_key=weights, choice=choice, spec=own,
                                published=published, population=population_metadata(sidecar)))
    return items


GENERIC_STEMS = frozenset({"model", "pytorch_model", "weights", "checkpoint", "adapter_model",
                           "diffusion_pytorch_model"})


def census_name(path: Path, taken: Collection[str]) -> str:
    """A checkpoint's name in the census, unique by path (never by content: two releases of the same weights are
    two rows): the file's stem, or its folder's name when the stem is generic (``model.safetensors`` in a folder
    laid out like a Hub repo); on a clash the folder above is prefixed, then a number.

    >>> census_name(Path("lab/resnet-a/model.safetensors"), set()), census_name(Path("x/bn-base.safetensors"), set())
    ('resnet-a', 'bn-base')
    >>> census_name(Path("r2/resnet-a/model.safetensors"), {"resnet-a"})
    'r2-resnet-a'
    """
    stem = checkpoint_name(path)
    folder = path.parent
    name = folder.name if stem in GENERIC_STEMS and folder.name else stem
    candidates = [name, f"{folder.name}-{stem}" if name == stem else f"{folder.parent.name}-{name}"]
    for candidate in candidates:
        if candidate and candidate not in taken:
            return candidate
    number = 2
    while f"{candidates[-1]}-{number}" in taken:
        number += 1
    return f"{candidates[-1]}-{number}"


def census_plan(spec: AuditSpec, items: Sequence[CensusItem]) -> CensusPlan:
    """What the census is fixed to before any refit: the spec's digest, the margin (derived with ``margin: auto``)
    and the listing."""
    listed = [ListedCheckpoint(name=item.name, path=str(item.path), weights_key=item.weights_key) for item in items]
    derived = None
    if spec.margin == "auto":
        entries = [MarginEntry(name=item.name, population=item.population, published=item.published)
                   for item in items]
        derived = seed_spread_margin(entries, spec.cell_expressions())
    # the plan keeps the derivation as the preregistration record writes it
    return CensusPlan(spec_sha256=spec.sha256(), margin_pp=spec.margin_pp if derived is None else derived.margin_pp,
                      margin_source="auto" if spec.margin == "auto" else "spec",
                      margin_derivation=None if derived is None else derived.model_dump(mode="json"),
                      listing_sha256=listing_sha256(listed), checkpoints=listed)


def at_margin(spec: AuditSpec, margin_pp: float) -> AuditSpec:
    """The spec deciding at a fixed margin (``margin: auto`` resolved)."""
    return spec.model_copy(update={"margin_pp": margin_pp, "margin": None})


def preregister_census(paths: Iterable[str | Path], spec: AuditSpec, out_dir: str | Path) -> tuple[
        Preregistration, bool]:
    """Check the population and the spec, derive the margin and write ``OUT/preregistration.json`` before any
    refit (:mod:`bnconvention.audit.census.preregistration`); True when it was written, False when an identical one was
    already there."""
    out = Path(out_dir)
    checkpoints = discover_checkpoints(paths)
    data = load_audit_data(local_spec(spec, checkpoints[0]), repo_dir=checkpoints[0].parent)
    items = preflight(checkpoints, spec, data)
    return preregister(out, census_plan(spec, items))


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


def _audit_in_worker(path: str, spec_data: dict[str, Any], allowed_factories: list[str], threads: int,
                     device: Device = "cpu", shipped_dir: str | None = None) -> str:
    """Run one audit in a spawned worker process; returns the result as JSON text."""
    tune_malloc()  # a process of the census's own, like a CLI command's (bnconvention.refitting.allocator)
    torch.set_num_threads(threads)
    for target in allowed_factories:
        allow_user_factory(target)
    spec = parse_spec(spec_data)
    store = ShippedStore(Path(shipped_dir)) if shipped_dir is not None else None
    data = _worker_data(spec, Path(path).parent)
    return run_audit(prepare_audit(path, spec, data=data, device=device), shipped_store=store).model_dump_json()


# One worker process audits many checkpoints of one dataset: decode it once per process (about 1 s for the
# population's task.npz), then bind it to each checkpoint's splits as the serial census does.
_WORKER_DATASETS: dict[str, Any] = {}


def _worker_data(spec: AuditSpec, repo_dir: Path) -> AuditData:
    key = json.dumps(spec.dataset.model_dump(mode="json"), sort_keys=True)
    dataset = _WORKER_DATASETS.get(key)
    data = load_audit_data(spec, repo_dir=repo_dir, dataset=dataset)
    _WORKER_DATASETS.setdefault(key, data.dataset)
    return data


def run_census(paths: Iterable[str | Path], spec: AuditSpec, out_dir: str | Path, *, workers: int = 1,
               progress: bool = False, allowed_factories: Sequence[str] = (),
               on_result: OnResult | None = None, device: Device = "cpu", amend: str | None = None) -> CensusOutcome:
    """Audit every checkpoint (resuming from the journal) and write the census; see the module docstring. A
    preregistered census is checked against its record first (``amend`` records a change as an amendment)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers!r}")
    out = Path(out_dir)
    checkpoints = discover_checkpoints(paths)
    # prepare_audit rebinds the data to each checkpoint (and its own spec, when the spec has rules)
    data = load_audit_data(local_spec(spec, checkpoints[0]), repo_dir=checkpoints[0].parent)
    items = preflight(checkpoints, spec, data)
    record, amendments, plan = check_plan(out, census_plan(spec, items), amend=amend)
    spec = at_margin(spec, plan.margin_pp)
    items = [replace(item, spec=at_margin(item.spec, plan.margin_pp)) for item in items]
    check_pool_sizes(spec, data)
    store = ReplicateStore(out / REPLICATES_DIR)
    shipped_store = ShippedStore(out / SHIPPED_DIR)  # census members sharing weights and splits: evaluated once

    results = _reuse_journal(items, out, data)
    reused = len(results)
    todo = [item for item in items if item.name not in results]
    ran = refits = 0

    def finish(item: CensusItem, result: AuditResult) -> None:
        nonlocal ran, refits
        write_json(journal_path(out, item.weights_key, measurement_sha256(item.spec)), result.model_dump(mode="json"))
        store.keep(item.weights_key, item.spec, result.replicate_records)
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
                own_data = data if item.spec is spec else load_audit_data(
                    item.spec, repo_dir=item.path.parent, dataset=data.dataset)
                result = run_audit(prepare_audit(item.path, item.spec, data=own_data, device=device),
                                   progress=progress, shipped_store=shipped_store)
                finish(item, result)
                bar.update(1)
        else:
            _run_parallel(todo, spec, workers=workers, threads=max(1, torch.get_num_threads() // workers),
                          allowed=list(allowed_factories), finish=finish, bar=bar, device=device,
                          shipped_dir=str(shipped_store.folder))
    finally:
        bar.close()

    ordered = [results[item.name] for item in items]
    names = [item.name for item in items]
    decided = set(decided_names(ordered, names, spec))
    swept = [SweepCheckpoint(path=item.path, weights_key=item.weights_key, result=results[item.name])
             for item in items if item.name in decided]
    pool_sizes, sweep_refits = pool_size_sweep(swept, spec, store, data=data)
    summary = summarize(ordered, names, spec, run=CensusRun(
        pool_sizes=pool_sizes, margin_source=plan.margin_source,
        margin_derivation=(None if plan.margin_derivation is None
                           else MarginDerivation.model_validate(plan.margin_derivation)),
        preregistration=PreregistrationSection.model_validate(census_section(record, amendments)),
        invocation=Invocation(audits_run=ran, audits_reused=reused, refits_run=refits + sweep_refits),
        timing=_timing(ordered, audits_run=ran, audits_reused=reused)))
    write_by_annotations(out, [r.annotation for r in ordered],  # spec 1.1: by_p_value, family, ...
                         [(row.annotation, {metric: cell.by_p_value for metric, cell in row.cells.items()})
                          for row in summary.checkpoints], family_size=summary.counts.decided,
                         families=[annotation_family(r.population) for r in ordered],
                         extras=annotation_fields(ordered, names, metric=spec.headline_cell().text))
    write_json(out / "census.json", summary.to_json())
    atomic_write_text(out / "census.md", census_markdown(summary) + census_sections_markdown(summary)
                      + families_markdown(summary) + encoder_census_markdown(summary)
                      + scales_census_markdown(summary))
    return CensusOutcome(summary=summary, results=ordered, audits_run=ran, audits_reused=reused, out_dir=out)


def _reuse_journal(items: Sequence[CensusItem], out: Path, data: AuditData) -> dict[str, AuditResult]:
    """The journaled results of each checkpoint's measurement (under its own spec, rules applied), re-decided under
    that spec's margin and q (no refit); the checkpoint outputs of a re-decided one are written again, and so are
    those a kill between the journal write and the outputs' left missing. A result journaled before audits kept
    their split sizes gets them from its splits (no evaluation)."""
    results: dict[str, AuditResult] = {}
    for item in items:
        measurement = measurement_sha256(item.spec)
        entry = read_journal(journal_path(out, item.weights_key, measurement), weights=item.weights_key,
                             measurement_sha256=measurement)
        if entry is None:
            continue
        if entry.weights_path != str(item.path):  # the same weights at another path: the same measurement, its row
            entry = entry.model_copy(update={"weights_path": str(item.path), "checkpoint": checkpoint_name(item.path)})
        again = redecide(entry, item.spec)
        if again.split_records is None:
            own = load_audit_data(item.spec, repo_dir=item.path.parent, dataset=data.dataset)
            again = again.model_copy(update={"split_records": split_records(own)})
        folder = out / CHECKPOINTS_DIR / item.name
        if again is not entry or not (folder / ANNOTATION_FILE).is_file():
            write_audit_outputs(again, folder)
        results[item.name] = again
    return results


def _run_parallel(todo: list[CensusItem], spec: AuditSpec, *, workers: int, threads: int, allowed: list[str],
                  finish: Callable[[CensusItem, AuditResult], None], bar: Any, device: Device = "cpu",
                  shipped_dir: str | None = None) -> None:
    context = multiprocessing.get_context("spawn")  # no forked torch thread pools
    executor = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context)
    try:
        pending = {executor.submit(_audit_in_worker, str(item.path), item.spec.model_dump(mode="json"), allowed,
                                   threads, device, shipped_dir): item for item in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                item = pending.pop(future)
                finish(item, AuditResult.model_validate_json(future.result()))
                bar.update(1)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _timing(results: Sequence[AuditResult], *, audits_run: int, audits_reused: int) -> Timing:
    seconds = [r.seconds for r in results]
    return Timing(per_checkpoint_seconds={r.checkpoint: r.seconds for r in results},
                  median_seconds=statistics.median(seconds) if seconds else 0.0, total_seconds=math.fsum(seconds),
                  audits_run=audits_run, audits_reused=audits_reused)
