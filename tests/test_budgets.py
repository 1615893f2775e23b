"""Work sized by a repo's files is bounded before it is done: an architecture's sizes from
config.json are checked against the safetensors header with nothing allocated, and a from_repo transform's sizes
against the limits and the records. Each hostile case runs in a child process under an 8 GiB address-space limit,
so a regression fails (an allocator error, a kill) instead of exhausting the machine."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("timm")
pytest.importorskip("transformers")

LIMIT = 8 * 1024**3  # torch with its CUDA libraries maps ~4 GiB of address space on import


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          preexec_fn=_limited)


def _release(folder: Path, kind: str, size: int) -> Path:
    """A tiny real release (timm test_resnet with 10 classes, or a transformers ResNet) whose config.json then says
    ``size`` for its class count or a width: the weights stay small."""
    import torch

    folder.mkdir()
    torch.manual_seed(0)
    if kind == "timm":
        import timm
        from timm.models._hub import save_for_hf

        save_for_hf(timm.create_model("test_resnet", pretrained=False, num_classes=10).eval(), str(folder),
                    safe_serialization=True)
        config = json.loads((folder / "config.json").read_text())
        config["num_classes"] = config["model_args"]["num_classes"] = size
    else:
        from transformers import ResNetConfig, ResNetForImageClassification

        ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                  layer_type="basic", num_labels=10)).save_pretrained(folder)
        config = json.loads((folder / "config.json").read_text())
        config["hidden_sizes"] = [8, size]
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


SPEC = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}, "criteria": ["df <= 0.05"],
        "published_source": "spec", "published": {"df": 0.1, "dr": 0.9, "dt": 0.9}, "replicates": 2,
        "refit": {"pool_size": 64}}


# Before the change: num_classes 5e6 built a 1.9 GB head (2.8 GB peak, 12 s) and then failed on the shapes; 1e12 and
# hidden_sizes 1e6 asked the allocator for 384 TB / 36 TB and ended in its raw message: all
# three ended in exit 1 without naming the field (the last two in the allocator's own message).
@pytest.mark.parametrize(("kind", "size", "expected"), [
    pytest.param("timm", 5_000_000, "num_classes 5000000 gives 'fc.weight' [5000000, 96] but the weights hold "
                 "[10, 96]", id="timm-num-classes-5e6"),
    pytest.param("timm", 10**12, "num_classes 1000000000000 gives 'fc.weight' [1000000000000, 96] but the weights "
                 "hold [10, 96]", id="timm-num-classes-1e12"),
    pytest.param("transformers", 1_000_000, "hidden_sizes [8, 1000000] gives ", id="transformers-hidden-sizes-1e6"),
])
def test_a_config_that_sizes_the_model_past_its_weights_is_refused_before_allocating(tmp_path, kind, size,
                                                                                    expected):
    weights = _release(tmp_path / "repo", kind, size)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    done = _run(["-m", "bnconvention", "audit", str(weights), "--spec", str(spec), "--out", str(tmp_path / "out"),
                 "--no-progress"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line and "Allocator" not in line
    assert line.startswith(f"bnconvention: architecture refused: {tmp_path / 'repo' / 'config.json'}: {expected}")
    assert "(nothing was built)" in line
    assert not (tmp_path / "out").exists()


def test_an_allocation_that_fails_names_the_config_not_the_allocator():
    from bnconvention.architectures.resolve import Architecture
    from bnconvention.architectures.sizing import allocation_refusal

    failure = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 384000000000000 bytes. Error code 12")
    refusal = allocation_refusal(Architecture("timm/test_resnet", {"num_classes": 10**12}, "org/m/config.json"),
                                 failure)
    assert str(refusal) == ("org/m/config.json: building factory 'timm/test_resnet' with its arguments needs more "
                            "memory than this process can have (it asked for 384.0 TB at once); check the sizes it "
                            "sets (classes, widths, image size) against the weights")


def test_a_fitting_config_still_builds_and_loads(tmp_path):
    import torch

    from bnconvention.architectures.resolve import Architecture
    from bnconvention.architectures.sizing import build_fitting, build_skeleton
    from bnconvention.formats.checkpoint_files import open_checkpoint

    weights = _release(tmp_path / "repo", "timm", 10)
    choice = Architecture("timm/test_resnet", {"num_classes": 10}, str(tmp_path / "repo" / "config.json"))
    skeleton = build_skeleton(choice)
    assert skeleton is not None and all(t.is_meta for t in skeleton.state_dict().values())
    model = build_fitting(choice, open_checkpoint(weights))
    assert not any(t.is_meta for t in model.state_dict().values()) and not model.training
    assert isinstance(model, torch.nn.Module)


def test_a_factory_that_computes_while_it_builds_gets_its_parameters_on_the_meta_device():
    from bnconvention.architectures.resolve import Architecture
    from bnconvention.architectures.sizing import build_skeleton

    skeleton = build_skeleton(Architecture("torchvision/regnet_y_400mf", {"num_classes": 10}, "org/m/config.json"))
    assert skeleton is not None and all(p.is_meta for p in skeleton.parameters())


# --- transforms from the repo (item 5) --------------------------------------------------------------------------------

APPLY = textwrap.dedent("""
    import sys, torch
    from bnconvention.data.repo_transforms import transforms_from_repo
    from bnconvention.errors import BnConventionError
    try:
        repo = transforms_from_repo(sys.argv[1], repo_name="org/m")
        print(tuple(repo.eval(torch.rand(4, 3, 16, 16)).shape))
    except BnConventionError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
""")


# Before the change: crop_pct 0.05 resized each 16 px record to 40960² (18 s and 2.3 GB for two records); size
# 40000 allocated 4.8 GB inside the size check (a raw allocator error under a limit); input_size 2048 at crop 1.0
# made every 16 px record 2048² (128 times its size).
@pytest.mark.parametrize(("name", "content", "expected"), [
    pytest.param("config.json", {"architecture": "resnet18", "pretrained_cfg": {
        "input_size": [1, 2048, 2048], "crop_pct": 0.05, "mean": [0.5], "std": [0.5]}},
        "org/m/config.json: pretrained_cfg.input_size [1,2048,2048] with crop_pct 0.05 resizes every image to 40960 "
        "pixels a side, over the 4096-pixel limit of a resize in a repo's transform", id="timm-crop-pct-0.05"),
    pytest.param("preprocessor_config.json", {"image_processor_type": "ViTImageProcessor", "size": 40000},
                 'org/m/preprocessor_config.json: size {"height":40000,"width":40000} resizes every image to 40000 '
                 "pixels a side, over the 4096-pixel limit of a resize in a repo's transform",
                 id="transformers-size-40000"),
    pytest.param("config.json", {"architecture": "resnet18", "pretrained_cfg": {
        "input_size": [3, 2048, 2048], "crop_pct": 1.0}},
        "org/m/config.json: pretrained_cfg.input_size [3,2048,2048] with crop_pct 1.0 resizes each 16×16 record to "
        "2048 pixels a side (128 times its size); a repo's transform may enlarge a record at most 32 times",
        id="timm-16px-records-to-2048"),
])
def test_a_repos_preprocessing_is_bounded_before_any_image_is_made(tmp_path, name, content, expected):
    (tmp_path / name).write_text(json.dumps(content))
    done = _run(["-c", APPLY, str(tmp_path)], cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:] + done.stdout
    assert done.stderr.strip().startswith(expected) and done.stderr.strip().count("\n") == 0


def test_a_processor_gets_sub_batches_within_the_pixel_budget(tmp_path, monkeypatch):
    import torch

    from bnconvention.data import repo_transforms
    from bnconvention.data.repo_transforms import transforms_from_repo

    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "ViTImageProcessor", "size": 32}))
    repo = transforms_from_repo(tmp_path)
    x = torch.rand(10, 3, 16, 16)
    whole = repo.eval(x)
    monkeypatch.setattr(repo_transforms, "MAX_BATCH_PIXELS", 10 * 32 * 32)  # ten outputs of 32×32
    assert repo.eval.plan is not None and repo.eval.plan.chunk(16, 16) == 10
    monkeypatch.setattr(repo_transforms.SizePlan, "chunk", lambda self, height, width: 3)  # passes of three
    assert torch.equal(repo.eval(x), whole)
    with pytest.raises(Exception, match="over the 10,240-pixel budget of a batch; lower the spec's batch sizes"):
        repo.eval(torch.rand(11, 3, 16, 16))
