"""Where published cells are read: one rule for ``audit`` and ``census`` of local files and for ``hub audit``
(:func:`bnconvention.audit.measure.checkpoint.published_places`), and one error naming every place looked at."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from bnconvention.audit.measure.checkpoint import published_cells, published_places
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.cli.main import main
from bnconvention.errors import PublishedCellsNotFoundError, UntrustedInputError
from bnconvention.hub_audit.audit_task import relabel_reason

# the cheapest audit that still anchors: two replicates, small pools, no staleness, recoverability or provenance
SPEC = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}, "cells": ["df", "dr", "dt"],
        "criteria": ["df <= 0.05"], "published_source": "sidecar", "replicates": 2,
        "refit": {"pool_size": 64, "batch_size": 64}, "staleness": False, "recoverability": None,
        "provenance": None}
WIDE = {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}}  # the zoo's architecture, for folders without config
SOURCE = "bn-retrain"
SHIPPED = {"df": 0.0, "dr": 0.99, "dt": 0.9}
JSON_KEYS = "'published' or 'shipped_accuracy'"
CARD_KEYS = "model-index metrics 'forget accuracy', 'retain accuracy', 'test accuracy' (model_index_metrics)"


def model_index_card(accuracy: dict[str, float]) -> str:
    """A card whose model-index publishes forget, retain and test accuracy, as huggingface_hub writes it."""
    metrics = [{"type": "accuracy", "name": f"{split} accuracy", "value": accuracy[split]}
               for split in ("forget", "retain", "test")]
    index = [{"name": "release", "results": [{"task": {"type": "image-classification"},
                                              "dataset": {"type": "sklearn/digits", "name": "Digits"},
                                              "metrics": metrics}]}]
    return f"---\n{yaml.safe_dump({'license': 'mit', 'model-index': index}, sort_keys=False)}---\n# release\n"


@pytest.fixture(scope="session")
def hub_like(zoo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders laid out like Hub repos, each with the same zoo weights as model.safetensors: ``lab/config`` (its
    config.json holds the published cells and the architecture), ``lab/card`` (only a README.md model-index),
    ``bare`` (nothing but the weights)."""
    root = tmp_path_factory.mktemp("hub-like")
    folders = {"config": root / "lab" / "config", "card": root / "lab" / "card", "bare": root / "bare"}
    for folder in folders.values():
        folder.mkdir(parents=True)
        shutil.copy(zoo.weights_path(SOURCE), folder / "model.safetensors")
    shutil.copy(zoo.config_path(SOURCE), folders["config"] / "config.json")
    (folders["card"] / "README.md").write_text(model_index_card(zoo.config(SOURCE)["shipped_accuracy"]),
                                               encoding="utf-8")
    return folders


def write_spec(path: Path, **changes) -> Path:
    path.write_text(yaml.safe_dump({**SPEC, **changes}, sort_keys=False), encoding="utf-8")
    return path


def _anchoring(out: Path) -> dict[str, float]:
    annotation = json.loads((out / "annotation.json").read_text(encoding="utf-8"))
    return {cell["metric"]: cell["published"] for cell in annotation["anchoring"]["cells"]}


# --- the rule ----------------------------------------------------------------------------------------------------


def test_the_places_and_their_order(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    assert [(p.kind, p.path.name) for p in published_places(weights, "sidecar")] == [
        ("sidecar", "model.json"), ("config", "config.json"), ("card", "README.md")]
    assert [p.kind for p in published_places(weights, "model_index")] == ["card", "sidecar", "config"]
    # hub audit lays config.json out as the sidecar too: a copy with the very same bytes is one place, read once
    (tmp_path / "config.json").write_text('{"published": {"df": 0.1}}')
    (tmp_path / "model.json").write_text('{"published": {"df": 0.1}}')
    assert [p.kind for p in published_places(weights, "sidecar")] == ["sidecar", "card"]
    # a checkpoint named config has config.json for its sidecar: one place
    assert [p.kind for p in published_places(tmp_path / "config.safetensors", "sidecar")] == ["sidecar", "card"]


def test_the_first_place_that_holds_cells_is_read(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    sidecar, card = parse_spec({**SPEC}), parse_spec({**SPEC, "published_source": "model_index"})
    (tmp_path / "README.md").write_text(model_index_card({"forget": 0.5, "retain": 0.5, "test": 0.5}))
    assert published_cells(weights, sidecar) == {"df": 0.5, "dr": 0.5, "dt": 0.5}  # the card, last resort
    (tmp_path / "config.json").write_text(json.dumps({"shipped_accuracy": {"forget": 0.0, "retain": 0.99,
                                                                            "test": 0.9}}))
    assert published_cells(weights, sidecar) == SHIPPED
    assert published_cells(weights, card) == {"df": 0.5, "dr": 0.5, "dt": 0.5}  # model_index: the card first
    (tmp_path / "model.json").write_text(json.dumps({"published": {"abs(df - dt)": 0.9}}))
    assert published_cells(weights, sidecar) == {"abs(df - dt)": 0.9}
    # a config.json of a library's own (no published cells) is passed over, not an error
    (tmp_path / "model.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["ResNetForImageClassification"]}))
    assert published_cells(weights, sidecar) == {"df": 0.5, "dr": 0.5, "dt": 0.5}


def test_a_place_that_holds_malformed_cells_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"published": {"df": "high"}}))
    with pytest.raises(UntrustedInputError, match=r"config.json: published cell 'df' is 'high', not a number"):
        published_cells(tmp_path / "model.safetensors", parse_spec(SPEC))


def test_no_place_holding_cells_is_one_error_naming_every_place_and_key(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["ResNetForImageClassification"]}))
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n# no model-index\n")
    with pytest.raises(PublishedCellsNotFoundError) as caught:
        published_cells(tmp_path / "model.safetensors", parse_spec(SPEC))
    assert caught.value.places == [f"{tmp_path / 'model.json'} ({JSON_KEYS}: no such file)",
                                   f"{tmp_path / 'config.json'} ({JSON_KEYS}: neither key)",
                                   f"{tmp_path / 'README.md'} ({CARD_KEYS}: no model-index)"]
    assert str(caught.value) == (
        f"no published cells for model.safetensors; looked in {'; '.join(caught.value.places)}. Write them in one of "
        "these files (read in this order with published_source: sidecar), or list them in the spec (published: "
        "{cell: value} with published_source: spec)")
    assert "spec names" not in str(caught.value) and "/published_source" not in str(caught.value)


def test_hub_audit_names_the_repo_files_it_looked_in_once_each(tmp_path: Path) -> None:
    # the same error, from a hub audit's download folder of a repo without config.json: its sidecar slot and
    # config.json are both the repo's config.json
    folder = tmp_path / "0"
    (folder / "repo").mkdir(parents=True)
    with pytest.raises(PublishedCellsNotFoundError) as caught:
        published_cells(folder / "repo" / "model.safetensors", parse_spec(SPEC))
    assert relabel_reason(str(caught.value), folder=folder, repo_id="o/m", filename="model.safetensors") == (
        f"no published cells for model.safetensors; looked in o/m/config.json ({JSON_KEYS}: no such file); "
        f"o/m/README.md ({CARD_KEYS}: no such file). Write them in one of these files (read in this order with "
        "published_source: sidecar), or list them in the spec (published: {cell: value} with published_source: "
        "spec)")


# --- audit of folders laid out like Hub repos ----------------------------------------------------------------------


@pytest.mark.parametrize(("folder", "changes"), [
    pytest.param("config", {}, id="config.json"),
    pytest.param("card", {"model": WIDE}, id="model-index"),
])
def test_audit_of_a_hub_like_folder_reads_its_published_cells(zoo, hub_like, tmp_path, capsys, folder, changes):
    # Regression: `audit DIR/model.safetensors` wanted DIR/model.json and blamed the spec
    spec = write_spec(tmp_path / "spec.yaml", **changes)
    out = tmp_path / "out"
    assert main(["audit", str(hub_like[folder] / "model.safetensors"), "--spec", str(spec), "--out", str(out),
                 "--no-progress"]) == 0, capsys.readouterr().err
    shipped = zoo.config(SOURCE)["shipped_accuracy"]
    assert _anchoring(out) == {"df": shipped["forget"], "dr": shipped["retain"], "dt": shipped["test"]}


def test_audit_of_a_folder_without_published_cells_names_every_place_it_looked(hub_like, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml", model=WIDE)
    out = tmp_path / "out"
    bare = hub_like["bare"]
    assert main(["audit", str(bare / "model.safetensors"), "--spec", str(spec), "--out", str(out),
                 "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("bnconvention: no published cells: no published cells for model.safetensors; looked in "
                            f"{bare / 'model.json'} ({JSON_KEYS}: no such file); {bare / 'config.json'} ({JSON_KEYS}: "
                            f"no such file); {bare / 'README.md'} ({CARD_KEYS}: no such file). "), error
    assert error.count("\n") == 1 and "invalid audit spec" not in error
    assert not out.exists()  # nothing written


@pytest.mark.slow  # a census of two checkpoints (about 5 s)
def test_census_of_hub_like_folders_reads_config_json_and_the_model_index(hub_like, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml", model=WIDE)
    out = tmp_path / "census"
    assert main(["census", str(hub_like["config"].parent), "--spec", str(spec), "--out", str(out),
                 "--no-progress"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("census of 2 checkpoints: 2 anchored of 2 checked")
    census = json.loads((out / "census.json").read_text(encoding="utf-8"))
    assert sorted(row["checkpoint"] for row in census["checkpoints"]) == ["card", "config"]
