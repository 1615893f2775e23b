"""Per-family readings and the frozen-twin gap (bnconvention.audit.population.families): clustered
family means by hand, the "equivalent on average yet contains displaced checkpoints" statement exactly when the data
has it, flips in both directions, twin gaps with their interval across seeds, and no section without metadata."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from audit_support import fake_result
from census_support import typed_census

from bnconvention.audit.core.result import AuditResult, PopulationMetadata, population_metadata
from bnconvention.audit.population import CensusResult
from bnconvention.audit.population.families import family_readings, twin_gaps
from bnconvention.audit.population.model_rows import CheckpointRow
from bnconvention.audit.population.summary import summarize
from bnconvention.audit.render.families import families_markdown
from bnconvention.audit.spec.audit_spec import parse_spec

# Two-sided t critical values from a table: t(0.95; 2) for a 90 % interval over 3 seed clusters, t(0.975; 2) for a
# 95 % interval over 3 seeds.
T_95_DF2 = 2.919986
T_975_DF2 = 4.302653
SHIFTS = [1.3, 0.0, 0.1, -0.1, 0.0, 0.1]  # three seeds × two removals, one checkpoint per cluster
CLUSTERS = [(s, r) for s in (0, 1, 2) for r in ("r05", "r10")]


def _row(name: str, shift: float, *, outcome: str = "undetermined", displaced_by: bool = False,
         flips: list[dict[str, Any]] | None = None, shipped: float = 0.5, theta: str = "t") -> dict[str, Any]:
    """A census row (checkpoint_row's shape) with the fields the family readings read."""
    return {"checkpoint": name, "anchored": True, "trainable_sha256": theta, "flips": flips or [],
            "cells": {"df": {"shift_pp": shift, "outcome": outcome, "displaced_by": displaced_by,
                             "shipped": shipped}}}


ROW = {"file": "x.safetensors", "path": "x.safetensors", "factory": None, "channel": "present", "staleness": None,
       "recoverability_shift_pp": None, "reporting_line": "", "annotation": "",
       "mechanism": {"mechanism": None, "evidence": None, "base_comparison": None, "consistent": None, "reason": "",
                     "base": None, "base_check": "no base named"}, "group": "decided"}
CELL = {"shipped": 0.5, "refit": 0.5, "min_shift_pp": 0.0, "max_shift_pp": 0.0, "method": "none", "p_value": None,
        "sign_p_value": 1.0, "sign_beyond": 0, "by_p_value": None}


def _model(row: dict[str, Any]) -> CheckpointRow:
    """The census row the summary would build, from the fields a test gives (the rest filled in)."""
    return CheckpointRow.model_validate({**ROW, **row, "cells": {m: {**CELL, **c} for m, c in row["cells"].items()}})


def _family(shifts: list[float], *, displaced_first: bool, family: str = "finetune", variant: str = "train"):
    rows, meta = [], {}
    for i, ((seed, removal), shift) in enumerate(zip(CLUSTERS, shifts, strict=True)):
        name = f"{removal}-s{seed}-{family}-{variant}"
        displaced = displaced_first and i == 0
        rows.append(_row(name, shift, outcome="displaced" if displaced else "equivalent", displaced_by=displaced))
        meta[name] = PopulationMetadata(role="unlearned", family=family, variant=variant, removal=removal, seed=seed)
    return rows, meta


def _readings(rows, meta, criteria=()):
    readings = family_readings([_model(r) for r in rows], meta, decided={r["checkpoint"] for r in rows},
                               metrics=["df"], criteria=list(criteria), margin_pp=1.2)
    return None if readings is None else readings.model_dump()


def test_family_mean_and_seed_clustered_interval_by_hand():
    rows, meta = _family(SHIFTS, displaced_first=True)
    cell = _readings(rows, meta)["families"][0]["cells"]["df"]
    seeds = [(1.3 + 0.0) / 2, (0.1 - 0.1) / 2, (0.0 + 0.1) / 2]  # each seed's checkpoints share its base weights
    mean = sum(seeds) / 3  # 0.2333
    se = math.sqrt(sum((s - mean) ** 2 for s in seeds) / 2 / 3)  # 0.2088
    assert cell["clusters"] == 3 and cell["mean_shift_pp"] == pytest.approx(mean)
    assert cell["lower_pp"] == pytest.approx(mean - T_95_DF2 * se, abs=1e-5)  # -0.3764
    assert cell["upper_pp"] == pytest.approx(mean + T_95_DF2 * se, abs=1e-5)  # +0.8431, inside ±1.2
    assert cell["outcome"] == "equivalent" and cell["displaced_by"] == 1 and cell["displaced"] == 1


def test_two_checkpoints_of_one_seed_count_once():
    rows, meta = _family(SHIFTS, displaced_first=False)
    extra = "r05-s0-finetune-train-b"
    rows.append(_row(extra, 0.7))  # seed 0 again: its cluster mean becomes (1.3 + 0.0 + 0.7) / 3
    meta[extra] = PopulationMetadata(role="unlearned", family="finetune", variant="train", removal="r05", seed=0)
    cell = _readings(rows, meta)["families"][0]["cells"]["df"]
    assert cell["clusters"] == 3 and cell["cluster_means_pp"][0] == pytest.approx(2.0 / 3)
    assert cell["mean_shift_pp"] == pytest.approx((2.0 / 3 + 0.0 + 0.05) / 3)


def test_an_interval_over_seeds_is_not_narrowed_by_the_checkpoints_that_share_a_seeds_weights():
    """Shifts that move together within a seed (its base) and apart across seeds: counting (seed, removal) pairs
    as independent gave a narrow interval inside the margin; over the seeds that share weights it is not."""
    from scipy import stats

    by_seed = {0: 1.0, 1: -0.6, 2: 0.2}
    rows, meta = [], {}
    for seed, shift in by_seed.items():
        for removal in ("r02", "r05", "r10", "r20"):
            name = f"{removal}-s{seed}-ga-eval"
            rows.append(_row(name, shift + (0.01 if removal == "r02" else 0.0)))
            meta[name] = PopulationMetadata(role="unlearned", family="ga", variant="eval", removal=removal, seed=seed,
                                            removal_kind="instances")
    cell = _readings(rows, meta)["families"][0]["cells"]["df"]
    means = [statistics_mean([r["cells"]["df"]["shift_pp"] for r in rows if meta[r["checkpoint"]].seed == s])
             for s in (0, 1, 2)]
    low, high = stats.t.interval(0.90, df=2, loc=sum(means) / 3, scale=stats.sem(means))
    assert cell["clusters"] == 3
    assert (cell["lower_pp"], cell["upper_pp"]) == (pytest.approx(low), pytest.approx(high))
    pairs = [r["cells"]["df"]["shift_pp"] for r in rows]  # what (seed, removal) clustering averaged over
    naive = stats.t.interval(0.90, df=len(pairs) - 1, loc=sum(pairs) / len(pairs), scale=stats.sem(pairs))
    assert naive[0] > -1.2 and naive[1] < 1.2  # would have read "equivalent on average"
    assert cell["outcome"] == "undetermined" and high - low > 2.5 * (naive[1] - naive[0])


def test_class_removal_is_read_apart_from_instance_removal():
    rows, meta = [], {}
    for seed in (0, 1, 2):
        for removal, kind, shift in (("r05", "instances", 0.1 * seed), ("c3", "class", 20.0 + seed)):
            name = f"{removal}-s{seed}-ga-train"
            rows.append(_row(name, shift))
            meta[name] = PopulationMetadata(role="unlearned", family="ga", variant="train", removal=removal,
                                            removal_kind=kind, seed=seed)
    families = _readings(rows, meta)["families"]
    assert [(f["removal_kind"], f["checkpoints"]) for f in families] == [("class", 3), ("instances", 3)]
    assert families[1]["cells"]["df"]["mean_shift_pp"] == pytest.approx(0.1)
    assert families[1]["statements"][0].startswith("Family `ga` (train, instances removal)")


def statistics_mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_the_equivalent_yet_displaced_statement_appears_exactly_when_the_data_has_it():
    with_displaced = _readings(*_family(SHIFTS, displaced_first=True))["families"][0]["statements"]
    assert with_displaced == ["Family `finetune` (train) is equivalent on average on `df` yet contains 1 displaced "
                              "checkpoint: per checkpoint, not per method."]
    without = _readings(*_family(SHIFTS, displaced_first=False))["families"][0]["statements"]
    assert without == ["Family `finetune` (train) is equivalent on average on `df` and contains no displaced "
                       "checkpoint."]
    wide = _readings(*_family([3.0, -2.0, 2.5, 0.0, 1.0, -1.0], displaced_first=True))["families"][0]
    assert wide["cells"]["df"]["outcome"] == "undetermined"
    assert wide["statements"] == ["Family `finetune` (train) is not shown equivalent on average on `df` (its "
                                  "interval is not inside ±1.2 pp); it contains 1 displaced checkpoint."]
    moved = _readings(*_family([5.0, 5.2, 4.8, 5.1, 4.9, 5.0], displaced_first=True))["families"][0]
    assert moved["cells"]["df"]["outcome"] == "displaced" and "displaced on average" in moved["statements"][0]
    text = families_markdown(typed_census({"families": _readings(*_family(SHIFTS, displaced_first=True))}))
    assert "yet contains 1 displaced checkpoint: per checkpoint, not per method." in text


def test_families_group_by_variant_leave_out_twins_and_undecided_and_count_flips_both_ways():
    rows, meta = _family(SHIFTS, displaced_first=False)
    criterion = "abs(df - dt) <= 0.05"
    rows[0]["flips"] = [{"criterion": criterion, "direction": "pass_to_fail", "refit_pass_replicates": 0}]
    rows[1]["flips"] = [{"criterion": criterion, "direction": "fail_to_pass", "refit_pass_replicates": 2}]
    rows[2]["flips"] = [{"criterion": criterion, "direction": "pass_to_fail", "refit_pass_replicates": 0}]
    eval_rows, eval_meta = _family(SHIFTS, displaced_first=False, variant="eval")
    twin = _row("r10-s0-twin1-online", 9.0)
    readings = family_readings(
        [_model(r) for r in [*rows, *eval_rows, twin, _row("undecided", 50.0)]],
        {**meta, **eval_meta, "undecided": meta[rows[0]["checkpoint"]],
         twin["checkpoint"]: PopulationMetadata(role="twin", family="relabel", variant="train", seed=0)},
        decided={r["checkpoint"] for r in [*rows, *eval_rows, twin]}, metrics=["df"], criteria=[criterion],
        margin_pp=1.2).model_dump()
    assert [(f["family"], f["variant"], f["checkpoints"]) for f in readings["families"]] == [
        ("finetune", "eval", 6), ("finetune", "train", 6)]
    assert readings["families"][1]["flips"][criterion] == {"flips": 3, "pass_to_fail": 2, "fail_to_pass": 1}
    assert readings["families"][0]["flips"][criterion] == {"flips": 0, "pass_to_fail": 0, "fail_to_pass": 0}


def test_one_cluster_gives_no_interval():
    rows, meta = _family(SHIFTS, displaced_first=False)
    cell = _readings(rows[:1], meta)["families"][0]["cells"]["df"]
    assert cell["lower_pp"] is None and cell["outcome"] == "undetermined"


def _twins(level: int, seed: int, online: float, frozen: float, *, theta_frozen: str = "t"):
    names = (f"r10-s{seed}-twin{level}-online", f"r10-s{seed}-twin{level}-frozen")
    rows = [_row(names[0], 0.0, shipped=online, theta=f"t{level}{seed}"),
            _row(names[1], 0.0, shipped=frozen, theta=theta_frozen if theta_frozen != "t" else f"t{level}{seed}")]
    meta = {names[0]: PopulationMetadata(role="twin", seed=seed, twin_arm="online", twin_level=level,
                                         twin_partner=names[1]),
            names[1]: PopulationMetadata(role="twin", seed=seed, twin_arm="frozen", twin_level=level,
                                         twin_partner=names[0])}
    return rows, meta


def test_twin_gap_per_level_with_its_interval_across_seeds_by_hand():
    rows: list[dict[str, Any]] = []
    meta: dict[str, PopulationMetadata | None] = {}
    for level, seed, online, frozen, theta in [(1, 0, 0.60, 0.50, "t"), (1, 1, 0.58, 0.50, "t"),
                                               (1, 2, 0.62, 0.50, "t"), (2, 0, 0.70, 0.40, "other")]:
        r, m = _twins(level, seed, online, frozen, theta_frozen=theta)
        rows += r
        meta.update(m)
    rows.append(_row("r10-s5-twin1-online", 0.0, shipped=0.9))  # its partner is not in the census: no pair
    meta["r10-s5-twin1-online"] = PopulationMetadata(role="twin", seed=5, twin_arm="online", twin_level=1,
                                                     twin_partner="missing")
    found = twin_gaps([_model(r) for r in rows], meta, headline="df")
    assert found is not None
    gaps = found.model_dump()
    assert gaps["cell"] == "df" and len(gaps["pairs"]) == 4
    one, two = gaps["levels"]
    # gaps 10, 8, 12 pp: mean 10, sd 2, se 2/√3; 95 % interval 10 ± 4.302653 · 1.154701 = [5.0317, 14.9683]
    assert one["level"] == 1 and one["pairs"] == 3 and one["seeds"] == [0, 1, 2]
    assert one["mean_gap_pp"] == pytest.approx(10.0)
    assert one["lower_pp"] == pytest.approx(10 - T_975_DF2 * 2 / math.sqrt(3), abs=1e-4)
    assert one["upper_pp"] == pytest.approx(10 + T_975_DF2 * 2 / math.sqrt(3), abs=1e-4)
    assert one["same_theta"] is True
    assert two["mean_gap_pp"] == pytest.approx(30.0) and two["lower_pp"] is None  # one seed: no interval
    assert two["same_theta"] is False  # the design's bit-identical θ is checked, not assumed
    text = families_markdown(typed_census({"twin_gaps": gaps}))
    assert "## Frozen twins" in text and "| 1 | 3 | 0, 1, 2 | +10.00 pp | [+5.03, +14.97] | yes |" in text
    assert twin_gaps([_model(r) for r in rows[:1]], meta, headline="df") is None


def test_population_metadata_from_a_sidecar_and_none_without_one():
    sidecar = {"role": "twin", "family": "relabel", "variant": "train", "seed": 1, "parent": "s1-base",
               "removal": {"name": "r10", "kind": "instances", "ratio": 0.1, "class": None},
               "twin": {"arm": "frozen", "level": 4, "partner": "r10-s1-twin4-online"}}
    assert population_metadata(sidecar) == PopulationMetadata(
        role="twin", family="relabel", variant="train", removal="r10", removal_kind="instances", seed=1,
        parent="s1-base", twin_arm="frozen", twin_level=4, twin_partner="r10-s1-twin4-online")
    assert population_metadata({"architecture": {"factory": "zoo/convnet-bn"}}) is None  # a digits-zoo sidecar
    assert population_metadata(None) is None
    assert population_metadata({"family": "ga", "seed": True}).seed is None  # wrong types are not trusted


def _result(name: str, shifts: list[float], population: PopulationMetadata | None) -> AuditResult:
    return fake_result(name, shifts, shipped=0.5, population=population)


def test_summary_carries_families_only_when_the_checkpoints_name_one():
    from audit_support import PATTERN_SPEC

    spec = parse_spec({**PATTERN_SPEC, "cells": ["df"], "criteria": ["df <= 0.05"], "replicates": 10})
    # one checkpoint displaced on every replicate (sign p = 0.5^10, survives BY), its seed's other one below the
    # margin the other way (half its replicates beyond it), four near zero: seed means 0.15, 0, 0
    per_cluster = [[1.5] * 10, [-1.3, -1.1] * 5] + [[0.1, -0.1] * 5] * 4
    results = [_result(f"{r}-s{s}-ga-train", shifts, PopulationMetadata(role="unlearned", family="ga",
                                                                        variant="train", removal=r, seed=s))
               for (s, r), shifts in zip(CLUSTERS, per_cluster, strict=True)]
    summary = summarize(results, [r.checkpoint for r in results], spec).to_json()
    family = summary["families"]["families"][0]
    assert family["cells"]["df"]["displaced_by"] == 1
    assert family["cells"]["df"]["mean_shift_pp"] == pytest.approx(0.15 / 3)
    assert family["cells"]["df"]["outcome"] == "equivalent" and "yet contains 1 displaced" in family["statements"][0]
    assert summary["twin_gaps"] is None
    json.dumps(summary)  # JSON-ready
    digits = summarize([_result("bn-ga-train", [2.0] * 10, None)], ["bn-ga-train"], spec)
    assert "families" not in digits.to_json() and "twin_gaps" not in digits.to_json()
    assert families_markdown(digits) == ""


@pytest.mark.slow
def test_the_tiny_population_census_reports_families_and_the_twin_gap(tiny_population, tmp_path: Path):
    from bnconvention.audit.census.run import run_census
    from bnconvention.audit.spec.audit_spec import load_spec

    spec = load_spec(tiny_population.root / "population.yaml", replicates=2)
    from bnconvention.audit.spec.audit_spec import RecoverabilitySpec

    curve = {"budgets": [2, 5], "seeds": 1, "sources": ["test", "noise"]}
    spec = spec.model_copy(update={"recoverability": RecoverabilitySpec.model_validate({"images": 2, "curve": curve}),
                                   "provenance": None})
    outcome = run_census([tiny_population.root], spec, tmp_path / "census")
    written = json.loads((tmp_path / "census" / "census.json").read_text())
    families = {(f["family"], f["variant"]): f for f in written["families"]["families"]}
    unlearned = tiny_population.select(role="unlearned")
    assert sum(f["checkpoints"] for f in families.values()) == len(unlearned)
    assert set(families) == {(tiny_population.sidecar(n)["family"], tiny_population.sidecar(n)["variant"])
                             for n in unlearned}
    pairs = written["twin_gaps"]["pairs"]
    assert len(pairs) == len(tiny_population.select(role="twin")) // 2 and all(p["same_theta"] for p in pairs)
    for pair in pairs:
        online = tiny_population.sidecar(pair["online"])["measured_at_release"]["forget"]
        frozen = tiny_population.sidecar(pair["frozen"])["measured_at_release"]["forget"]
        assert pair["gap_pp"] == pytest.approx((online - frozen) * 100, abs=1e-7)
    text = (tmp_path / "census" / "census.md").read_text()
    assert "## Per family" in text and "## Frozen twins" in text
    assert outcome.summary.to_json()["families"] == written["families"]
    # the census page draws every checkpoint of the real census once, and each family's mean
    from bnconvention.report_html.census_figures import forest_plot

    svg = forest_plot(CensusResult.read(tmp_path / "census" / "census.json"))
    assert svg is not None
    drawn = sorted(point.split(":")[0] for point in re.findall(r'data-point="([^"]+)"', svg))
    assert drawn == sorted(tiny_population.names)
    assert len(re.findall(r"data-mean=", svg)) == len(families)
    _check_v11_annotations(tmp_path / "census", written)


def _check_v11_annotations(out: Path, census: dict[str, Any]) -> None:
    """Each annotation carries the 1.1 readings the census measured: the twin with its gap, the curves; and
    validates as the standard says."""
    from bnconvention.validation import validate_record

    rows = {row["checkpoint"]: row for row in census["checkpoints"]}
    for pair in census["twin_gaps"]["pairs"]:
        for arm, other, sign in (("online", "frozen", 1.0), ("frozen", "online", -1.0)):
            annotation = json.loads((out / rows[pair[arm]]["annotation"]).read_text())
            twin = annotation["twin"]
            assert annotation["spec_version"] == "1.1" and twin["filename"] == f"{pair[other]}.safetensors"
            assert twin["gap_pp"] == pytest.approx(sign * pair["gap_pp"], abs=1e-9)
            assert twin["trainable_sha256"] == annotation["subject"]["trainable_sha256"]  # bit-identical θ
            assert twin["buffer_update_mode"] == {"online": "train", "frozen": "frozen"}[other]
    for name, row in rows.items():
        annotation = json.loads((out / row["annotation"]).read_text())
        if row["channel"] == "present":
            curves = {c["source"]: c for c in annotation["recoverability_curves"]}
            assert set(curves) == {"test", "other"}, name  # noise is out of distribution: "other"
            assert [p["images"] for p in curves["test"]["points"]] == [2, 5]
            assert all(len(p["forget_accuracy"]) == 1 for p in curves["test"]["points"])
        assert validate_record(annotation) == [], name
