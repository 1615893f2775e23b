"""``bnconvention.hub.push_to_hub``: the library's own save, header and card stamped in the same commit,
validated before it; read back with timm/transformers and the validator; a failure commits nothing and leaves the
author's folder unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.local_hub import lab_hub

from bnconvention import BNRecorder, make_transform, validate_paths
from bnconvention.errors import DigestMismatchError

TOKEN = "hf_library_push_token"
TRANSFORM = make_transform(mode="train", reference="tests:generated")


@pytest.fixture(scope="module")
def local_hub(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with lab_hub(tmp_path_factory, token=TOKEN) as server:
        yield server


def _trained(model: torch.nn.Module, shape: tuple[int, ...]) -> Any:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with BNRecorder(model) as recorder:
        model.train()
        for _ in range(2):
            optimizer.zero_grad()
            output = model(torch.randn(4, *shape))
            logits = output.logits if hasattr(output, "logits") else output
            logits.square().mean().backward()
            optimizer.step()
    return recorder.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM)


def _api(hub: Any) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.endpoint, token=TOKEN)


def _download(api: Any, repo_id: str, into: Path) -> Path:
    for name in api.list_repo_files(repo_id):
        if not name.startswith("."):
            api.hf_hub_download(repo_id, name, local_dir=into)
    return into


@pytest.mark.slow
def test_a_timm_model_pushed_keeps_its_record_and_reads_back(local_hub: Any, tmp_path: Path) -> None:
    import timm
    from safetensors.torch import load_file

    from bnconvention.authoring.stamp import read_stamped_record
    from bnconvention.hub import push_to_hub

    torch.manual_seed(0)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=3)
    record = _trained(model, (3, 32, 32))
    api = _api(local_hub)
    result = push_to_hub(model, "lab/timm-model", record=record, api=api)
    assert result.uploaded and result.records == {"model.safetensors": record.convention.name}
    commits = api.list_repo_commits("lab/timm-model")
    assert len(commits) == 2  # the repo's creation, then one commit with the weights, header and card stamped
    folder = _download(api, "lab/timm-model", tmp_path / "dl")
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in folder.iterdir()}
    assert read_stamped_record(folder / "model.safetensors") == record
    config = json.loads((folder / "config.json").read_text())
    again = timm.create_model(config["architecture"], pretrained=False, num_classes=config["num_classes"])
    again.load_state_dict(load_file(str(folder / "model.safetensors")))  # timm reads the stamped file as it is
    report = validate_paths([folder], require_declaration=True)
    assert report.exit_code == 0 and not report.warnings, report.issues


@pytest.mark.slow
def test_a_transformers_model_pushed_keeps_its_record_and_reads_back(local_hub: Any, tmp_path: Path) -> None:
    from transformers import ResNetConfig, ResNetForImageClassification

    from bnconvention.hub import push_to_hub

    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_channels=1, num_labels=3)
    model = ResNetForImageClassification(config)
    record = _trained(model, (1, 16, 16))
    api = _api(local_hub)
    push_to_hub(model, "lab/hf-model", record=record, api=api)
    folder = _download(api, "lab/hf-model", tmp_path / "dl")
    again = ResNetForImageClassification.from_pretrained(str(folder))  # transformers reads it back
    assert isinstance(again, ResNetForImageClassification)
    assert validate_paths([folder], require_declaration=True).exit_code == 0


def _tree(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_failing_push_commits_nothing_and_leaves_the_folder_unchanged(local_hub: Any, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from bnconvention.hub import push_to_hub

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    record = _trained(model, (4,))
    with torch.no_grad():
        model[0].weight.add_(1.0)  # the weights moved after the record was made
    folder = tmp_path / "release"
    folder.mkdir()
    save_file(model.state_dict(), str(folder / "model.safetensors"))
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# mine\n", encoding="utf-8")
    before = _tree(folder)
    api = _api(local_hub)
    with pytest.raises(DigestMismatchError):
        push_to_hub(folder, "lab/never", record=record, api=api)
    assert _tree(folder) == before
    assert not api.repo_exists("lab/never")
    # and the folder route works with a record that fits, still leaving the author's files as they were
    fitting = _trained(model, (4,))
    save_file(model.state_dict(), str(folder / "model.safetensors"))
    before = _tree(folder)
    result = push_to_hub(folder, "lab/folder", record=fitting, api=api)
    assert result.uploaded and _tree(folder) == before
