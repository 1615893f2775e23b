"""The digits model zoo: small BatchNorm ConvNets (and GroupNorm twins) trained and unlearned on
``sklearn.datasets.load_digits`` with class 3 forgotten, exercising both BatchNorm failure modes (BN
corruption with train-mode BN, BN misalignment with eval-mode BN; docs/statistics.md#mechanism).

>>> from bnconvention.zoo import build_zoo        # doctest: +SKIP
>>> zoo = build_zoo(".cache/zoo")                 # doctest: +SKIP
>>> model = zoo.load_model("bn-badteacher-eval")  # doctest: +SKIP
"""

from bnconvention.data.digits import (
    DIGITS_DATASET_ID,
    DIGITS_EVAL_TRANSFORM,
    DIGITS_TRAIN_TRANSFORM,
    BatchTransform,
    DigitsArrays,
    digits_arrays,
    digits_split_masks,
)
from bnconvention.zoo.build import build_zoo, default_zoo_dir
from bnconvention.zoo.manifest import ZooManifest, code_sha256, read_manifest
from bnconvention.zoo.methods import (
    accuracy,
    bad_teacher,
    finetune,
    gradient_ascent,
    predict,
    random_relabel,
    set_bn_mode,
    train_classifier,
)
from bnconvention.zoo.models import ConvNet, convnet_bn, convnet_gn
from bnconvention.zoo.variants import FORGET_CLASSES, VARIANTS, SplitTensors, VariantSpec, split_tensors, variant

__all__ = [
    "DIGITS_DATASET_ID",
    "DIGITS_EVAL_TRANSFORM",
    "DIGITS_TRAIN_TRANSFORM",
    "FORGET_CLASSES",
    "VARIANTS",
    "BatchTransform",
    "ConvNet",
    "DigitsArrays",
    "SplitTensors",
    "VariantSpec",
    "ZooManifest",
    "accuracy",
    "bad_teacher",
    "build_zoo",
    "code_sha256",
    "convnet_bn",
    "convnet_gn",
    "default_zoo_dir",
    "digits_arrays",
    "digits_split_masks",
    "finetune",
    "gradient_ascent",
    "predict",
    "random_relabel",
    "read_manifest",
    "set_bn_mode",
    "split_tensors",
    "train_classifier",
    "variant",
]
