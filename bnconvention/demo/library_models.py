"""The demo's two releases made with timm and transformers: their models, trained for a second each, and cached.

Real authors on the Hub publish timm and transformers checkpoints, so the demo organisation holds one of each,
published by the libraries' own code (:mod:`bnconvention.demo.library_publish`). Both are unlearning references
like ``convnet-bn-retrain``: random-initialised from the library's own registry or config (never ``pretrained``,
nothing downloaded), then trained from scratch on the retained part of the digits zoo's train split (class 3 left
out) with the zoo's recipe (Adam, train-mode BatchNorm, the zoo's training transform, one torch thread):

* timm ``resnet10t`` slimmed to 16-32-64-128 channels (``timm.create_model(..., in_chans=1, num_classes=10,
  channels=..., stem_width=8)``; timm records those arguments in ``config.json``'s ``model_args``);
* transformers ``ResNetForImageClassification`` of a small ``ResNetConfig`` (1 channel, 10 labels).

Training is deterministic in the seed and takes about a second each on one core. The trained weights and the
accuracies the author measured (forget, retain and test, in eval mode, as the zoo measures ``shipped_accuracy``) are
kept in a folder beside the zoo (``<zoo>-libraries``) with a manifest bound to this code, the libraries' versions
and the zoo's data code, so reruns, ``demo --serve`` restarts and parallel test sessions train once.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file

from bnconvention.errors import BnConventionError
from bnconvention.extras import import_extra
from bnconvention.formats.atomic import atomic_write_bytes, file_sha256
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.zoo import DIGITS_TRAIN_TRANSFORM, FORGET_CLASSES, split_tensors
from bnconvention.zoo.methods import accuracy, train_classifier

Library: TypeAlias = Literal["timm", "transformers"]
LIBRARIES_FORMAT = "bnconvention-demo-libraries/1"
MANIFEST = "manifest.json"
NUM_CLASSES = 10
TIMM_ARCHITECTURE = "resnet10t"
TIMM_ARGS: dict[str, Any] = {"in_chans": 1, "num_classes": NUM_CLASSES, "channels": [16, 32, 64, 128],
                             "stem_width": 8}
TRANSFORMERS_CONFIG: dict[str, Any] = {
    "num_channels": 1, "embedding_size": 16, "hidden_sizes": [16, 32, 64], "depths": [1, 1, 1],
    "layer_type": "basic", "downsample_in_first_stage": False, "num_labels": NUM_CLASSES,
    "id2label": {i: str(i) for i in range(NUM_CLASSES)}, "label2id": {str(i): i for i in range(NUM_CLASSES)}}
# the zoo's retrain recipe (bnconvention.zoo.variants), fewer epochs: retain accuracy above 0.98 in about a second
RECIPE: dict[str, Any] = {"optimizer": "adam", "lr": 3e-3, "epochs": 8, "batch_size": 64, "bn_mode": "train",
                          "trained_on": "retain"}


@dataclass(frozen=True)
class LibraryModel:
    """One library-made model of the demo: which library builds it, and its seed."""

    name: str  # the release name in the demo organisation
    library: Library
    seed: int

    @property
    def weights(self) -> str:
        return f"{self.name}.safetensors"


LIBRARY_MODELS: tuple[LibraryModel, ...] = (
    LibraryModel("timm-resnet10t-retrain", "timm", seed=11),
    LibraryModel("transformers-resnet-retrain", "transformers", seed=12),
)


def _import(module: str) -> Any:
    return import_extra(module, command="bnconvention demo")


def require_libraries() -> None:
    """Import timm and transformers, or say which extra to install (one line)."""
    for library in ("timm", "transformers"):
        _import(library)


def new_library_model(model: LibraryModel) -> Any:
    """The random-initialised architecture of ``model``, built by its library (global RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(model.seed)
        if model.library == "timm":
            timm = _import("timm")
            return timm.create_model(TIMM_ARCHITECTURE, pretrained=False, **TIMM_ARGS)
        _import("transformers")
        from transformers import ResNetConfig, ResNetForImageClassification

        return ResNetForImageClassification(ResNetConfig(**TRANSFORMERS_CONFIG))


class Logits(torch.nn.Module):
    """``model(x)`` as logits, for training and measuring: transformers' models return an output object."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        return out.logits if hasattr(out, "logits") else out


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train(model: LibraryModel, data: Any) -> tuple[Any, dict[str, float]]:
    """``(trained model, accuracies)``: the zoo's retrain recipe on ``data``'s retained split; forget, retain and
    test accuracy measured in eval mode, as the author would publish them."""
    built = new_library_model(model)
    logits = Logits(built)
    with _one_thread():
        train_classifier(logits, data.x["retain"], data.y["retain"], epochs=RECIPE["epochs"], lr=RECIPE["lr"],
                         batch_size=RECIPE["batch_size"], generator=torch.Generator().manual_seed(model.seed),
                         transform=DIGITS_TRAIN_TRANSFORM, split_tag="retain")
        scores = {role: accuracy(logits, data.x[role], data.y[role]) for role in ("forget", "retain", "test")}
    built.eval()
    return built, scores


# --- the cache ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryModels:
    """The trained library models in ``root``: weights file and measured accuracies of each, by release name."""

    root: Path
    key: str
    files: dict[str, str]  # file name -> sha256
    accuracy: dict[str, dict[str, float]]  # release name -> {"forget", "retain", "test"}

    def load(self, name: str) -> Any:
        """The trained model of release ``name``: its library's architecture with the cached weights."""
        model = next(m for m in LIBRARY_MODELS if m.name == name)
        built = new_library_model(model)
        built.load_state_dict(load_file(str(self.root / model.weights)), strict=True)
        return built.eval()


def _version(name: str) -> str:
    """The installed version, read without importing (transformers takes seconds to import)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"  # no cache matches; training then names the extra to install


def cache_key(zoo_code: str) -> str:
    """What the trained models depend on: this code, the libraries' versions and the zoo's data code."""
    versions = {name: _version(name) for name in ("timm", "transformers", "torch")}
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return canonical_sha256({"format": LIBRARIES_FORMAT, "code": code, "versions": versions, "zoo_code": zoo_code,
                             "models": [(m.name, m.library, m.seed) for m in LIBRARY_MODELS]})


def cached(root: Path, key: str) -> LibraryModels | None:
    """The models in ``root`` when its manifest has ``key`` and every file its sha256; else ``None``."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    try:
        data = loads_strict(path.read_bytes(), source=str(path))
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    files, scores = data.get("files"), data.get("accuracy")
    if not isinstance(files, dict) or not isinstance(scores, dict):
        return None
    if any(not (root / n).is_file() or file_sha256(root / n) != digest for n, digest in files.items()):
        return None
    return LibraryModels(root=root, key=key, files=files, accuracy=scores)


def _build(root: Path, key: str, on_model: Callable[[LibraryModel], object] | None) -> LibraryModels:


    root.mkdir(parents=True, exist_ok=True)
    data = split_tensors(FORGET_CLASSES)
    files: dict[str, str] = {}
    scores: dict[str, dict[str, float]] = {}
    for model in LIBRARY_MODELS:
        built, scores[model.name] = train(model, data)
        temporary = root / f".{model.weights}.tmp"
        save_file({k: v.detach().contiguous() for k, v in built.state_dict().items()}, str(temporary))
        temporary.replace(root / model.weights)
        files[model.weights] = file_sha256(root / model.weights)
        if on_model is not None:
            on_model(model)
    manifest = {"format": LIBRARIES_FORMAT, "key": key, "files": files, "accuracy": scores, "recipe": RECIPE}
    atomic_write_bytes(root / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    found = cached(root, key)
    if found is None:
        raise BnConventionError(f"the library models written to {root} do not read back; remove the folder")
    return found


def prepare_library_models(root: Path, *, zoo_code: str,
                           on_model: Callable[[LibraryModel], object] | None = None) -> tuple[LibraryModels, bool]:
    """``(models, reused)``: the cached models in ``root``, or trained there (two seconds). Checked and built under
    one lock, so parallel demos sharing the folder train once."""
    key = cache_key(zoo_code)
    found = cached(root, key)
    if found is not None:
        return found, True
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root.parent / f".{root.name}.lock")):
        found = cached(root, key)
        if found is not None:
            return found, True
        return _build(root, key, on_model), False


__all__ = ["LIBRARY_MODELS", "RECIPE", "TIMM_ARCHITECTURE", "TIMM_ARGS", "TRANSFORMERS_CONFIG", "Library",
           "LibraryModel", "LibraryModels", "Logits", "cache_key", "cached", "new_library_model",
           "prepare_library_models", "require_libraries", "train"]
