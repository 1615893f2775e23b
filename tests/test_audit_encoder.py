"""The encoder-level diagnostics: each against a hand-computed reference on tiny inputs, the bad input they refuse,
and one audit of a zoo checkpoint against its retrain reference
(docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from census_support import typed_census

from bnconvention.audit.diagnostics.encoder import typed_cell
from bnconvention.audit.diagnostics.membership import attack_scores, auc, bootstrap_intervals, draw_attack
from bnconvention.audit.diagnostics.probe import (
    decompose,
    draw_probe,
    feature_layer,
    features_and_logits,
    probe_accuracy,
)
from bnconvention.audit.diagnostics.relearn import draw_relearn, steps_to_target
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.audit.spec.diagnostics import (
    LinearProbeSpec,
    MembershipSpec,
    RelearningSpec,
    reference_path,
    seed_stem,
)
from bnconvention.errors import AuditSpecError
from bnconvention.formats.digests import model_digests

# --- membership: AUC, scores, bootstrap -----------------------------------------------------------------------------


@pytest.mark.parametrize(("members", "nonmembers", "expected"), [
    pytest.param([3.0, 2.0], [1.0, 2.0], 0.875, id="one-tie"),  # pairs 3>1, 3>2, 2>1, 2=2: (1 + 1 + 1 + 0.5) / 4
    pytest.param([5.0, 4.0, 3.0], [0.0, 1.0], 1.0, id="separated"),
    pytest.param([0.0], [1.0, 2.0], 0.0, id="reversed"),
    pytest.param([1.0, 1.0], [1.0], 0.5, id="all-tied"),
    pytest.param([0.2, 0.9, 0.4], [0.1, 0.5, 0.3, 0.8], 7 / 12, id="hand"),  # 0.2>0.1; 0.9>all 4; 0.4>0.1,0.3
])
def test_auc_is_the_mann_whitney_probability(members: list[float], nonmembers: list[float], expected: float) -> None:
    assert auc(np.array(members), np.array(nonmembers)) == pytest.approx(expected, abs=1e-15)


def test_attack_scores_by_hand() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(3.0), 0.0]], dtype=torch.float64)
    labels = torch.tensor([1, 1])
    # softmax of (0, ln 3) is (1/4, 3/4): record 0's label has p = 3/4, record 1's p = 1/4
    loss = attack_scores(logits, labels, attack="loss-threshold")
    assert loss == pytest.approx([math.log(0.75), math.log(0.25)], abs=1e-12)
    confidence = attack_scores(logits, labels, attack="confidence-threshold")
    assert confidence == pytest.approx([0.75, 0.75], abs=1e-12)


def test_bootstrap_intervals_contain_their_estimates_and_a_state_equal_to_shipped_shifts_by_zero() -> None:
    rng = np.random.default_rng(0)
    shipped = (rng.normal(1.0, 1.0, 40), rng.normal(0.0, 1.0, 40))
    spec = MembershipSpec(bootstrap=100)
    same = bootstrap_intervals(shipped, [shipped, shipped], spec=spec, seed=0)
    assert (same.shift_pp.lower, same.shift_pp.estimate, same.shift_pp.upper) == (0.0, 0.0, 0.0)
    assert same.shipped.estimate == auc(*shipped)
    assert same.shipped.lower <= same.shipped.estimate <= same.shipped.upper
    moved = bootstrap_intervals(shipped, [(shipped[0] + 5.0, shipped[1])], spec=spec, seed=0)
    assert moved.refit.estimate == 1.0 and moved.shift_pp.estimate == pytest.approx(100 * (1 - auc(*shipped)))
    assert moved.shift_pp.lower > 0


def test_attack_refuses_too_few_records_naming_the_cell() -> None:
    test_labels = np.repeat(np.arange(10), 10)  # 10 test records of each of 10 classes
    with pytest.raises(AuditSpecError, match=r"^cell mia_auc: .*at least 10 per side") as info:
        draw_attack(forget_labels=np.full(9, 3), test_labels=test_labels, spec=MembershipSpec(), seed=0)
    assert info.value.field == "/diagnostics/membership_inference/records_per_side"
    with pytest.raises(AuditSpecError, match=r"cell mia_auc: .*test of the forget classes \(10 records\)"):
        draw_attack(forget_labels=np.full(50, 3), test_labels=test_labels, spec=MembershipSpec(records_per_side=11),
                    seed=0)
    # class-matched: a class removal's non-members are the test records of that class
    draw = draw_attack(forget_labels=np.full(50, 3), test_labels=test_labels, spec=MembershipSpec(), seed=0)
    assert len(draw.members) == len(draw.nonmembers) == 10 and set(test_labels[draw.nonmembers]) == {3}
    unmatched = draw_attack(forget_labels=np.full(50, 3), test_labels=test_labels,
                            spec=MembershipSpec(class_matched=False), seed=0)
    assert len(unmatched.members) == 50 and len(set(test_labels[unmatched.nonmembers])) > 1


# --- linear probe ---------------------------------------------------------------------------------------------------


def test_decomposition_arithmetic_and_its_t_interval() -> None:
    parts = decompose(0.5, [0.75, 0.70], 0.625)
    assert parts.bn_residuals_pp == pytest.approx([-25.0, -20.0])
    assert parts.nc_residuals_pp == pytest.approx([12.5, 7.5])
    # mean -22.5, sd 5 / sqrt(2), half-width t_{0.975, 1} * sd / sqrt(2) = 12.7062047 * 2.5
    half = 12.706204736174707 * 2.5
    bn = parts.bn_residual_pp
    assert (bn.estimate, bn.lower, bn.upper) == pytest.approx((-22.5, -22.5 - half, -22.5 + half), abs=1e-9)
    # Proposition 1: LP_M - LP_retr = BN-residual + NC-residual, per replicate
    assert [b + n for b, n in zip(parts.bn_residuals_pp, parts.nc_residuals_pp, strict=True)] == \
        pytest.approx([100 * (0.5 - 0.625)] * 2)
    alone = decompose(0.5, [0.75], None)
    assert alone.nc_residual_pp is None and alone.bn_residual_pp.lower == alone.bn_residual_pp.upper == -25.0


def test_probe_accuracy_on_hand_made_features() -> None:
    # two classes on either side of x = 0; the forget records sit deep in class 1's side except one
    train_x = np.array([[-2.0], [-1.0], [-1.5], [1.0], [2.0], [1.5]])
    train_y = np.array([0, 0, 0, 1, 1, 1])
    test_x = np.array([[3.0], [2.5], [4.0], [-3.0]])
    test_y = np.array([1, 1, 1, 1])
    assert probe_accuracy(train_x, train_y, test_x, test_y, spec=LinearProbeSpec()) == 0.75
    assert probe_accuracy(train_x, train_y, test_x, test_y, spec=LinearProbeSpec(standardize=False)) == 0.75


def test_probe_draw_is_per_class_and_fixed_by_the_seed() -> None:
    labels = np.repeat(np.arange(3), 10)
    spec = LinearProbeSpec(per_class=4)
    draw = draw_probe(labels, np.array([1, 1, 2]), spec, seed=7, train_split="test")
    assert draw.classes == 3 and np.bincount(labels[draw.train]).tolist() == [4, 4, 4]
    assert draw.test.tolist() == [0, 1, 2]
    again = draw_probe(labels, np.array([1, 1, 2]), spec, seed=7, train_split="test")
    assert again.train.tolist() == draw.train.tolist()


@pytest.mark.parametrize(("train", "forget", "per_class", "message", "field"), [
    pytest.param([2] * 20, [2, 2], 5, r"has 1 class; a linear probe needs at least 2", "train_split", id="one-class"),
    pytest.param([0] * 20 + [1] * 3, [0, 1], 5, r"fewer records of 1 class \(class 1: 3\)", "per_class",
                 id="too-few-per-class"),
    pytest.param([0] * 20 + [1] * 20, [0], 5, r"scored on 1 forget record", "test_records", id="one-forget-record"),
    pytest.param([0] * 20 + [1] * 20, [3, 3], 5, r"forget labels \[3\] do not occur", "train_split", id="unseen"),
])
def test_probe_refuses_bad_input_naming_the_cell(train: list[int], forget: list[int], per_class: int, message: str,
                                                 field: str) -> None:
    with pytest.raises(AuditSpecError, match=rf"^cell lp_forget: .*{message}") as info:
        draw_probe(np.array(train), np.array(forget), LinearProbeSpec(per_class=per_class), seed=0, train_split="test")
    assert info.value.field == f"/diagnostics/linear_probe/{field}"


def _tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    model.eval()
    return model


def test_features_are_the_input_of_the_head() -> None:
    model = _tiny_model()
    name, layer = feature_layer(model, None)
    assert name == "3"
    x = torch.randn(5, 2)
    features, logits = features_and_logits(model, x, transform=lambda t, generator: t, layer=layer, batch_size=2)
    with torch.no_grad():
        expected = model[2](model[1](model[0](x)))
    assert features is not None and np.allclose(features, expected.numpy(), atol=1e-6)
    assert torch.allclose(logits, model(x))
    with pytest.raises(AuditSpecError, match="cell lp_forget: the model has no module 'nope'"):
        feature_layer(model, "nope")


# --- relearning ------------------------------------------------------------------------------------------------------


def _identity(x: torch.Tensor, *, generator: object) -> torch.Tensor:
    return x


def test_relearning_counts_steps_deterministically_on_a_copy() -> None:
    model = _tiny_model()
    model[1].running_mean.fill_(0.3)  # a non-trivial φ, kept as it is
    before = model_digests(model)
    x = torch.randn(16, 2)
    y = (x[:, 0] > 0).long()
    spec = RelearningSpec(target_forget_accuracy=0.9, records=16, batch_size=8, learning_rate=0.5, max_steps=200)
    kwargs = {"train_x": x, "train_y": y, "eval_x": x, "eval_y": y, "transform": _identity}
    steps = steps_to_target(model, spec=spec, **kwargs)
    assert steps is not None and steps > 0
    assert steps_to_target(model, spec=spec, **kwargs) == steps  # deterministic
    after = model_digests(model)
    assert (after.trainable_sha256, after.running_sha256) == (before.trainable_sha256, before.running_sha256)
    # a target the state already meets takes 0 steps; one out of reach within the budget is censored (None)
    assert steps_to_target(model, spec=spec.model_copy(update={"target_forget_accuracy": 0.0}), **kwargs) == 0
    unreachable = spec.model_copy(update={"learning_rate": 1e-9, "max_steps": 2, "target_forget_accuracy": 1.0})
    initial = float((model(x).argmax(1) == y).float().mean())
    if initial < 1.0:
        assert steps_to_target(model, spec=unreachable, **kwargs) is None


def test_relearning_refuses_more_records_than_the_forget_split() -> None:
    with pytest.raises(AuditSpecError, match="records is 32 but the forget split has 5 records") as info:
        draw_relearn(5, RelearningSpec(target_forget_accuracy=0.5), seed=0)
    assert info.value.field == "/diagnostics/relearning/records"


# --- typed cells, the spec section ----------------------------------------------------------------------------------


def test_typed_cell_shifts_follow_the_unit() -> None:
    auc_cell = typed_cell("mia_auc", 0.5, [0.53, 0.55], unit="auc", margin_pp=1.2, anchored=True, channel="present",
                          reference=None)
    assert auc_cell["replicate_shifts_pp"] == pytest.approx([3.0, 5.0]) and auc_cell["unit"] == "auc"
    pp_cell = typed_cell("gap_pp", 3.0, [1.0, 1.5], unit="pp", margin_pp=1.2, anchored=True, channel="present",
                         reference=None)
    assert pp_cell["replicate_shifts_pp"] == pytest.approx([-2.0, -1.5])
    unanchored = typed_cell("lp_forget", 0.5, [0.9, 0.9], unit="fraction", margin_pp=1.2, anchored=False,
                            channel="present", reference=None)
    assert unanchored["decision"] == {"outcome": "undetermined", "method": "not-anchored"}


def test_seed_stem_names_the_population_s_retrain_sibling() -> None:
    assert seed_stem("c3-s0-gradascent-train") == "c3-s0"
    template = "../{seed_stem}-retrain/{seed_stem}-retrain.safetensors"
    assert reference_path(template, name="r10-s2-twin1-online") == "../r10-s2-retrain/r10-s2-retrain.safetensors"
    with pytest.raises(AuditSpecError, match="has no '-s<seed>' part"):
        reference_path(template, name="bn-badteacher-eval")


BASE_SPEC = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}}


def test_a_spec_without_diagnostics_digests_as_before() -> None:
    spec = parse_spec(BASE_SPEC)
    assert "diagnostics" not in spec.model_dump(mode="json")
    with_section = parse_spec({**BASE_SPEC, "diagnostics": {"linear_probe": {}}})
    assert with_section.sha256() != spec.sha256()
    with pytest.raises(AuditSpecError, match="unknown placeholder"):
        parse_spec({**BASE_SPEC, "diagnostics": {"reference": {"path": "{seed}.safetensors"}}})


# --- one audit of a zoo checkpoint ------------------------------------------------------------------------------------

ZOO_SPEC = {
    **BASE_SPEC, "published_source": "sidecar", "replicates": 2, "refit": {"pool_size": 128},
    "recoverability": None, "staleness": False,
    "diagnostics": {"reference": {"path": "bn-retrain.safetensors"}, "linear_probe": {"per_class": 8},
                    "membership_inference": {"bootstrap": 50},
                    "relearning": {"target_forget_accuracy": 0.5, "max_steps": 5, "replicates": 1}},
}


@pytest.mark.slow
def test_audit_writes_a_1_1_annotation_with_the_diagnostics(zoo, tmp_path: Path) -> None:
    from bnconvention.audit.diagnostics.relearn import relearn
    from bnconvention.audit.render.outputs import write_audit_outputs
    from bnconvention.audit.run.runner import prepare_audit, run_audit
    from bnconvention.validation.records import validate_record

    weights = Path(zoo.root) / "bn-badteacher-eval.safetensors"
    before = weights.read_bytes()
    prepared = prepare_audit(weights, parse_spec(ZOO_SPEC))
    data, chosen = prepared.data, torch.from_numpy(prepared.encoder.relearn)
    by_hand = relearn(prepared.checkpoint.model, train_x=data.forget.x[chosen], train_y=data.forget.y[chosen],
                      eval_x=data.forget.x, eval_y=data.forget.y, spec=prepared.spec.diagnostics.relearning,
                      transform=data.eval_transform)
    result = run_audit(prepared)
    record = json.loads(result.annotation.model_dump_json(exclude_none=True))
    assert record["spec_version"] == "1.1" and validate_record(record) == []
    cells = {c["metric"]: c for c in record["cells"]}
    lp, mia = cells["lp_forget"], cells["mia_auc"]
    assert (lp["unit"], mia["unit"], lp["reference"]["arm"]) == ("fraction", "auc", "retrain")
    probe = record["linear_probe"]
    # the decomposition is the cell's own numbers: BN = LP_M - LP_Mcal, NC = LP_Mcal - LP_retr (pp)
    assert probe["bn_residual_pp"]["estimate"] == pytest.approx(-lp["shift_pp"], abs=1e-9)
    assert probe["nc_residual_pp"]["estimate"] == pytest.approx(100 * (lp["refit"] - lp["reference"]["value"]),
                                                                abs=1e-9)
    assert record["membership_inference"]["auc_shipped"]["estimate"] == mia["shipped"]
    assert len(record["relearning"]["steps_refit"]) == len(record["relearning"]["area_refit"]) == 1
    # the shipped state's area is the mean of its own trajectory, fine-tuned on the same records (same process and
    # inputs, so equal to rounding: 1e-12 is far above the float64 sum of 6 accuracies, far below a 1/133 step)
    assert by_hand.area == pytest.approx(sum(by_hand.trajectory) / 6, abs=1e-12)
    assert record["relearning"]["area_shipped"] == pytest.approx(by_hand.area, abs=1e-12)
    assert record["relearning"].get("steps_shipped") == by_hand.steps
    assert weights.read_bytes() == before  # θ and φ on disk untouched
    write_audit_outputs(result, tmp_path / "out", plots=False)  # the annotation round-trips through the journal's JSON
    assert type(result).model_validate_json(result.model_dump_json()) == result


@pytest.mark.slow
def test_bad_diagnostics_input_is_refused_before_anything_is_written(zoo, tmp_path: Path, capsys) -> None:
    from bnconvention.cli.main import main
    from bnconvention.formats.digests import file_digests

    weights = Path(zoo.root) / "bn-badteacher-eval.safetensors"
    before = file_digests(weights)
    spec = {**ZOO_SPEC, "diagnostics": {**ZOO_SPEC["diagnostics"], "linear_probe": {"per_class": 10_000}}}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["audit", str(weights), "--spec", str(spec_file), "--out", str(out)]) == 2  # an invalid spec
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bnconvention: invalid audit spec: cell lp_forget: linear_probe.per_class is 10000")
    assert not out.exists()
    assert file_digests(weights) == before


def test_census_columns_and_table_from_the_annotation() -> None:
    from bnconvention.audit.population.encoder_report import encoder_census_markdown, encoder_lines, encoder_row
    from bnconvention.standard.models import parse_record

    vectors = Path(__file__).resolve().parent.parent / "schema" / "tests" / "valid"
    record = parse_record(json.loads((vectors / "refit-annotation-v11-encoder.json").read_text(encoding="utf-8")))
    columns = encoder_row(record)
    assert columns is not None
    row = columns.model_dump(mode="json")
    assert (row["lp_shipped"], row["lp_refit"], row["lp_reference"]) == (0.5, 0.75, 0.625)
    assert (row["bn_residual_pp"]["estimate"], row["nc_residual_pp"]["estimate"]) == (-25.0, 12.5)
    assert (row["relearn_steps_shipped"], row["relearn_steps_refit"]) == (7, [2, 3, None])
    table = encoder_census_markdown(typed_census({"checkpoints": [{"checkpoint": "c3-s0-x", "encoder": row},
                                                                  {"checkpoint": "plain"}]}))
    assert "| c3-s0-x | -25.00 [-25.00, -25.00] | +12.50 [+12.50, +12.50] | 0.562 | 0.562 | 7 | 2, 3, not reached |" \
        in table
    assert "plain" not in table and "hides encoder leakage" in table
    assert "## Encoder-level diagnostics" in encoder_lines(record)
    full = parse_record(json.loads((vectors / "refit-annotation-full.json").read_text(encoding="utf-8")))
    assert encoder_row(full) is None and encoder_lines(full) == []
    assert encoder_census_markdown(typed_census({"checkpoints": [{"checkpoint": "plain"}]})) == ""


def test_relearning_areas_in_the_census_row_and_table() -> None:
    from bnconvention.audit.population.encoder_report import encoder_census_markdown, encoder_lines, encoder_row
    from bnconvention.standard.models import parse_record

    vectors = Path(__file__).resolve().parent.parent / "schema" / "tests" / "valid"
    record = parse_record(json.loads((vectors / "refit-annotation-v11-relearning-area.json").read_text("utf-8")))
    columns = encoder_row(record)
    assert columns is not None
    row = columns.model_dump(mode="json")
    assert (row["relearn_area_shipped"], row["relearn_area_refit"]) == (0.625, [0.875, 0.75, 0.375])
    table = encoder_census_markdown(typed_census({"checkpoints": [{"checkpoint": "c3-s0-x", "encoder": row}]}))
    assert "| relearn area shipped | relearn area refit |" in table
    assert "| 7 | 2, 3, not reached | 0.625 | 0.875, 0.750, 0.375 |" in table
    assert any("(area): shipped 0.625, refit 0.875, 0.750, 0.375." in line for line in encoder_lines(record))


def test_a_1_1_relearning_section_without_areas_stays_valid_and_means_the_same() -> None:
    """Migration: area_shipped / area_refit are optional, so every 1.1 record written before them still validates,
    reads back without them, and reports as before (no area keys in the census row, dashes in the table)."""
    from bnconvention.audit.population.encoder_report import encoder_census_markdown, encoder_lines, encoder_row
    from bnconvention.standard.models import parse_record, to_dict
    from bnconvention.validation.records import validate_record

    vectors = Path(__file__).resolve().parent.parent / "schema" / "tests" / "valid"
    data = json.loads((vectors / "refit-annotation-v11-encoder.json").read_text(encoding="utf-8"))
    assert "area_shipped" not in data["relearning"] and validate_record(data) == []
    record = parse_record(data)
    assert to_dict(record) == data  # nothing added on the way through the models
    columns = encoder_row(record)
    assert columns is not None
    row = columns.model_dump(mode="json")
    assert not any(key.startswith("relearn_area") for key in row)
    assert "| 7 | 2, 3, not reached | — | — |" in encoder_census_markdown(
        typed_census({"checkpoints": [{"checkpoint": "c3-s0-x", "encoder": row}]}))
    assert not any("(area)" in line for line in encoder_lines(record))


def test_a_censored_shipped_relearning_count_survives_the_writer() -> None:
    """Regression (found on the population's c3-s1-retrain): the writer drops None fields, so a shipped state that
    never reaches the target must be valid with steps_shipped absent (absent and null mean the same)."""
    from bnconvention.standard.models import parse_record, to_dict
    from bnconvention.validation.records import validate_record

    vectors = Path(__file__).resolve().parent.parent / "schema" / "tests" / "valid"
    data = json.loads((vectors / "refit-annotation-v11-encoder.json").read_text(encoding="utf-8"))
    data["relearning"]["steps_shipped"] = None
    written = to_dict(parse_record(data))
    assert "steps_shipped" not in written["relearning"] and written["relearning"]["steps_refit"] == [2, 3, None]
    assert validate_record(written) == []


@pytest.mark.slow
def test_a_census_carries_the_diagnostics_and_re_decides_them_from_its_journal(zoo, tmp_path: Path) -> None:
    """Regression (found on the population): the census's margin sweep parsed every annotation cell as a spec cell
    expression and refused ``lp_forget``; controls and the BY family must keep to the spec's cells."""
    from bnconvention.audit.census.run import run_census
    from bnconvention.validation.records import validate_record

    paths = [Path(zoo.root) / f"{name}.safetensors" for name in ("bn-ga-train", "bn-retrain")]
    spec = {**ZOO_SPEC, "controls": {"checkpoints": {"bn-retrain": "retrain reference"}},
            "diagnostics": {"reference": {"path": "bn-retrain.safetensors"}, "linear_probe": {"per_class": 8},
                            "membership_inference": {"bootstrap": 20}}}
    first = run_census(paths, parse_spec(spec), tmp_path / "census")
    rows = {row["checkpoint"]: row for row in first.summary.to_json()["checkpoints"]}
    assert set(rows["bn-ga-train"]["encoder"]) >= {"bn_residual_pp", "nc_residual_pp", "mia_auc_shipped"}
    assert set(first.summary.to_json()["cells"]) == {"df", "dr", "dt"}  # the typed cells stay outside the family
    assert "## Encoder-level diagnostics" in (tmp_path / "census" / "census.md").read_text("utf-8")
    again = run_census(paths, parse_spec({**spec, "margin_pp": 50.0}), tmp_path / "census")
    assert again.audits_run == 0  # the journal is reused and re-decided at the new margin
    for result in again.results:
        lp = next(c for c in result.annotation.cells if c.metric == "lp_forget")
        assert lp.margin_pp == 50.0 and lp.unit == "fraction"
        record = json.loads((tmp_path / "census" / "checkpoints" / result.checkpoint / "annotation.json").read_text())
        assert validate_record(record) == []


def test_a_census_checks_every_retrain_reference_before_any_audit(zoo, tmp_path: Path) -> None:
    from bnconvention.audit.census.run import run_census

    paths = [Path(zoo.root) / f"{name}.safetensors" for name in ("bn-retrain", "bn-ga-train")]
    spec = {**ZOO_SPEC, "diagnostics": {"reference": {"path": "{name}-missing.safetensors"}, "linear_probe": {}}}
    with pytest.raises(AuditSpecError, match=r"the retrain reference of bn-retrain \(bn-retrain-missing") as info:
        run_census(paths, parse_spec(spec), tmp_path / "census")
    assert info.value.field == "/diagnostics/reference/path"
    assert not list((tmp_path / "census").rglob("result.json"))  # no audit ran


def test_census_groups_summarise_the_diagnostics_per_family_and_control() -> None:
    from bnconvention.audit.population.encoder_report import encoder_groups_markdown
    from bnconvention.audit.population.families import census_group

    def interval(estimate: float, lower: float, upper: float) -> dict[str, object]:
        return {"estimate": estimate, "lower": lower, "upper": upper, "level": 0.95, "method": "t-replicates"}

    def entry(name: str, bn: tuple[float, float, float], auc: tuple[float, float], moved: bool,
              population: dict[str, object] | None = None) -> dict[str, object]:
        shift = interval(1.0, 0.5, 2.0) if moved else interval(1.0, -1.0, 3.0)
        return {"checkpoint": name, "population": population,
                "encoder": {"bn_residual_pp": interval(*bn), "nc_residual_pp": interval(10.0, 9.0, 11.0),
                            "mia_auc_shipped": interval(auc[0], 0.0, 1.0), "mia_auc_refit": interval(auc[1], 0.0, 1.0),
                            "mia_shift_pp": shift}}

    ga = {"role": "unlearned", "family": "gradascent", "variant": "eval"}
    census = {"controls": {"rows": [{"checkpoint": "c3-s0-retrain", "label": "retrain reference"}]},
              "checkpoints": [entry("c3-s0-gradascent-eval", (-8.0, -9.0, -7.0), (0.5, 0.6), True, ga),
                              entry("c3-s1-gradascent-eval", (2.0, 1.0, 3.0), (0.7, 0.6), False, ga),
                              entry("c3-s0-retrain", (0.0, -1.0, 1.0), (0.5, 0.5), False),
                              {"checkpoint": "plain"}]}
    typed = typed_census(census)
    assert census_group(typed.checkpoints[0], {}) == "gradascent (eval)"
    twin, plain = typed_census({"checkpoints": [
        {"checkpoint": "t", "population": {"role": "twin", "twin_level": 4, "twin_arm": "frozen"}},
        {"checkpoint": "x"}]}).checkpoints
    assert census_group(twin, {}) == "twin level 4 (frozen)" and census_group(twin, {}, twin_arms=False) == "twins"
    assert census_group(plain, {}) == "checkpoints"
    table = "\n".join(encoder_groups_markdown(typed))
    # mean BN-residual (-8 + 2) / 2 = -3; one interval below 0 (hides), one above (overstates); AUC means 0.6, 0.6
    assert "| gradascent (eval) | 2 | -3.00 [-8.00, +2.00] | 1 | 1 | +10.00 | 0.600 | 0.600 | 1 of 2 |" in table
    assert ("| control: retrain reference | 1 | +0.00 [+0.00, +0.00] | 0 | 0 | +10.00 | 0.500 | 0.500 | 0 of 1 |"
            in table)
    assert "plain" not in table
    assert encoder_groups_markdown(typed_census({"checkpoints": [{"checkpoint": "plain"}]})) == []


def test_the_relearning_trajectory_and_its_area_against_a_hand_computed_sgd_run() -> None:
    """Linear(1 -> 2), W = 0, b = (1, 0): every input predicts class 0. Fine-tuning on x = 1 labelled 1 with lr 1:
    the gradient of the cross-entropy wrt the logits is softmax(1, 0) - (0, 1) = (s, -s), s = e / (e + 1), and
    dW = db = (s, -s) (x = 1), so after one step the logits at x = 1 are (-2s + 1, 2s) -> class 1, and at x = -1
    they are (1, 0) -> class 0, for every later step too (dW = db leaves -W + b unchanged). Scored on x = 1 and
    x = -1, both labelled 1: forget accuracy 0, 0.5, 0.5 over steps 0..2; area (0 + 0.5 + 0.5) / 3."""
    from bnconvention.audit.diagnostics.relearn import area_under, first_step_at, relearn

    model = torch.nn.Linear(1, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([1.0, 0.0]))
    spec = RelearningSpec(target_forget_accuracy=0.5, records=2, batch_size=2, learning_rate=1.0, max_steps=2)
    out = relearn(model, train_x=torch.ones(2, 1), train_y=torch.ones(2, dtype=torch.long),
                  eval_x=torch.tensor([[1.0], [-1.0]]), eval_y=torch.ones(2, dtype=torch.long), spec=spec,
                  transform=lambda x, generator: x)
    assert out.trajectory == [0.0, 0.5, 0.5]
    assert out.steps == 1 and out.area == pytest.approx(1 / 3, abs=1e-12)
    assert first_step_at(out.trajectory, 0.9) is None and area_under([1.0, 0.0]) == 0.5
    assert model.bias.tolist() == [1.0, 0.0]  # the audited model is untouched (a copy is fine-tuned)


def test_the_relearning_default_step_size_is_the_measured_one() -> None:
    # docs/statistics.md: at 0.05 every c3 checkpoint of the population reached 0.9 in 0-2 steps; at 1e-4 bases
    # take 0-2, unlearned checkpoints 5-11, retrain references never (benchmarks/relearn_rates.py)
    assert RelearningSpec(target_forget_accuracy=0.9).learning_rate == 1e-4
