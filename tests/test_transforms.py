"""Describing transforms (bnconvention.authoring.transforms): torchvision pipelines as canonical steps with a digest,
what the recorder and the refit engine accept, and the clear errors for what cannot be described.

Regression: ``recorder.declaration(..., transform=train_transform)`` with a real torchvision transform
failed with ``AttributeError: ... has no attribute 'standard'``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.v2 as V
from helpers.refit_models import SmallConvNet, make_pool, seeded

from bnconvention import BNRecorder, describe_transform, make_transform
from bnconvention.authoring.transforms import as_standard_transform
from bnconvention.data.digits import DIGITS_TRAIN_TRANSFORM
from bnconvention.errors import RecordError
from bnconvention.refitting import refit
from bnconvention.standard.models import to_dict
from bnconvention.standard.naming import transform_sha256

ROOT = Path(__file__).resolve().parent.parent
CROP = ('torchvision.transforms.RandomCrop(fill=0, pad_if_needed=false, padding=4, padding_mode="constant", '
        'size=[32,32])')
FLIP = "torchvision.transforms.RandomHorizontalFlip(p=0.5)"
NORMALIZE = "torchvision.transforms.Normalize(inplace=false, mean=[0.5], std=[0.25])"


def cifar_like() -> T.Compose:
    return T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize([0.5], [0.25])])


def test_a_torchvision_pipeline_is_described_step_by_step() -> None:
    described = describe_transform(cifar_like(), reference="train.py:train_transform")
    assert to_dict(described.description) == {
        "crop": CROP, "augmentations": [FLIP], "normalize": {"mean": [0.5], "std": [0.25]},
        "steps": [CROP, FLIP, "torchvision.transforms.ToTensor()", NORMALIZE]}
    assert (described.mode, described.reference) == ("train", "train.py:train_transform")
    assert described.sha256 == transform_sha256(described.description)


def test_the_conformance_vector_is_what_describe_transform_writes() -> None:
    vector = json.loads((ROOT / "schema" / "tests" / "valid" / "declaration-transform-steps.json").read_text())
    described = describe_transform(cifar_like(), reference="train.py:train_transform")
    assert vector["convention"]["transform"] == to_dict(described)


def test_v2_pipeline_without_random_steps_is_an_eval_transform() -> None:
    pipeline = V.Compose([V.ToImage(), V.ToDtype(torch.float32, scale=True), V.Resize(16), V.CenterCrop(8),
                          V.Normalize([0.5], [0.25])])
    described = describe_transform(pipeline)
    assert described.mode == "eval" and described.description.augmentations == []
    assert described.description.steps[:2] == [
        "torchvision.transforms.v2.ToImage()", 'torchvision.transforms.v2.ToDtype(dtype="torch.float32", scale=true)']
    assert described.description.resize == (
        'torchvision.transforms.v2.Resize(antialias=true, interpolation="bilinear", max_size=null, size=[16])')
    assert described.description.crop == "torchvision.transforms.v2.CenterCrop(size=[8,8])"
    assert describe_transform(pipeline, mode="train").mode == "train"


def test_spelling_does_not_change_the_digest_and_parameters_do() -> None:
    spelt = T.Compose([T.RandomCrop((32, 32), padding=4), T.RandomHorizontalFlip(p=0.5), T.ToTensor(),
                       T.Normalize((0.5,), torch.tensor([0.25]))])
    nested = T.Compose([T.Compose([T.RandomCrop(32, padding=4)]),
                        torch.nn.Sequential(T.RandomHorizontalFlip()), T.ToTensor(), T.Normalize([0.5], [0.25])])
    digests = {describe_transform(t).sha256 for t in (cifar_like(), spelt, nested)}
    assert len(digests) == 1
    other = T.Compose([T.RandomCrop(32, padding=2), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize([0.5], [0.25])])
    assert describe_transform(other).sha256 not in digests
    v2 = V.Compose([V.RandomCrop(32, padding=4), V.RandomHorizontalFlip(), V.ToImage(),
                    V.ToDtype(torch.float32, scale=True), V.Normalize([0.5], [0.25])])
    assert describe_transform(v2).sha256 not in digests  # another library version of the steps, another digest


def test_the_digest_is_the_same_in_another_process() -> None:
    # Nothing process-specific (addresses, reprs, hash seeds) may enter the description.
    code = ("import torchvision.transforms as T; from bnconvention import describe_transform; "
            "print(describe_transform(T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), "
            "T.ToTensor(), T.Normalize([0.5], [0.25])])).sha256)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == describe_transform(cifar_like()).sha256


def test_random_containers_keep_their_choices() -> None:
    choice = T.RandomChoice([T.RandomHorizontalFlip(), T.Compose([T.RandomVerticalFlip(), T.ToTensor()])])
    [step] = describe_transform(choice).description.steps
    assert step == ('torchvision.transforms.RandomChoice(p=null, transforms=["torchvision.transforms.'
                    'RandomHorizontalFlip(p=0.5)",["torchvision.transforms.RandomVerticalFlip(p=0.5)",'
                    '"torchvision.transforms.ToTensor()"]])')
    applied = describe_transform(T.RandomApply([T.ColorJitter(0.1)], p=0.3))
    assert applied.mode == "train" and applied.description.augmentations == [
        'torchvision.transforms.RandomApply(p=0.3, transforms=["torchvision.transforms.ColorJitter('
        'brightness=[0.9,1.1], contrast=null, hue=null, saturation=null)"])']
    assert describe_transform(T.AutoAugment()).description.steps == [
        'torchvision.transforms.AutoAugment(fill=null, interpolation="nearest", policy="imagenet")']


class MyCrop(T.CenterCrop):
    """A user's subclass: its behaviour may differ from the parent's, so it is not described as torchvision's."""


@pytest.mark.parametrize(("value", "message"), [
    pytest.param("train.py:train_transform", "is a string, not a transform", id="string"),
    pytest.param(T.Lambda(lambda x: x), r"\(torchvision.transforms.Lambda\) parameter 'lambd': it is a function",
                 id="lambda-v1"),
    pytest.param(V.Lambda(lambda x: x), r"\(torchvision.transforms.v2.Lambda\) parameter 'lambd'", id="lambda-v2"),
    pytest.param(T.Compose([T.ToTensor(), abs]), r"transform\[1\]: builtins.builtin_function_or_method is not one "
                 "of torchvision's public transforms", id="function-in-compose"),
    pytest.param(MyCrop(8), "test_transforms.MyCrop subclasses torchvision.transforms.CenterCrop, and may not "
                 "behave like it", id="subclass"),
    pytest.param(T.LinearTransformation(torch.eye(64), torch.zeros(64)), "a tensor of 4096 values is data",
                 id="large-tensor"),
    pytest.param(42, "builtins.int is not one of torchvision's public transforms", id="int"),
])
def test_what_cannot_be_described_is_a_clear_error(value, message) -> None:
    with pytest.raises(RecordError, match=message) as caught:
        as_standard_transform(value)
    assert "bnconvention.make_transform(mode='train'" in str(caught.value) and "\n" not in str(caught.value)


def test_described_and_self_describing_transforms_pass_through() -> None:
    written = make_transform(mode="eval", reference="eval.py:t", resize="16x16 bilinear")
    assert as_standard_transform(written) is written
    assert as_standard_transform(DIGITS_TRAIN_TRANSFORM) == DIGITS_TRAIN_TRANSFORM.standard()
    assert make_transform(mode="eval").description.steps is None  # hand-written digests are unchanged by `steps`
    assert make_transform(mode="eval").sha256 == transform_sha256({"augmentations": []})


def test_recorder_declaration_takes_a_torchvision_transform() -> None:
    model = seeded(SmallConvNet)
    with BNRecorder(model, split="train") as recorder:
        model.train()
        with torch.no_grad():
            model(make_pool((3, 6, 6), [4])[0])
    record = recorder.declaration(dataset_id="my/dataset", subset="all", transform=cifar_like())
    assert record.convention.transform == describe_transform(cifar_like())
    assert record.convention.name == "train/train/train-transform/ema-m0.1"
    with pytest.raises(RecordError, match="is a string, not a transform"):
        recorder.declaration(dataset_id="my/dataset", subset="all", transform="train_transform")


def test_refit_records_a_torchvision_transform() -> None:
    eval_transform = T.Compose([T.ToTensor(), T.Normalize([0.5], [0.25])])
    report = refit(seeded(SmallConvNet), make_pool((3, 6, 6), [4, 4]), transform=eval_transform)
    assert report.declaration.convention.transform == describe_transform(eval_transform)
    assert report.declaration.convention.name == "refit/other/eval-transform/exact"
