"""Tests of bnconvention.zoo: architectures, methods, the built zoo, the BN illusion on it, caching and hooks.

The ``zoo`` fixture (tests/conftest.py) builds the real zoo once per session into ``.cache/``; tests that exercise
the build machinery itself (reuse, tampering, resume, hooks) use a fake or shortened training to stay fast.
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from bnconvention.architectures.build import build_model
from bnconvention.cli.main import main
from bnconvention.data.pools import iter_batches, load_dataset, split_by_classes
from bnconvention.errors import UsageError
from bnconvention.formats.safetensors_header import read_header
from bnconvention.refitting import refit
from bnconvention.standard.models import FittingConvention
from bnconvention.zoo import (
    DIGITS_EVAL_TRANSFORM,
    VARIANTS,
    accuracy,
    bad_teacher,
    build_zoo,
    code_sha256,
    convnet_bn,
    convnet_gn,
    default_zoo_dir,
    gradient_ascent,
    methods,
    predict,
    random_relabel,
    read_manifest,
    split_tensors,
)
from bnconvention.zoo import build as build_module
from bnconvention.zoo import variants as variants_module

NAMES = ["bn-base", "bn-retrain", "bn-ga-train", "bn-relabel-train", "bn-finetune", "bn-badteacher-eval",
         "bn-relabel-eval", "gn-base", "gn-retrain", "gn-ga-train", "gn-relabel-train", "gn-finetune",
         "gn-badteacher-eval", "gn-relabel-eval"]
BUFFER_MODES = {
    "bn-base": "train", "bn-retrain": "train", "bn-ga-train": "train", "bn-relabel-train": "train",
    "bn-finetune": "train", "bn-badteacher-eval": "frozen", "bn-relabel-eval": "frozen",
    **{name: "untouched" for name in NAMES if name.startswith("gn-")},
}
CONVENTION_NAMES = {
    "bn-base": "train/train/train-transform/ema-m0.1",
    "bn-retrain": "train/retain/train-transform/ema-m0.1",
    "bn-ga-train": "train/forget/train-transform/ema-m0.1",
    "bn-relabel-train": "train/forget/train-transform/ema-m0.1",
    "bn-finetune": "train/retain/train-transform/ema-m0.1",
    "bn-badteacher-eval": "frozen/train/train-transform/ema-m0.1",
    "bn-relabel-eval": "frozen/train/train-transform/ema-m0.1",
}
SPLIT_SIZES = {"train": 1334, "retain": 1199, "forget": 135, "test": 463}
BN_LAYERS = ["features.1", "features.4", "features.8", "features.11"]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """These models are tiny: one thread is faster than two on a shared machine (no spinning on a busy core)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def splits():
    return split_by_classes(load_dataset("digits"), forget_classes=[3])


def _running(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if k.rsplit(".", 1)[-1] in ("running_mean", "running_var",
                                                                         "num_batches_tracked")}


def _trainable(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    running = _running(state)
    return {k: v for k, v in state.items() if k not in running}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- architectures ----------------------------------------------------------------------------------------------------


def test_factories_build_the_zoo_architectures() -> None:
    bn = build_model("zoo/convnet-bn", {"width": 8})
    gn = build_model("zoo/convnet-gn", {"width": 8})
    assert [n for n, m in bn.named_modules() if isinstance(m, torch.nn.BatchNorm2d)] == BN_LAYERS
    assert [n for n, m in gn.named_modules() if isinstance(m, torch.nn.GroupNorm)] == BN_LAYERS
    assert bn(torch.zeros(2, 1, 16, 16)).shape == (2, 10)
    # the twin has the same trainable tensors (names and shapes) and no running statistics
    assert {k: v.shape for k, v in gn.state_dict().items()} == {
        k: v.shape for k, v in _trainable(bn.state_dict()).items()}


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"width": 0}, "width must be a positive integer", id="width-0"),
    pytest.param({"num_classes": True}, "num_classes must be a positive integer", id="bool"),
    pytest.param({"groups": 0}, "groups must be a positive integer", id="groups"),
])
def test_convnet_rejects_bad_arguments(kwargs, message) -> None:
    factory = convnet_gn if "groups" in kwargs else convnet_bn
    with pytest.raises(UsageError, match=message):
        factory(**kwargs)


# --- methods ----------------------------------------------------------------------------------------------------------


def _toy(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(24, 1, 16, 16, generator=generator)
    y = torch.arange(24) % 10
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = convnet_bn(width=4)
    return model, x, y


class _Tags:
    def __init__(self) -> None:
        self.tags: list[str] = []

    def set_split(self, tag: str) -> None:
        self.tags.append(tag)


@pytest.mark.parametrize("bn_mode", ["train", "eval"])
@pytest.mark.parametrize("method", ["gradient_ascent", "random_relabel"])
def test_bn_mode_decides_whether_buffers_move(method, bn_mode) -> None:
    model, x, y = _toy()
    before = copy.deepcopy(model.state_dict())
    observer = _Tags()
    generator = torch.Generator().manual_seed(1)
    if method == "gradient_ascent":
        gradient_ascent(model, x, y, steps=3, lr=1e-2, batch_size=8, bn_mode=bn_mode, generator=generator,
                        observer=observer)
        assert observer.tags == ["forget"] * 3
    else:
        random_relabel(model, x, y, epochs=2, lr=1e-3, batch_size=8, bn_mode=bn_mode, generator=generator,
                       observer=observer)
        assert observer.tags == ["forget"] * 6
    after = model.state_dict()
    assert not _same(_trainable(before), _trainable(after))  # the weights moved either way
    assert _same(_running(before), _running(after)) == (bn_mode == "eval")  # buffers only in train mode
    assert not model.training


def test_bad_teacher_eval_mode_freezes_buffers_and_alternates_splits() -> None:
    model, x, _ = _toy()
    competent = copy.deepcopy(model)
    incompetent, _, _ = _toy(seed=9)
    before = copy.deepcopy(model.state_dict())
    observer = _Tags()
    losses = bad_teacher(model, x, x[:10], competent=competent, incompetent=incompetent, epochs=2, lr=1e-3,
                         batch_size=4, retain_fraction=0.5, generator=torch.Generator().manual_seed(0),
                         observer=observer)
    assert len(losses) == 2
    # per epoch: 12 retain records in 3 batches and 10 forget records in 3 batches, interleaved, never mixed
    assert observer.tags == ["forget", "retain", "forget", "retain", "forget", "retain"] * 2
    assert _same(_running(before), _running(model.state_dict()))
    assert not _same(_trainable(before), _trainable(model.state_dict()))
    assert _same(competent.state_dict(), before)  # the teacher is untouched


def test_random_labels_are_never_the_true_label() -> None:
    y = torch.arange(1000) % 10
    wrong = methods.random_labels(y, num_classes=10, generator=torch.Generator().manual_seed(0))
    assert not bool((wrong == y).any())
    assert set(wrong.tolist()) == set(range(10))


@pytest.mark.parametrize("n", [2, 63, 64, 65, 129, 130, 1199])
def test_batches_per_epoch_matches_the_batches(n) -> None:
    batches = list(methods._batches(n, 64, torch.Generator().manual_seed(0)))
    assert len(batches) == methods.batches_per_epoch(n, 64)
    assert sorted(torch.cat(batches).tolist()) == list(range(n))
    assert min(len(b) for b in batches) >= 2


def test_accuracy_and_predict_restore_module_modes() -> None:
    model, x, y = _toy()
    methods.set_bn_mode(model, "eval")  # model in train mode, BN layers in eval: a mixed state to restore
    flags = [m.training for m in model.modules()]
    predictions = predict(model, x, batch_size=5)
    assert predictions.shape == (24,)
    assert accuracy(model, x, y, batch_size=7) == float((predictions == y).double().mean())
    assert [m.training for m in model.modules()] == flags


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda m, x, y: accuracy(m, x, y[:3]), "as many labels as inputs", id="length"),
    pytest.param(lambda m, x, y: accuracy(m, x[:0], y[:0]), "empty set", id="empty"),
    pytest.param(lambda m, x, y: predict(m, x, batch_size=0), "batch_size must be positive", id="batch-size"),
    pytest.param(lambda m, x, y: methods.set_bn_mode(m, "frozen"), "bn_mode must be", id="bn-mode"),
    pytest.param(lambda m, x, y: gradient_ascent(m, x[:1], y[:1], steps=1, lr=1.0,
                                                 generator=torch.Generator()), "at least 2 samples", id="one-sample"),
    pytest.param(lambda m, x, y: gradient_ascent(m, x.double(), y, steps=1, lr=1.0,
                                                 generator=torch.Generator()), "float32", id="float64"),
])
def test_method_argument_errors(call, message) -> None:
    model, x, y = _toy()
    with pytest.raises(UsageError, match=message):
        call(model, x, y)


# --- the built zoo ----------------------------------------------------------------------------------------------------


def test_manifest_lists_every_file_with_its_sha256(zoo) -> None:
    assert list(zoo.variants) == NAMES
    assert (zoo.format, zoo.seed, zoo.code_sha256) == ("bnconvention-zoo/1", 0, code_sha256())
    assert sorted(zoo.files) == sorted(f"{n}{s}" for n in NAMES for s in (".json", ".safetensors"))
    assert zoo.verify() == []
    assert zoo.data["split_sizes"] == SPLIT_SIZES
    assert zoo.root == default_zoo_dir(zoo.root.parent, seed=0)
    umask = os.umask(0)
    os.umask(umask)
    assert {(zoo.root / f).stat().st_mode & 0o777 for f in [*zoo.files, "manifest.json"]} == {0o666 & ~umask}


def test_variant_configs(zoo, splits) -> None:
    for name in NAMES:
        config = zoo.config(name)
        arch = name[:2]
        assert config["name"] == name
        assert config["architecture"] == {"factory": f"zoo/convnet-{arch}", "kwargs": {"width": 16}}
        assert config["buffer_update_mode"] == BUFFER_MODES[name]
        assert config["channel"] == ("present" if arch == "bn" else "absent")
        assert config["twin"] == ("gn" if arch == "bn" else "bn") + name[2:]
        assert config["data"]["split_sizes"] == SPLIT_SIZES
        assert config["data"]["forget_classes"] == [3]
        assert config["data"]["split_ids_sha256"] == {role: splits[role].ids_sha256 for role in SPLIT_SIZES}
        assert config["method"]["hyperparameters"] == dict(variants_module.variant(name).hyperparameters)
        if arch == "bn":
            convention = FittingConvention.model_validate(config["convention"])
            assert convention.name == CONVENTION_NAMES[name]
            role = convention.data.role
            assert (convention.data.record_count, convention.data.ids_sha256) == (
                splits[role].record_count, splits[role].ids_sha256)
        else:
            assert "convention" not in config and config["data"]["fitting"] == []
    forget = splits["forget"]
    assert zoo.config("bn-ga-train")["data"]["fitting"] == [
        {"role": "train", "record_count": 1334, "ids_sha256": splits["train"].ids_sha256, "by": "bn-base"},
        {"role": "forget", "record_count": 135, "ids_sha256": forget.ids_sha256, "by": "bn-ga-train"},
    ]
    assert [f["by"] for f in zoo.config("bn-badteacher-eval")["data"]["fitting"]] == ["bn-base"]
    assert zoo.config("bn-retrain")["parent"] is None and zoo.config("bn-finetune")["parent"] == "bn-base"


def test_weights_are_plain_safetensors_and_honour_the_buffer_modes(zoo) -> None:
    states = {}
    for name in NAMES:
        path = zoo.weights_path(name)
        header = read_header(path)  # our reference-checked parser accepts every file
        with safe_open(str(path), framework="pt") as handle:
            assert handle.metadata() is None  # weights only
            names = set(handle.keys())
        assert names == set(header.tensors) and header.metadata is None
        states[name] = load_file(str(path))
        model = build_model(zoo.config(name)["architecture"]["factory"], {"width": 16})
        assert names == set(model.state_dict())
    base = states["bn-base"]
    for name in ("bn-badteacher-eval", "bn-relabel-eval"):  # frozen: buffers bit-identical to the parent's
        assert _same(_running(states[name]), _running(base))
        assert not _same(_trainable(states[name]), _trainable(base))
    for name in ("bn-ga-train", "bn-relabel-train", "bn-finetune"):  # train mode: buffers rewritten
        assert not any(torch.equal(states[name][k], base[k]) for k in _running(base) if "running_mean" in k)
    assert all(not _running(states[name]) for name in NAMES if name.startswith("gn-"))


def test_shipped_accuracy_in_configs_is_reproducible(zoo, splits) -> None:
    for name in ("bn-base", "bn-badteacher-eval", "gn-badteacher-eval"):
        model = zoo.load_model(name)
        shipped = zoo.config(name)["shipped_accuracy"]
        for role in ("forget", "retain", "test"):
            assert accuracy(model, splits[role].x, splits[role].y) == shipped[role]


def _forget_accuracy_after_refit(model, splits, **kwargs) -> tuple[float, float]:
    forget = splits["forget"]
    before = accuracy(model, forget.x, forget.y)
    report = refit(model, **kwargs)
    digests = report.declaration.refit
    assert digests.trainable_sha256_before == digests.trainable_sha256_after
    return before, accuracy(model, forget.x, forget.y)


def test_bn_illusion_exact_refit_on_retain(zoo, splits) -> None:
    """Eval-mode distillation rebounds by > 50 pp; its GroupNorm twin does not move at all."""
    retain = splits["retain"]
    pool = list(iter_batches(retain.x, batch_size=256))
    data, transform = retain.data_split(), DIGITS_EVAL_TRANSFORM.standard()
    model = zoo.load_model("bn-badteacher-eval")
    shipped, refitted = _forget_accuracy_after_refit(model, splits, pool=pool, rule="exact", data=data,
                                                     transform=transform)
    assert shipped < 0.2
    assert refitted - shipped > 0.5

    twin = zoo.load_model("gn-badteacher-eval")
    everything = torch.cat([splits[role].x for role in ("train", "test")])
    logits_before = twin(everything).detach()
    report = refit(twin, pool, rule="exact", data=data, transform=transform)
    assert report.channel == "absent"
    assert torch.equal(twin(everything).detach(), logits_before)  # exactly equal, not approximately
    assert torch.equal(predict(twin, everything), logits_before.argmax(dim=1))


def test_expected_pattern_across_variants(zoo, splits) -> None:
    """Eval-mode methods rebound most; train-mode methods move less; the retrain reference stays low."""
    pool = list(iter_batches(splits["retain"].x, batch_size=256))
    shifts = {}
    for name in ("bn-retrain", "bn-ga-train", "bn-relabel-train", "bn-badteacher-eval", "bn-relabel-eval"):
        shipped, refitted = _forget_accuracy_after_refit(zoo.load_model(name), splits, pool=pool, rule="exact")
        shifts[name] = refitted - shipped
        if name == "bn-retrain":
            assert refitted < 0.05
    assert shifts["bn-relabel-eval"] > 0.5
    assert max(shifts["bn-ga-train"], shifts["bn-relabel-train"]) < min(shifts["bn-badteacher-eval"],
                                                                        shifts["bn-relabel-eval"])


def test_ten_unlabeled_images_recover_forget_accuracy(zoo, splits) -> None:
    pool = [splits["test"].x[:10]]  # ten unlabeled test images, one update_bn-style batch
    shipped, recovered = _forget_accuracy_after_refit(zoo.load_model("bn-badteacher-eval"), splits, pool=pool,
                                                      rule="cumulative")
    assert recovered - shipped > 0.5
    twin_shipped, twin_after = _forget_accuracy_after_refit(zoo.load_model("gn-badteacher-eval"), splits, pool=pool,
                                                            rule="cumulative")
    assert twin_after == twin_shipped


@pytest.mark.slow
def test_rebuild_is_byte_identical(tmp_path: Path) -> None:
    # Two builds in this process, not one against the session's cached zoo: training reduces in float32, so a zoo
    # cached by an earlier run under other CPU kernels (ATEN_CPU_CAPABILITY, another machine's .cache) holds other,
    # equally valid bytes. What this checks is that a build is deterministic where it runs.
    first = build_zoo(tmp_path / "first", seed=0, progress=False, variants=["bn-badteacher-eval"])
    rebuilt = build_zoo(tmp_path / "zoo", seed=0, progress=False, variants=["bn-badteacher-eval"])
    assert rebuilt.variants == ("bn-base", "bn-badteacher-eval")
    for filename in sorted(rebuilt.files):
        assert (rebuilt.root / filename).read_bytes() == (first.root / filename).read_bytes(), filename
        assert rebuilt.files[filename] == first.files[filename]
    assert not list(tmp_path.glob(".zoo.partial"))


def test_cli_reuses_the_built_zoo(zoo, capsys) -> None:
    assert main(["zoo", "build", "--out", str(zoo.root), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"zoo in {zoo.root} (seed 0, code {zoo.code_sha256[:12]})" in out
    assert any(line.split()[:2] == ["bn-badteacher-eval", "frozen"] for line in out.splitlines())
    assert read_manifest(zoo.root).files == zoo.files


@pytest.mark.parametrize("argv, message", [
    pytest.param(["zoo"], "needs an action", id="no-action"),
    pytest.param(["zoo", "build", "--variant", "bn-nope"], "unknown zoo variant 'bn-nope'", id="bad-variant"),
    pytest.param(["zoo", "build", "--seed", "-1"], "--seed must be a non-negative integer", id="bad-seed"),
])
def test_cli_usage_errors(argv, message, tmp_path: Path, capsys) -> None:
    assert main([*argv, "--out", str(tmp_path / "z")] if len(argv) > 1 else argv) == 2
    assert message in capsys.readouterr().err


# --- build machinery (fake or shortened training) ---------------------------------------------------------------------


class _FakeTraining:
    """Stands in for run_variant: counts calls, trains nothing, can fail on a chosen variant."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail_on = fail_on

    def __call__(self, spec, model, data, **kwargs):
        if spec.name == self.fail_on:
            raise KeyboardInterrupt
        self.calls.append(spec.name)
        with torch.no_grad():  # make the weights depend on the variant so files differ
            next(model.parameters()).add_(len(self.calls))
        return []


SMALL = ["gn-ga-train"]  # gn-base and gn-ga-train


def test_build_reuses_rebuilds_when_tampered_and_when_the_seed_changes(tmp_path: Path, monkeypatch) -> None:
    fake = _FakeTraining()
    monkeypatch.setattr(build_module, "run_variant", fake)
    out = tmp_path / "zoo"
    first = build_zoo(out, seed=3, progress=False, variants=SMALL)
    assert fake.calls == ["gn-base", "gn-ga-train"]
    again = build_zoo(out, seed=3, progress=False, variants=SMALL)
    assert fake.calls == ["gn-base", "gn-ga-train"] and again.files == first.files  # reused, nothing trained

    weights = out / "gn-ga-train.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00\x00\x00\x01")
    assert read_manifest(out).verify() == ["gn-ga-train.safetensors: sha256 differs from the manifest"]
    repaired = build_zoo(out, seed=3, progress=False, variants=SMALL)
    assert len(fake.calls) == 4 and repaired.verify() == []

    build_zoo(out, seed=4, progress=False, variants=SMALL)
    assert len(fake.calls) == 6 and read_manifest(out).seed == 4
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["zoo"]  # no partial or old folders left


def test_interrupted_build_resumes_and_keeps_the_previous_zoo(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "zoo"
    monkeypatch.setattr(build_module, "run_variant", _FakeTraining())
    previous = build_zoo(out, seed=0, progress=False, variants=SMALL)

    failing = _FakeTraining(fail_on="gn-ga-train")
    monkeypatch.setattr(build_module, "run_variant", failing)
    with pytest.raises(KeyboardInterrupt):
        build_zoo(out, seed=1, progress=False, variants=SMALL)
    assert failing.calls == ["gn-base"]
    assert read_manifest(out).files == previous.files and read_manifest(out).verify() == []  # old zoo intact
    assert (tmp_path / ".zoo.partial" / "gn-base.json").is_file()

    resumed = _FakeTraining()
    monkeypatch.setattr(build_module, "run_variant", resumed)
    manifest = build_zoo(out, seed=1, progress=False, variants=SMALL)
    assert resumed.calls == ["gn-ga-train"]  # gn-base came from the interrupted build
    assert manifest.seed == 1 and manifest.verify() == []
    assert not (tmp_path / ".zoo.partial").exists()


def test_build_refuses_to_replace_a_foreign_folder(tmp_path: Path) -> None:
    precious = tmp_path / "mine" / "notes.txt"
    precious.parent.mkdir()
    precious.write_text("keep me")
    with pytest.raises(UsageError, match="non-empty folder without a zoo manifest.json"):
        build_zoo(precious.parent, progress=False, variants=SMALL)
    assert precious.read_text() == "keep me"
    with pytest.raises(UsageError, match="exists and is not a folder"):
        build_zoo(precious, progress=False, variants=SMALL)


@pytest.mark.parametrize("seed", [pytest.param(-1, id="negative"), pytest.param(True, id="bool")])
def test_build_rejects_bad_seed(tmp_path: Path, seed) -> None:
    with pytest.raises(UsageError, match="non-negative integer"):
        build_zoo(tmp_path / "z", seed=seed)


def test_observe_hook_wraps_each_variant(tmp_path: Path, monkeypatch) -> None:
    base = variants_module.variant("bn-base")
    short = replace(base, hyperparameters={**base.hyperparameters, "epochs": 1})  # keep the test fast
    monkeypatch.setitem(variants_module._BY_NAME, "bn-base", short)
    seen: dict[str, tuple[torch.nn.Module, _Tags]] = {}

    class Recorder(_Tags):
        def to_dict(self) -> dict:
            return {"split_tags": sorted(set(self.tags)), "batches": len(self.tags)}

    @contextlib.contextmanager
    def observe(name: str, model: torch.nn.Module):
        recorder = Recorder()
        seen[name] = (model, recorder)
        yield recorder

    zoo = build_zoo(tmp_path / "zoo", progress=False, observe=observe, variants=["bn-badteacher-eval"])
    assert list(seen) == ["bn-base", "bn-badteacher-eval"]
    data = split_tensors()
    assert seen["bn-base"][1].tags == ["train"] * variants_module.batch_count(short, data)
    teacher_tags = seen["bn-badteacher-eval"][1].tags
    assert set(teacher_tags) == {"retain", "forget"}
    assert len(teacher_tags) == variants_module.batch_count(variants_module.variant("bn-badteacher-eval"), data)
    for name, (model, recorder) in seen.items():  # the hook saw the very model that was saved
        assert _same(model.state_dict(), load_file(str(zoo.weights_path(name))))
        observation = zoo.observation_path(name)
        assert observation is not None and observation.name in zoo.files
        assert zoo.config(name)["name"] == name
        assert observation.read_text().startswith("{\n") and f'"batches": {len(recorder.tags)}' in \
            observation.read_text()


def test_observe_hook_yielding_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(build_module, "run_variant", _FakeTraining())
    names: list[str] = []

    @contextlib.contextmanager
    def observe(name, model):
        names.append(name)
        yield None

    zoo = build_zoo(tmp_path / "zoo", progress=False, observe=observe, variants=SMALL)
    assert names == ["gn-base", "gn-ga-train"]
    assert zoo.observation_path("gn-base") is None
    assert sorted(zoo.files) == ["gn-base.json", "gn-base.safetensors", "gn-ga-train.json",
                                 "gn-ga-train.safetensors"]


def test_manifest_rejects_unknown_variant_and_malformed_files(zoo, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="has no variant 'bn-nope'"):
        zoo.weights_path("bn-nope")
    (tmp_path / "manifest.json").write_text('{"format": "bnconvention-zoo/1", "seed": 0}')
    with pytest.raises(ValueError, match="is not a zoo manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"files": {"../x": "0"}, "format": "f", "seed": 0, '
                                            '"code_sha256": "c", "variants": [], "data": {}}')
    with pytest.raises(ValueError, match="plain file names"):
        read_manifest(tmp_path)


def test_variant_specs_pair_every_method_with_a_twin() -> None:
    bn = {spec.key: spec for spec in VARIANTS if spec.arch == "bn"}
    gn = {spec.key: spec for spec in VARIANTS if spec.arch == "gn"}
    assert bn.keys() == gn.keys()
    for key, spec in bn.items():
        twin = gn[key]
        assert (twin.method, twin.bn_mode, dict(twin.hyperparameters)) == (
            spec.method, spec.bn_mode, dict(spec.hyperparameters))
        assert variants_module.derived_seed(0, spec.key) == variants_module.derived_seed(0, twin.key)
