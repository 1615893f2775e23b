"""``bnconvention reproduce``: an annotation re-run and compared (exit 0), an edited claim (exit 1, the cell named),
and inputs that are not the annotated ones (exit 2, named)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from bnconvention.audit.run.reproduce import TOLERANCE, cell_differences, spec_disagreements
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.cli.main import main
from bnconvention.standard.models import parse_record

CHECKPOINT = "bn-badteacher-eval"
# a pool in a local file (the digits as the zoo prepares them), so that it can go missing or change
SPEC = {
    "spec_version": "1.0", "kind": "audit_spec",
    "dataset": {"kind": "npz", "path": "digits.npz", "ids_key": "ids", "test_key": "test"},
    "splits": {"forget_classes": [3]}, "criteria": ["df <= 0.05", "dr >= 0.95"], "published_source": "sidecar",
    "replicates": 2, "refit": {"pool_size": 128}, "recoverability": None,
}


def write_pool(folder: Path) -> Path:
    from bnconvention.data.digits import digits_arrays

    arrays = digits_arrays()
    path = folder / "digits.npz"
    np.savez(path, x=arrays.x, y=arrays.y, ids=arrays.ids, test=arrays.is_test)
    return path


@pytest.fixture(scope="module")
def audited(zoo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | float]:
    """One audit of one zoo checkpoint, written by the CLI (kept read-only: tests copy what they change)."""
    folder = tmp_path_factory.mktemp("reproduce")
    write_pool(folder)
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False), encoding="utf-8")
    weights = folder / f"{CHECKPOINT}.safetensors"
    for suffix in (".safetensors", ".json"):
        shutil.copy(zoo.root / f"{CHECKPOINT}{suffix}", folder / f"{CHECKPOINT}{suffix}")
    assert main(["audit", str(weights), "--spec", str(spec), "--out", str(folder / "audit"), "--no-progress"]) == 0
    return {"folder": folder, "spec": spec, "weights": weights, "out": folder / "audit"}


def _reproduce(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["reproduce", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_annotation_is_reproduced(audited, capsys: pytest.CaptureFixture[str]) -> None:
    annotation = audited["out"] / "annotation.json"
    code, out, err = _reproduce(capsys, str(annotation), "--spec", str(audited["spec"]), "--weights",
                                str(audited["weights"]))
    assert (code, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[0] == f"{annotation}: {CHECKPOINT}.safetensors"
    assert [line.split()[0] for line in lines[1:4]] == ["df", "dr", "dt"]
    assert all(line.endswith(": reproduced") for line in lines[1:6])
    assert "df <= 0.05: shipped pass, refit fail, flip pass to fail: reproduced" in out
    assert lines[-1] == (f"reproduced: 3 cells and 2 verdicts within ± {TOLERANCE:g} of the annotation's replicate "
                         "ranges, every decision and flip the same")


def test_the_folder_alone_names_the_weights_and_json_gives_the_same_replicate_values(audited, capsys) -> None:
    code, out, _ = _reproduce(capsys, str(audited["out"]), "--spec", str(audited["spec"]), "--format", "json")
    assert code == 0
    (result,) = json.loads(out)
    annotation = json.loads((audited["out"] / "annotation.json").read_text())
    # deterministic given the annotation: on one machine every replicate value comes back exactly
    assert [c["reproduced_values"] for c in result["cells"]] == [c["replicate_values"] for c in annotation["cells"]]
    assert (result["reproduced"], result["differing"]) == (True, [])
    assert result["original_seconds"] > 0 and result["rerun_seconds"] > 0


def _edited(audited, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path / "audit"
    shutil.copytree(audited["out"], out)
    annotation = json.loads((out / "annotation.json").read_text())
    edit(annotation)
    (out / "annotation.json").write_text(json.dumps(annotation, indent=2) + "\n")
    return out / "annotation.json"


def test_one_edited_replicate_value_is_not_reproduced_and_names_the_cell(audited, tmp_path, capsys) -> None:
    def edit(annotation):  # type: ignore[no-untyped-def]
        cell = next(c for c in annotation["cells"] if c["metric"] == "dr")
        cell["replicate_values"][0] = round(cell["replicate_values"][0] - 0.05, 6)

    annotation = _edited(audited, tmp_path, edit)
    code, out, _ = _reproduce(capsys, str(annotation), "--spec", str(audited["spec"]), "--weights",
                              str(audited["weights"]))
    assert code == 1
    assert out.splitlines()[-1] == "not reproduced: dr differs"
    dr = next(line for line in out.splitlines() if line.strip().startswith("dr "))
    assert "DIFFERS: annotated replicate values [0.9467] outside the reproduced range" in dr


def test_a_flip_that_is_not_reproduced_is_named(audited, tmp_path, capsys) -> None:
    def edit(annotation):  # type: ignore[no-untyped-def]
        verdict = annotation["verdicts"][0]
        verdict.update(refit=True, flipped=False)
        verdict.pop("direction")

    annotation = _edited(audited, tmp_path, edit)
    code, out, _ = _reproduce(capsys, str(annotation), "--spec", str(audited["spec"]), "--weights",
                              str(audited["weights"]))
    assert code == 1 and out.splitlines()[-1] == "not reproduced: df <= 0.05 differs"
    assert ("df <= 0.05: shipped pass, refit pass, no flip: DIFFERS: shipped pass, refit fail, flip pass to fail, "
            "annotated shipped pass, refit pass, no flip") in out


def test_weights_whose_digests_differ_are_named(audited, zoo, capsys) -> None:
    other = zoo.root / "bn-relabel-train.safetensors"
    code, out, err = _reproduce(capsys, str(audited["out"]), "--spec", str(audited["spec"]), "--weights", str(other))
    assert (code, out) == (2, "")
    assert err.startswith(f"bnconvention: cannot reproduce: weights {str(other)!r} are not the annotated "
                          f"{CHECKPOINT}.safetensors: trainable sha256 ")


def test_a_pool_that_is_gone_or_changed_is_named(audited, tmp_path, capsys) -> None:
    folder = tmp_path / "moved"
    folder.mkdir()
    spec = folder / "spec.yaml"
    shutil.copy(audited["spec"], spec)
    code, _, err = _reproduce(capsys, str(audited["out"]), "--spec", str(spec))
    assert code == 2
    assert "bnconvention: cannot reproduce: the pool (dataset file:digits.npz@" in err
    assert f"is unavailable: dataset: dataset {folder / 'digits.npz'} does not exist" in err
    pool = write_pool(folder)
    with np.load(pool) as arrays:  # one record's pixels changed: another file under the same name
        changed = dict(arrays)
    changed["x"][0, 0, 0, 0] += 1
    np.savez(pool, **changed)
    code, _, err = _reproduce(capsys, str(audited["out"]), "--spec", str(spec))
    assert code == 2
    assert err.startswith("bnconvention: cannot reproduce: the spec's data is file:digits.npz@")
    assert ", not the annotated dataset file:digits.npz@" in err


def test_a_spec_that_is_not_the_annotations_is_named(audited, tmp_path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "seed": 7, "dataset": {**SPEC["dataset"],
                                                                  "path": str(audited["folder"] / "digits.npz")}}))
    code, _, err = _reproduce(capsys, str(audited["out"]), "--spec", str(spec))
    assert code == 2
    assert err == (f"bnconvention: cannot reproduce: the spec {spec} is not the one this annotation was audited "
                   "under: seed: annotated 0, spec 7; pass the audit's own spec\n")


def test_an_unreadable_annotation_and_missing_weights_are_named(audited, tmp_path, capsys) -> None:
    bad = tmp_path / "annotation.json"
    bad.write_text('{"kind": "refit_annotation"}')
    code, _, err = _reproduce(capsys, str(bad), "--spec", str(audited["spec"]), "--weights", str(audited["weights"]))
    assert code == 2 and err.startswith(f"bnconvention: cannot reproduce: annotation {bad} is not a readable refit "
                                        "annotation")
    shutil.copy(audited["out"] / "annotation.json", bad)  # without the result.json beside it
    code, _, err = _reproduce(capsys, str(bad), "--spec", str(audited["spec"]))
    assert code == 2 and "pass --weights (the annotated bn-badteacher-eval.safetensors)" in err


# --- bnconvention verify --reproduce: the signature, the digests, then the reproduction ----------------------------


def _verify(capsys: pytest.CaptureFixture[str], annotation: Path, keys, audited, *extra: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(["verify", str(annotation), "--public-key", str(keys[1]), "--weights", str(audited["weights"]),
                 *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_verify_reproduce_folds_the_reproduction_into_the_exit_status(audited, keys, tmp_path, capsys) -> None:
    out = tmp_path / "audit"
    shutil.copytree(audited["out"], out)
    annotation = out / "annotation.json"
    assert main(["sign", str(annotation), "--private-key", str(keys[0])]) == 0
    capsys.readouterr()
    code, stdout, err = _verify(capsys, annotation, keys, audited, "--reproduce", "--spec", str(audited["spec"]))
    assert (code, err) == (0, ""), err
    assert "reproduced: 3 cells and 2 verdicts" in stdout
    assert stdout.splitlines()[-1] == f"{annotation}: verified and reproduced"
    # the signature holds but the reproduction does not come back: exit 1, the cell named
    def edit(annotation):  # type: ignore[no-untyped-def]
        cell = annotation["cells"][1]
        cell["replicate_values"][0] = round(cell["replicate_values"][0] - 0.05, 6)
        cell["refit"] = sum(cell["replicate_values"]) / len(cell["replicate_values"])  # a valid record, signed

    edited = _edited(audited, tmp_path / "edited", edit)
    assert main(["sign", str(edited), "--private-key", str(keys[0])]) == 0
    capsys.readouterr()
    code, stdout, err = _verify(capsys, edited, keys, audited, "--reproduce", "--spec", str(audited["spec"]))
    assert code == 1
    assert "not reproduced: dr differs" in stdout
    assert err == f"bnconvention: verification failed: not reproduced: {edited} (dr)\n"
    # tampered after signing: the signature fails first, nothing is re-run
    annotation.write_text(annotation.read_text().replace('"replicates": 2', '"replicates": 3'))
    code, stdout, err = _verify(capsys, annotation, keys, audited, "--reproduce", "--spec", str(audited["spec"]))
    assert code == 1 and str(annotation) in err
    assert stdout.splitlines()[-1] == f"{annotation}: not reproduced: the signature and digests must hold first"


def test_verify_reproduce_keeps_reproduces_exit_2(audited, keys, tmp_path, capsys) -> None:
    out = tmp_path / "audit"
    shutil.copytree(audited["out"], out)
    annotation = out / "annotation.json"
    assert main(["sign", str(annotation), "--private-key", str(keys[0])]) == 0
    capsys.readouterr()
    folder = tmp_path / "moved"  # the spec without its pool beside it: the pool is gone
    folder.mkdir()
    shutil.copy(audited["spec"], folder / "spec.yaml")
    code, stdout, err = _verify(capsys, annotation, keys, audited, "--reproduce", "--spec", str(folder / "spec.yaml"))
    assert code == 2
    assert stdout.startswith("ok ") and "cannot reproduce: the pool (dataset file:digits.npz@" in err
    code, _, err = _verify(capsys, annotation, keys, audited, "--reproduce")
    assert code == 2 and "--reproduce needs --spec" in err
    code, _, err = _verify(capsys, annotation, keys, audited, "--spec", str(audited["spec"]))
    assert code == 2 and "go with --reproduce" in err


# --- the rule, on numbers alone -------------------------------------------------------------------------------------


def _cell(values: list[float], *, shipped: float = 0.5, outcome: str = "undetermined"):  # type: ignore[no-untyped-def]
    mean = sum(values) / len(values)
    return parse_record({
        "spec_version": "1.0", "kind": "refit_annotation",
        "subject": {"filename": "m.safetensors", "trainable_sha256": "0" * 64},
        "convention": json.loads((Path(__file__).parent / "fixtures" / "reproduce_convention.json").read_text()),
        "channel": "present", "replicates": len(values), "margin_pp": 1.2,
        "cells": [{"metric": "df", "shipped": shipped, "refit": mean, "shift_pp": 100 * (mean - shipped),
                   "replicate_values": values, "replicate_shifts_pp": [100 * (v - shipped) for v in values],
                   "margin_pp": 1.2, "decision": {"outcome": outcome, "method": "none"}}],
        "producer": {"tool": "t", "version": "0"}, "reporting_line": "x"}).cells[0]


@pytest.mark.parametrize(("annotated", "reproduced", "found"), [
    pytest.param([0.5, 0.6], [0.5, 0.6], [], id="identical"),
    pytest.param([0.5, 0.6], [0.609, 0.491], [], id="within-the-tolerance"),
    pytest.param([0.5, 0.6], [0.55, 0.55], ["annotated replicate values [0.5000, 0.6000] outside the reproduced "
                                            "range 0.5500..0.5500 ± 0.01"], id="a-claim-no-replicate-reaches"),
    pytest.param([0.5, 0.6], [0.5, 0.62], ["reproduced replicate values [0.6200] outside the annotated range "
                                           "0.5000..0.6000 ± 0.01"], id="outside-the-claim"),
])
def test_the_comparison_rule(annotated, reproduced, found, repo_root) -> None:
    assert cell_differences(_cell(annotated), _cell(reproduced), tolerance=TOLERANCE) == found


def test_the_rule_compares_shipped_values_and_decisions() -> None:
    found = cell_differences(_cell([0.5]), _cell([0.5], shipped=0.52, outcome="displaced"), tolerance=TOLERANCE)
    assert found == ["shipped 0.5200, annotated 0.5000", "decision displaced, annotated undetermined"]
    assert cell_differences(_cell([0.5]), None, tolerance=TOLERANCE) == ["not in the reproduction"]


def test_spec_disagreements_name_each_field(audited) -> None:
    annotation = parse_record(json.loads((audited["out"] / "annotation.json").read_text()))
    spec = parse_spec({**SPEC, "replicates": 3, "refit": {"pool_size": 64, "rule": "cumulative"},
                       "criteria": ["df <= 0.05"]})
    assert spec_disagreements(annotation, spec) == [
        "replicates: annotated 2, spec 3", "refit.pool_size: annotated 128, spec 64",
        "refit.rule: annotated 'exact', spec 'cumulative'",
        "criteria: annotated ['df <= 0.05', 'dr >= 0.95'], spec ['df <= 0.05']"]
