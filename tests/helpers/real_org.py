"""A real organisation on a local Hub, published with timm's, transformers' and datasets' own code.

Every repo is what those libraries write when a user publishes: ``timm.models.push_to_hf_hub`` (``config.json``
with ``architecture``, ``model.safetensors`` and ``pytorch_model.bin``, timm's card), ``PreTrainedModel.push_to_hub``
(single file, and sharded with ``max_shard_size``), ``save_pretrained`` + ``HfApi.upload_folder``,
``torch.save`` + ``HfApi.upload_file`` (a pickle-only repo) and ``datasets.DatasetDict.push_to_hub`` (parquet
shards). Models are random-initialised from the libraries' registries and configs, then fitted for a few steps on
the digits below (nothing comes from outside); their running statistics are those training left.

The data: scikit-learn's bundled digits, upsampled to 32x32 RGB (bilinear), 80/20 train/test split, labels as a
``ClassLabel`` with names "0".."9". Models normalise with the train images' mean and std (``MEAN``, ``STD``), which
timm's ``pretrained_cfg`` records.

:func:`publish_real_org` builds it on a running :class:`~bnconvention.hubserver.LocalHub` started with ``lfs=True``
(``datasets`` needs the LFS upload path); :func:`library_endpoint` points the libraries' import-time copies of the
endpoint at it. The repos, what published each and the census class each must get are in :data:`REPOS`.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ORG = "vision-lab"
OWNER = "vlab-owner"
TOKEN = "tok-vision-lab-owner"
AUDITOR = "auditor"  # signed in, not a member: opens pull requests, as `hub push` does
AUDITOR_TOKEN = "tok-vision-lab-auditor"
HUB_TOKENS = {TOKEN: OWNER, AUDITOR_TOKEN: AUDITOR}
HUB_ORGS = {ORG: [OWNER]}
NUM_CLASSES = 10
IMAGE_SIZE = 32
TRAIN_FRACTION = 0.8
DATASET = f"{ORG}/digits32"
# Of the 32x32 train images in [0, 1] (digits32()[0][train_test(1797)[0]] / 255: 0.30536 and 0.32279; the three
# channels are equal).
MEAN = (0.3054, 0.3054, 0.3054)
STD = (0.3228, 0.3228, 0.3228)
DATA_CONFIG = {"input_size": (3, IMAGE_SIZE, IMAGE_SIZE), "mean": MEAN, "std": STD, "crop_pct": 1.0,
               "interpolation": "bilinear"}
PR_FILE = "NOTES.md"  # what the pull requests add: weights are untouched, so the PR revision loads main's


@dataclass(frozen=True)
class RealRepo:
    """One published model repo: what it holds and what the census must say of it."""

    name: str  # the repo name inside ORG
    library: str  # "timm", "transformers" or "torch"
    architecture: str  # timm model name, or the transformers class in config.json's architectures
    published_by: str  # the library call that wrote the repo
    census: str  # the class ``hub census`` must give it
    norm: str = "batchnorm"  # or "layernorm"
    layout: str = "single"  # "single", "sharded" or "pickle"
    dtype: str = "float32"  # of the floating-point tensors in the file
    declared: bool = False  # stamped with a bnconvention declaration (header and card) at some point
    pull_request: int | None = None  # refs/pr/N opened by HfApi.create_commit(create_pr=True), adding PR_FILE

    @property
    def repo_id(self) -> str:
        return f"{ORG}/{self.name}"


REPOS: tuple[RealRepo, ...] = (
    RealRepo("timm-resnet10t", "timm", "resnet10t", "timm.models.push_to_hf_hub", "undeclared", pull_request=1),
    RealRepo("timm-efficientnet-b0", "timm", "efficientnet_b0", "timm.models.push_to_hf_hub", "undeclared"),
    RealRepo("timm-mobilenetv3-small-050", "timm", "mobilenetv3_small_050", "timm.models.push_to_hf_hub",
             "undeclared"),
    RealRepo("timm-convnext-atto", "timm", "convnext_atto", "timm.models.push_to_hf_hub", "channel_absent",
             norm="layernorm"),
    RealRepo("timm-vit-tiny", "timm", "vit_tiny_patch16_224", "timm.models.push_to_hf_hub", "channel_absent",
             norm="layernorm"),
    RealRepo("timm-mobilenetv3-fp16", "timm", "mobilenetv3_small_050", "timm.models.push_to_hf_hub",
             "undeclared", dtype="float16"),
    RealRepo("timm-resnet10t-declared", "timm", "resnet10t",
             "timm save_for_hf + bnconvention stamp + HfApi.upload_folder", "declared_consistent", declared=True),
    # declared like the one above, then re-pushed by timm after more training: the card keeps the block (timm
    # writes a README only when there is none), the new weights carry no record and other running statistics
    RealRepo("timm-resnet10t-repushed", "timm", "resnet10t", "declared, then timm.models.push_to_hf_hub again",
             "declared_inconsistent", declared=True),
    RealRepo("timm-mobilenetv3-bin", "torch", "mobilenetv3_small_050", "torch.save + HfApi.upload_file",
             "no_weights", layout="pickle"),
    RealRepo("hf-resnet", "transformers", "ResNetForImageClassification", "PreTrainedModel.push_to_hub",
             "undeclared", pull_request=1),
    RealRepo("hf-resnet-sharded", "transformers", "ResNetForImageClassification",
             "PreTrainedModel.push_to_hub(max_shard_size=...)", "undeclared", layout="sharded", pull_request=1),
    RealRepo("hf-resnet-bf16", "transformers", "ResNetForImageClassification",
             "save_pretrained + HfApi.upload_folder", "undeclared", dtype="bfloat16"),
)


@dataclass(frozen=True)
class RealDataset:
    """The dataset repo: parquet shards pushed by ``datasets``, at a pinned revision."""

    repo_id: str
    revision: str  # the commit the push made
    splits: dict[str, int]  # split -> rows
    image_column: str = "image"
    label_column: str = "label"
    num_classes: int = NUM_CLASSES


@dataclass(frozen=True)
class RealOrg:
    """The published organisation: its hub, its repos and its dataset."""

    hub: Any  # bnconvention.hubserver.LocalHub
    repos: tuple[RealRepo, ...]
    dataset: RealDataset
    shard_size: int  # the max_shard_size hf-resnet-sharded was pushed with
    org: str = ORG
    token: str = TOKEN  # the owner's
    auditor_token: str = AUDITOR_TOKEN

    @property
    def endpoint(self) -> str:
        return str(self.hub.endpoint)

    def repo(self, name: str) -> RealRepo:
        return next(r for r in self.repos if r.name == name)

    def api(self) -> Any:
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token)

    def libraries(self) -> contextlib.AbstractContextManager[None]:
        """timm, transformers and datasets calls inside go to this hub (see :func:`library_endpoint`)."""
        return library_endpoint(self.endpoint)

    def env(self, *, token: str | None = None) -> dict[str, str]:
        """The variables a subprocess (or a user's shell) needs to reach this hub (as the owner by default)."""
        return {"HF_ENDPOINT": self.endpoint, "HF_TOKEN": token or self.token, "HF_HUB_DISABLE_XET": "1"}

    @contextlib.contextmanager
    def clone(self, root: Path) -> Iterator[RealOrg]:
        """The same organisation on a second hub over a copy of the store, for tests that write (pull requests,
        pushes) without changing what other tests see. The copy hard-links every file: the store never changes a
        file in place (blobs are written once, states and commits replaced by a rename), so the clones stay
        independent. Instant, where publishing again takes seconds."""
        import os
        import shutil

        from bnconvention.hubserver import LocalHub

        shutil.copytree(self.hub.store.root, root, copy_function=os.link)
        with LocalHub(root, tokens=HUB_TOKENS, orgs=HUB_ORGS, durable=False, lfs=True) as hub:
            yield RealOrg(hub=hub, repos=self.repos, dataset=self.dataset, shard_size=self.shard_size)


# --- the endpoint --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def library_endpoint(endpoint: str) -> Iterator[None]:
    """Point every import-time copy of the Hub endpoint (huggingface_hub's, transformers', timm's through it, and
    datasets', imported first here) at ``endpoint`` while inside: the demo's own
    :func:`bnconvention.demo.library_publish.library_endpoint`. Anything missed fails loudly: no network."""
    import datasets.config  # noqa: F401 - imported before, so that its copies are patched too

    from bnconvention.demo.library_publish import library_endpoint as demo_library_endpoint

    with demo_library_endpoint(endpoint):
        yield


@contextlib.contextmanager
def quiet_and_single_threaded() -> Iterator[None]:
    """No progress bars, one torch thread: on a shared 2-core machine two threads made these small forwards about
    100x slower (measured: resnet10t, batch 32 at 32x32, 14 ms with one thread, 1.4 s with two under load)."""
    import datasets
    import torch
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as transformers_logging

    threads, bars_were_off = torch.get_num_threads(), are_progress_bars_disabled()
    torch.set_num_threads(1)
    disable_progress_bars()
    datasets.disable_progress_bars()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if not bars_were_off:
            enable_progress_bars()
        datasets.enable_progress_bars()
        transformers_logging.enable_progress_bar()


# --- data and training ---------------------------------------------------------------------------------------------


def digits32() -> tuple[Any, Any]:
    """(images N x 32 x 32 x 3 uint8, labels N int64) from sklearn's bundled digits, upsampled bilinearly."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    small = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0
    large = torch.nn.functional.interpolate(small, size=IMAGE_SIZE, mode="bilinear", align_corners=False)
    images = (large.clamp(0, 1) * 255).round().to(torch.uint8).repeat(1, 3, 1, 1).permute(0, 2, 3, 1).numpy()
    return images, np.asarray(digits.target, dtype=np.int64)


def train_test(n: int) -> tuple[slice, slice]:
    cut = int(n * TRAIN_FRACTION)
    return slice(0, cut), slice(cut, n)


def fit(model: Any, images: Any, labels: Any, *, steps: int, seed: int, lr: float = 0.05) -> None:
    """A few SGD steps in train mode on the train split (``steps=0``: untouched), then eval mode."""
    import torch

    if steps:
        x = (torch.tensor(images).permute(0, 3, 1, 2).float() / 255 - torch.tensor(MEAN)[:, None, None]) \
            / torch.tensor(STD)[:, None, None]
        y = torch.tensor(labels)
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        model.train()
        for _ in range(steps):
            batch = torch.randint(0, len(x), (64,), generator=generator)
            loss = torch.nn.functional.cross_entropy(_logits(model(x[batch])), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()


def _logits(output: Any) -> Any:
    return output.logits if hasattr(output, "logits") else output


def timm_model(architecture: str, *, seed: int, **kwargs: Any) -> Any:
    import timm
    import torch

    torch.manual_seed(seed)
    return timm.create_model(architecture, pretrained=False, num_classes=NUM_CLASSES, **kwargs)


def transformers_model(*, seed: int) -> Any:
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64], depths=[1, 1, 1],
                          layer_type="basic", num_labels=NUM_CLASSES, downsample_in_first_stage=False,
                          id2label={i: str(i) for i in range(NUM_CLASSES)},
                          label2id={str(i): i for i in range(NUM_CLASSES)})
    torch.manual_seed(seed)
    return ResNetForImageClassification(config)


def bn_splitting_shard_size(state_dict: dict[str, Any]) -> int:
    """The smallest ``max_shard_size`` (from an eighth of the checkpoint up) under which huggingface_hub's
    sharding, which transformers uses, puts a BatchNorm layer's tensors into different shards; the largest size
    tried when none does."""
    from huggingface_hub import split_torch_state_dict_into_shards

    layers = [name.removesuffix(".running_mean") for name in state_dict if name.endswith(".running_mean")]
    start = sum(t.numel() * t.element_size() for t in state_dict.values()) // 8  # about eight shards at most
    size = start
    for size in range(start, 8 * start, 250):
        split = split_torch_state_dict_into_shards(state_dict, max_shard_size=size)
        for layer in layers:
            if len({split.tensor_to_filename.get(f"{layer}.{t}") for t in ("weight", "running_mean")}) > 1:
                return size
    return size


def split_bn_layers(index: dict[str, Any]) -> list[str]:
    """BatchNorm layers of a ``model.safetensors.index.json`` whose tensors sit in more than one shard."""
    weight_map = index["weight_map"]
    layers = [name.removesuffix(".running_mean") for name in weight_map if name.endswith(".running_mean")]
    parts = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    return sorted(layer for layer in layers
                  if len({weight_map[f"{layer}.{p}"] for p in parts if f"{layer}.{p}" in weight_map}) > 1)


# --- publishing ----------------------------------------------------------------------------------------------------


def _declaration(model: Any, *, steps: int, dataset_revision: str) -> dict[str, Any]:
    from bnconvention.authoring.declaration import declare, make_convention, make_transform
    from bnconvention.standard.models import to_dict

    transform = make_transform(mode="train", resize="8x8 to 32x32 bilinear", normalize_mean=MEAN, normalize_std=STD)
    convention = make_convention(buffer_update_mode="train", role="train", dataset_id=DATASET,
                                 dataset_revision=dataset_revision, subset="train split", transform=transform,
                                 rule="ema", momentum=0.1, batch_size=64, num_batches=steps)
    return to_dict(declare(model, convention))


def _publish_declared(api: Any, model: Any, repo: RealRepo, record: dict[str, Any]) -> None:
    """timm's own files, stamped by bnconvention (header record and card block), uploaded as a folder."""
    from timm.models._hub import generate_readme, save_for_hf

    from bnconvention.authoring.card_stamp import stamp_card_text
    from bnconvention.authoring.stamp import stamp_file

    with tempfile.TemporaryDirectory() as folder:
        save_for_hf(model, folder, safe_serialization=True, data_config=DATA_CONFIG)
        stamp_file(Path(folder) / "model.safetensors", record)
        card = generate_readme({}, repo.name)
        (Path(folder) / "README.md").write_text(stamp_card_text(card, record), encoding="utf-8")
        api.create_repo(repo.repo_id, exist_ok=True)
        api.upload_folder(repo_id=repo.repo_id, folder_path=folder, commit_message="Add declared model")


def _publish_timm(api: Any, images: Any, labels: Any, revision: str) -> None:
    import torch
    from timm.models import push_to_hf_hub
    from timm.models._hub import save_config_for_hf

    resnet = timm_model("resnet10t", seed=1)
    fit(resnet, images, labels, steps=8, seed=1)
    push_to_hf_hub(resnet, f"{ORG}/timm-resnet10t", token=TOKEN, data_config=DATA_CONFIG)
    efficientnet = timm_model("efficientnet_b0", seed=2)
    fit(efficientnet, images, labels, steps=2, seed=2)
    push_to_hf_hub(efficientnet, f"{ORG}/timm-efficientnet-b0", token=TOKEN, data_config=DATA_CONFIG)
    mobilenet = timm_model("mobilenetv3_small_050", seed=3)
    fit(mobilenet, images, labels, steps=8, seed=3)
    push_to_hf_hub(mobilenet, f"{ORG}/timm-mobilenetv3-small-050", token=TOKEN, data_config=DATA_CONFIG)
    push_to_hf_hub(timm_model("convnext_atto", seed=4), f"{ORG}/timm-convnext-atto", token=TOKEN,
                   data_config=DATA_CONFIG)
    push_to_hf_hub(timm_model("vit_tiny_patch16_224", seed=5, img_size=IMAGE_SIZE), f"{ORG}/timm-vit-tiny",
                   token=TOKEN, data_config=DATA_CONFIG)
    half = timm_model("mobilenetv3_small_050", seed=3)
    half.load_state_dict(mobilenet.state_dict())
    push_to_hf_hub(half.half(), f"{ORG}/timm-mobilenetv3-fp16", token=TOKEN, data_config=DATA_CONFIG)

    # pickle only: the state dict as torch.save writes it, beside timm's config
    pickled = io.BytesIO()
    torch.save(mobilenet.state_dict(), pickled)
    bin_repo = f"{ORG}/timm-mobilenetv3-bin"
    api.create_repo(bin_repo)
    api.upload_file(path_or_fileobj=pickled.getvalue(), path_in_repo="pytorch_model.bin", repo_id=bin_repo)
    with tempfile.TemporaryDirectory() as folder:
        save_config_for_hf(mobilenet, f"{folder}/config.json", data_config=DATA_CONFIG)
        api.upload_file(path_or_fileobj=f"{folder}/config.json", path_in_repo="config.json", repo_id=bin_repo)

    declared = timm_model("resnet10t", seed=6)
    fit(declared, images, labels, steps=6, seed=6)
    record = _declaration(declared, steps=6, dataset_revision=revision)
    _publish_declared(api, declared, next(r for r in REPOS if r.name == "timm-resnet10t-declared"), record)
    repushed = next(r for r in REPOS if r.name == "timm-resnet10t-repushed")
    _publish_declared(api, declared, repushed, record)
    fit(declared, images, labels, steps=3, seed=7)  # more training: new weights and running statistics
    push_to_hf_hub(declared, repushed.repo_id, token=TOKEN, data_config=DATA_CONFIG)


def image_processor() -> Any:
    """The evaluation preprocessing the transformers repos publish beside their weights: what ``fit`` does (no
    resize at 32x32: ``crop_pct`` 1 keeps the whole image; the train images' mean and std)."""
    from transformers import ConvNextImageProcessor

    return ConvNextImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_pct=1.0, image_mean=list(MEAN),
                                  image_std=list(STD))


def _publish_transformers(api: Any, images: Any, labels: Any) -> int:
    """The three transformers repos, each with its image processor; returns the max_shard_size of the sharded
    one."""
    import torch

    model = transformers_model(seed=8)
    fit(model, images, labels, steps=8, seed=8)
    model.push_to_hub(f"{ORG}/hf-resnet", token=TOKEN)
    image_processor().push_to_hub(f"{ORG}/hf-resnet", token=TOKEN)
    shard_size = bn_splitting_shard_size(model.state_dict())
    model.push_to_hub(f"{ORG}/hf-resnet-sharded", token=TOKEN, max_shard_size=shard_size)
    image_processor().push_to_hub(f"{ORG}/hf-resnet-sharded", token=TOKEN)
    bf16 = transformers_model(seed=9)
    fit(bf16, images, labels, steps=8, seed=9)
    with tempfile.TemporaryDirectory() as folder:
        bf16.to(torch.bfloat16).save_pretrained(folder)
        image_processor().save_pretrained(folder)
        api.create_repo(f"{ORG}/hf-resnet-bf16")
        api.upload_folder(repo_id=f"{ORG}/hf-resnet-bf16", folder_path=folder, commit_message="Upload model")
    return shard_size


def _publish_dataset(images: Any, labels: Any) -> RealDataset:
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image

    features = Features({"image": Image(), "label": ClassLabel(names=[str(i) for i in range(NUM_CLASSES)])})
    train, test = train_test(len(labels))
    splits = DatasetDict({
        "train": Dataset.from_dict({"image": list(images[train]), "label": labels[train].tolist()}, features=features),
        "test": Dataset.from_dict({"image": list(images[test]), "label": labels[test].tolist()}, features=features),
    })
    info = splits.push_to_hub(DATASET, token=TOKEN, max_shard_size="300KB", commit_message="Upload digits32")
    return RealDataset(DATASET, revision=info.oid, splits={name: len(split) for name, split in splits.items()})


def _open_pull_requests(api: Any) -> None:
    from huggingface_hub import CommitOperationAdd

    for repo in REPOS:
        if repo.pull_request is not None:
            note = f"# Notes\n\nA pull request on {repo.repo_id} that leaves the weights as they are.\n"
            info = api.create_commit(repo.repo_id, operations=[CommitOperationAdd(PR_FILE, note.encode())],
                                     commit_message="Add notes", create_pr=True)
            if info.pr_num != repo.pull_request:
                raise RuntimeError(f"{repo.repo_id}: the pull request is #{info.pr_num}, not #{repo.pull_request}")


def publish_real_org(hub: Any) -> RealOrg:
    """Publish :data:`REPOS` and the dataset on ``hub`` (a started ``LocalHub(lfs=True)`` that knows ``TOKEN``
    as a member of ``ORG``) with the libraries' own code; a few seconds on 2 cores."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=TOKEN)
    images, labels = digits32()
    train, _ = train_test(len(labels))
    with library_endpoint(hub.endpoint), quiet_and_single_threaded():
        dataset = _publish_dataset(images, labels)
        _publish_timm(api, images[train], labels[train], dataset.revision)
        shard_size = _publish_transformers(api, images[train], labels[train])
        _open_pull_requests(api)
    return RealOrg(hub=hub, repos=REPOS, dataset=dataset, shard_size=shard_size)


def audit_spec(org: RealOrg) -> dict[str, Any]:
    """One spec for the whole organisation, with no model section: the data is the dataset repo at its pinned
    revision, the preprocessing each repo's own (timm's ``pretrained_cfg``, transformers' image processor); a rule
    gives the transformers repos, whose image processor is evaluation preprocessing only, an eval-transform
    refit."""
    refit = {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 32}
    return {
        "spec_version": "1.0", "kind": "audit_spec",
        "dataset": {"kind": "hub", "repo": org.dataset.repo_id, "revision": org.dataset.revision,
                    "image_column": "image", "label_column": "label", "train_split": "train", "test_split": "test"},
        "splits": {"forget_classes": [3]}, "transform": "from_repo", "cells": ["df", "dr", "dt"],
        "criteria": ["abs(df - dt) <= 0.5"], "replicates": 2, "refit": refit,
        "recoverability": None, "provenance": None, "staleness": False,
        "rules": [{"name": "image processors", "match": {"config": {"model_type": "resnet"}},
                   "refit": {**refit, "transform": "eval"}}],
    }


def read_index(org: RealOrg, repo: RealRepo) -> dict[str, Any]:
    """The repo's ``model.safetensors.index.json``, through the hub."""
    data = org.hub.store.read_file(repo.repo_id, "model.safetensors.index.json")
    return dict(json.loads(data))
