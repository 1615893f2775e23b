"""Half-precision checkpoints and refits that write weights: float16 and bfloat16 releases of timm and
transformers models are read exactly into float32, digests describe the file's own bytes before and after, a refit
writes its statistics back in the buffers' dtype and the checkpoint's own layout (one file, or the same shards),
with every trainable byte unchanged.

Regression: ``tensor 'bn1.bias' is torch.float16 in the file but torch.float32 in the model ... the audit does not
convert dtypes`` (audit), and refits of half-precision files were refused the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from layouts_support import factory_module, moved_buffers, save_state, timm_test_resnet, tiny_transformers_resnet
from safetensors import safe_open

from bnconvention.architectures import factories
from bnconvention.cli.main import main
from bnconvention.formats.checkpoint_files import open_checkpoint
from bnconvention.formats.digests import bn_layer_names, checkpoint_digests, running_names_for_layer
from bnconvention.refitting.weights import load_checkpoint_weights

HALF = [pytest.param(torch.float16, "F16", id="fp16"), pytest.param(torch.bfloat16, "BF16", id="bf16")]
MODELS = [pytest.param(timm_test_resnet, "timm_resnet", id="timm"),
          pytest.param(tiny_transformers_resnet, "tiny_resnet", id="transformers")]


@pytest.fixture(autouse=True)
def _own_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factories, "_user_allowed", {})


@pytest.fixture(scope="module")
def factories_module(tmp_path_factory: pytest.TempPathFactory) -> str:
    return factory_module(tmp_path_factory.mktemp("factories"))


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pool") / "pool.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=(rng.random((32, 1, 16, 16)) * 2 - 0.3).astype(np.float32))
    return path


def _save_half(make, dtype: torch.dtype, folder: Path) -> Path:
    model = moved_buffers(make())
    if hasattr(model, "save_pretrained"):  # transformers writes the model in its dtype
        model.to(dtype).save_pretrained(folder)
        return folder / "model.safetensors"
    folder.mkdir(parents=True, exist_ok=True)
    return save_state(model, folder / "model.safetensors", dtype=dtype)  # as timm's save_for_hf after .half()


def _raw(path: Path) -> dict[str, tuple[str, bytes]]:
    """Every tensor of a checkpoint as (dtype, bytes), across its shards."""
    files = open_checkpoint(path)
    out = {}
    for shard in files.shards:
        data = shard.path.read_bytes()
        for name, info in shard.header.tensors.items():
            start = shard.header.data_offset + info.begin
            out[name] = (info.dtype, data[start:start + info.nbytes])
    return out


def _running_names(model: torch.nn.Module) -> set[str]:
    state = model.state_dict()
    return {n for layer in bn_layer_names(model) for n in running_names_for_layer(layer, state)}


@pytest.mark.parametrize(("make", "factory"), MODELS)
@pytest.mark.parametrize(("dtype", "stored"), HALF)
def test_a_half_precision_file_is_read_exactly_into_float32(make, factory: str, dtype: torch.dtype, stored: str,
                                                            tmp_path: Path) -> None:
    path = _save_half(make, dtype, tmp_path / "release")
    assert {d for d, _ in _raw(path).values()} == {stored, "I64"}
    model = make(seed=5)
    loaded = load_checkpoint_weights(model, path)
    assert {t.dtype for t in model.state_dict().values() if t.is_floating_point()} == {torch.float32}
    with safe_open(str(path), framework="pt") as handle:
        for name in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
            # every half value is a float32 value: the copy holds the file's numbers
            assert torch.equal(model.state_dict()[name], handle.get_tensor(name).to(torch.float32)), name
    assert loaded.stored_digests(model) == checkpoint_digests(loaded.files)  # the file's bytes, converted back
    assert f"the file stores {stored} tensors, read exactly into float32" in loaded.notes[-1]


def _refit(weights: Path, out: Path, module: str, factory: str, pool: Path, tmp_path: Path, *rule: str) -> int:
    return main(["refit", str(weights), "--allow-factory", f"{module}:{factory}", "--arch", f"{module}:{factory}",
                 "--pool", str(pool), "--out", str(out), "--report", str(tmp_path / "report.json"), "--no-progress",
                 *rule])


@pytest.mark.parametrize(("make", "factory"), MODELS)
@pytest.mark.parametrize(("dtype", "stored"), HALF)
def test_a_half_precision_refit_writes_its_statistics_in_the_buffer_dtype(make, factory: str, dtype: torch.dtype,
                                                                          stored: str, factories_module: str,
                                                                          pool: Path, tmp_path: Path) -> None:
    path = _save_half(make, dtype, tmp_path / "release")
    out = tmp_path / "refit.safetensors"
    assert _refit(path, out, factories_module, factory, pool, tmp_path) == 0
    before, after = _raw(path), _raw(out)
    running = _running_names(make())
    assert sorted(before) == sorted(after)
    assert {n: d for n, (d, _) in after.items()} == {n: d for n, (d, _) in before.items()}  # dtypes as in the file
    assert [n for n in before if n not in running and before[n] != after[n]] == []  # θ bytes unchanged
    assert [n for n in running if n.endswith("running_var") and before[n] == after[n]] == []  # φ refit
    source, written = checkpoint_digests(open_checkpoint(path)), checkpoint_digests(open_checkpoint(out))
    assert written.trainable_sha256 == source.trainable_sha256
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["refit"]["trainable_sha256_before"] == report["refit"]["trainable_sha256_after"] == \
        source.trainable_sha256
    assert (report["digests"]["running_sha256"], report["refit"]["running_sha256_before"]) == (
        written.running_sha256, source.running_sha256)
    # the same refit in this process, in float32: the file holds its statistics rounded to the buffer dtype
    from bnconvention.refitting import refit

    model = make(seed=7)
    load_checkpoint_weights(model, path)
    refit(model, list(torch.from_numpy(np.load(pool)["x"]).split(128)), rule="exact")
    with safe_open(str(out), framework="pt") as handle:
        for name in running:
            expected = model.state_dict()[name]
            expected = expected.to(dtype) if expected.is_floating_point() else expected
            assert torch.equal(handle.get_tensor(name), expected), name
    assert main(["validate", str(out)]) == 0  # the stamped record describes the written tensors


def test_a_sharded_refit_writes_the_same_shards_and_index(factories_module: str, pool: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    model = moved_buffers(tiny_transformers_resnet())
    model.save_pretrained(tmp_path / "release", max_shard_size="5KB")
    source = tmp_path / "release" / "model.safetensors.index.json"
    out = tmp_path / "refit"
    assert _refit(tmp_path / "release", out, factories_module, "tiny_resnet", pool, tmp_path) == 0
    shards = sorted(p.name for p in (tmp_path / "release").glob("*.safetensors"))
    assert sorted(p.name for p in out.iterdir()) == sorted([*shards, source.name])
    assert (out / source.name).read_bytes() == source.read_bytes()  # the index, byte for byte
    running = _running_names(model)
    before, after = _raw(source), _raw(out / source.name)
    for shard in shards:  # each shard holds the same tensors, θ bytes unchanged
        names_before = open_checkpoint(tmp_path / "release" / shard).tensors()
        assert list(open_checkpoint(out / shard).tensors()) == list(names_before)
        assert [n for n in names_before if n not in running and before[n] != after[n]] == []
    assert [n for n in running if n.endswith("running_mean") and before[n] == after[n]] == []
    assert checkpoint_digests(open_checkpoint(out)).trainable_sha256 == \
        checkpoint_digests(open_checkpoint(source)).trainable_sha256
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0  # one checkpoint, its record in every shard
    shown = capsys.readouterr().out
    assert "index of 38 tensors in 5 shards; agrees with the shards' headers; declaration refit/" in shown
    assert shown.rstrip().endswith("digests match the tensors\n\n1 file checked: 0 errors, 0 warnings")


@pytest.mark.parametrize(("out", "message"), [
    pytest.param("release", "is the folder of the sharded input; write the refit to another folder", id="in-place"),
    pytest.param("refit.safetensors", "is sharded: --out names a folder or a .safetensors.index.json", id="one-file"),
])
def test_a_sharded_refit_never_replaces_its_shards_or_merges_them(out: str, message: str, factories_module: str,
                                                                  pool: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tiny_transformers_resnet().save_pretrained(tmp_path / "release", max_shard_size="5KB")
    before = {p.name: p.read_bytes() for p in (tmp_path / "release").iterdir()}
    assert _refit(tmp_path / "release", tmp_path / out, factories_module, "tiny_resnet", pool, tmp_path) == 2
    assert message in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (tmp_path / "release").iterdir()} == before
    assert not (tmp_path / "refit.safetensors").exists() and not (tmp_path / "report.json").exists()


def test_round_running_gives_the_statistics_a_written_refit_stores(tmp_path: Path) -> None:
    path = _save_half(timm_test_resnet, torch.float16, tmp_path / "release")
    model = timm_test_resnet()
    loaded = load_checkpoint_weights(model, path)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_var"):
                buffer.add_(1e-4)  # between two float16 values
    loaded.round_running(model)
    stored = loaded.stored_state(model)
    for name, buffer in model.named_buffers():
        if buffer.is_floating_point():
            assert torch.equal(buffer, stored[name].to(torch.float32)), name


# --- the audit of half-precision and sharded releases --------------------------------------------------------------


def _spec(tmp_path: Path, module: str, factory: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
        "model": {"factory": f"{module}:{factory}"}, "criteria": ["df <= 0.05"], "replicates": 2,
        "refit": {"pool_size": 64, "batch_size": 64}, "recoverability": None, "provenance": None}), encoding="utf-8")
    return spec


@pytest.mark.slow
@pytest.mark.parametrize(("layout", "factory"), [
    pytest.param("bf16", "timm_resnet", id="timm-bf16"),
    pytest.param("fp16", "tiny_resnet", id="transformers-fp16"),
    pytest.param("sharded", "tiny_resnet", id="transformers-sharded"),
])
def test_the_audit_reads_every_layout_and_binds_the_files_digests(layout: str, factory: str, factories_module: str,
                                                                  tmp_path: Path) -> None:
    make = timm_test_resnet if factory == "timm_resnet" else tiny_transformers_resnet
    release = tmp_path / "release"
    if layout == "sharded":
        moved_buffers(make()).save_pretrained(release, max_shard_size="5KB")
    else:
        _save_half(make, torch.bfloat16 if layout == "bf16" else torch.float16, release)
    out = tmp_path / "audit"
    argv = ["audit", str(release), "--spec", str(_spec(tmp_path, factories_module, factory)),
            "--allow-factory", f"{factories_module}:{factory}", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    annotation = json.loads((out / "annotation.json").read_text())
    files = open_checkpoint(release)
    digests = checkpoint_digests(files)
    assert (annotation["subject"]["filename"], annotation["subject"]["trainable_sha256"],
            annotation["subject"]["running_sha256"]) == (files.path.name, digests.trainable_sha256,
                                                         digests.running_sha256)
    result = json.loads((out / "result.json").read_text())
    assert not any("do not give the file's digest" in w for w in result["warnings"])
    assert main(["validate", str(out / "annotation.json")]) == 0
