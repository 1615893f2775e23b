"""Transforms ``from_repo``: timm's pretrained_cfg in config.json (train and eval variants) and
transformers' image processor in preprocessor_config.json, built by the libraries' own code, described with their
digest, and recorded in the audit's convention."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bnconvention.audit.measure.data import load_audit_data, model_repo_files
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.data.repo_transforms import transforms_from_repo
from bnconvention.errors import AuditSpecError, UntrustedInputError, UsageError
from bnconvention.standard.naming import transform_sha256

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

DATA_CONFIG = {"input_size": (3, 24, 24), "crop_pct": 0.75, "interpolation": "bicubic", "mean": (0.5, 0.4, 0.3),
               "std": (0.2, 0.25, 0.3)}


@pytest.fixture(scope="module")
def timm_repo(tmp_path_factory) -> Path:
    """A model repo folder as timm's own save_for_hf writes it (config.json with pretrained_cfg)."""
    from timm.models import save_for_hf

    folder = tmp_path_factory.mktemp("timm-repo")
    model = timm.create_model("resnet10t", pretrained=False, num_classes=3)
    save_for_hf(model, str(folder), safe_serialization=True, data_config=dict(DATA_CONFIG))
    return folder


@pytest.fixture(scope="module")
def hf_repo(tmp_path_factory) -> Path:
    from transformers import ConvNextImageProcessor

    folder = tmp_path_factory.mktemp("hf-repo")
    ConvNextImageProcessor(size={"shortest_edge": 20}, crop_pct=0.8).save_pretrained(str(folder))
    return folder


def _batch(n: int = 5, size: int = 12) -> torch.Tensor:
    pixels = np.random.default_rng(0).integers(0, 256, (n, 3, size, size), dtype=np.uint8)
    return torch.from_numpy(pixels.astype(np.float32) / 255)


def _pil(x: torch.Tensor) -> list:
    from PIL import Image

    return [Image.fromarray((im * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()) for im in x]


# --- timm -------------------------------------------------------------------------------------------------------------


def test_timm_pretrained_cfg_gives_train_and_eval_transforms(timm_repo) -> None:
    repo = transforms_from_repo(timm_repo, repo_name="org/r10")
    assert repo.library == "timm" and repo.source == "org/r10/config.json"
    assert (repo.train.mode, repo.eval.mode) == ("train", "eval")
    train_steps = repo.train.record.description.steps or []
    assert train_steps[0].startswith("timm.data.transforms.RandomResizedCropAndInterpolation(interpolation=\"bicubic\"")
    assert repo.eval.record.description.crop == "torchvision.transforms.CenterCrop(size=[24,24])"
    assert repo.eval.record.description.normalize.std == pytest.approx([0.2, 0.25, 0.3])
    for described in (repo.train, repo.eval):
        assert described.record.sha256 == transform_sha256(described.record.description)
    assert "timm " in (repo.eval.record.reference or "")


def test_timm_eval_transform_is_timms_own_pipeline_on_pil_images(timm_repo) -> None:
    from timm.data import create_transform, resolve_data_config

    config = json.loads((timm_repo / "config.json").read_text())
    pipeline = create_transform(**resolve_data_config(pretrained_cfg=config["pretrained_cfg"]), is_training=False)
    x = _batch()
    expected = torch.stack([pipeline(im) for im in _pil(x)])
    assert torch.equal(transforms_from_repo(timm_repo).eval(x), expected)
    assert expected.shape == (5, 3, 24, 24)


def test_timm_train_transform_is_seeded_by_the_generator_and_leaves_global_rngs_alone(timm_repo) -> None:
    train = transforms_from_repo(timm_repo).train
    x = _batch()
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    first = train(x, generator=torch.Generator().manual_seed(7))
    again = train(x, generator=torch.Generator().manual_seed(7))
    other = train(x, generator=torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == python_state


@pytest.mark.parametrize("cfg, message", [
    pytest.param({"input_size": [3, 100000, 100000]}, "input_size must be", id="huge"),
    pytest.param({"input_size": [4, 32, 32]}, "input_size must be", id="channels"),
    pytest.param({"mean": [0.5, 0.5]}, "mean must be 3 finite numbers", id="mean-length"),
    pytest.param({"std": [0.5, 0.0, 0.5]}, "std must be 3 finite numbers > 0", id="std-zero"),
    pytest.param({"interpolation": "exec"}, "interpolation 'exec' is not one of", id="interpolation"),
    pytest.param({"crop_pct": "0.9"}, "crop_pct must be a number", id="crop-string"),
    pytest.param({"license": "mit"}, "has none of the data keys", id="no-data-keys"),
    pytest.param([1, 2], "pretrained_cfg must be a non-empty JSON object", id="not-a-mapping"),
])
def test_bad_pretrained_cfg_is_one_line(tmp_path, cfg, message) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "resnet18", "pretrained_cfg": cfg}))
    with pytest.raises(UntrustedInputError, match=message) as caught:
        transforms_from_repo(tmp_path, repo_name="org/bad")
    assert str(caught.value).startswith("org/bad/config.json: ") and "\n" not in str(caught.value)


def test_timm_config_wins_over_a_preprocessor_config(tmp_path, timm_repo, hf_repo) -> None:
    for name, source in (("config.json", timm_repo), ("preprocessor_config.json", hf_repo)):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    assert transforms_from_repo(tmp_path).library == "timm"


# --- transformers -----------------------------------------------------------------------------------------------------


def test_transformers_image_processor_is_the_eval_transform(hf_repo) -> None:
    from transformers import ConvNextImageProcessor

    repo = transforms_from_repo(hf_repo, repo_name="org/convnext")
    assert repo.library == "transformers" and repo.train is None and repo.eval.mode == "eval"
    x = _batch(size=30)
    expected = ConvNextImageProcessor.from_pretrained(str(hf_repo))(images=_pil(x), return_tensors="pt")
    assert torch.equal(repo.eval(x), expected["pixel_values"])
    description = repo.eval.record.description
    assert (description.steps or [""])[0].startswith('transformers.ConvNextImageProcessor({"crop_pct":0.8,')
    assert description.normalize is not None and repo.eval.record.sha256 == transform_sha256(description)


@pytest.mark.parametrize("config, message", [
    pytest.param({"image_processor_type": "EvilImageProcessor"}, "'EvilImageProcessor' is not an image processor "
                 "known to transformers", id="unknown-class"),
    pytest.param({"image_processor_type": "ResNetForImageClassification"}, "is not an image processor known",
                 id="not-a-processor"),
    pytest.param({}, "image_processor_type None is not", id="no-class"),
    pytest.param({"image_processor_type": "ConvNextImageProcessor",
                  "auto_map": {"AutoImageProcessor": "evil.Processor"}}, "auto_map names remote code", id="auto-map"),
])
def test_preprocessor_config_naming_an_unknown_class_is_refused(tmp_path, config, message) -> None:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
    with pytest.raises(UntrustedInputError, match=message) as caught:
        transforms_from_repo(tmp_path, repo_name="org/evil")
    assert str(caught.value).startswith("org/evil/preprocessor_config.json: ")


def test_a_repo_without_either_file(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "resnet"}))
    with pytest.raises(UsageError, match="has neither"):
        transforms_from_repo(tmp_path)


# --- in the audit -----------------------------------------------------------------------------------------------------


def _images_npz(path: Path) -> Path:
    rng = np.random.default_rng(4)
    np.savez(path, x=rng.integers(0, 256, (40, 3, 12, 12), dtype=np.uint8), y=np.arange(40) % 3,
             test=np.arange(40) % 4 == 0)
    return path


def _spec(tmp_path: Path, **changes) -> dict:
    return {"spec_version": "1.0", "kind": "audit_spec", "transform": "from_repo",
            "dataset": {"kind": "npz", "path": str(_images_npz(tmp_path / "img.npz")), "test_key": "test"},
            "splits": {"forget_classes": [1]}, "recoverability": None, **changes}


def test_audit_data_takes_the_repos_transforms(tmp_path, timm_repo) -> None:
    spec = parse_spec(_spec(tmp_path))
    assert model_repo_files(spec) == ("config.json", "preprocessor_config.json")
    data = load_audit_data(spec, repo_dir=timm_repo, repo_name="org/r10")
    repo = transforms_from_repo(timm_repo, repo_name="org/r10")
    assert data.transform("train").standard() == repo.train.record
    assert data.eval_transform.standard() == repo.eval.record
    assert data.retain.x.shape[1:] == (3, 12, 12)  # prepared images; the transform runs per batch


@pytest.mark.parametrize("changes, field", [
    pytest.param({}, "/refit/transform", id="refit-train"),
    pytest.param({"refit": {"transform": "eval"}, "recoverability": {"transform": "train"}},
                 "/recoverability/transform", id="recoverability-train"),
])
def test_an_eval_only_processor_cannot_serve_a_train_refit(tmp_path, hf_repo, changes, field) -> None:
    with pytest.raises(AuditSpecError, match="declares evaluation preprocessing only") as caught:
        load_audit_data(parse_spec(_spec(tmp_path, **changes)), repo_dir=hf_repo)
    assert caught.value.field == field
    data = load_audit_data(parse_spec(_spec(tmp_path, refit={"transform": "eval"})), repo_dir=hf_repo)
    assert data.eval_transform.mode == "eval" and data.train_transform is None


def test_from_repo_needs_a_repo_and_images(tmp_path, timm_repo) -> None:
    with pytest.raises(AuditSpecError) as caught:
        load_audit_data(parse_spec(_spec(tmp_path)))
    assert caught.value.field == "/transform"
    np.savez(tmp_path / "tab.npz", x=np.zeros((8, 5), np.float32), y=np.arange(8) % 2)
    tabular = _spec(tmp_path, dataset={"kind": "npz", "path": str(tmp_path / "tab.npz")},
                    splits={"forget_classes": [1]})
    with pytest.raises(AuditSpecError, match="is tabular") as caught:
        load_audit_data(parse_spec(tabular), repo_dir=timm_repo)
    assert caught.value.field == "/transform"


def test_index_files_in_the_model_repo_are_bound_by_their_digest(tmp_path, timm_repo) -> None:
    from bnconvention.standard.naming import record_ids_sha256

    repo = tmp_path / "repo"
    (repo / "splits").mkdir(parents=True)
    (repo / "config.json").write_bytes((timm_repo / "config.json").read_bytes())
    (repo / "splits" / "forget.txt").write_text("1\n5\n")
    splits = {"forget_index": "splits/forget.txt", "index_files_in": "model_repo",
              "forget_ids_sha256": record_ids_sha256([1, 5])}
    spec = parse_spec(_spec(tmp_path, splits=splits))
    assert model_repo_files(spec) == ("config.json", "preprocessor_config.json", "splits/forget.txt")
    assert load_audit_data(spec, repo_dir=repo, repo_name="org/m").forget.ids.tolist() == [1, 5]
    (repo / "splits" / "forget.txt").write_text("1\n5\n9\n")  # the repo changed its forget set
    with pytest.raises(AuditSpecError, match=r"^index file: org/m/splits/forget.txt: its 3 record ids hash") as caught:
        load_audit_data(spec, repo_dir=repo, repo_name="org/m")
    assert caught.value.field == "/splits/forget_ids_sha256"


def _small_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3))


def test_the_audit_records_the_repos_transform_and_its_digest(tmp_path, timm_repo, monkeypatch) -> None:
    from safetensors.torch import save_file

    from bnconvention.architectures import factories
    from bnconvention.audit.run.runner import prepare_audit, run_audit

    monkeypatch.setattr(factories, "_user_allowed", {})
    name = factories.allow_user_factory("test_repo_transforms:_small_net")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_bytes((timm_repo / "config.json").read_bytes())
    save_file(_small_net().state_dict(), str(repo / "model.safetensors"))
    spec = parse_spec(_spec(tmp_path, model={"factory": name}, replicates=2, refit={"pool_size": 8, "batch_size": 4},
                            staleness=False))
    result = run_audit(prepare_audit(repo / "model.safetensors", spec))
    expected = transforms_from_repo(repo).train.record
    recorded = result.annotation.convention.transform
    assert (recorded.sha256, recorded.mode, recorded.description) == (expected.sha256, "train", expected.description)
