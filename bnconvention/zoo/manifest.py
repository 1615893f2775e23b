"""The zoo's ``manifest.json``: what was built, from which code and seed, and the sha256 of every file.

A build is reused only when its manifest has the same format, seed and code version (:func:`code_sha256`) and every
listed file is present with the listed sha256 (:meth:`ZooManifest.verify`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy
import safetensors
import torch
from safetensors.torch import load_file
from torch import nn

from bnconvention.architectures.build import build_model
from bnconvention.errors import CheckpointMismatchError, JSONInputError, UsageError
from bnconvention.formats.atomic import file_sha256
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.json_types import JsonObject

MANIFEST_NAME = "manifest.json"

# Source files whose content decides the zoo's bytes (the zoo package, the record builder and the standard).
_CODE_FILES = ("zoo/__init__.py", "data/digits.py", "zoo/models.py", "zoo/methods.py", "zoo/variants.py",
               "zoo/manifest.py", "zoo/build.py", "authoring/declaration.py", "formats/canonical.py",
               "standard/models.py", "standard/fields.py", "standard/convention.py", "standard/deployed.py",
               "standard/evidence.py", "standard/annotation.py", "standard/naming.py", "architectures/factories.py")


def code_sha256() -> str:
    """sha256 over the zoo's source files and the library versions that decide its bytes (torch, numpy, sklearn)."""
    import sklearn  # only for its version: reading a zoo does not load sklearn (and scipy)

    package = Path(__file__).resolve().parent.parent
    files = {name: hashlib.sha256((package / name).read_bytes()).hexdigest() for name in _CODE_FILES}
    versions = {"numpy": numpy.__version__, "safetensors": safetensors.__version__,
                "sklearn": sklearn.__version__, "torch": torch.__version__}
    return canonical_sha256({"files": files, "versions": versions})



class _VariantArchitecture(TypedDict):
    factory: str
    kwargs: JsonObject


class FittingStep(TypedDict):
    role: str
    record_count: int
    ids_sha256: str
    by: str


class _VariantData(TypedDict):
    dataset_id: str
    forget_classes: list[int]
    split_sizes: dict[str, int]
    split_ids_sha256: dict[str, str]
    trained_on: list[str]
    fitting: list[FittingStep]


class _VariantMethod(TypedDict):
    name: str
    function: str
    bn_mode: str
    transform: str
    hyperparameters: JsonObject


class VariantConfig(TypedDict):
    """``<variant>.json``, beside its weights: architecture, data split and fitting history, method, buffer-update
    mode, channel, shipped accuracy, and (BatchNorm variants) the fitting convention as the standard's JSON."""

    format: str
    name: str
    architecture: _VariantArchitecture
    weights: str
    parent: str | None
    twin: str
    seed: int
    data: _VariantData
    method: _VariantMethod
    buffer_update_mode: str
    channel: str
    shipped_accuracy: dict[str, float]
    convention: NotRequired[JsonObject]

@dataclass(frozen=True)
class ZooManifest:
    """A built zoo in ``root``: variant names in build order, their configs, and the sha256 of every file.

    Typical use: ``zoo = build_zoo("zoo")``, then ``zoo.load_model("bn-badteacher-eval")`` (an ``nn.Module`` from its
    allowlisted factory and safetensors weights) and ``zoo.config("bn-base")["shipped_accuracy"]``.
    """

    root: Path
    format: str
    seed: int
    code_sha256: str
    variants: tuple[str, ...]
    files: Mapping[str, str]
    data: Mapping[str, Any]

    def to_dict(self) -> JsonObject:
        return {"format": self.format, "seed": self.seed, "code_sha256": self.code_sha256,
                "variants": list(self.variants), "files": dict(sorted(self.files.items())), "data": dict(self.data)}

    def _known(self, name: str) -> None:
        if name not in self.variants:
            raise UsageError(f"zoo in {self.root} has no variant {name!r}; it has: {', '.join(self.variants)}")

    def weights_path(self, name: str) -> Path:
        self._known(name)
        return self.root / f"{name}.safetensors"

    def config_path(self, name: str) -> Path:
        self._known(name)
        return self.root / f"{name}.json"

    def observation_path(self, name: str) -> Path | None:
        """The recorder's observation of this variant's training, when the build had an ``observe`` hook."""
        self._known(name)
        filename = f"{name}.observation.json"
        return self.root / filename if filename in self.files else None

    def config(self, name: str) -> VariantConfig:
        """The variant's JSON config (architecture, data split, method, buffer-update mode, shipped accuracy), as
        the build wrote it (the manifest's digests bind it)."""
        path = self.config_path(name)
        config: VariantConfig = loads_strict(path.read_bytes(), source=str(path))
        return config

    def names(self, *, arch: str | None = None) -> list[str]:
        """Variant names in build order, optionally only ``"bn"`` or ``"gn"`` ones."""
        return [n for n in self.variants if arch is None or n.startswith(f"{arch}-")]

    def load_model(self, name: str) -> nn.Module:
        """The variant as an ``nn.Module`` in eval mode: its allowlisted factory plus its safetensors weights."""
        config = self.config(name)
        architecture = config["architecture"]
        model = build_model(architecture["factory"], architecture["kwargs"])
        state = load_file(str(self.weights_path(name)))
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise CheckpointMismatchError(
                f"{self.weights_path(name)} does not fit {architecture['factory']}: {exc}"
            ) from exc
        return model.eval()

    def verify(self) -> list[str]:
        """Problems with the files on disk (missing, or sha256 differs); empty when the build is intact."""
        problems = []
        for filename, expected in sorted(self.files.items()):
            path = self.root / filename
            if not path.is_file():
                problems.append(f"{filename}: missing")
            elif file_sha256(path) != expected:
                problems.append(f"{filename}: sha256 differs from the manifest")
        return problems


def manifest_bytes(manifest: ZooManifest) -> bytes:
    return (json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")


def read_manifest(root: Path | str) -> ZooManifest:
    """Parse ``root/manifest.json``; :class:`~bnconvention.errors.JSONInputError` if it is malformed."""
    root = Path(root)
    path = root / MANIFEST_NAME
    data = loads_strict(path.read_bytes(), source=str(path))
    try:
        files = data["files"]
        if not all(isinstance(k, str) and isinstance(v, str) and "/" not in k and k not in ("", ".", "..")
                   for k, v in files.items()):
            raise TypeError("files must map plain file names to sha256 strings")
        return ZooManifest(root=root, format=str(data["format"]), seed=int(data["seed"]),
                           code_sha256=str(data["code_sha256"]), variants=tuple(str(v) for v in data["variants"]),
                           files=dict(files), data=dict(data["data"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise JSONInputError(
            f"{path} is not a zoo manifest ({exc}); delete the folder and build the zoo again", source=path
        ) from exc


__all__ = ["MANIFEST_NAME", "FittingStep", "VariantConfig", "ZooManifest", "code_sha256", "file_sha256",
           "manifest_bytes", "read_manifest"]
