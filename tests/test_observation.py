"""The recorder's rules as pure functions: layer modes, model modes, contradictions, conventions from observations."""

from __future__ import annotations

import pytest

from bnconvention.authoring.declaration import make_transform
from bnconvention.authoring.observation import (
    DECLARED_FROZEN_BUFFERS_CHANGED,
    DECLARED_MODE_MISMATCH,
    DECLARED_REFIT_NO_REFIT,
    DECLARED_RULE_MISMATCH,
    DECLARED_TRAIN_NO_BUFFER_UPDATE,
    DECLARED_UNTOUCHED_BUFFERS_CHANGED,
    MOMENTUM_VARIES,
    SPLIT_MISMATCH,
    UNOBSERVED_BUFFER_WRITE,
    combine_modes,
    convention_from_observation,
    declared_contradictions,
    layer_mode,
    observed_contradictions,
    with_declared,
)
from bnconvention.errors import RecordError
from bnconvention.standard.models import LayerObservation, Observation

TRANSFORM = make_transform(mode="train", reference="train.py:train_transform", augmentations=["hflip p=0.5"])


def events(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = dict(tracks=True, updates=0, refits=0, last_update_tick=0, last_refit_tick=0,
                                   last_frozen_tick=0, buffers_changed=False, trainable_changed=False)
    base.update(overrides)
    return base


@pytest.mark.parametrize(("layer", "expected"), [
    pytest.param(events(tracks=False, updates=5, buffers_changed=True), None, id="no-running-stats"),
    pytest.param(events(), "untouched", id="nothing-happened"),
    pytest.param(events(trainable_changed=True, last_frozen_tick=4), "frozen", id="trained-with-frozen-bn"),
    pytest.param(events(trainable_changed=True), "frozen", id="trained-layer-never-reached"),
    pytest.param(events(buffers_changed=True), "unknown", id="changed-without-write"),
    pytest.param(events(updates=3, last_update_tick=6, buffers_changed=True, trainable_changed=True), "train",
                 id="train"),
    pytest.param(events(updates=3, last_update_tick=6, buffers_changed=False, trainable_changed=True), "unknown",
                 id="updates-then-restored"),
    pytest.param(events(updates=3, last_update_tick=6, last_frozen_tick=2, buffers_changed=True,
                        trainable_changed=True), "train", id="frozen-then-train"),
    pytest.param(events(updates=3, last_update_tick=6, last_frozen_tick=9, buffers_changed=True,
                        trainable_changed=True), "mixed", id="train-then-frozen"),
    pytest.param(events(updates=3, last_update_tick=6, last_frozen_tick=9, buffers_changed=True,
                        trainable_changed=False), "train", id="grad-forwards-after-but-weights-unchanged"),
    pytest.param(events(refits=1, last_refit_tick=5, buffers_changed=True, trainable_changed=True), "refit",
                 id="refit"),
    pytest.param(events(refits=1, last_refit_tick=5, buffers_changed=False), "refit", id="refit-same-values"),
    pytest.param(events(updates=4, last_update_tick=3, refits=1, last_refit_tick=5, last_frozen_tick=2,
                        buffers_changed=True, trainable_changed=True), "refit", id="train-frozen-then-refit"),
    pytest.param(events(updates=4, last_update_tick=8, refits=1, last_refit_tick=5, buffers_changed=True,
                        trainable_changed=True), "mixed", id="refit-then-updates"),
    pytest.param(events(refits=1, last_refit_tick=5, last_frozen_tick=7, buffers_changed=True,
                        trainable_changed=True), "mixed", id="refit-then-frozen-steps"),
])
def test_layer_mode(layer: dict[str, object], expected: str | None) -> None:
    assert layer_mode(**layer) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("modes", "expected"), [
    pytest.param([], "untouched", id="no-batchnorm"),
    pytest.param([None, None], "untouched", id="no-running-stats"),
    pytest.param(["train", None, "train"], "train", id="all-train"),
    pytest.param(["frozen", "frozen"], "frozen", id="all-frozen"),
    pytest.param(["refit", "refit"], "refit", id="all-refit"),
    pytest.param(["train", "frozen"], "mixed", id="some-updated-others-not"),
    pytest.param(["train", "refit"], "mixed", id="some-refit-others-trained"),
    pytest.param(["train", "unknown", "mixed"], "unknown", id="unknown-wins"),
])
def test_combine_modes(modes: list[str | None], expected: str) -> None:
    assert combine_modes(modes) == expected  # type: ignore[arg-type]


def layer(name: str, **overrides: object) -> LayerObservation:
    fields: dict[str, object] = dict(name=name, train_forwards=3, eval_forwards=0, buffer_updates=3,
                                     momenta=[0.1], buffers_changed=True, frozen_forwards=0, refits=0, mode="train")
    fields.update(overrides)
    return LayerObservation(**fields)  # type: ignore[arg-type]


def observation(**overrides: object) -> Observation:
    fields: dict[str, object] = dict(
        train_forwards=3, eval_forwards=0, buffer_updates=3, buffers_changed=True, batch_size_min=30,
        batch_size_max=64, split_tags=["retain"], last_update_split="retain",
        layers=[layer("bn1"), layer("bn2")], mode="train", last_write="update", rule="ema", momentum=0.1,
        frozen_forwards=0, refits=0, trainable_changed=True, dropout="absent", precision="float32",
    )
    fields.update(overrides)
    return Observation(**fields)  # type: ignore[arg-type]


FROZEN = dict(train_forwards=0, buffer_updates=0, buffers_changed=False, split_tags=[], last_update_split=None,
              layers=[layer("bn1", train_forwards=0, buffer_updates=0, momenta=[], buffers_changed=False,
                            eval_forwards=5, frozen_forwards=5, mode="frozen")],
              mode="frozen", last_write=None, rule=None, momentum=None, batch_size_min=None, batch_size_max=None,
              eval_forwards=5, frozen_forwards=5)


def test_observed_contradictions_name_unseen_writes_and_varying_momenta() -> None:
    obs = observation(layers=[layer("bn1", mode="unknown"), layer("bn2", momenta=[0.1, None])], mode="unknown")
    found = observed_contradictions(obs)
    assert [c.code for c in found] == [UNOBSERVED_BUFFER_WRITE, MOMENTUM_VARIES]
    assert found[0].layers == ["bn1"]
    assert found[1].layers == ["bn2"]
    assert "several momenta (0.1, None)" in found[1].message
    assert observed_contradictions(observation()) == []


@pytest.mark.parametrize(("obs_fields", "declared", "codes"), [
    pytest.param({}, dict(declared_mode="frozen"), [DECLARED_FROZEN_BUFFERS_CHANGED], id="frozen-but-changed"),
    pytest.param({}, dict(declared_mode="untouched"), [DECLARED_UNTOUCHED_BUFFERS_CHANGED],
                 id="untouched-but-changed"),
    pytest.param(FROZEN, dict(declared_mode="train"), [DECLARED_TRAIN_NO_BUFFER_UPDATE], id="train-no-update"),
    pytest.param({}, dict(declared_mode="refit"), [DECLARED_REFIT_NO_REFIT], id="refit-never-ran"),
    pytest.param({}, dict(declared_mode="mixed"), [DECLARED_MODE_MISMATCH], id="other-mismatch"),
    pytest.param({}, dict(declared_mode="train", role="retain", rule="ema", momentum=0.1), [], id="agrees"),
    pytest.param({"last_update_split": "forget", "split_tags": ["retain", "forget"]}, dict(role="retain"),
                 [SPLIT_MISMATCH], id="last-updates-from-another-split"),
    pytest.param(FROZEN, dict(role="retain"), [], id="frozen-run-has-no-split-to-contradict"),
    pytest.param({}, dict(rule="cumulative"), [DECLARED_RULE_MISMATCH], id="rule-differs"),
    pytest.param({}, dict(rule="ema", momentum=0.01), [DECLARED_RULE_MISMATCH], id="momentum-differs"),
])
def test_declared_contradictions(obs_fields: dict[str, object], declared: dict[str, object],
                                 codes: list[str]) -> None:
    found = declared_contradictions(observation(**obs_fields), **declared)  # type: ignore[arg-type]
    assert [c.code for c in found] == codes


def test_split_mismatch_message_names_both_splits() -> None:
    obs = observation(mode="refit", last_write="refit", rule="exact", momentum=None, last_update_split="forget",
                      split_tags=["retain", "forget"])
    (found,) = declared_contradictions(obs, declared_mode="refit", role="retain")
    assert found.message == ("a refit declared on 'retain' data, but the last buffer updates came from split tag "
                             "'forget' (tags seen: retain, forget)")


def test_with_declared_appends_without_duplicates() -> None:
    once = with_declared(observation(), declared_mode="frozen")
    twice = with_declared(once, declared_mode="frozen")
    assert [c.code for c in twice.contradictions] == [DECLARED_FROZEN_BUFFERS_CHANGED]


def test_convention_from_a_train_observation_is_measured() -> None:
    convention = convention_from_observation(observation(), dataset_id="sklearn/digits", subset="retain split",
                                             transform=TRANSFORM, rule="cumulative", batch_size=7, num_batches=99)
    assert convention.name == "train/retain/train-transform/ema-m0.1"
    assert convention.accumulation.batch_size == 64
    assert convention.accumulation.num_batches == 3
    assert convention.accumulation.precision == "float32"
    assert convention.other_modules.dropout == "absent"


def test_convention_from_a_refit_observation_takes_the_shape_from_arguments() -> None:
    obs = observation(mode="refit", last_write="refit", rule="exact", momentum=None)
    convention = convention_from_observation(obs, dataset_id="sklearn/digits", subset="retain", transform=TRANSFORM,
                                             batch_size=128, num_batches=4, precision="float64")
    assert convention.name == "refit/retain/train-transform/exact"
    assert (convention.accumulation.batch_size, convention.accumulation.num_batches) == (128, 4)


def test_convention_from_a_frozen_observation_needs_role_and_rule() -> None:
    obs = observation(**FROZEN)
    with pytest.raises(RecordError, match="name it with role="):
        convention_from_observation(obs, dataset_id="d", subset="s", transform=TRANSFORM, rule="ema", momentum=0.1)
    with pytest.raises(RecordError, match="name it with rule="):
        convention_from_observation(obs, dataset_id="d", subset="s", transform=TRANSFORM, role="train")
    convention = convention_from_observation(obs, dataset_id="d", subset="s", transform=TRANSFORM, role="train",
                                             rule="ema", momentum=0.1)
    assert convention.name == "frozen/train/train-transform/ema-m0.1"


def test_convention_role_from_a_tag_that_is_not_a_split_role_is_refused() -> None:
    obs = observation(last_update_split="warmup", split_tags=["warmup"])
    with pytest.raises(RecordError, match="the last write was tagged 'warmup'"):
        convention_from_observation(obs, dataset_id="d", subset="s", transform=TRANSFORM)


def test_convention_from_an_observation_without_mode_is_refused() -> None:
    with pytest.raises(RecordError, match="not produced by bnconvention's recorder"):
        convention_from_observation(observation(mode=None), dataset_id="d", subset="s", transform=TRANSFORM)
