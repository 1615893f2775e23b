"""``bnconvention audit`` and ``bnconvention census`` end to end, and their refusals (nothing written)."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import yaml

from bnconvention.cli.main import main
from bnconvention.standard.schema import schema_validator

SMALL = {
    "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
    "criteria": ["df <= 0.05", "dr >= 0.95"], "published_source": "sidecar", "replicates": 2,
    "refit": {"pool_size": 128}, "recoverability": {"images": 10},
}


def write_spec(path, **changes):
    spec = {**SMALL, **changes}
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.slow
def test_audit_end_to_end_writes_a_valid_annotation(zoo, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml")
    out = tmp_path / "out"
    code = main(["audit", str(zoo.root / "bn-badteacher-eval.safetensors"), "--spec", str(spec), "--out", str(out),
                 "--no-progress"])
    captured = capsys.readouterr()
    printed = captured.out
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["annotation.json", "cells.png", "result.json", "staleness.png",
                                                     "summary.md"]
    annotation = json.loads((out / "annotation.json").read_text())
    assert list(schema_validator().iter_errors(annotation)) == []
    assert printed.splitlines()[0] == annotation["reporting_line"]
    assert "forget accuracy moves +" in annotation["reporting_line"]
    # two replicates cannot reach the sign test's level (p = 0.25 > 0.05): undetermined, however far they move
    assert ("(undetermined: 2/2 replicates beyond ±1.2pp; R = 2 cannot reach p <= 0.05 (smallest p = 0.25))"
            in annotation["reporting_line"])
    assert "warning: with 2 replicates no cell can be displaced" in captured.err
    assert "FLIP pass to fail" in printed
    assert main(["validate", str(out / "annotation.json")]) == 0
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# Audit of `bn-badteacher-eval.safetensors`\n")
    assert "![cells](cells.png)" in summary


@pytest.mark.slow
def test_census_end_to_end(zoo, tmp_path, capsys):
    population = tmp_path / "zoo"
    population.mkdir()
    for name in ("gn-base", "bn-finetune"):
        for suffix in (".safetensors", ".json"):
            shutil.copy(zoo.root / f"{name}{suffix}", population / f"{name}{suffix}")
    spec = write_spec(tmp_path / "spec.json", replicates=2, recoverability=None)
    spec.write_text(json.dumps({**SMALL, "replicates": 2, "recoverability": None}))
    code = main(["census", str(population), "--spec", str(spec), "--out", str(tmp_path / "census"),
                 "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0
    # the channel-absent twin is a known-answer control, outside the decided family
    assert printed.startswith("census of 2 checkpoints: 2 anchored of 2 checked, 1 decided, 1 controls (1 channel "
                              "absent)\n")
    census = json.loads((tmp_path / "census" / "census.json").read_text())
    assert [c["checkpoint"] for c in census["checkpoints"]] == ["bn-finetune", "gn-base"]
    for entry in census["checkpoints"]:
        assert main(["validate", str(tmp_path / "census" / entry["annotation"])]) == 0
    assert main(["census", str(population), "--spec", str(spec), "--out", str(tmp_path / "census"),
                 "--no-progress"]) == 0
    assert "0 audited, 2 reused from the journal" in capsys.readouterr().out


def _refused(capsys, argv, out, *, code, message, label=None):
    assert main(argv + ["--out", str(out), "--no-progress"]) == code
    error = capsys.readouterr().err
    assert message in error, error
    if label is not None:
        assert error.startswith(f"bnconvention: {label}: "), error
    assert error.count("\n") == 1 and "Traceback" not in error  # one line, no traceback
    assert not out.exists()  # nothing written


@pytest.mark.parametrize(("changes", "message"), [
    pytest.param({"replicates": 1}, "/replicates: a decision needs at least 2 replicates (found 1)", id="R-below-2"),
    pytest.param({"cellz": ["df"]}, "/cellz: unknown field", id="schema"),
    pytest.param({"splits": {"forget_classes": [12]}}, "forget class 12 is out of range", id="class-out-of-range"),
    pytest.param({"splits": {"forget_classes": list(range(10))}}, "the retain split is empty", id="empty-split"),
    pytest.param({"criteria": ["__import__('os').system('true') == 0"]}, "only abs, min and max may be called",
                 id="code-in-criterion"),
])
def test_audit_refuses_bad_specs_before_computing(zoo, tmp_path, capsys, changes, message):
    spec = write_spec(tmp_path / "spec.yaml", **changes)
    _refused(capsys, ["audit", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec)], tmp_path / "out",
             code=2, message=message, label="invalid audit spec")


def test_replicates_option_below_one_is_refused(zoo, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml")
    _refused(capsys, ["audit", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec), "--replicates", "0"],
             tmp_path / "out", code=2, message="/replicates")


def test_tensors_that_do_not_fit_the_factory_are_refused(zoo, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml", model={"factory": "zoo/convnet-bn", "kwargs": {"width": 8}},
                      published_source="spec")
    _refused(capsys, ["audit", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec)], tmp_path / "out",
             code=1, label="error",
             message="'features.0.weight' has shape [16, 1, 3, 3] in the file but [8, 1, 3, 3] in the model")


def test_factory_outside_the_allowlist_is_refused_without_import(zoo, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml", model={"factory": "evil_module_h7_cli:build"}, published_source="spec")
    _refused(capsys, ["audit", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec)], tmp_path / "out",
             code=2, message="factory not allowed: model factory 'evil_module_h7_cli:build' is not allowlisted")
    assert "evil_module_h7_cli" not in sys.modules


def test_malformed_checkpoint_is_unreadable_input(tmp_path, capsys):
    weights = tmp_path / "broken.safetensors"
    weights.write_bytes(b"\xff" * 8 + b"{}")
    spec = write_spec(tmp_path / "spec.yaml", model={"factory": "zoo/convnet-bn"}, published_source="spec")
    _refused(capsys, ["audit", str(weights), "--spec", str(spec)], tmp_path / "out", code=2,
             message="bnconvention: unreadable input: ")
    assert weights.read_bytes() == b"\xff" * 8 + b"{}"  # input untouched


def test_missing_checkpoint(tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml", model={"factory": "zoo/convnet-bn"}, published_source="spec")
    _refused(capsys, ["audit", str(tmp_path / "nope.safetensors"), "--spec", str(spec)], tmp_path / "out", code=2,
             message="file not found")


def test_census_refuses_bad_workers(zoo, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml")
    _refused(capsys, ["census", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec), "--workers", "0"],
             tmp_path / "out", code=2, message="--workers must be at least 1")


@pytest.mark.slow
def test_user_factory_runs_only_when_allowed_on_the_command_line(zoo, tmp_path, capsys, monkeypatch):
    from bnconvention.architectures import factories

    monkeypatch.setattr(factories, "_user_allowed", {})
    spec = write_spec(tmp_path / "spec.yaml", replicates=2, recoverability=None, published_source="spec",
                      model={"factory": "bnconvention.zoo.models:convnet_bn", "kwargs": {"width": 16}})
    argv = ["audit", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec)]
    _refused(capsys, argv, tmp_path / "refused", code=2, label="factory not allowed", message="--allow-factory")
    out = tmp_path / "allowed"
    assert main(argv + ["--allow-factory", "bnconvention.zoo.models:convnet_bn", "--out", str(out),
                        "--no-progress"]) == 0
    annotation = json.loads((out / "annotation.json").read_text())
    assert annotation["subject"]["filename"] == "bn-retrain.safetensors"


@pytest.mark.slow
def test_a_preregistered_census_refuses_a_changed_spec_until_amended(zoo, tmp_path, capsys):
    population = tmp_path / "zoo"
    population.mkdir()
    for suffix in (".safetensors", ".json"):
        shutil.copy(zoo.root / f"bn-finetune{suffix}", population / f"bn-finetune{suffix}")
    spec = write_spec(tmp_path / "spec.yaml", replicates=2, recoverability=None)
    out = tmp_path / "census"
    assert main(["census", str(population), "--spec", str(spec), "--out", str(out), "--preregister"]) == 0
    assert capsys.readouterr().out.startswith("preregistered: 1 checkpoint, margin ±1.2 pp (from the spec)")
    assert sorted(p.name for p in out.iterdir()) == ["preregistration.json"]  # nothing audited yet
    wider = write_spec(tmp_path / "wider.yaml", replicates=2, recoverability=None, margin_pp=2.0)
    assert main(["census", str(population), "--spec", str(wider), "--out", str(out), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("bnconvention: preregistration: this census differs from its preregistration")
    assert "--amend REASON" in error and error.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == ["preregistration.json"]  # still nothing audited
    assert main(["census", str(population), "--spec", str(wider), "--out", str(out), "--no-progress",
                 "--amend", "the pilot's spread was wider"]) == 0
    census = json.loads((out / "census.json").read_text())
    assert census["margin_pp"] == 2.0 and census["preregistration"]["preregistered"] is True
    assert census["preregistration"]["margin_pp"] == 1.2
    assert [a["reason"] for a in census["preregistration"]["amendments"]] == ["the pilot's spread was wider"]
    assert "amended 1×" in (out / "census.md").read_text()


def test_margin_auto_without_seeds_is_refused_in_one_line(zoo, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec.yaml", margin="auto")
    _refused(capsys, ["census", str(zoo.root / "bn-finetune.safetensors"), "--spec", str(spec), "--preregister"],
             tmp_path / "out", code=2, message="margin: auto needs the seed spread", label="usage error")
    _refused(capsys, ["audit", str(zoo.root / "bn-finetune.safetensors"), "--spec", str(spec)], tmp_path / "out",
             code=2, message="audit a population with `bnconvention census`", label="invalid audit spec")
    both = write_spec(tmp_path / "both.yaml", margin="auto", margin_pp=1.5)
    _refused(capsys, ["census", str(zoo.root / "bn-finetune.safetensors"), "--spec", str(both)], tmp_path / "out",
             code=2, message="both margin: auto and margin_pp", label="invalid audit spec")


@pytest.mark.slow
def test_a_census_of_hub_like_folders_names_each_by_its_folder_and_keeps_identical_weights_apart(zoo, tmp_path,
                                                                                                  capsys):
    population = tmp_path / "lab"
    for folder, source in (("release-a", "bn-finetune"), ("release-b", "bn-finetune"), ("other", "bn-retrain")):
        (population / folder).mkdir(parents=True)
        shutil.copy(zoo.root / f"{source}.safetensors", population / folder / "model.safetensors")
        shutil.copy(zoo.root / f"{source}.json", population / folder / "model.json")
    spec = write_spec(tmp_path / "spec.yaml", replicates=2, recoverability=None)
    assert main(["census", str(population), "--spec", str(spec), "--out", str(tmp_path / "census"),
                 "--no-progress"]) == 0
    capsys.readouterr()
    census = json.loads((tmp_path / "census" / "census.json").read_text())
    rows = {row["checkpoint"]: row["path"] for row in census["checkpoints"]}
    # one row per input path, named by its folder: the same weights released twice are two rows, and said to be one file
    assert rows == {"other": str(population / "other" / "model.safetensors"),
                    "release-a": str(population / "release-a" / "model.safetensors"),
                    "release-b": str(population / "release-b" / "model.safetensors")}
    assert census["identical_weights"] == [["release-a", "release-b"]]
    assert census["counts"]["checkpoints"] == 3 and census["counts"]["decided"] == 3
    assert "release-a = release-b" in (tmp_path / "census" / "census.md").read_text()
    # a rerun reads both from the journal (one entry: one weight file, one measurement) and keeps both paths
    assert main(["census", str(population), "--spec", str(spec), "--out", str(tmp_path / "census"),
                 "--no-progress"]) == 0
    assert "0 audited, 3 reused from the journal" in capsys.readouterr().out
    again = json.loads((tmp_path / "census" / "census.json").read_text())
    assert {row["checkpoint"]: row["path"] for row in again["checkpoints"]} == rows
