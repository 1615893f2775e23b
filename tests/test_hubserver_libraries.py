"""The libraries' own publishing and loading code against the local Hub, in both upload modes:
``regular`` (the default: content inside the commit, any client) and ``lfs`` (``LocalHub(lfs=True)``: the Hub's
answers and the classic LFS batch API, with ``HF_HUB_DISABLE_XET`` set as in conftest).

``datasets.DatasetDict.push_to_hub`` works only in ``lfs`` mode: it pre-uploads each parquet shard and deletes its
temporary file before the commit (against a ``regular`` answer it failed with ``FileNotFoundError``). The shared
real organisation (``test_real_org.py``) is published in ``lfs`` mode; these tests are the small per-call checks.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.real_org import library_endpoint, quiet_and_single_threaded, timm_model, transformers_model
from huggingface_hub import CommitOperationAdd, HfApi

from bnconvention.hubserver import LocalHub

TOKEN = "tok-lib"
ORG = "libs"


@pytest.fixture(scope="module", params=[False, True], ids=["regular", "lfs"])
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHub]:
    """One hub per mode, each with a download cache of its own: the two serve the same repo ids, and a file
    cached from one must not answer the other."""
    from huggingface_hub import constants

    with LocalHub(tmp_path_factory.mktemp("libs"), tokens={TOKEN: "lib"}, orgs={ORG: ["lib"]}, durable=False,
                  lfs=request.param) as server, library_endpoint(server.endpoint), quiet_and_single_threaded(), \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_CACHE", str(tmp_path_factory.mktemp("libs-cache")))
        yield server


@pytest.fixture(scope="module")
def api(hub: LocalHub) -> HfApi:
    return HfApi(endpoint=hub.endpoint, token=TOKEN)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _lfs_paths(api: HfApi, repo_id: str) -> set[str]:
    return {e.path for e in api.list_repo_tree(repo_id, recursive=True) if getattr(e, "lfs", None) is not None}


def _open_pr(api: HfApi, repo_id: str) -> int:
    info = api.create_commit(repo_id, operations=[CommitOperationAdd("NOTES.md", b"notes\n")],
                             commit_message="notes", create_pr=True)
    assert info.pr_num is not None
    return info.pr_num


def test_timm_push_to_hf_hub_and_hf_hub_loads(hub: LocalHub, api: HfApi) -> None:
    import timm
    from timm.models import push_to_hf_hub

    model = timm_model("mobilenetv3_small_050", seed=0)
    push_to_hf_hub(model, f"{ORG}/timm-mnv3", token=TOKEN)
    files = set(api.list_repo_files(f"{ORG}/timm-mnv3"))
    assert {"config.json", "model.safetensors", "pytorch_model.bin", "README.md"} <= files
    assert _lfs_paths(api, f"{ORG}/timm-mnv3") == ({"model.safetensors", "pytorch_model.bin"} if hub.context.lfs
                                                  else set())
    number = _open_pr(api, f"{ORG}/timm-mnv3")
    loaded = timm.create_model(f"hf-hub:{ORG}/timm-mnv3", pretrained=True)
    from_pr = timm.create_model(f"hf-hub:{ORG}/timm-mnv3@refs/pr/{number}", pretrained=True)
    assert _same(model.state_dict(), loaded.state_dict()) and _same(model.state_dict(), from_pr.state_dict())


@pytest.mark.parametrize("shard_size", [None, 20_000], ids=["single", "sharded"])
def test_transformers_push_to_hub_and_from_pretrained(hub: LocalHub, api: HfApi, shard_size: int | None) -> None:
    from transformers import AutoModelForImageClassification

    model = transformers_model(seed=1)
    repo_id = f"{ORG}/hf-{'sharded' if shard_size else 'single'}"
    model.push_to_hub(repo_id, token=TOKEN, **({"max_shard_size": shard_size} if shard_size else {}))
    files = set(api.list_repo_files(repo_id))
    assert ("model.safetensors.index.json" in files) == bool(shard_size)
    number = _open_pr(api, repo_id)
    for revision in (None, f"refs/pr/{number}"):
        loaded = AutoModelForImageClassification.from_pretrained(repo_id, revision=revision)
        assert _same(model.state_dict(), loaded.state_dict()), revision


def test_save_pretrained_and_upload_folder(hub: LocalHub, api: HfApi, tmp_path: Any) -> None:
    import torch
    from transformers import AutoModelForImageClassification

    model = transformers_model(seed=2).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    api.create_repo(f"{ORG}/hf-folder")
    api.upload_folder(repo_id=f"{ORG}/hf-folder", folder_path=tmp_path)
    loaded = AutoModelForImageClassification.from_pretrained(f"{ORG}/hf-folder", dtype=torch.bfloat16)
    assert _same(model.state_dict(), loaded.state_dict())


def test_a_pickle_published_with_torch_save_and_upload_file(hub: LocalHub, api: HfApi) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save(timm_model("mobilenetv3_small_050", seed=3).state_dict(), buffer)
    api.create_repo(f"{ORG}/bin-only")
    api.upload_file(path_or_fileobj=buffer.getvalue(), path_in_repo="pytorch_model.bin", repo_id=f"{ORG}/bin-only")
    assert hub.store.read_file(f"{ORG}/bin-only", "pytorch_model.bin") == buffer.getvalue()  # never loaded


def test_datasets_push_to_hub_and_load_dataset(hub: LocalHub, api: HfApi) -> None:
    if not hub.context.lfs:
        pytest.skip("datasets' push_to_hub needs the LFS upload path (module docstring)")
    import datasets
    import numpy as np

    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    images = [np.full((8, 8, 3), i, dtype=np.uint8) for i in range(12)]
    splits = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"image": images[:8], "label": [i % 2 for i in range(8)]},
                                            features=features),
        "test": datasets.Dataset.from_dict({"image": images[8:], "label": [0, 1, 0, 1]}, features=features)})
    info = splits.push_to_hub(f"{ORG}/tiny-data", token=TOKEN, num_shards={"train": 3, "test": 2})
    parquet = [f for f in api.list_repo_files(f"{ORG}/tiny-data", repo_type="dataset") if f.endswith(".parquet")]
    assert len(parquet) == 5
    api.upload_file(path_or_fileobj=b"later\n", path_in_repo="NOTES.md", repo_id=f"{ORG}/tiny-data",
                    repo_type="dataset")  # main moves on; the pinned revision still loads what was pushed
    loaded = datasets.load_dataset(f"{ORG}/tiny-data", revision=info.oid)
    assert {name: len(split) for name, split in loaded.items()} == {"train": 8, "test": 4}
    assert loaded["test"]["label"] == [0, 1, 0, 1] and loaded["train"].features["label"].names == ["a", "b"]
    assert np.asarray(loaded["train"][3]["image"]).tolist() == images[3].tolist()


def test_hf_file_system_reads_a_dataset_repo_at_a_revision(hub: LocalHub, api: HfApi) -> None:
    """What datasets' loaders do underneath: list, stat and read through HfFileSystem (tree, paths-info, resolve
    with ranges, for repo_type=dataset and a pinned revision)."""
    from huggingface_hub import HfFileSystem

    api.create_repo(f"{ORG}/fs-data", repo_type="dataset")
    first = api.upload_file(path_or_fileobj=b"\0a,b\n1,2\n", path_in_repo="data/x.csv", repo_id=f"{ORG}/fs-data",
                            repo_type="dataset")
    api.upload_file(path_or_fileobj=b"changed\n", path_in_repo="data/x.csv", repo_id=f"{ORG}/fs-data",
                    repo_type="dataset")
    fs = HfFileSystem(endpoint=hub.endpoint, token=TOKEN, skip_instance_cache=True)
    pinned = f"datasets/{ORG}/fs-data@{first.oid}"
    assert fs.ls(f"{pinned}/data", detail=False) == [f"{pinned}/data/x.csv"]
    info = fs.info(f"{pinned}/data/x.csv")
    assert info["size"] == 9 and (info["lfs"] is not None) == hub.context.lfs  # a NUL byte: binary, so LFS
    with fs.open(f"{pinned}/data/x.csv", "rb", block_size=4) as handle:
        handle.seek(1)
        assert handle.read(3) == b"a,b"
    assert fs.cat(f"datasets/{ORG}/fs-data/data/x.csv") == b"changed\n"  # main has moved on


@pytest.mark.slow
def test_a_45_mb_resnet18_uploads_and_loads(hub: LocalHub, api: HfApi) -> None:
    """timm's resnet18 (46.8 MB of safetensors, and as much again of pickle) in one push: base64 inside the commit
    in regular mode, LFS objects of 10 MiB and more in lfs mode."""
    import timm
    import torch
    from timm.models import push_to_hf_hub

    torch.manual_seed(4)
    model = timm.create_model("resnet18", pretrained=False)  # ImageNet's 1000 classes: 46.8 MB
    push_to_hf_hub(model, f"{ORG}/resnet18", token=TOKEN)
    size = hub.store.resolve(f"{ORG}/resnet18").commit.tree["model.safetensors"].size
    assert size > 45_000_000
    loaded = timm.create_model(f"hf-hub:{ORG}/resnet18", pretrained=True)
    assert _same(model.state_dict(), loaded.state_dict())
