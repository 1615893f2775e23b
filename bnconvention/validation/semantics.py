"""Semantic checks on one record that the schema accepts: rules that tie several fields together.

Each check takes the parsed model (and the file name for the issues) and returns issues; none raises. Numbers that
must be means or averages are compared with a relative and absolute tolerance of 1e-6 (writers may sum in a
different order).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence

from bnconvention.formats.text import plural
from bnconvention.standard.models import (
    BatchNormState,
    Declaration,
    FittingConvention,
    Observation,
    RefitAnnotation,
    Staleness,
)
from bnconvention.standard.naming import canonical_name, transform_sha256
from bnconvention.validation.decision_check import decision_issues
from bnconvention.validation.issues import Issue, join_pointer, new_issue
from bnconvention.validation.scales_check import activation_scales_issues, refit_state_issues
from bnconvention.validation.schema_errors import show

TOLERANCE = 1e-6


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def short(digest: str | None) -> str:
    """A digest shortened for messages (16 hex digits identify it in practice)."""
    return "absent" if digest is None else digest[:16] + "…"


def convention_issues(convention: FittingConvention, *, source: str, base: str) -> Iterator[Issue]:
    expected = canonical_name(convention)
    if convention.name != expected:
        yield new_issue("record.name_mismatch", file=source, path=join_pointer(base, "name"), message=(
            f"{show(convention.name)} is not the canonical name of this convention: its fields give "
            f"{show(expected)}; set "
            f"name to {show(expected)}, or fix the field that is wrong (the name is "
            "<buffer_update_mode>/<data.role>/<transform.mode>-transform/<rule>)"))
    transform = convention.transform
    digest = transform_sha256(transform.description)
    if transform.sha256 != digest:
        yield new_issue("record.transform_sha256_mismatch", file=source,
                        path=join_pointer(base, "transform", "sha256"), message=(
            f"{show(short(transform.sha256))} is not the sha256 of the transform description: the canonical JSON of "
            f"transform.description hashes to {digest}; recompute it (bnconvention.standard.transform_sha256)"))


def batchnorm_state_issues(record: Declaration, *, source: str) -> Iterator[Issue]:
    """Deployed-state rules: one entry per kind, unique layer names, per-layer and combined digests agree."""
    kinds: Counter[str] = Counter()
    for index, state in enumerate(record.deployed_state):
        kinds[state.kind] += 1
        if kinds[state.kind] > 1:
            yield new_issue("record.duplicate_state_kind", file=source,
                            path=join_pointer("", "deployed_state", index, "kind"), message=(
                f"{show(state.kind)} appears more than once in deployed_state: each kind of deployed state is "
                "described once; merge the entries"))
    states = [(i, s) for i, s in enumerate(record.deployed_state) if isinstance(s, BatchNormState)]
    running_layers: list[tuple[str, str | None]] = []
    for index, state in states:
        seen: set[str] = set()
        for j, layer in enumerate(state.layers):
            where = join_pointer("", "deployed_state", index, "layers", j)
            if layer.name in seen:
                yield new_issue("record.duplicate_layer", file=source, path=join_pointer(where, "name"), message=(
                    f"{show(layer.name)} is listed twice: each BatchNorm layer appears once; remove the duplicate"))
            seen.add(layer.name)
            if layer.track_running_stats:
                running_layers.append((layer.name, layer.running_sha256))
                if layer.running_sha256 is None:
                    yield new_issue("record.layer_digest_missing", file=source, path=where, message=(
                        f"layer {show(layer.name)} tracks running statistics but has no running_sha256: add the digest "
                        "of its running buffers (bnconvention declare computes it)"))
            elif layer.running_sha256 is not None:
                yield new_issue("record.layer_digest_unexpected", file=source,
                                path=join_pointer(where, "running_sha256"), message=(
                    f"{show(short(layer.running_sha256))} is a running digest of layer {show(layer.name)}, "
                    "which tracks no "
                    "running statistics: remove running_sha256 or set track_running_stats to true"))
    combined = record.digests.running_sha256
    if not running_layers and combined is not None:
        yield new_issue("record.running_digest_inconsistent", file=source, path="/digests/running_sha256", message=(
            f"{show(short(combined))} is a running-statistics digest, but no declared layer tracks running statistics "
            "(channel absent): remove digests.running_sha256 or declare the BatchNorm layers"))
    elif running_layers and combined is None:
        yield new_issue("record.running_digest_inconsistent", file=source, path="/digests", message=(
            f"digests has no running_sha256 although {plural(len(running_layers), 'declared layer')} track running "
            "statistics: add the digest of all running buffers"))
    elif len(running_layers) == 1 and combined is not None and running_layers[0][1] is not None \
            and running_layers[0][1] != combined:
        # With one layer the combined digest covers exactly that layer's buffers, so the two must be equal.
        yield new_issue("record.running_digest_inconsistent", file=source, path="/digests/running_sha256", message=(
            f"{show(short(combined))} differs from the only running layer's digest "
            f"{show(short(running_layers[0][1]))}; "
            "with one layer both cover the same buffers and must be equal: recompute the digests"))
    if not running_layers and record.convention.buffer_update_mode not in ("untouched", "unknown"):
        yield new_issue("record.channel_mode", file=source, path="/convention/buffer_update_mode", message=(
            f"{show(record.convention.buffer_update_mode)} is the buffer-update mode of a model with no running "
            "statistics (channel absent): nothing was fitted; declare 'untouched'"))


def staleness_issues(staleness: Staleness, *, source: str, base: str) -> Iterator[Issue]:
    if not staleness.layers:
        return
    for field in ("mean_distance", "var_distance"):
        average = _mean([getattr(layer, field) for layer in staleness.layers])
        value = getattr(staleness, field)
        if not _close(value, average):
            yield new_issue("record.staleness_average", file=source, path=join_pointer(base, field), message=(
                f"{show(value)} is not the layer average of {field}: the {plural(len(staleness.layers), 'layer')} "
                f"average to {show(average)}; write the average"))


def refit_details_issues(record: Declaration, *, source: str) -> Iterator[Issue]:
    refit = record.refit
    if refit is None:
        return
    if refit.trainable_sha256_before != refit.trainable_sha256_after:
        yield new_issue("record.refit_weights_changed", file=source, path="/refit/trainable_sha256_after", message=(
            f"{show(short(refit.trainable_sha256_after))} differs from trainable_sha256_before "
            f"{show(short(refit.trainable_sha256_before))}: a refit must leave the trainable tensors bit-identical; "
            "these weights are not the ones that were refit"))
    if refit.trainable_sha256_after != record.digests.trainable_sha256:
        yield new_issue("record.refit_digest_mismatch", file=source, path="/refit/trainable_sha256_after", message=(
            f"{show(short(refit.trainable_sha256_after))} differs from digests.trainable_sha256 "
            f"{show(short(record.digests.trainable_sha256))}: the refit produced other tensors than the ones declared"))
    if refit.running_sha256_after is not None and refit.running_sha256_after != record.digests.running_sha256:
        yield new_issue("record.refit_digest_mismatch", file=source, path="/refit/running_sha256_after", message=(
            f"{show(short(refit.running_sha256_after))} differs from digests.running_sha256 "
            f"{show(short(record.digests.running_sha256))}: the declared running statistics are not the refit ones"))
    if record.convention.buffer_update_mode != "refit":
        yield new_issue("record.refit_mode_mismatch", file=source, path="/convention/buffer_update_mode", message=(
            f"{show(record.convention.buffer_update_mode)} is not 'refit' although the declaration carries refit "
            "details: set buffer_update_mode to 'refit', or drop the refit section"))
    yield from staleness_issues(refit.staleness, source=source, base="/refit/staleness")


def observation_issues(record: Declaration, *, source: str) -> Iterator[Issue]:
    if record.observation is None:
        return
    yield from _mode_issues(record.convention.buffer_update_mode, record.observation, source=source)
    for k, contradiction in enumerate(record.observation.contradictions):
        yield new_issue("record.observation_contradiction", file=source,
                        path=join_pointer("", "observation", "contradictions", k), message=(
            f"{show(contradiction.code)}: {contradiction.message} (measured by the recorder: check the declared "
            "convention against what the run did)"))


def _mode_issues(mode: str, observation: Observation, *, source: str) -> Iterator[Issue]:
    """The convention's mode against the observed one: equal, or an override that names both."""
    override, observed = getattr(observation, "override", None), observation.mode
    if override is not None:
        if override.mode != mode or override.observed != observed:
            yield new_issue("record.observation_mode_mismatch", file=source, path="/observation/override", message=(
                f"the override says {show(override.observed)} observed, {show(override.mode)} declared, but the "
                f"observation's mode is {show(observed)} and the convention's {show(mode)}: the override describes "
                "another record"))
            return
        yield new_issue("record.mode_override", file=source, path="/observation/override", message=(
            f"{show(override.by)} declares {show(override.mode)} where the recorder observed {show(override.observed)}"
            f": {override.reason}"))
    elif observed is not None and mode != observed:
        yield new_issue("record.observation_mode_mismatch", file=source, path="/convention/buffer_update_mode",
                        message=(f"{show(mode)} but the recorder observed {show(observed)}: declare the observed mode, "
                                 "or record the author's as an override (declare --override REASON --override-by WHO)"))


def declaration_issues(record: Declaration, *, source: str) -> list[Issue]:
    issues = list(convention_issues(record.convention, source=source, base="/convention"))
    issues += batchnorm_state_issues(record, source=source)
    issues += activation_scales_issues(record, source=source)
    issues += refit_details_issues(record, source=source)
    issues += observation_issues(record, source=source)
    return issues


def annotation_issues(record: RefitAnnotation, *, source: str) -> list[Issue]:
    issues = list(convention_issues(record.convention, source=source, base="/convention"))
    for k, cell in enumerate(record.cells):
        base = join_pointer("", "cells", k)
        for field in ("replicate_values", "replicate_shifts_pp"):
            values = getattr(cell, field)
            if len(values) != record.replicates:
                issues.append(new_issue("record.replicate_count", file=source, path=join_pointer(base, field),
                                        message=(
                    f"{plural(len(values), 'value')} in {field} of cell {show(cell.metric)}, but the annotation has "
                    f"{plural(record.replicates, 'replicate')}: give one value per replicate")))
        for field, values in (("refit", cell.replicate_values), ("shift_pp", cell.replicate_shifts_pp)):
            mean = _mean(values)
            if not _close(getattr(cell, field), mean):
                source_field = "replicate_values" if field == "refit" else "replicate_shifts_pp"
                issues.append(new_issue("record.cell_mean", file=source, path=join_pointer(base, field), message=(
                    f"{show(getattr(cell, field))} is not the mean of {source_field} of cell {show(cell.metric)}: they "
                    f"average to {show(mean)}; write the mean")))
        if record.channel == "absent" and (cell.shift_pp != 0 or any(s != 0 for s in cell.replicate_shifts_pp)):
            issues.append(new_issue("record.channel_absent_shift", file=source, path=join_pointer(base, "shift_pp"),
                                    message=(
                f"{show(cell.shift_pp)} is a shift of cell {show(cell.metric)} in an annotation with channel "
                "'absent': a "
                "model without running statistics has nothing to refit and every shift is exactly 0.00")))
    for v, verdict in enumerate(record.verdicts):
        base = join_pointer("", "verdicts", v)
        flipped = verdict.shipped != verdict.refit
        if verdict.flipped != flipped:
            issues.append(new_issue("record.verdict_flip", file=source, path=join_pointer(base, "flipped"),
                                    message=(
                f"{str(verdict.flipped).lower()} contradicts the outcomes of {show(verdict.criterion)}: shipped "
                f"{str(verdict.shipped).lower()}, refit {str(verdict.refit).lower()}; set flipped to "
                f"{str(flipped).lower()}")))
        if verdict.direction is not None:
            expected = ("pass_to_fail" if verdict.shipped else "fail_to_pass") if flipped else None
            if verdict.direction != expected:
                fix = f"set it to {show(expected)}" if expected else "remove it (the verdict did not flip)"
                issues.append(new_issue("record.verdict_flip", file=source, path=join_pointer(base, "direction"),
                                        message=(
                    f"{show(verdict.direction)} is not the direction of {show(verdict.criterion)} (shipped "
                    f"{str(verdict.shipped).lower()}, refit {str(verdict.refit).lower()}): {fix}")))
    if record.anchoring is not None:
        anchoring = record.anchoring
        for c, anchor in enumerate(anchoring.cells):
            diff = abs(anchor.published - anchor.shipped)
            if not _close(anchor.abs_diff, diff):
                issues.append(new_issue("record.anchoring_inconsistent", file=source,
                                        path=join_pointer("", "anchoring", "cells", c, "abs_diff"), message=(
                    f"{show(anchor.abs_diff)} is not |published - shipped| = {show(diff)} for "
                    f"{show(anchor.metric)}; write the "
                    "absolute difference")))
        anchored = all(abs(a.published - a.shipped) <= anchoring.tolerance + 1e-12 for a in anchoring.cells)
        if anchoring.anchored != anchored:
            issues.append(new_issue("record.anchoring_inconsistent", file=source, path="/anchoring/anchored",
                                    message=(
                f"{str(anchoring.anchored).lower()} contradicts the anchoring cells: with tolerance "
                f"{show(anchoring.tolerance)} they give {str(anchored).lower()}")))
    if record.staleness is not None:
        issues += staleness_issues(record.staleness, source=source, base="/staleness")
    issues += decision_issues(record, source=source)
    issues += twin_issues(record, source=source)
    issues += refit_state_issues(record, source=source)
    return issues


def twin_issues(record: RefitAnnotation, *, source: str) -> Iterator[Issue]:
    """A 1.1 twin shares the subject's trainable tensors bit for bit (only its buffers took another path)."""
    twin = getattr(record, "twin", None)
    if twin is not None and twin.trainable_sha256 != record.subject.trainable_sha256:
        yield new_issue("record.twin_weights_differ", file=source, path="/twin/trainable_sha256", message=(
            f"{show(short(twin.trainable_sha256))} is not the subject's trainable digest "
            f"{show(short(record.subject.trainable_sha256))}: a twin has bit-identical trainable tensors and differs "
            "only in its running statistics; name the twin of this checkpoint, or drop the twin"))


__all__ = ["TOLERANCE", "annotation_issues", "declaration_issues", "short"]
