"""The real organisation (``helpers.real_org``), published with timm's, transformers' and datasets' own code on the
local Hub: what they wrote, how ``hub census`` classifies it, and the pull-request revisions the libraries load
.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from helpers.real_org import (
    DATA_CONFIG,
    IMAGE_SIZE,
    NUM_CLASSES,
    ORG,
    PR_FILE,
    REPOS,
    RealOrg,
    RealRepo,
    read_index,
    split_bn_layers,
)

from bnconvention.cli.main import main

TOKEN_ENV = "BNC_REAL_ORG_TOKEN"


def _file(org: RealOrg, repo: RealRepo, path: str) -> bytes:
    return bytes(org.hub.store.read_file(repo.repo_id, path))


def _header(data: bytes) -> dict[str, Any]:
    (length,) = struct.unpack("<Q", data[:8])
    return dict(json.loads(data[8:8 + length]))


def _float_dtypes(header: dict[str, Any]) -> set[str]:
    return {info["dtype"] for name, info in header.items() if name != "__metadata__" and info["dtype"][0] in "FB"}


@pytest.fixture(scope="module")
def census(real_org: RealOrg, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``bnconvention hub census ORG`` as a user runs it; repo id -> its row of org-census.json."""
    out = tmp_path_factory.mktemp("census")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TOKEN_ENV, real_org.auditor_token)
        code = main(["hub", "census", ORG, "--endpoint", real_org.endpoint, "--token-env", TOKEN_ENV,
                     "--no-progress", "--out", str(out)])
    assert code == 0
    return {row["repo_id"]: row for row in json.loads((out / "org-census.json").read_text())["repos"]}


# --- what the libraries published ----------------------------------------------------------------------------------


def test_timm_repos_are_what_push_to_hf_hub_writes(real_org: RealOrg) -> None:
    for repo in real_org.repos:
        if repo.library != "timm":
            continue
        config = json.loads(_file(real_org, repo, "config.json"))
        assert config["architecture"] == repo.architecture and config["num_classes"] == NUM_CLASSES, repo.name
        assert config["pretrained_cfg"]["input_size"] == list(DATA_CONFIG["input_size"]), repo.name
        files = set(real_org.api().list_repo_files(repo.repo_id))
        assert {"README.md", "model.safetensors"} <= files, repo.name
        if repo.published_by.endswith("push_to_hf_hub"):  # timm's default: safetensors and a pickle beside it
            assert "pytorch_model.bin" in files, repo.name
    vit = json.loads(_file(real_org, real_org.repo("timm-vit-tiny"), "config.json"))
    assert vit["model_args"]["img_size"] == [IMAGE_SIZE, IMAGE_SIZE]  # timm records what rebuilding it needs


def test_transformers_repos_are_what_save_pretrained_writes(real_org: RealOrg) -> None:
    for repo in real_org.repos:
        if repo.library == "transformers":
            config = json.loads(_file(real_org, repo, "config.json"))
            assert config["model_type"] == "resnet" and config["architectures"] == [repo.architecture], repo.name
            assert len(config["id2label"]) == NUM_CLASSES, repo.name


def test_the_sharded_release_splits_a_batchnorm_layer_across_shards(real_org: RealOrg) -> None:
    repo = real_org.repo("hf-resnet-sharded")
    index = read_index(real_org, repo)
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and "model.safetensors" not in real_org.api().list_repo_files(repo.repo_id)
    assert split_bn_layers(index), f"max_shard_size={real_org.shard_size} split no BatchNorm layer"


@pytest.mark.parametrize(("name", "dtype"), [
    pytest.param("timm-mobilenetv3-fp16", "F16", id="timm-fp16"),
    pytest.param("hf-resnet-bf16", "BF16", id="transformers-bf16"),
    pytest.param("timm-mobilenetv3-small-050", "F32", id="timm-fp32"),
])
def test_half_precision_releases_hold_half_precision_tensors(real_org: RealOrg, name: str, dtype: str) -> None:
    header = _header(_file(real_org, real_org.repo(name), "model.safetensors"))
    assert _float_dtypes(header) == {dtype}
    assert header[next(k for k in header if k.endswith("num_batches_tracked"))]["dtype"] == "I64"


def test_the_pickle_only_repo_holds_torch_save_output(real_org: RealOrg) -> None:
    repo = real_org.repo("timm-mobilenetv3-bin")
    files = set(real_org.api().list_repo_files(repo.repo_id))
    assert files == {".gitattributes", "config.json", "pytorch_model.bin"}
    assert _file(real_org, repo, "pytorch_model.bin")[:4] == b"PK\x03\x04"  # torch.save's zip container


def test_the_declared_releases_carry_a_record_and_the_repush_lost_it(real_org: RealOrg) -> None:
    from bnconvention.formats.card import read_card_record

    declared, repushed = real_org.repo("timm-resnet10t-declared"), real_org.repo("timm-resnet10t-repushed")
    assert "bnconvention.record" in _header(_file(real_org, declared, "model.safetensors"))["__metadata__"]
    assert "bnconvention.record" not in _header(_file(real_org, repushed, "model.safetensors")).get(
        "__metadata__", {})
    for repo in (declared, repushed):
        card = _file(real_org, repo, "README.md").decode("utf-8")
        assert read_card_record(card) is not None, repo.name
    history = real_org.api().list_repo_commits(repushed.repo_id)
    assert [c.title for c in history[:2]] == ["Add model", "Add declared model"]  # timm's re-push came last


# --- the census ----------------------------------------------------------------------------------------------------

CENSUS_TODAY = [r for r in REPOS if r.name != "timm-resnet10t-repushed"]  # that one: its own test below


@pytest.mark.parametrize("repo", [pytest.param(r, id=r.name) for r in CENSUS_TODAY])
def test_census_classifies_every_real_release(census: dict[str, dict[str, Any]], repo: RealRepo) -> None:
    assert census[repo.repo_id]["status"] == repo.census, census[repo.repo_id]["reason"]


def test_census_reads_every_repo_and_only_model_repos(census: dict[str, dict[str, Any]], real_org: RealOrg) -> None:
    assert set(census) == {r.repo_id for r in real_org.repos}  # the dataset repo is not a model


def test_census_reads_all_shards_of_the_sharded_release(census: dict[str, dict[str, Any]],
                                                        real_org: RealOrg) -> None:
    row = census[real_org.repo("hf-resnet-sharded").repo_id]
    single = census[real_org.repo("hf-resnet").repo_id]
    assert row["reason"] == single["reason"]  # the same 9 layers, found across the shards
    assert row["reason"].startswith("9 BatchNorm layers")


def test_census_names_the_pickle_it_never_opens(census: dict[str, dict[str, Any]], real_org: RealOrg) -> None:
    assert "pytorch_model.bin" in census[real_org.repo("timm-mobilenetv3-bin").repo_id]["reason"]


# with the old 16 KiB budget the census skipped resnet10t's 23,600 bytes of running statistics, so
# the stale card read as consistent
def test_census_catches_the_timm_repush_behind_a_declared_card(census: dict[str, dict[str, Any]],
                                                               real_org: RealOrg) -> None:
    repo = real_org.repo("timm-resnet10t-repushed")
    assert census[repo.repo_id]["status"] == repo.census, census[repo.repo_id]["reason"]


# --- pull-request revisions ----------------------------------------------------------------------------------------


def _same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _asked_for_pr(org: RealOrg, repo: RealRepo, number: int) -> bool:
    """Whether the hub served a file of ``repo`` at ``refs/pr/<number>`` (by name, as timm asks, or by its head
    commit, which transformers' snapshot download resolves first) since its last stats reset."""
    head = org.hub.store.resolve(repo.repo_id, f"refs/pr/{number}").commit.id
    markers = tuple(f"/{repo.repo_id}/resolve/{rev}/" for rev in (f"refs%2Fpr%2F{number}", head))
    return any(record.path.startswith(markers) for record in org.hub.stats)


def test_the_pull_requests_add_a_file_and_leave_the_weights(real_org: RealOrg) -> None:
    api = real_org.api()
    for repo in real_org.repos:
        if repo.pull_request is not None:
            pr_files = set(api.list_repo_files(repo.repo_id, revision=f"refs/pr/{repo.pull_request}"))
            assert pr_files - set(api.list_repo_files(repo.repo_id)) == {PR_FILE}, repo.name


def test_timm_loads_the_pull_request_revision_with_mains_weights(real_org: RealOrg) -> None:
    import timm

    repo = real_org.repo("timm-resnet10t")
    real_org.hub.reset_stats()
    with real_org.libraries():
        main_model = timm.create_model(f"hf-hub:{repo.repo_id}", pretrained=True)
        pr_model = timm.create_model(f"hf-hub:{repo.repo_id}@refs/pr/{repo.pull_request}", pretrained=True)
    assert _asked_for_pr(real_org, repo, repo.pull_request)
    assert pr_model.num_classes == NUM_CLASSES
    assert _same_tensors(main_model.state_dict(), pr_model.state_dict())


@pytest.mark.parametrize("name", ["hf-resnet", "hf-resnet-sharded"])
def test_transformers_loads_the_pull_request_revision_with_mains_weights(real_org: RealOrg, name: str) -> None:
    from transformers import AutoModelForImageClassification

    repo = real_org.repo(name)
    real_org.hub.reset_stats()
    with real_org.libraries():
        main_model = AutoModelForImageClassification.from_pretrained(repo.repo_id)
        pr_model = AutoModelForImageClassification.from_pretrained(repo.repo_id,
                                                                   revision=f"refs/pr/{repo.pull_request}")
    assert _asked_for_pr(real_org, repo, repo.pull_request)
    assert _same_tensors(main_model.state_dict(), pr_model.state_dict())


def test_timm_loads_the_fp16_release_into_a_float32_model(real_org: RealOrg) -> None:
    """What a user of the fp16 release gets: timm copies the half tensors into its float32 model."""
    import timm
    import torch

    with real_org.libraries():
        half = timm.create_model(f"hf-hub:{real_org.repo('timm-mobilenetv3-fp16').repo_id}", pretrained=True)
        full = timm.create_model(f"hf-hub:{real_org.repo('timm-mobilenetv3-small-050').repo_id}", pretrained=True)
    for key, tensor in full.state_dict().items():
        if tensor.is_floating_point():
            assert torch.equal(half.state_dict()[key], tensor.half().float()), key


# --- the dataset ---------------------------------------------------------------------------------------------------


def test_the_dataset_loads_at_its_pinned_revision(real_org: RealOrg) -> None:
    import datasets

    data = real_org.dataset
    files = real_org.api().list_repo_files(data.repo_id, repo_type="dataset")
    assert sum(f.startswith("data/train-") and f.endswith(".parquet") for f in files) > 1  # parquet shards
    with real_org.libraries():
        loaded = datasets.load_dataset(data.repo_id, revision=data.revision)
    assert {name: len(split) for name, split in loaded.items()} == data.splits
    features = loaded["train"].features
    assert features[data.label_column].names == [str(i) for i in range(NUM_CLASSES)]
    first = loaded["test"][0]
    assert first[data.image_column].size == (IMAGE_SIZE, IMAGE_SIZE) and first[data.image_column].mode == "RGB"


def test_a_dataset_revision_that_does_not_exist_is_refused(real_org: RealOrg) -> None:
    import datasets
    from huggingface_hub.errors import RevisionNotFoundError

    with real_org.libraries(), pytest.raises((RevisionNotFoundError, datasets.exceptions.DatasetNotFoundError)):
        datasets.load_dataset(real_org.dataset.repo_id, revision="0" * 40)


# --- the clone -----------------------------------------------------------------------------------------------------


def test_a_clone_takes_writes_the_shared_organisation_never_sees(real_org: RealOrg,
                                                                 real_org_clone: RealOrg) -> None:
    from huggingface_hub import CommitOperationAdd, HfApi

    repo = real_org.repo("hf-resnet")
    auditor = HfApi(endpoint=real_org_clone.endpoint, token=real_org_clone.auditor_token)
    info = auditor.create_commit(repo.repo_id, operations=[CommitOperationAdd("x.txt", b"x")],
                                 commit_message="audit", create_pr=True)
    assert info.pr_num == (repo.pull_request or 0) + 1
    assert [d.num for d in real_org.api().get_repo_discussions(repo.repo_id)] == [repo.pull_request]
    assert real_org_clone.endpoint != real_org.endpoint
