"""The census writes each eligible checkpoint's BY-adjusted p-values into its annotation, as spec 1.1."""

from __future__ import annotations

import json
from pathlib import Path

from bnconvention.audit.census.annotations import annotation_with_by, write_by_annotations
from bnconvention.standard.models import RefitAnnotation, parse_record, to_dict
from bnconvention.validation.records import validate_record

FULL = Path(__file__).resolve().parent.parent / "schema" / "tests" / "valid" / "refit-annotation-full.json"


def _annotation() -> RefitAnnotation:
    record = parse_record(json.loads(FULL.read_text(encoding="utf-8")))
    assert isinstance(record, RefitAnnotation)
    return record


def test_adjusted_p_values_make_a_valid_1_1_annotation_and_change_nothing_else() -> None:
    annotation = _annotation()
    adjusted = annotation_with_by(annotation, {"df": 0.25, "dt": 1.0, "abs(df - dt)": 0.25}, family_size=12)
    assert isinstance(adjusted, RefitAnnotation) and adjusted.spec_version == "1.1"
    data = to_dict(adjusted)
    assert validate_record(data) == []
    assert [(c["decision"]["by_p_value"], c["decision"]["by_family_size"]) for c in data["cells"]] == [
        (0.25, 12), (1.0, 12), (0.25, 12)]
    for cell in data["cells"]:
        del cell["decision"]["by_p_value"], cell["decision"]["by_family_size"]
    assert {**data, "spec_version": "1.0"} == to_dict(annotation)


def test_a_checkpoint_outside_the_family_keeps_its_1_0_annotation() -> None:
    annotation = _annotation()
    assert annotation_with_by(annotation, {"df": None, "dt": None}, family_size=12) is annotation


def test_write_by_annotations_rewrites_the_eligible_ones_only(tmp_path: Path) -> None:
    annotation = _annotation()
    rows = [{"annotation": "checkpoints/a/annotation.json", "cells": {"df": {"by_p_value": 0.5}}},
            {"annotation": "checkpoints/b/annotation.json", "cells": {"df": {"by_p_value": None}}}]
    for row in rows:
        (tmp_path / row["annotation"]).parent.mkdir(parents=True)
        (tmp_path / row["annotation"]).write_text("untouched", encoding="utf-8")
    adjusted = [(row["annotation"], {metric: cell["by_p_value"] for metric, cell in row["cells"].items()})
                for row in rows]
    assert write_by_annotations(tmp_path, [annotation, annotation], adjusted, family_size=1) == 1
    written = json.loads((tmp_path / rows[0]["annotation"]).read_text(encoding="utf-8"))
    assert written["spec_version"] == "1.1" and written["cells"][0]["decision"]["by_p_value"] == 0.5
    assert "by_p_value" not in written["cells"][1]["decision"]  # dt has no adjusted p in this summary
    assert (tmp_path / rows[1]["annotation"]).read_text(encoding="utf-8") == "untouched"


def test_a_population_checkpoint_carries_its_family_in_the_1_1_annotation() -> None:
    from bnconvention.audit.census.annotations import annotation_family
    from bnconvention.audit.core.result import PopulationMetadata

    population = PopulationMetadata(role="unlearned", family="relabel", variant="eval", removal="r05", seed=2)
    family = annotation_family(population)
    assert family == {"name": "relabel", "variant": "eval", "removal": "r05", "seed": 2}
    annotation = _annotation()
    adjusted = annotation_with_by(annotation, {"df": None}, family_size=12, family=family)  # no BY p, a family
    data = to_dict(adjusted)
    assert data["spec_version"] == "1.1" and data["family"] == family and validate_record(data) == []
    assert {k: v for k, v in data.items() if k not in ("family", "spec_version")} == {
        k: v for k, v in to_dict(annotation).items() if k != "spec_version"}


def test_bases_retrains_and_zoo_checkpoints_have_no_family() -> None:
    from bnconvention.audit.census.annotations import annotation_family
    from bnconvention.audit.core.result import PopulationMetadata

    assert annotation_family(None) is None
    assert annotation_family(PopulationMetadata(role="retrain", removal="r05", seed=0)) is None
