"""The population (bnconvention.zoo.population_*): structure, determinism, cache and resume, published cells in the
card, the frozen twins, and a census that anchors against the cards. Built once per session (``tiny_population`` in
conftest.py, a small configuration of the same code); the full population's structure is checked on its plan."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bnconvention.zoo.population_data import forget_ids, noisy_digits, task_npz_bytes
from bnconvention.zoo.population_plan import (
    FAMILIES,
    REMOVALS,
    TINY_CONFIG,
    VARIANTS,
    PopulationConfig,
    plan,
    plan_counts,
)
from bnconvention.zoo.population_train import is_buffer


def test_full_plan_is_families_by_variants_by_removals_by_seeds():
    items = plan(PopulationConfig())
    unlearned = {(i.family, i.variant, i.removal.key, i.seed) for i in items if i.role == "unlearned"}
    assert len(FAMILIES) >= 3 and len(VARIANTS) >= 2 and len([r for r in REMOVALS if r.ratio]) >= 3
    assert unlearned == {(f, v, r.key, s) for f in FAMILIES for v in VARIANTS for r in REMOVALS for s in (0, 1, 2)}
    for role in ("base", "retrain"):
        assert {(i.removal.key, i.seed) for i in items if i.role == role} == {
            (r.key, s) for r in REMOVALS for s in (0, 1, 2)}
    twins = [i for i in items if i.role == "twin"]
    assert {(i.level, i.arm, i.seed) for i in twins} == {(lv, a, s) for lv in (1, 2, 4) for a in ("online", "frozen")
                                                          for s in (0, 1, 2)}
    assert plan_counts(items) == {"total": 114, "base": 12, "retrain": 12, "unlearned": 72, "twin": 18}
    assert len({i.name for i in items}) == len(items)


def test_removals_are_instance_wise_nested_and_the_class_one_is_a_class():
    task = noisy_digits()
    train = len(task.train_ids)
    small, mid, large = (forget_ids(task, ratio=r) for r in (0.02, 0.05, 0.10))
    assert (len(small), len(mid), len(large)) == (round(0.02 * train), round(0.05 * train), round(0.10 * train))
    assert set(small) < set(mid) < set(large) <= {int(i) for i in task.train_ids}
    by_class = forget_ids(task, forget_class=3)
    assert {int(task.y[list(task.ids).index(i)]) for i in by_class[:20]} == {3}


def test_task_bytes_are_deterministic_in_one_process():
    assert task_npz_bytes(noisy_digits()) == task_npz_bytes(noisy_digits())


def test_unknown_configuration_is_refused_in_one_line():
    from bnconvention.errors import UsageError

    with pytest.raises(UsageError, match="population familys"):
        PopulationConfig(families=("salun",))


def test_tiny_population_has_its_structure_and_metadata(tiny_population):
    manifest = tiny_population
    assert manifest.names == [i.name for i in plan(TINY_CONFIG)]
    for name in manifest.names:
        side = manifest.sidecar(name)
        assert side["role"] in ("base", "retrain", "unlearned", "twin")
        folder = manifest.folder(name)
        ids = [int(line) for line in (folder / "forget.txt").read_text().splitlines() if not line.startswith("#")]
        from bnconvention.standard.naming import record_ids_sha256

        assert record_ids_sha256(ids) == side["forget_ids"]["record_ids_sha256"]
        assert side["convention"]["buffer_update_mode"] == side["buffer_update_mode"]
    modes = {manifest.sidecar(n)["variant"]: manifest.sidecar(n)["buffer_update_mode"]
             for n in manifest.select(role="unlearned")}
    assert modes == {"train": "train", "eval": "frozen"}


def test_published_cells_in_the_card_are_what_the_producer_measured(tiny_population):
    from bnconvention.audit.measure.published import card_published_cells
    from bnconvention.formats.card import parse_card_metadata

    manifest = tiny_population
    for name in manifest.names:
        metadata = parse_card_metadata(manifest.card_path(name).read_text("utf-8"), source=name)
        published = card_published_cells(metadata, {"forget accuracy": "df", "retain accuracy": "dr",
                                                     "test accuracy": "dt"}, source=name)
        measured = manifest.sidecar(name)["measured_at_release"]
        assert published == {"df": measured["forget"], "dr": measured["retain"], "dt": measured["test"]}


def test_published_cells_are_the_checkpoints_accuracy(tiny_population):
    from bnconvention.zoo.methods import accuracy
    from bnconvention.zoo.population_plan import removal
    from bnconvention.zoo.population_train import removal_data

    manifest = tiny_population
    name = manifest.select(role="unlearned", variant="eval")[0]
    side = manifest.sidecar(name)
    data = removal_data(noisy_digits(), removal(side["removal"]["name"]))
    model = manifest.load_model(name)
    assert accuracy(model, data.x["forget"], data.y["forget"]) == side["measured_at_release"]["forget"]


def test_cells_do_not_saturate(tiny_population):
    manifest = tiny_population
    tests = [manifest.sidecar(n)["measured_at_release"]["test"] for n in manifest.names]
    assert max(tests) < 0.95 and min(tests) > 0.1
    instance_forget = [manifest.sidecar(n)["measured_at_release"]["forget"] for n in manifest.names
                       if manifest.sidecar(n)["removal"]["kind"] == "instances"]
    assert all(0.0 < value < 1.0 for value in instance_forget)


def test_twins_have_identical_theta_and_different_buffers(tiny_population):
    manifest = tiny_population
    online = [n for n in manifest.select(role="twin") if manifest.sidecar(n)["twin"]["arm"] == "online"]
    assert online
    for name in online:
        partner = manifest.sidecar(name)["twin"]["partner"]
        a, b = load_file(str(manifest.weights_path(name))), load_file(str(manifest.weights_path(partner)))
        assert set(a) == set(b)
        assert all(torch.equal(a[k], b[k]) for k in a if not is_buffer(k))
        assert any(not torch.equal(a[k], b[k]) for k in a if k.endswith("running_mean"))
        seed = manifest.sidecar(name)["seed"]
        base = next(n for n in manifest.select(role="base", seed=seed))
        c = load_file(str(manifest.weights_path(base)))
        assert all(torch.equal(b[k], c[k]) for k in b if is_buffer(k))  # the frozen arm kept the base's buffers
        assert not all(torch.equal(a[k], c[k]) for k in a if not is_buffer(k))  # θ moved
        assert manifest.sidecar(partner)["convention"]["buffer_update_mode"] == "frozen"


@pytest.mark.slow
def test_two_builds_in_one_process_give_identical_bytes(tiny_population, tmp_path: Path):
    from bnconvention.zoo.population_build import build_population

    again = build_population(tmp_path / "again", config=TINY_CONFIG, progress=False)
    assert dict(again.files) == dict(tiny_population.files)
    assert again.code_sha256 == tiny_population.code_sha256


@pytest.mark.slow
def test_a_killed_build_resumes_without_retraining_finished_checkpoints(tiny_population, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    import bnconvention.zoo.population_build as build

    out = tmp_path / "pop"
    partial = tmp_path / ".pop.partial"
    shutil.copytree(tiny_population.root, partial)
    (partial / "manifest.json").unlink()
    (partial / "population.yaml").unlink()
    import json

    (partial / "partial.json").write_text(json.dumps({"format": tiny_population.format, "seed": 0,
                                                      "code_sha256": tiny_population.code_sha256}, sort_keys=True))
    unfinished = tiny_population.names[-1]
    (partial / tiny_population.folders[unfinished] / "README.md").unlink()
    trained: list[str] = []
    original = build._Context.release

    def spy(self, item, model, observation):
        trained.append(item.name)
        return original(self, item, model, observation)

    monkeypatch.setattr(build._Context, "release", spy)
    resumed = build.build_population(out, config=TINY_CONFIG, progress=False)
    assert trained == [unfinished]
    assert dict(resumed.files) == dict(tiny_population.files)
    trained.clear()
    build.build_population(out, config=TINY_CONFIG, progress=False)  # reused as it is
    assert trained == []


@pytest.mark.slow
def test_census_over_the_tiny_population_runs_and_anchors(tiny_population, tmp_path: Path):
    from bnconvention.audit.census.run import run_census
    from bnconvention.audit.spec.audit_spec import load_spec

    spec = load_spec(tiny_population.root / "population.yaml", replicates=2)
    spec = spec.model_copy(update={"recoverability": None})
    outcome = run_census([tiny_population.root], spec, tmp_path / "census")
    counts = outcome.summary.to_json()["counts"]
    assert counts["checkpoints"] == len(tiny_population.names)
    assert counts["anchored"] == counts["anchoring_checked"] == len(tiny_population.names)
    rows = {row["checkpoint"]: row for row in outcome.summary.to_json()["checkpoints"]}
    for name in tiny_population.names:
        measured = tiny_population.sidecar(name)["measured_at_release"]
        assert rows[name]["cells"]["df"]["shipped"] == pytest.approx(measured["forget"], abs=1e-9)
    # the r05 checkpoints anchor only because the rule gave them their own forget set: the default (r10) differs
    base = tiny_population.select(role="base", seed=0)
    assert {tiny_population.sidecar(n)["measured_at_release"]["forget"] for n in base} != {None} and len(
        {tiny_population.sidecar(n)["measured_at_release"]["forget"] for n in base}) == 2


@pytest.mark.slow
def test_a_card_that_does_not_match_the_weights_does_not_anchor(tiny_population, tmp_path: Path):
    from bnconvention.audit.census.run import run_census
    from bnconvention.audit.spec.audit_spec import load_spec

    name = tiny_population.select(role="retrain")[0]
    folder = tmp_path / "pop" / tiny_population.folders[name]
    shutil.copytree(tiny_population.folder(name), folder)
    shutil.copy(tiny_population.root / "task.npz", tmp_path / "pop" / "task.npz")
    card = folder / "README.md"
    measured = tiny_population.sidecar(name)["measured_at_release"]["test"]
    text = card.read_text("utf-8")
    assert f"value: {measured}" in text
    card.write_text(text.replace(f"value: {measured}", f"value: {measured + 0.05}"), "utf-8")
    spec = load_spec(tiny_population.root / "population.yaml", replicates=2)
    spec = spec.model_copy(update={"recoverability": None})
    outcome = run_census([tmp_path / "pop"], spec, tmp_path / "census")
    counts = outcome.summary.to_json()["counts"]
    assert counts["anchored"] == 0 and counts["anchoring_checked"] == 1


@pytest.mark.slow
def test_published_cells_from_a_train_mode_evaluation_fail_to_anchor(tiny_population, tmp_path: Path):
    """Anchoring can fail: a producer that evaluated with BatchNorm in train mode (batch statistics, batches of 64)
    published numbers this audit's eval-mode evaluation does not reproduce, and the census says the published
    cells were an independent measurement."""
    import torch

    from bnconvention.audit.census.run import local_spec, run_census
    from bnconvention.audit.run.runner import prepare_audit
    from bnconvention.audit.spec.audit_spec import load_spec

    spec = load_spec(tiny_population.root / "population.yaml", replicates=2)
    spec = spec.model_copy(update={"recoverability": None})
    # frozen buffers: batch statistics move retain and test accuracy by 0.10-0.11 on this checkpoint (measured), far
    # beyond 0.02; r10 is outside the spec's diagnostics rule, so the checkpoint needs no sibling in the folder
    name = next(n for n in tiny_population.select(role="unlearned", variant="eval", family="relabel")
                if n.startswith("r10-"))
    folder = tmp_path / "pop" / tiny_population.folders[name]
    shutil.copytree(tiny_population.folder(name), folder)
    shutil.copy(tiny_population.root / "task.npz", tmp_path / "pop" / "task.npz")
    weights = folder / f"{name}.safetensors"
    prepared = prepare_audit(weights, local_spec(spec, weights))  # the checkpoint's removal's rule applied
    model, data = prepared.checkpoint.model, prepared.data
    model.train()  # the producer's mistake
    published = {}
    with torch.no_grad():
        for key, split in (("forget", data.forget), ("retain", data.retain), ("test", data.test)):
            hits = sum(int((model(data.eval_transform(split.x[i:i + 64], generator=None)).argmax(1)
                            == split.y[i:i + 64]).sum()) for i in range(0, len(split.x), 64))
            published[key] = hits / len(split.y)
    measured = tiny_population.sidecar(name)["measured_at_release"]
    assert max(abs(published[k] - measured[k]) for k in measured) > 0.02  # else this checkpoint tests nothing
    card = folder / "README.md"
    text = card.read_text("utf-8")
    for key, value in measured.items():
        assert f"value: {value}" in text
        text = text.replace(f"value: {value}", f"value: {published[key]}")
    card.write_text(text, "utf-8")
    summary = run_census([tmp_path / "pop"], spec, tmp_path / "census").summary.to_json()
    assert summary["counts"]["anchored"] == 0 and summary["counts"]["anchoring_checked"] == 1
    anchoring = summary["readings"]["anchoring"]
    assert anchoring["independent"] is True and anchoring["failed"] == 1 and anchoring["max_abs_diff"] > 0.02


def test_committed_example_spec_is_the_built_one(repo_root: Path):
    from bnconvention.examples import read_example
    from bnconvention.zoo.population_spec import example_spec_text

    assert (repo_root / "examples/audit/digits-population.yaml").read_text("utf-8") == example_spec_text()
    assert read_example("audit/digits-population.yaml").decode("utf-8") == example_spec_text()  # the packaged copy


def test_cli_population_build_reuses_an_intact_build(tiny_population, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]):
    import bnconvention.zoo.population_build as build
    from bnconvention.cli.main import main

    monkeypatch.setattr(build, "PopulationConfig", lambda: TINY_CONFIG)  # the CLI builds the default configuration
    monkeypatch.setattr(build, "_build_into", None)  # reuse only: building anything would fail
    assert main(["zoo", "build", "--population", "--out", str(tiny_population.root), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "14 checkpoints (2 base, 2 retrain, 8 unlearned, 2 twin)" in out
    assert "population.yaml" in out


def test_cli_population_refuses_a_zoo_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from bnconvention.cli.main import main

    assert main(["zoo", "build", "--population", "--variant", "bn-base", "--out", str(tmp_path / "p")]) == 2
    assert "--variant names a zoo variant" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_local_census_applies_the_spec_rules_by_removal_folder(tmp_path: Path):
    from bnconvention.audit.census.run import local_spec
    from bnconvention.audit.spec.audit_spec import load_spec
    from bnconvention.standard.naming import record_ids_sha256
    from bnconvention.zoo.population_spec import spec_text

    (tmp_path / "population.yaml").write_text(spec_text(PopulationConfig()), "utf-8")
    spec = load_spec(tmp_path / "population.yaml")
    r05 = local_spec(spec, tmp_path / "r05" / "r05-s0-base" / "r05-s0-base.safetensors")
    assert r05.splits.forget_ids_sha256 == record_ids_sha256(forget_ids(noisy_digits(), ratio=0.05))
    assert r05.rules == []
    twin = local_spec(spec, tmp_path / "r10" / "r10-s0-twin1-online" / "r10-s0-twin1-online.safetensors")
    assert twin is spec and twin.splits.forget_ids_sha256 == record_ids_sha256(forget_ids(noisy_digits(), ratio=0.1))
    r10 = local_spec(spec, tmp_path / "r10" / "r10-s0-base" / "r10-s0-base.safetensors")  # the provenance rule
    assert r10.provenance is not None and r10.splits == spec.splits and r10.rules == []
    assert local_spec(spec, tmp_path / "r05" / "r05-s0-relabel-eval" / "x.safetensors").diagnostics is not None
    assert local_spec(spec, tmp_path / "r05" / "r05-s1-relabel-eval" / "x.safetensors").diagnostics is None
