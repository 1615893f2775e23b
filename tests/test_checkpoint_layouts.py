"""Every checkpoint layout: sharded safetensors as transformers writes them, timm/transformers name
conventions, pickles refused by their magic bytes. The digests of a sharded checkpoint are those of the merged file,
whatever the sharding."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from layouts_support import moved_buffers, save_state, timm_test_resnet, tiny_transformers_resnet
from safetensors.torch import save_file

from bnconvention.cli.main import main
from bnconvention.errors import CheckpointMismatchError, SafetensorsHeaderError, UsageError
from bnconvention.formats.checkpoint_files import checkpoint_name, open_checkpoint, resolve_checkpoint_path
from bnconvention.formats.digests import checkpoint_digests, file_digests, model_digests
from bnconvention.refitting.keymap import KeyMap, KeyProblems, match_keys
from bnconvention.refitting.weights import load_checkpoint_weights

INDEX = "model.safetensors.index.json"


def _save_pretrained(model: torch.nn.Module, folder: Path, shard: str | None) -> Path:
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kwargs)
    return folder


def _layer_split_across_shards(folder: Path) -> str | None:
    """A BatchNorm layer whose running buffers and affine tensors sit in different shards, if any."""
    weight_map = json.loads((folder / INDEX).read_text())["weight_map"]
    for name, shard in weight_map.items():
        if name.endswith(".running_mean"):
            layer = name[: -len(".running_mean")]
            if weight_map.get(f"{layer}.weight") not in (None, shard):
                return layer
    return None


@pytest.fixture(scope="module")
def resnet() -> torch.nn.Module:
    return moved_buffers(tiny_transformers_resnet())


@pytest.fixture(scope="module")
def layouts(resnet: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One model saved by save_pretrained as one file and in two shardings."""
    root = tmp_path_factory.mktemp("layouts")
    return {label: _save_pretrained(resnet, root / label, shard)
            for label, shard in (("single", None), ("small", "5KB"), ("large", "12KB"))}


def test_transformers_shards_split_a_batchnorm_layer(layouts: dict[str, Path]) -> None:
    # the case the issue names: one layer's buffers and affine tensors in different shards
    assert not (layouts["single"] / INDEX).exists()
    assert _layer_split_across_shards(layouts["small"]) is not None
    small, large = (open_checkpoint(layouts[k] / INDEX) for k in ("small", "large"))
    assert small.kind == large.kind == "sharded" and len(small.shards) > len(large.shards) > 1


def test_sharded_digests_are_the_merged_files_whatever_the_sharding(layouts: dict[str, Path],
                                                                    resnet: torch.nn.Module) -> None:
    single = file_digests(layouts["single"] / "model.safetensors")
    for label in ("small", "large"):
        found = checkpoint_digests(open_checkpoint(layouts[label] / INDEX))
        assert found == single, label
    assert single.trainable_sha256 == model_digests(resnet).trainable_sha256
    assert single.running_sha256 == model_digests(resnet).running_sha256
    assert single.layer_running_sha256 == model_digests(resnet).layer_running_sha256


def test_a_folder_is_its_one_checkpoint(layouts: dict[str, Path], tmp_path: Path) -> None:
    assert resolve_checkpoint_path(layouts["small"]) == layouts["small"] / INDEX
    assert resolve_checkpoint_path(layouts["single"]) == layouts["single"] / "model.safetensors"
    assert checkpoint_name(layouts["small"] / INDEX) == "model"
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.safetensors", "b.safetensors"):
        shutil.copy(layouts["single"] / "model.safetensors", two / name)
    with pytest.raises(UsageError, match=r"holds 2 checkpoints \(a.safetensors, b.safetensors\); name the file"):
        resolve_checkpoint_path(two)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no .safetensors checkpoint"):
        resolve_checkpoint_path(tmp_path / "empty")


def test_an_index_that_disagrees_with_its_shards_is_refused(layouts: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(layouts["small"], broken)
    shard = sorted(broken.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(SafetensorsHeaderError, match=f"names shard '{shard.name}', which the folder does not hold"):
        open_checkpoint(broken)
    moved = tmp_path / "moved"
    shutil.copytree(layouts["small"], moved)
    index = json.loads((moved / INDEX).read_text())
    name = next(iter(index["weight_map"]))
    others = sorted(set(index["weight_map"].values()) - {index["weight_map"][name]})
    index["weight_map"][name] = others[0]
    (moved / INDEX).write_text(json.dumps(index))
    with pytest.raises(SafetensorsHeaderError, match="the index and the shard headers disagree"):
        open_checkpoint(moved)


# --- names: the conventions of timm and transformers ------------------------------------------------------------


@pytest.mark.parametrize(("file_names", "model_names", "base", "expected"), [
    pytest.param(["a.w", "b.w"], ["a.w", "b.w"], "", None, id="as-is"),
    pytest.param(["module.a.w", "module.b.w"], ["a.w", "b.w"], "", "stripped the prefix 'module.' from every tensor "
                 "name", id="data-parallel"),
    pytest.param(["_orig_mod.a.w"], ["a.w"], "", "stripped the prefix '_orig_mod.' from every tensor name",
                 id="torch-compile"),
    pytest.param(["model.a.w"], ["a.w"], "", "stripped the prefix 'model.' from every tensor name", id="lightning"),
    pytest.param(["model.a.w"], ["model.a.w"], "", None, id="a-model-prefix-of-its-own"),
    pytest.param(["enc.w"], ["resnet.enc.w"], "resnet", "added the base model prefix 'resnet.' to every tensor name",
                 id="base-into-base-prefixed"),
])
def test_names_map_by_the_first_convention_that_fits(file_names: list[str], model_names: list[str], base: str,
                                                     expected: str | None) -> None:
    found = match_keys(dict.fromkeys(file_names, (2,)), dict.fromkeys(model_names, (2,)), base_prefix=base)
    assert isinstance(found, KeyMap)
    assert found.note == expected
    assert sorted(found.to_model.values()) == sorted(model_names)


def test_a_base_model_checkpoint_lacks_the_head_an_audit_needs() -> None:
    found = match_keys({"enc.w": (2,)}, {"resnet.enc.w": (2,), "classifier.1.weight": (10, 2)}, base_prefix="resnet")
    assert isinstance(found, KeyProblems)
    assert found.describe() == ("missing from the file: 'classifier.1.weight' (after the file's names were mapped: "
                                "added the base model prefix 'resnet.' to every tensor name)")


def test_tied_tensors_stored_once_are_accepted_and_shapes_still_checked() -> None:
    aliases = {"emb.weight": "t", "head.weight": "t"}
    found = match_keys({"emb.weight": (4, 2)}, {"emb.weight": (4, 2), "head.weight": (4, 2)}, aliases=aliases)
    assert isinstance(found, KeyMap) and found.aliases == {"head.weight": "emb.weight"}
    wrong = match_keys({"emb.weight": (4, 3)}, {"emb.weight": (4, 2), "head.weight": (4, 2)}, aliases=aliases)
    assert isinstance(wrong, KeyProblems)
    assert wrong.describe() == "'emb.weight' has shape [4, 3] in the file but [4, 2] in the model"


def test_a_wrapped_timm_checkpoint_loads_strictly_and_keeps_its_digests(tmp_path: Path) -> None:
    source = moved_buffers(timm_test_resnet(seed=3))
    path = save_state(source, tmp_path / "model.safetensors", prefix="module.")
    model = timm_test_resnet(seed=4)  # other random weights: the load must replace every one
    loaded = load_checkpoint_weights(model, path)
    assert loaded.notes == ["tensor names mapped onto the model: stripped the prefix 'module.' from every tensor name"]
    for name, tensor in source.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    assert loaded.stored_digests(model) == checkpoint_digests(loaded.files)
    assert loaded.bn_layers_in_file(model)[0].startswith("module.")


def test_a_base_model_checkpoint_into_a_head_model_is_one_line_naming_the_head(tmp_path: Path) -> None:
    from transformers import ResNetModel

    head = tiny_transformers_resnet()
    ResNetModel(head.config).save_pretrained(tmp_path / "base")
    with pytest.raises(CheckpointMismatchError) as caught:
        load_checkpoint_weights(head, tmp_path / "base", factory="factory 'tiny'")
    message = str(caught.value)
    assert "\n" not in message
    assert ("the tensors do not fit the model built by factory 'tiny': missing from the file: 'classifier.1.weight', "
            "'classifier.1.bias' (after the file's names were mapped: added the base model prefix 'resnet.'") in message


def test_a_head_checkpoint_loads_into_the_head_model(layouts: dict[str, Path], resnet: torch.nn.Module) -> None:
    model = tiny_transformers_resnet(seed=9)
    loaded = load_checkpoint_weights(model, layouts["small"])  # the folder: its index and every shard
    assert loaded.files.kind == "sharded" and loaded.notes == []
    for name, tensor in resnet.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_tied_weights_saved_once_by_transformers_are_filled_in(tmp_path: Path) -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.emb.weight

    from safetensors.torch import save_model

    source = Tied()
    save_model(source, str(tmp_path / "tied.safetensors"))  # stores the shared tensor once
    assert len(open_checkpoint(tmp_path / "tied.safetensors").tensors()) == 1
    model = Tied()
    loaded = load_checkpoint_weights(model, tmp_path / "tied.safetensors")
    assert len(loaded.keys.aliases) == 1
    assert torch.equal(model.head.weight, source.emb.weight) and model.head.weight is model.emb.weight


# --- the local census: a sharded checkpoint is one checkpoint ------------------------------------------------------


def test_census_discovery_takes_an_index_for_its_shards(layouts: dict[str, Path], tmp_path: Path) -> None:
    from bnconvention.audit.census.run import discover_checkpoints

    shutil.copytree(layouts["small"], tmp_path / "sharded")
    shutil.copytree(layouts["single"], tmp_path / "single")
    renamed = tmp_path / "renamed"  # shards under names no pattern claims: the index names them
    renamed.mkdir()
    index = json.loads((layouts["large"] / INDEX).read_text())
    names = {old: f"part-{i}.safetensors" for i, old in enumerate(sorted(set(index["weight_map"].values())))}
    for old, new in names.items():
        shutil.copy(layouts["large"] / old, renamed / new)
    index["weight_map"] = {t: names[s] for t, s in index["weight_map"].items()}
    (renamed / "weights.safetensors.index.json").write_text(json.dumps(index))
    found = discover_checkpoints([tmp_path])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "renamed/weights.safetensors.index.json", "sharded/model.safetensors.index.json", "single/model.safetensors"]


# --- pickles: refused by their magic bytes, never unpickled ----------------------------------------------------------


class _Trap:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return os.mkdir, (str(self.marker),)


@pytest.mark.parametrize("command", ["audit", "census", "refit"])
def test_a_folder_holding_only_a_pickle_is_refused_by_name(command: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    release = tmp_path / "release"
    release.mkdir()
    marker = tmp_path / "UNPICKLED"
    torch.save({"w": torch.ones(2), "trap": _Trap(marker)}, release / "pytorch_model.bin")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
                                "criteria": ["df <= 0.05"], "model": {"factory": "zoo/convnet-bn"}}))
    np.savez(tmp_path / "pool.npz", x=np.zeros((4, 1, 16, 16), dtype=np.float32))
    argv = {"audit": ["audit", str(release), "--spec", str(spec), "--out", str(tmp_path / "out")],
            "census": ["census", str(release), "--spec", str(spec), "--out", str(tmp_path / "out")],
            "refit": ["refit", str(release), "--arch", "zoo/convnet-bn", "--pool", str(tmp_path / "pool.npz"),
                      "--out", str(tmp_path / "out.safetensors"), "--report", str(tmp_path / "r.json")]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bnconvention: unreadable input: {release / 'pytorch_model.bin'}: is a PyTorch checkpoint")
    assert "never unpickles" in err and err.count("\n") == 1
    assert not marker.exists() and sorted(os.listdir(tmp_path)) == ["pool.npz", "release", "spec.json"]


def test_validate_names_the_pickles_of_a_folder_without_safetensors(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: "holds no .safetensors file, no README.md and no record" said nothing of pytorch_model.bin
    marker = tmp_path / "UNPICKLED"
    (tmp_path / "release").mkdir()
    torch.save({"trap": _Trap(marker)}, tmp_path / "release" / "pytorch_model.bin")
    assert main(["validate", str(tmp_path / "release")]) == 2
    out = capsys.readouterr().out
    assert "error   safetensors.not_safetensors: " in out and "pytorch_model.bin: is a PyTorch checkpoint" in out
    assert "never unpickles" in out and not marker.exists()


def test_the_hub_census_names_a_bin_only_repo_with_the_hint_to_convert(tmp_path: Path) -> None:
    from bnconvention.hub.classify import classify_repo
    from bnconvention.hub.client import make_client
    from bnconvention.hubserver import LocalHub

    marker = tmp_path / "UNPICKLED"
    blob = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2), "trap": _Trap(marker)}, blob)
    with LocalHub(tmp_path / "hub", tokens={}, durable=False) as hub:
        commit = hub.store.commit("lab/bin-only", files={"pytorch_model.bin": blob.read_bytes(),
                                                         "config.json": b"{}"})
        client = make_client(endpoint=hub.endpoint)
        entry = classify_repo(client, "lab/bin-only", sha=commit.oid, filenames=["config.json", "pytorch_model.bin"])
        assert hub.bytes_sent(repo_id="lab/bin-only") == 0  # never opened
    assert (entry.status, entry.reason) == ("no_weights", "no .safetensors weights (other weights files, never "
                                            "opened: pytorch_model.bin; convert them to safetensors to have them "
                                            "classified and audited)")
    assert not marker.exists()


def test_a_file_under_a_safetensors_name_that_is_a_pickle_is_named(tmp_path: Path) -> None:
    marker = tmp_path / "UNPICKLED"
    torch.save({"trap": _Trap(marker)}, tmp_path / "model.safetensors")
    with pytest.raises(SafetensorsHeaderError, match="is a PyTorch checkpoint"):
        load_checkpoint_weights(timm_test_resnet(), tmp_path)
    save_file({"w": torch.ones(1)}, str(tmp_path / "other.safetensors"))  # the folder now holds two
    with pytest.raises(UsageError, match="holds 2 checkpoints"):
        open_checkpoint(tmp_path)
    assert not marker.exists()
