"""Reproduce a refit annotation: re-run the audit it records and say, cell by cell, whether the numbers come back.

An annotation is a stranger's claim; this module lets its reader check it. The orchestrator
(:func:`reproduce_local`; the Hub's is :func:`bnconvention.hub_audit.reproduce.reproduce_pull_request`) is four named
stages:

1. **read** (:func:`read_annotation`, :func:`check_spec`): the annotation, and the audit spec it was computed under.
   An annotation keeps the convention (rule, transform, pool size, seed, dataset id and revision), R and the margin,
   but not the spec's splits, architecture or cells' expressions, so the spec is an input; every field the
   annotation does keep must agree with it, else the spec is not the annotation's.
2. **fetch** (:func:`pinned_spec`, :func:`check_annotated_weights`, :func:`fetch_data`): the weights, whose trainable
   and running digests must be the annotation's subject's, and the pool: a Hub dataset is read at the commit the
   annotation recorded (not the spec's branch), and the data read must be the recorded dataset at that revision.
3. **re-run** (:func:`rerun_local`): the audit of :mod:`bnconvention.audit.run.runner`, unchanged; every draw is seeded
   from the spec, so on one machine the replicate values come back exactly.
4. **compare** (:func:`compare_reproduction`, with the one rule :func:`cell_differences`): each cell, each decision
   and each verdict (and its flip) against the annotation's own.

The rule, written once (:func:`cell_differences`): a cell reproduces when its shipped value is the annotated one
within the tolerance, every reproduced replicate value lies in the annotation's replicate range
[min, max] widened by the tolerance, every annotated replicate value lies in the reproduction's range widened the
same way (so a claimed value no replicate reaches is caught, not only a reproduction outside the claim), and the
decision's outcome is the same. Verdicts reproduce when shipped, refit, flipped and direction are all the same.

The tolerance (:data:`TOLERANCE`, in the cell's unit: fraction or AUC; ×100 for a cell in pp) allows what another
machine may do to the floating-point sums of a refit: one forward pass near a decision boundary can move a cell by
one record. docs/statistics.md ("Reproducing an annotation") gives what was measured.

Inputs that cannot be read or fetched raise :class:`~bnconvention.errors.ReproductionInputError` naming them
(exit 2 at the CLI); a reproduction that differs is a :class:`Reproduction` with ``reproduced`` False (exit 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.measure.data import AuditData, load_audit_data
from bnconvention.audit.run.runner import prepare_audit, run_audit
from bnconvention.audit.spec.audit_spec import AuditSpec, parse_spec
from bnconvention.errors import BnConventionError, ReproductionInputError
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.checkpoint_files import open_checkpoint
from bnconvention.formats.digests import checkpoint_digests
from bnconvention.formats.text import first_validation_error, one_line
from bnconvention.refitting.devices import Device
from bnconvention.standard.decision_rules import REPRODUCTION_TOLERANCE
from bnconvention.standard.models import Cell, RefitAnnotation, Verdict, parse_record, to_dict

TOLERANCE = REPRODUCTION_TOLERANCE
ANNOTATION_FILE = "annotation.json"
RESULT_FILE = "result.json"
MAX_ANNOTATION_BYTES = 10_000_000
T = TypeVar("T")


# --- the typed result -----------------------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CellCheck(_Model):
    """One cell: the annotation's numbers, the reproduction's, and why they differ (empty: reproduced)."""

    metric: str
    annotated_shipped: float
    reproduced_shipped: float | None
    annotated_range: tuple[float, float] = Field(description="min and max of the annotation's replicate values.")
    reproduced_values: list[float]
    annotated_decision: str
    reproduced_decision: str | None
    differences: list[str] = Field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        return not self.differences


class VerdictCheck(_Model):
    """One criterion: shipped, refit and flip as annotated and as reproduced."""

    criterion: str
    annotated: str
    reproduced: str | None
    differences: list[str] = Field(default_factory=list)


class Reproduction(_Model):
    """The outcome of reproducing one annotation."""

    annotation: str = Field(description="Where the annotation was read (a path, or repo@refs/pr/N:path).")
    annotation_sha256: str
    subject: str = Field(description="The audited file, repo/file@revision or its file name.")
    tolerance: float
    cells: list[CellCheck]
    verdicts: list[VerdictCheck]
    seconds: float = Field(description="Wall-clock seconds of the whole reproduction (fetch, re-run, compare).")
    rerun_seconds: float = Field(description="Seconds of the re-run audit alone.")
    original_seconds: float | None = Field(default=None, description=(
        "Seconds of the original audit, when its result.json was beside the annotation."))

    @property
    def differing(self) -> list[str]:
        """The cells and criteria that did not reproduce, in the annotation's order."""
        return [*(c.metric for c in self.cells if c.differences), *(v.criterion for v in self.verdicts
                                                                     if v.differences)]

    @property
    def reproduced(self) -> bool:
        return not self.differing

    @property
    def exit_code(self) -> int:
        return 0 if self.reproduced else 1


# --- stage 1: read --------------------------------------------------------------------------------------------------


def parse_annotation(data: bytes, *, source: str) -> RefitAnnotation:
    """A refit annotation from its bytes; anything else (another record, invalid JSON or fields) is refused."""
    if len(data) > MAX_ANNOTATION_BYTES:
        raise ReproductionInputError(f"annotation {source} is {len(data)} bytes, over the {MAX_ANNOTATION_BYTES}-byte "
                                     "limit", missing=source)
    try:
        record = parse_record(loads_strict(data, source=source))
    except (BnConventionError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if isinstance(exc, BnConventionError) else first_validation_error(exc)
        raise ReproductionInputError(f"annotation {source} is not a readable refit annotation: {first}; check it "
                                     "with bnconvention validate", missing=source) from exc
    if not isinstance(record, RefitAnnotation):
        raise ReproductionInputError(f"{source} is a {record.kind} record, not a refit annotation", missing=source)
    return record


def read_annotation(path: str | Path) -> tuple[RefitAnnotation, Path]:
    """The annotation at ``path`` (an ``annotation.json``, or an audit output folder holding one) and its path."""
    target = Path(path)
    if target.is_dir():
        target = target / ANNOTATION_FILE
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise ReproductionInputError(f"annotation {str(target)!r} cannot be read ({exc.strerror or exc}); pass an "
                                     "annotation.json or the audit folder holding one", missing=str(target)) from exc
    return parse_annotation(data, source=str(target)), target


def read_original_result(annotation_path: Path) -> dict[str, Any] | None:
    """The original audit's ``result.json`` beside the annotation, when it is there and about the same annotation
    (its pools' record digests and its time); ``None`` otherwise."""
    path = annotation_path.parent / RESULT_FILE
    try:
        result = loads_strict(path.read_bytes(), source=str(path))
    except (OSError, BnConventionError):
        return None
    if not isinstance(result, dict) or not isinstance(result.get("annotation"), dict):
        return None
    try:  # result.json keeps null fields the annotation file leaves out: compared as records
        same = to_dict(parse_record(result["annotation"])) == to_dict(parse_annotation(
            annotation_path.read_bytes(), source=str(annotation_path)))
    except (BnConventionError, ValidationError):
        return None
    return result if same else None


def spec_disagreements(annotation: RefitAnnotation, spec: AuditSpec) -> list[str]:
    """Each field the annotation keeps of its spec that the given spec contradicts, as ``field: annotated X, spec
    Y`` (empty: the spec may be the annotation's)."""
    data = annotation.convention.data
    accumulation = annotation.convention.accumulation
    pairs: list[tuple[str, Any, Any]] = [
        ("replicates", annotation.replicates, spec.replicates),
        ("margin_pp", annotation.margin_pp, spec.margin_pp),
        ("seed", data.sampling_seed, spec.seed),
        ("refit.pool_size", data.record_count, spec.refit.pool_size),
        ("refit.rule", accumulation.rule, spec.refit.rule),
        ("refit.transform", annotation.convention.transform.mode, spec.refit.transform),
        ("cells", sorted(c.metric for c in annotation.cells), sorted(c.text for c in spec.cell_expressions())),
        ("criteria", sorted(v.criterion for v in annotation.verdicts), sorted(spec.criteria)),
    ]
    return [f"{name}: annotated {annotated!r}, spec {given!r}" for name, annotated, given in pairs
            if annotated != given]


def check_spec(annotation: RefitAnnotation, spec: AuditSpec, *, source: str) -> None:
    """Refuse a spec that contradicts what the annotation keeps of its own (exit 2: the input is not the
    annotation's)."""
    found = spec_disagreements(annotation, spec)
    if found:
        raise ReproductionInputError(f"the spec {source} is not the one this annotation was audited under: "
                                     f"{'; '.join(found)}; pass the audit's own spec", missing=source)


# --- stage 2: fetch -------------------------------------------------------------------------------------------------


def pinned_spec(annotation: RefitAnnotation, spec: AuditSpec) -> AuditSpec:
    """The spec with a Hub dataset pinned at the commit the annotation recorded (what was read then, not what a
    branch names now); other sources are read where the spec says."""
    revision = annotation.convention.data.dataset.revision
    if spec.dataset.kind != "hub" or revision is None or revision == spec.dataset.revision:
        return spec
    dumped = spec.model_dump(mode="json")
    dumped["dataset"]["revision"] = revision
    return parse_spec(dumped)


def subject_name(annotation: RefitAnnotation) -> str:
    subject = annotation.subject
    where = f"{subject.repo}/{subject.filename}" if subject.repo else subject.filename
    return f"{where}@{subject.revision}" if subject.revision else where


def digest_differences(annotation: RefitAnnotation, *, trainable_sha256: str, running_sha256: str | None) -> list[str]:
    """How the weights' digests differ from the annotation's subject (empty: the same tensors)."""
    subject = annotation.subject
    found = []
    if trainable_sha256 != subject.trainable_sha256:
        found.append(f"trainable sha256 {trainable_sha256[:12]}... (annotated {subject.trainable_sha256[:12]}...)")
    if subject.running_sha256 is not None and running_sha256 != subject.running_sha256:
        found.append(f"running sha256 {str(running_sha256)[:12]}... (annotated {subject.running_sha256[:12]}...)")
    return found


def check_annotated_weights(annotation: RefitAnnotation, weights: Path) -> None:
    """Refuse weights that are not the annotated tensors (their digests over the file's bytes, every shard)."""
    try:
        digests = checkpoint_digests(open_checkpoint(weights))
    except (OSError, BnConventionError) as exc:
        raise ReproductionInputError(f"weights {str(weights)!r} cannot be read: {_one_line(exc)}",
                                     missing=str(weights)) from exc
    found = digest_differences(annotation, trainable_sha256=digests.trainable_sha256,
                               running_sha256=digests.running_sha256)
    if found:
        raise ReproductionInputError(f"weights {str(weights)!r} are not the annotated {subject_name(annotation)}: "
                                     f"{'; '.join(found)}", missing=str(weights))


def pool_name(annotation: RefitAnnotation) -> str:
    dataset = annotation.convention.data.dataset
    return f"dataset {dataset.id}" + (f"@{dataset.revision}" if dataset.revision else "")


def check_pool(annotation: RefitAnnotation, *, dataset_id: str, revision: str | None) -> None:
    """Refuse data that is not the annotated dataset at the annotated revision."""
    recorded = annotation.convention.data.dataset
    if (dataset_id, revision) != (recorded.id, recorded.revision):
        read = dataset_id + (f"@{revision}" if revision else "")
        raise ReproductionInputError(f"the spec's data is {read}, not the annotated {pool_name(annotation)}",
                                     missing=pool_name(annotation))


def unavailable(what: str, call: Callable[[], T]) -> T:
    """``call()``, with any failure to read an input turned into one :class:`ReproductionInputError` naming
    ``what``."""
    try:
        return call()
    except ReproductionInputError:
        raise
    except (OSError, BnConventionError, ValueError, LookupError) as exc:
        raise ReproductionInputError(f"{what} is unavailable: {_one_line(exc)}", missing=what) from exc


def fetch_data(annotation: RefitAnnotation, spec: AuditSpec, *, repo_dir: Path) -> AuditData:
    """The annotated pool, read as the spec defines it, checked against the annotation's dataset reference."""
    data = unavailable(f"the pool ({pool_name(annotation)})", lambda: load_audit_data(spec, repo_dir=repo_dir))
    check_pool(annotation, dataset_id=data.dataset_id, revision=data.dataset_revision)
    return data


# --- stage 3: re-run ------------------------------------------------------------------------------------------------


def rerun_local(spec: AuditSpec, weights: Path, data: AuditData, *, device: Device = "cpu") -> AuditResult:
    """The audit, exactly as ``bnconvention audit`` runs it."""
    return run_audit(prepare_audit(weights, spec, data=data, device=device))


def check_pools(expected: Sequence[str] | None, result: AuditResult) -> None:
    """Refuse a re-run whose replicate pools are not the original's records (their record-id digests, from the
    original result.json): the data changed under the same name."""
    if not expected:
        return
    found = [record.pool_ids_sha256 for record in result.replicate_records]
    for index, (before, now) in enumerate(zip(expected, found, strict=False)):
        if before != now:
            raise ReproductionInputError(f"replicate {index}'s retain pool holds other records than the original "
                                         f"audit's (record ids sha256 {now[:12]}..., originally {before[:12]}...): "
                                         "the data changed", missing=f"retain pool of replicate {index}")


# --- stage 4: compare -----------------------------------------------------------------------------------------------


def cell_differences(annotated: Cell, reproduced: Cell | None, *, tolerance: float) -> list[str]:
    """The one comparison rule (module docstring): why ``reproduced`` does not reproduce ``annotated``."""
    if reproduced is None:
        return ["not in the reproduction"]
    tol = tolerance * 100 if getattr(annotated, "unit", None) == "pp" else tolerance
    found = []
    if abs(reproduced.shipped - annotated.shipped) > tol:
        found.append(f"shipped {reproduced.shipped:.4f}, annotated {annotated.shipped:.4f}")
    low, high = min(annotated.replicate_values), max(annotated.replicate_values)
    outside = [v for v in reproduced.replicate_values if not low - tol <= v <= high + tol]
    if outside:
        found.append(f"reproduced replicate values {_values(outside)} outside the annotated range "
                     f"{low:.4f}..{high:.4f} ± {tol:g}")
    r_low, r_high = min(reproduced.replicate_values), max(reproduced.replicate_values)
    unreached = [v for v in annotated.replicate_values if not r_low - tol <= v <= r_high + tol]
    if unreached:
        found.append(f"annotated replicate values {_values(unreached)} outside the reproduced range "
                     f"{r_low:.4f}..{r_high:.4f} ± {tol:g}")
    if reproduced.decision.outcome != annotated.decision.outcome:
        found.append(f"decision {reproduced.decision.outcome}, annotated {annotated.decision.outcome}")
    return found


def _verdict_text(verdict: Verdict) -> str:
    flip = ", no flip" if not verdict.flipped else f", flip {(verdict.direction or '').replace('_', ' ')}".rstrip()
    return f"shipped {'pass' if verdict.shipped else 'fail'}, refit {'pass' if verdict.refit else 'fail'}{flip}"


def compare_verdict(annotated: Verdict, reproduced: Verdict | None) -> VerdictCheck:
    now = None if reproduced is None else _verdict_text(reproduced)
    same = reproduced is not None and (annotated.shipped, annotated.refit, annotated.flipped, annotated.direction) == (
        reproduced.shipped, reproduced.refit, reproduced.flipped, reproduced.direction)
    differences = [] if same else ["not in the reproduction" if now is None else f"{now}, annotated "
                                   f"{_verdict_text(annotated)}"]
    return VerdictCheck(criterion=annotated.criterion, annotated=_verdict_text(annotated), reproduced=now,
                        differences=differences)


def compare_reproduction(annotation: RefitAnnotation, reproduced: RefitAnnotation, *, tolerance: float
            ) -> tuple[list[CellCheck], list[VerdictCheck]]:
    """Every cell and verdict of the annotation against the reproduction's (matched by metric and criterion)."""
    cells_now = {c.metric: c for c in reproduced.cells}
    verdicts_now = {v.criterion: v for v in reproduced.verdicts}
    cells = []
    for cell in annotation.cells:
        now = cells_now.get(cell.metric)
        cells.append(CellCheck(
            metric=cell.metric, annotated_shipped=cell.shipped, reproduced_shipped=None if now is None else now.shipped,
            annotated_range=(min(cell.replicate_values), max(cell.replicate_values)),
            reproduced_values=[] if now is None else list(now.replicate_values),
            annotated_decision=cell.decision.outcome, reproduced_decision=None if now is None else now.decision.outcome,
            differences=cell_differences(cell, now, tolerance=tolerance)))
    return cells, [compare_verdict(v, verdicts_now.get(v.criterion)) for v in annotation.verdicts]


def reproduction(annotation: RefitAnnotation, result: AuditResult, *, source: str, tolerance: float, start: float,
                 original_seconds: float | None = None) -> Reproduction:
    """The typed outcome of a re-run ``result`` compared with ``annotation``."""
    cells, verdicts = compare_reproduction(annotation, result.annotation, tolerance=tolerance)
    return Reproduction(annotation=source, annotation_sha256=canonical_sha256(to_dict(annotation)),
                        subject=subject_name(annotation), tolerance=tolerance, cells=cells, verdicts=verdicts,
                        seconds=time.perf_counter() - start, rerun_seconds=result.seconds,
                        original_seconds=original_seconds)


# --- the orchestrator -----------------------------------------------------------------------------------------------


def reproduce_local(annotation_path: str | Path, spec: AuditSpec, *, spec_source: str,
                    weights: str | Path | None = None, tolerance: float = TOLERANCE,
                    device: Device = "cpu") -> Reproduction:
    """Read → fetch → re-run → compare, for an annotation on disk and weights and data at local paths.

    ``weights`` defaults to the original audit's ``weights_path`` in the ``result.json`` beside the annotation."""
    start = time.perf_counter()
    annotation, path = read_annotation(annotation_path)
    original = read_original_result(path)
    check_spec(annotation, spec, source=spec_source)
    if weights is None:
        if original is None or not isinstance(original.get("weights_path"), str):
            raise ReproductionInputError(f"no weights to reproduce {path} on: pass --weights (the annotated "
                                         f"{subject_name(annotation)})", missing=annotation.subject.filename)
        weights = original["weights_path"]
    weights = Path(weights)
    check_annotated_weights(annotation, weights)
    spec = pinned_spec(annotation, spec)
    data = fetch_data(annotation, spec, repo_dir=weights.parent)
    result = rerun_local(spec, weights, data, device=device)
    records = original.get("replicate_records") if original else None
    check_pools([str(r.get("pool_ids_sha256")) for r in records if isinstance(r, dict)]
                if isinstance(records, list) else None, result)
    seconds = original.get("seconds") if original else None
    return reproduction(annotation, result, source=str(path), tolerance=tolerance, start=start,
                        original_seconds=seconds if isinstance(seconds, (int, float)) else None)


# --- text -----------------------------------------------------------------------------------------------------------


def reproduction_lines(result: Reproduction) -> list[str]:
    """What the CLI prints: one line per cell and verdict, then the outcome naming what differs."""
    lines = [f"{result.annotation}: {result.subject}"]
    for cell in result.cells:
        low, high = cell.annotated_range
        status = "reproduced" if cell.reproduced else "DIFFERS: " + "; ".join(cell.differences)
        lines.append(f"  {cell.metric:<16} annotated {low:.4f}..{high:.4f}  reproduced "
                     f"{_values(cell.reproduced_values)}  {cell.annotated_decision}: {status}")
    for verdict in result.verdicts:
        status = "reproduced" if not verdict.differences else "DIFFERS: " + "; ".join(verdict.differences)
        lines.append(f"  {verdict.criterion}: {verdict.annotated}: {status}")
    if result.reproduced:
        lines.append(f"reproduced: {len(result.cells)} cells and {len(result.verdicts)} verdicts within ± "
                     f"{result.tolerance:g} of the annotation's replicate ranges, every decision and flip the same")
    else:
        lines.append(f"not reproduced: {', '.join(result.differing)} differ{'s' if len(result.differing) == 1 else ''}")
    return lines


def _values(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def _one_line(exc: BaseException) -> str:
    return one_line(exc) or type(exc).__name__


__all__ = [
    "TOLERANCE",
    "CellCheck",
    "Reproduction",
    "VerdictCheck",
    "cell_differences",
    "check_spec",
    "check_annotated_weights",
    "compare_reproduction",
    "digest_differences",
    "fetch_data",
    "parse_annotation",
    "pinned_spec",
    "read_annotation",
    "reproduce_local",
    "reproduction",
    "reproduction_lines",
]
