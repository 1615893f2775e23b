"""The quantized population (zoo build --population --quantized) and its activation scales in the audit and census."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bnconvention.audit.census.run import run_census
from bnconvention.audit.measure.evaluation import stream
from bnconvention.audit.population.scales_report import HEADING
from bnconvention.audit.run.runner import prepare_audit, scales_outcome
from bnconvention.audit.run.sweeps import measurement_sha256
from bnconvention.audit.scales.cells import scales_cells
from bnconvention.audit.spec.audit_spec import AuditSpec, load_spec
from bnconvention.audit.spec.scales import SCALES_STREAM, QuantizationSpec
from bnconvention.authoring.activation_scales import load_quantized
from bnconvention.cli.main import main
from bnconvention.errors import QuantizationError
from bnconvention.formats.atomic import file_sha256
from bnconvention.formats.checkpoint_files import open_checkpoint
from bnconvention.formats.digests import checkpoint_digests
from bnconvention.refitting.observers import observer_spec
from bnconvention.refitting.scales import ScaleSet, parse_scales_tensors, scales_digests
from bnconvention.report_html.census_page import render_census_page
from bnconvention.standard.models import SCALES_FILENAME
from bnconvention.zoo.population_quantized import DECLARATION_FILE, QUANTIZATION_KEY
from bnconvention.zoo.population_spec import SPEC_FILE

CENSUSED = ("r10-s0-base", "r10-s0-relabel-train", "r10-s0-retrain")


def small_spec(root: Path, *, quantization: dict | None) -> AuditSpec:
    """The population's spec, cut down for a test: R = 2, no recoverability or staleness."""
    spec = load_spec(root / SPEC_FILE)
    update: dict = {"replicates": 2, "recoverability": None, "staleness": False, "quantization": None}
    if quantization is not None:
        update["quantization"] = QuantizationSpec(**quantization)
    return spec.model_copy(update=update)


def weights(root: Path, name: str) -> Path:
    return root / name.split("-")[0] / name / f"{name}.safetensors"


def test_quantized_build_adds_scales_and_keeps_the_float_files(tiny_population, tiny_quantized_population):
    float_root, quant_root = tiny_population.root, tiny_quantized_population.root
    assert tiny_quantized_population.names == tiny_population.names
    plain = json.loads((float_root / "manifest.json").read_text())
    quantized = json.loads((quant_root / "manifest.json").read_text())
    assert QUANTIZATION_KEY not in plain  # the default build is as before
    assert quantized[QUANTIZATION_KEY]["observer"] == "minmax"
    assert quantized[QUANTIZATION_KEY]["calibration_size"] == 256
    for name, digest in plain["files"].items():  # every float file byte for byte (the spec gains a section)
        if name != SPEC_FILE:
            assert quantized["files"][name] == digest == file_sha256(quant_root / name), name
    assert "\nquantization:" in (quant_root / SPEC_FILE).read_text()
    assert "quantization" not in (float_root / SPEC_FILE).read_text()
    for name in tiny_population.names:
        assert not (tiny_population.folder(name) / SCALES_FILENAME).exists()
        folder = tiny_quantized_population.folder(name)
        assert quantized["files"][f"{tiny_quantized_population.folders[name]}/{SCALES_FILENAME}"] == file_sha256(
            folder / SCALES_FILENAME)
        declaration = json.loads((folder / DECLARATION_FILE).read_text())
        digests = checkpoint_digests(open_checkpoint(weights(quant_root, name)))
        assert declaration["digests"]["trainable_sha256"] == digests.trainable_sha256
        kinds = [state["kind"] for state in declaration["deployed_state"]]
        assert declaration["spec_version"] == "1.1" and kinds == ["batchnorm", "activation_scales"]
        scales = declaration["deployed_state"][1]
        # a retrain reference calibrates on what it was trained on (the retained records), the others on train
        assert scales["calibration"]["role"] == ("retain" if name.endswith("-retrain") else "train")
    assert main(["validate", str(tiny_quantized_population.folder("r10-s0-base") / DECLARATION_FILE)]) == 0


@pytest.fixture(scope="module")
def scales_census(tiny_quantized_population, tmp_path_factory):
    root = tiny_quantized_population.root
    spec = small_spec(root, quantization={"replicates": 2, "calibration_size": 64, "seed": 3})
    before = {name: file_sha256(weights(root, name)) for name in CENSUSED}
    out = tmp_path_factory.mktemp("scales-census")
    outcome = run_census([weights(root, name) for name in CENSUSED], spec, out)
    return spec, outcome, before


@pytest.mark.slow
def test_census_scales_rows_equal_a_hand_check(scales_census, tiny_quantized_population):
    spec, outcome, _ = scales_census
    root = tiny_quantized_population.root
    rows = {row["checkpoint"]: row for row in outcome.summary.to_json()["checkpoints"]}
    assert outcome.summary.to_json()["scales"]["quantized"] == len(CENSUSED)
    # by hand: the same pools (SeedSequence(3, spawn_key=(5, r))) through scales_cells on the prepared model
    name = "r10-s0-relabel-train"
    prepared = prepare_audit(weights(root, name), spec)
    data = prepared.data
    model, shipped = load_quantized(tiny_quantized_population.load_model(name),
                                    weights(root, name).parent / "declaration.json")
    pools = [[data.retain.x[torch.from_numpy(np.sort(stream(3, SCALES_STREAM, r).choice(
        len(data.retain.ids), size=64, replace=False)))]] for r in range(2)]
    splits = {s.role: (s.x, s.y) for s in (data.forget, data.retain, data.test)}
    audit = scales_cells(model, splits=splits, calibration_pools=pools, margin_pp=spec.margin_pp, shipped=shipped)
    for cell in audit.cells:
        row = rows[name]["scales"]["cells"][cell.metric]
        assert row["shift_pp"] == pytest.approx(cell.shift_pp, abs=1e-9)
        assert row["outcome"] == cell.decision.outcome
    assert rows[name]["scales"]["median_abs_log_ratio"] == pytest.approx(audit.median_abs_log_ratio, abs=1e-12)


@pytest.mark.slow
def test_census_scales_outputs_validate_and_weights_unchanged(scales_census, tiny_quantized_population):
    _, outcome, before = scales_census
    root = tiny_quantized_population.root
    for name in CENSUSED:
        assert file_sha256(weights(root, name)) == before[name]
        row = next(r for r in outcome.summary.to_json()["checkpoints"] if r["checkpoint"] == name)
        annotation = json.loads((outcome.out_dir / row["scales"]["annotation"]).read_text())
        digests = checkpoint_digests(open_checkpoint(weights(root, name)))
        assert annotation["subject"]["trainable_sha256"] == digests.trainable_sha256
        assert annotation["subject"]["running_sha256"] == digests.running_sha256
        assert annotation["refit_state"]["kind"] == "activation_scales"
        assert main(["validate", str(outcome.out_dir / row["scales"]["annotation"])]) == 0
    text = (outcome.out_dir / "census.md").read_text()
    assert f"## {HEADING}" in text and f"of {len(CENSUSED)} quantized checkpoints displaced" in text
    assert f">{HEADING}<" in render_census_page(outcome.summary)


def test_spec_without_the_section_warns_and_digests_as_before(tiny_quantized_population):
    root = tiny_quantized_population.root
    spec = small_spec(root, quantization=None)
    assert "quantization" not in spec.model_dump(mode="json")
    with_section = small_spec(root, quantization={"calibration_size": 64})
    assert measurement_sha256(with_section) != measurement_sha256(spec)  # only the section changes the journal key
    prepared = prepare_audit(weights(root, "r10-s0-base"), spec)
    assert prepared.scales is None and scales_outcome(prepared) is None
    assert any("'quantization' section" in w for w in prepared.checkpoint.warnings)


def test_section_on_a_checkpoint_without_scales_says_not_quantized(tiny_population):
    spec = small_spec(tiny_population.root, quantization={"calibration_size": 64})
    prepared = prepare_audit(weights(tiny_population.root, "r10-s0-base"), spec)
    result = scales_outcome(prepared)
    assert result is not None and result.status == "not_quantized" and result.annotation is None
    assert "not quantized" in result.reason
    assert not any("quantization" in w for w in prepared.checkpoint.warnings)


def _copy_checkpoint(root: Path, name: str, target: Path) -> Path:
    folder = target / "r10" / name
    shutil.copytree(weights(root, name).parent, folder)
    shutil.copy(root / "task.npz", target / "task.npz")
    shutil.copy(root / SPEC_FILE, target / SPEC_FILE)
    return folder


@pytest.mark.parametrize("bad", [pytest.param(float("nan"), id="nan"), pytest.param(0.0, id="zero"),
                                 pytest.param(None, id="not-as-declared")])
def test_malformed_scales_are_a_clear_error_and_nothing_is_written(tiny_quantized_population, tmp_path, bad):
    name = "r10-s0-base"
    folder = _copy_checkpoint(tiny_quantized_population.root, name, tmp_path / "pop")
    tensors = load_file(str(folder / SCALES_FILENAME))
    key = next(k for k in tensors if k.endswith(".scale"))
    tensors[key] = tensors[key] * 1.5 if bad is None else torch.tensor([bad], dtype=torch.float32)
    save_file(tensors, str(folder / SCALES_FILENAME))
    spec = small_spec(tmp_path / "pop", quantization={"calibration_size": 64})
    out = tmp_path / "census"
    with pytest.raises(QuantizationError, match=rf"checkpoint .*{name}\.safetensors: its activation scales"):
        run_census([tmp_path / "pop"], spec, out)
    assert not out.exists()


def test_missing_observer_site_is_refused(tiny_quantized_population, tmp_path):
    name = "r10-s0-base"
    folder = _copy_checkpoint(tiny_quantized_population.root, name, tmp_path / "pop")
    declaration = json.loads((folder / DECLARATION_FILE).read_text())
    tensors = load_file(str(folder / SCALES_FILENAME))
    site = declaration["deployed_state"][1]["sites"][0]["name"]
    renamed = "nowhere.activation_post_process"
    tensors = {k.replace(site, renamed) if k.startswith(f"{site}.") else k: v for k, v in tensors.items()}
    save_file(tensors, str(folder / SCALES_FILENAME))
    state = declaration["deployed_state"][1]
    state["sites"][0]["name"] = renamed
    stored = parse_scales_tensors(tensors, source="test")
    combined, per_site = scales_digests(ScaleSet(spec=observer_spec("minmax"),
                                                 sites={s["name"]: stored[s["name"]] for s in state["sites"]}))
    for entry in state["sites"]:
        entry["tensors_sha256"] = per_site[entry["name"]]
    state["scales_sha256"] = combined
    (folder / DECLARATION_FILE).write_text(json.dumps(declaration))
    spec = small_spec(tmp_path / "pop", quantization={"calibration_size": 64})
    with pytest.raises(QuantizationError, match="has no observer"):
        prepare_audit(folder / f"{name}.safetensors", spec)


def test_zoo_build_quantized_needs_a_folder_without_population(capsys):
    assert main(["zoo", "build", "--quantized", "--no-progress"]) == 2
    assert "--quantized needs DIR" in capsys.readouterr().err


def _scales_view(outcome) -> dict:
    """Each checkpoint's scales cells as the census wrote them: row decisions and the annotation file's cells."""
    view = {}
    for row in outcome.summary.to_json()["checkpoints"]:
        annotation = json.loads((outcome.out_dir / row["scales"]["annotation"]).read_text())
        view[row["checkpoint"]] = {
            "row": {m: (c["outcome"], c["p_value"]) for m, c in row["scales"]["cells"].items()},
            "reason": row["scales"]["reason"], "margin_pp": annotation["margin_pp"],
            "line": annotation["reporting_line"],
            "cells": [(c["metric"], c["margin_pp"], c["decision"]) for c in annotation["cells"]]}
    return view


@pytest.mark.slow
def test_a_census_rerun_under_another_margin_re_decides_the_scales_cells(tiny_quantized_population, tmp_path):
    # Regression: the journal's re-decision left the scales cells at the margin they were measured at
    root = tiny_quantized_population.root
    paths = [weights(root, name) for name in CENSUSED]
    base = small_spec(root, quantization={"replicates": 3, "calibration_size": 64, "seed": 3})
    wide, narrow = (base.model_copy(update={"margin_pp": m, "sweeps": base.sweeps.model_copy(
        update={"margins_pp": [other]})}) for m, other in ((1.2, 0.3), (0.3, 1.2)))
    first = run_census(paths, wide, tmp_path / "census")
    rerun = run_census(paths, narrow, tmp_path / "census")
    fresh = run_census(paths, narrow, tmp_path / "fresh")
    assert (rerun.audits_run, rerun.audits_reused, fresh.audits_run) == (0, len(CENSUSED), len(CENSUSED))
    assert _scales_view(rerun) == _scales_view(fresh)
    assert _scales_view(first) != _scales_view(fresh)  # the margin changes some decision: the check can fail
    assert {v["margin_pp"] for v in _scales_view(rerun).values()} == {0.3}
    sweeps = [{row["margin_pp"]: row["scales"] for row in o.summary.to_json()["sweeps"]["margins"]}
              for o in (first, fresh)]
    assert sweeps[0] == sweeps[1] and set(sweeps[0]) == {0.3, 1.2}
    decided = set(fresh.summary.to_json()["decided"])
    for margin, outcome in ((0.3, fresh), (1.2, first)):  # the sweep at a margin counts what a census there decides
        counted: dict = {}
        for row in outcome.summary.to_json()["checkpoints"]:
            for metric, cell in row["scales"]["cells"].items():
                if row["checkpoint"] in decided:
                    counts = counted.setdefault(metric, {"displaced": 0, "equivalent": 0, "undetermined": 0})
                    counts[cell["outcome"]] += 1
        assert sweeps[0][margin] == counted
    assert "scales cell" in (tmp_path / "census" / "census.md").read_text()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_a_half_precision_checkpoint_is_audited_on_its_scales_bound_to_the_file(tiny_quantized_population,
                                                                                tmp_path, dtype):
    # A half-precision release is audited upcast; its scales annotation must still name the digests of the bytes
    # the file holds (before: "the scales were audited on other weights", the upcast model's digests)
    name = "r10-s0-base"
    folder = _copy_checkpoint(tiny_quantized_population.root, name, tmp_path / "pop")
    path = folder / f"{name}.safetensors"
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(str(path)).items()}
    save_file(state, str(path))
    digests = checkpoint_digests(open_checkpoint(path))
    declaration = json.loads((folder / DECLARATION_FILE).read_text())
    declaration["digests"].update(trainable_sha256=digests.trainable_sha256, running_sha256=digests.running_sha256)
    (folder / DECLARATION_FILE).write_text(json.dumps(declaration))
    before = file_sha256(path)
    prepared = prepare_audit(path, small_spec(tmp_path / "pop", quantization={"calibration_size": 64}))
    result = scales_outcome(prepared)
    assert result is not None and result.status == "audited" and result.annotation is not None
    subject = result.annotation.subject
    assert (subject.trainable_sha256, subject.running_sha256) == (digests.trainable_sha256, digests.running_sha256)
    assert file_sha256(path) == before
