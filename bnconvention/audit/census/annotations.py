"""Each census checkpoint's annotation with the Benjamini–Yekutieli adjusted p-values of its cells (spec 1.1).

An audit writes a 1.0 annotation: one checkpoint knows no multiplicity family. The census adjusts the sign-test
p-values of each cell across its decided checkpoints (controls are outside the family) (``census.json``'s
``by_p_value``) and then rewrites each eligible checkpoint's ``annotation.json`` as spec version 1.1 with
``decision.by_p_value`` and ``decision.by_family_size``: the producer writes 1.1 exactly when a 1.1 field is filled.
Checkpoints outside the family (not anchored) keep their 1.0 annotation. The journal (``result.json``) keeps the
audit's 1.0 annotation, so a rerun with another population adjusts again from the unadjusted p-values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bnconvention.audit.core.files import ANNOTATION_FILE, json_text
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.standard.models import LATEST_SPEC_VERSION, RefitAnnotation, parse_record, to_dict


def annotation_with_by(annotation: RefitAnnotation, by_p_values: Mapping[str, float | None], *,
                       family_size: int, family: Mapping[str, Any] | None = None,
                       extra: Mapping[str, Any] | None = None) -> RefitAnnotation:
    """``annotation`` as 1.1 with each cell's adjusted p-value and, for a checkpoint of a structured population, its
    ``family`` (name, variant, removal, seed), plus ``extra`` 1.1 fields (:func:`.annotation_fields.annotation_fields`:
    recoverability curves, provenance arms, twin); the annotation itself when it gains none of them."""
    if (family is None and not extra
            and all(by_p_values.get(cell.metric) is None for cell in annotation.cells)):
        return annotation
    data = to_dict(annotation)
    data["spec_version"] = LATEST_SPEC_VERSION
    if family is not None:
        data["family"] = dict(family)
    data.update(extra or {})
    for cell in data["cells"]:
        p_by = by_p_values.get(cell["metric"])
        if p_by is not None:
            cell["decision"]["by_p_value"] = p_by
            cell["decision"]["by_family_size"] = family_size
    record = parse_record(data)
    if not isinstance(record, RefitAnnotation):  # a refit_annotation stays one; a guard for the type checker
        raise TypeError("the annotation did not parse as a refit annotation")
    return record


def annotation_family(population: Any) -> dict[str, Any] | None:
    """The 1.1 ``family`` of a checkpoint from its population metadata (:class:`~.result.PopulationMetadata`), or
    None when it names no family (a base, a retrain, a twin, or no population at all)."""
    if population is None or not getattr(population, "family", None):
        return None
    found = {"name": population.family, "variant": population.variant, "removal": population.removal,
             "seed": population.seed}
    return {key: value for key, value in found.items() if value is not None}


def write_by_annotations(out_dir: Path, annotations: Sequence[RefitAnnotation],
                         adjusted: Sequence[tuple[str, Mapping[str, float | None]]], *, family_size: int,
                         families: Sequence[Mapping[str, Any] | None] | None = None,
                         extras: Sequence[Mapping[str, Any]] | None = None) -> int:
    """Rewrite the annotation file of every checkpoint that has adjusted p-values (``adjusted``: per annotation, its
    path under ``out_dir`` and the BY p-value of each cell, as the census rows hold them), a family (one per
    annotation in ``families``) or other 1.1 fields (``extras``); how many. ``family_size``: the checkpoints the
    census decided (controls sit outside the family)."""
    written = 0
    own_families = list(families) if families is not None else [None] * len(annotations)
    own_extras = list(extras) if extras is not None else [{}] * len(annotations)
    for annotation, (path, by_p_values), family, extra in zip(annotations, adjusted, own_families, own_extras,
                                                              strict=True):
        rewritten = annotation_with_by(annotation, by_p_values, family_size=family_size, family=family,
                                       extra=extra)
        if rewritten is annotation:
            continue
        atomic_write_text(out_dir / path, json_text(to_dict(rewritten)))
        written += 1
    return written


__all__ = ["ANNOTATION_FILE", "annotation_family", "annotation_with_by", "write_by_annotations"]
