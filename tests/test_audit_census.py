"""The census: discovery, checks before any audit, Benjamini–Yekutieli counts, resume from the journal, workers."""

from __future__ import annotations

import json
import shutil

import pytest
from audit_support import PATTERN_SPEC, checkpoint_paths, fake_result, pattern_census, pattern_spec, without_timing
from safetensors.torch import load_file, save_file

from bnconvention.audit.census.run import discover_checkpoints, read_journal, run_census
from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.population.model import LargestShift
from bnconvention.audit.population.readings import mechanisms
from bnconvention.audit.population.summary import (
    adjusted_p_values,
    by_reading,
    cell_counts,
    checkpoint_row,
    largest_shift,
    population_counts,
    summarize,
    verdict_tally,
)
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.errors import CheckpointMismatchError, FactoryNotAllowedError, UsageError

RESUME_SET = ("gn-badteacher-eval", "bn-retrain", "bn-relabel-train")


# The pattern census (audit_support.py) takes about 40 s on 2 cores: the tests that use it are marked slow.
@pytest.fixture(scope="module")
def pattern(zoo, tmp_path_factory):
    return pattern_census(zoo.root, tmp_path_factory)


@pytest.mark.slow
def test_census_counts_on_the_zoo_sample(pattern):
    summary = pattern.summary.to_json()
    counts = dict(summary["counts"])
    assert counts.pop("staleness_exceeds_band") >= 3
    # the channel-absent twin is a control: outside the decided family and its counts
    assert counts == {"checkpoints": 5, "anchoring_checked": 5, "anchored": 5, "eligible": 5, "channel_absent": 1,
                      "controls": 1, "decided": 4, "twin_arms": 0}
    df = summary["cells"]["df"]
    # with R = 3 the smallest sign-test p is 0.125 > 0.05: no cell is displaced (three agreeing replicates
    # were called displaced), and none survives BY at q = 0.05; the control is outside the count
    assert df["displaced"] == 0 and df["displaced_by"] == 0
    assert sum(df[k] for k in ("displaced", "equivalent", "undetermined")) == 4
    assert summary["largest_shift"]["cell"] == "df"
    assert summary["largest_shift"]["checkpoint"] == "bn-badteacher-eval"
    flips = summary["verdicts"]["df <= 0.05"]
    assert flips["pass_to_fail"] >= 1 and flips["flips"] == flips["pass_to_fail"] + flips["fail_to_pass"]
    written = json.loads((pattern.out_dir / "census.json").read_text())
    assert written == json.loads(json.dumps(summary))
    assert "| Verdict `df <= 0.05` flips | 4 |" in (pattern.out_dir / "census.md").read_text()
    for name in ("bn-badteacher-eval", "gn-badteacher-eval"):
        folder = pattern.out_dir / "checkpoints" / name
        assert sorted(p.name for p in folder.iterdir()) == ["annotation.json", "cells.png", "result.json",
                                                            "staleness.png", "summary.md"]
        assert (folder / "cells.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the census's BY-adjusted p-values are in each eligible checkpoint's annotation (spec 1.1)
    row = summary["checkpoints"][0]
    annotation = json.loads((pattern.out_dir / row["annotation"]).read_text())
    assert annotation["spec_version"] == "1.1"
    assert annotation["cells"][0]["decision"]["by_p_value"] == row["cells"][annotation["cells"][0]["metric"]][
        "by_p_value"]


@pytest.mark.parametrize(("replicates", "displaced_by"), [
    pytest.param(10, 3, id="R10-p0.00098-survives-BY"),
    pytest.param(5, 0, id="R5-p0.031-does-not"),
])
def test_benjamini_yekutieli_across_the_census(replicates, displaced_by):
    # 12 decided checkpoints: 3 displaced on every replicate, 9 with no shift; BY's c(12) = 3.1032, so the three
    # displaced ones have adjusted p = p * 12 * 3.1032 / 3: 0.0121 for R = 10, 0.388 for R = 5
    spec = parse_spec({**PATTERN_SPEC, "cells": ["df"], "criteria": ["df <= 0.05"], "replicates": replicates})
    results = [fake_result(f"moved{i}", [2.0] * replicates, direction="pass_to_fail") for i in range(3)]
    results += [fake_result(f"still{i}", [0.0] * replicates) for i in range(9)]
    results.append(fake_result("unanchored", [5.0] * replicates, anchored=False, direction="fail_to_pass"))
    summary = summarize(results, [r.checkpoint for r in results], spec).to_json()
    by = summary["cells"]["df"].pop("by")
    assert summary["cells"]["df"] == {"displaced": 3, "displaced_by": displaced_by, "equivalent": 9,
                                      "undetermined": 0}
    # every displaced cell has p = 0.5^R: BY keeps all three once 0.5^R * 12 * c(12) / k <= 0.05, i.e. from
    # k = 1 with R = 10; with R = 5 not even all 12 displaced would survive
    assert by == {"m": 12, "p_displaced": 0.5 ** replicates, "keeps_all_from": 1 if replicates == 10 else None}
    assert summary["counts"]["eligible"] == 12 and summary["counts"]["anchored"] == 12
    assert summary["verdicts"]["df <= 0.05"] == {"flips": 3, "pass_to_fail": 3, "fail_to_pass": 0,
                                                 "flips_on_every_replicate": 3}
    by_p = summary["checkpoints"][0]["cells"]["df"]["by_p_value"]
    assert by_p == pytest.approx(0.5 ** replicates * 12 * sum(1 / i for i in range(1, 13)) / 3)
    assert summary["checkpoints"][-1]["cells"]["df"]["by_p_value"] is None  # not anchored: not in the family


@pytest.mark.slow
def test_interrupted_census_resumes_without_redoing_work_and_matches(pattern, zoo, tmp_path):
    out = tmp_path / "census"
    paths = checkpoint_paths(zoo.root, RESUME_SET)

    def interrupt(name, result):
        raise KeyboardInterrupt  # e.g. Ctrl-C right after the first checkpoint was journaled

    with pytest.raises(KeyboardInterrupt):
        run_census(paths, pattern_spec(), out, on_result=interrupt)
    assert len(list((out / "journal").iterdir())) == 1
    assert not (out / "census.json").exists()

    seen = []
    resumed = run_census(paths, pattern_spec(), out, workers=2, on_result=lambda name, result: seen.append(name))
    assert (resumed.audits_run, resumed.audits_reused) == (2, 1)
    assert sorted(seen) == sorted(RESUME_SET[1:])  # the first checkpoint was not audited again
    reference = {r.checkpoint: r for r in pattern.results}
    for result in resumed.results:  # the same numbers as the uninterrupted, single-process census
        assert without_timing(result.model_dump(mode="json")) == without_timing(
            reference[result.checkpoint].model_dump(mode="json"))
    expected = summarize([reference[n] for n in RESUME_SET], list(RESUME_SET), pattern_spec()).to_json()
    assert without_timing(json.loads((out / "census.json").read_text())) == without_timing(
        json.loads(json.dumps(expected)))

    again = run_census(paths, pattern_spec(), out)
    assert (again.audits_run, again.audits_reused) == (0, 3)

    # killed after a checkpoint was journaled but before its outputs were written: the rerun writes them again
    written = out / "checkpoints" / RESUME_SET[0]
    expected_annotation = (written / "annotation.json").read_bytes()
    shutil.rmtree(written)
    healed = run_census(paths, pattern_spec(), out)
    assert (healed.audits_run, healed.audits_reused) == (0, 3)
    assert (written / "annotation.json").read_bytes() == expected_annotation
    assert (written / "summary.md").is_file()


@pytest.mark.slow
def test_journal_entries_are_bound_to_weights_and_spec(pattern):
    entry = next((pattern.out_dir / "journal").iterdir())
    result = AuditResult.model_validate_json(entry.read_bytes())
    assert read_journal(entry, weights=result.weights_key, measurement_sha256=result.measurement_sha256) == result
    assert read_journal(entry, weights=result.weights_key, measurement_sha256="0" * 64) is None
    assert read_journal(entry, weights="0" * 64, measurement_sha256=result.measurement_sha256) is None


def test_unreadable_journal_entry_is_redone_not_trusted(tmp_path):
    bad = tmp_path / "entry.json"
    bad.write_text('{"format": "bnconvention-audit-result/1", "checkpoint": ')
    assert read_journal(bad, weights="k", measurement_sha256="s") is None


def test_discovery_recurses_sorts_and_deduplicates(zoo, tmp_path):
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    for name in ("bn-retrain", "gn-base"):
        shutil.copy(zoo.root / f"{name}.safetensors", nested / f"{name}.safetensors")
    (nested / ".hidden.safetensors").write_bytes(b"")
    found = discover_checkpoints([tmp_path, nested / "gn-base.safetensors"])
    assert [p.name for p in found] == ["bn-retrain.safetensors", "gn-base.safetensors"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no .safetensors files"):
        discover_checkpoints([tmp_path / "empty"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        discover_checkpoints([tmp_path / "missing.safetensors"])


def test_every_checkpoint_is_checked_before_any_audit(zoo, tmp_path):
    population = tmp_path / "population"
    population.mkdir()
    for name in ("bn-retrain", "gn-base"):
        for suffix in (".safetensors", ".json"):
            shutil.copy(zoo.root / f"{name}{suffix}", population / f"{name}{suffix}")
    # a BatchNorm checkpoint whose sidecar claims the GroupNorm architecture: its tensors do not fit
    shutil.copy(zoo.root / "bn-finetune.safetensors", population / "bn-finetune.safetensors")
    sidecar = json.loads((zoo.root / "gn-finetune.json").read_text())
    (population / "bn-finetune.json").write_text(json.dumps(sidecar))
    out = tmp_path / "out"
    with pytest.raises(CheckpointMismatchError, match="not in the model: .features.1.num_batches_tracked.") as caught:
        run_census([population], pattern_spec(), out)
    assert "bn-finetune.safetensors" in str(caught.value)
    assert not out.exists()  # nothing written, nothing audited


def test_sidecar_factory_outside_the_allowlist_is_never_imported(zoo, tmp_path):
    import sys

    shutil.copy(zoo.root / "bn-retrain.safetensors", tmp_path / "m.safetensors")
    (tmp_path / "m.json").write_text(json.dumps({"architecture": {"factory": "evil_module_h7:build"},
                                                 "shipped_accuracy": {"forget": 0.0}}))
    with pytest.raises(FactoryNotAllowedError, match="not allowlisted"):
        run_census([tmp_path / "m.safetensors"], pattern_spec(), tmp_path / "out")
    assert "evil_module_h7" not in sys.modules
    assert not (tmp_path / "out").exists()


def test_workers_must_be_positive(zoo, tmp_path):
    with pytest.raises(UsageError, match="--workers"):
        run_census([zoo.root / "bn-retrain.safetensors"], pattern_spec(), tmp_path, workers=0)


def test_checkpoint_with_foreign_tensor_names_is_a_mismatch(zoo, tmp_path):
    state = load_file(str(zoo.root / "bn-retrain.safetensors"))
    state["extra.weight"] = state["head.bias"].clone()
    save_file(state, str(tmp_path / "bn-retrain.safetensors"))
    shutil.copy(zoo.root / "bn-retrain.json", tmp_path / "bn-retrain.json")
    with pytest.raises(CheckpointMismatchError, match="not in the model: 'extra.weight'"):
        run_census([tmp_path / "bn-retrain.safetensors"], pattern_spec(), tmp_path / "out")


# --- the stages of summarize(), each on its own ---------------------------------------------------------------------


def test_adjusted_p_values_are_keyed_by_census_position_over_the_eligible_only():
    results = [fake_result(f"c{i}", [2.0] * 5) for i in range(3)]
    adjusted = adjusted_p_values(results, [0, 2], "df")
    assert list(adjusted) == [0, 2]
    assert adjusted[0] == adjusted[2] == pytest.approx(0.5 ** 5 * 2 * 1.5 / 2)  # BY with m = 2: c(2) = 1.5


def test_cell_counts_apply_the_fdr_threshold_to_displaced_cells_only():
    moved, still = fake_result("moved", [2.0] * 5), fake_result("still", [0.0] * 5)
    counts = cell_counts([moved, moved, still], "df", [0.01, 0.2, 0.01], fdr_q=0.05,
                         by=by_reading(3, replicates=5, fdr_q=0.05)).model_dump(exclude={"by"})
    assert counts == {"displaced": 2, "displaced_by": 1, "equivalent": 1, "undetermined": 0}


def test_verdict_tally_counts_directions_and_flips_on_every_replicate():
    up = fake_result("up", [2.0] * 4, direction="fail_to_pass")  # refit passes on all 4 replicates
    down = fake_result("down", [2.0] * 4, direction="pass_to_fail")  # and fails on all 4
    partial = down.model_copy(update={"annotation": down.annotation.model_copy(update={"verdicts": [
        down.annotation.verdicts[0].model_copy(update={"refit_pass_replicates": 1})]})})
    still = fake_result("still", [0.0] * 4)
    assert verdict_tally([up, down, partial, still], "df <= 0.05").model_dump() == {
        "flips": 3, "pass_to_fail": 2, "fail_to_pass": 1, "flips_on_every_replicate": 2}


def test_largest_shift_is_by_absolute_value_and_the_first_on_a_tie():
    results = [("a", fake_result("a", [1.0, 1.0])), ("b", fake_result("b", [-3.0, -3.0])),
               ("c", fake_result("c", [3.0, 3.0]))]
    assert largest_shift(results, ["df"]) == LargestShift(checkpoint="b", cell="df", shift_pp=-3.0)
    assert largest_shift([], ["df"]) is None


def test_checkpoint_row_marks_displaced_by_only_with_an_adjusted_p_value_under_q():
    moved = fake_result("moved", [2.0] * 5)
    mechanism = mechanisms([moved], ["moved"])["moved"]
    row = checkpoint_row(moved, "moved", "checkpoints/moved/annotation.json", ["df"], by_p_values={"df": 0.01},
                         fdr_q=0.05, mechanism=mechanism, group="decided").model_dump()
    assert (row["checkpoint"], row["annotation"], row["cells"]["df"]["displaced_by"]) == (
        "moved", "checkpoints/moved/annotation.json", True)
    assert (row["cells"]["df"]["min_shift_pp"], row["cells"]["df"]["sign_beyond"]) == (2.0, 5)
    unadjusted = checkpoint_row(moved, "moved", "a.json", ["df"], by_p_values={"df": None}, fdr_q=0.05,
                                mechanism=mechanism, group="decided").model_dump()
    assert unadjusted["cells"]["df"]["by_p_value"] is None and unadjusted["cells"]["df"]["displaced_by"] is False


def test_population_counts():
    results = [fake_result("a", [0.0]), fake_result("b", [0.0], anchored=False), fake_result("c", [0.0],
                                                                                               anchored=None)]
    assert population_counts(results, [0, 2]) == {"checkpoints": 3, "anchoring_checked": 2, "anchored": 1,
                                                  "eligible": 2, "channel_absent": 0, "staleness_exceeds_band": 0}
