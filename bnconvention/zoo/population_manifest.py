"""The population's ``manifest.json``: what was built, from which code, seed and configuration, with the sha256 of
every file (relative POSIX paths), the checkpoints in build order with their folders, and the counts per role.

A build is reused only when format, seed and :func:`population_code_sha256` (the code and the configuration) match
and every file hashes as listed (:meth:`PopulationManifest.verify`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from safetensors.torch import load_file
from torch import nn

from bnconvention.architectures.build import build_model
from bnconvention.errors import JSONInputError, UsageError
from bnconvention.formats.atomic import atomic_write_bytes, file_sha256
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.json_types import JsonObject
from bnconvention.formats.links import folder_files
from bnconvention.zoo.manifest import code_sha256
from bnconvention.zoo.population_plan import Checkpoint, PopulationConfig, plan_counts
from bnconvention.zoo.population_release import POPULATION_FORMAT, PopulationSidecar

MANIFEST_NAME = "manifest.json"
_CODE_FILES = ("zoo/population_data.py", "zoo/population_plan.py", "zoo/population_train.py",
               "zoo/population_release.py", "zoo/population_spec.py", "zoo/population_build.py",
               "zoo/population_manifest.py", "authoring/observation.py", "authoring/recorder.py")

__all__ = ["MANIFEST_NAME", "POPULATION_FORMAT", "PopulationManifest", "population_code_sha256",
           "read_population_manifest", "write_manifest"]


def population_code_sha256(config: PopulationConfig) -> str:
    """sha256 over the zoo's code version, the population's source files and the configuration."""
    package = Path(__file__).resolve().parent.parent
    files = {name: hashlib.sha256((package / name).read_bytes()).hexdigest() for name in _CODE_FILES}
    return canonical_sha256({"zoo": code_sha256(), "files": files, "config": config.to_dict()})


@dataclass(frozen=True)
class PopulationManifest:
    """A built population in ``root``. ``folders`` maps each checkpoint name to its folder (relative)."""

    root: Path
    format: str
    seed: int
    code_sha256: str
    config: Mapping[str, Any]
    folders: Mapping[str, str]
    files: Mapping[str, str]
    counts: Mapping[str, int]

    @property
    def names(self) -> list[str]:
        return list(self.folders)

    def to_dict(self) -> JsonObject:
        return {"format": self.format, "seed": self.seed, "code_sha256": self.code_sha256, "config": dict(self.config),
                "checkpoints": [{"name": n, "folder": f} for n, f in self.folders.items()],
                "files": dict(sorted(self.files.items())), "counts": dict(self.counts)}

    def folder(self, name: str) -> Path:
        if name not in self.folders:
            raise UsageError(f"population in {self.root} has no checkpoint {name!r}")
        return self.root / self.folders[name]

    def weights_path(self, name: str) -> Path:
        return self.folder(name) / f"{name}.safetensors"

    def card_path(self, name: str) -> Path:
        return self.folder(name) / "README.md"

    def sidecar(self, name: str) -> PopulationSidecar:
        """The checkpoint's sidecar (role, family, variant, removal, seed, forget ids, cells, convention), as the
        build wrote it (the manifest's digests bind it)."""
        path = self.folder(name) / f"{name}.json"
        data: PopulationSidecar = loads_strict(path.read_bytes(), source=str(path))
        return data

    def select(self, **fields: Any) -> list[str]:
        """Names whose sidecar has every given field value, e.g. ``select(role="twin", seed=0)``."""
        return [n for n in self.names if all(self.sidecar(n).get(k) == v for k, v in fields.items())]

    def load_model(self, name: str) -> nn.Module:
        architecture = self.sidecar(name)["architecture"]
        model = build_model(architecture["factory"], architecture["kwargs"])
        model.load_state_dict(load_file(str(self.weights_path(name))), strict=True)
        return model.eval()

    def verify(self) -> list[str]:
        """Problems with the files on disk (missing, or sha256 differs); empty when the build is intact."""
        problems = []
        for name, expected in sorted(self.files.items()):
            path = self.root / name
            if not path.is_file():
                problems.append(f"{name}: missing")
            elif file_sha256(path) != expected:
                problems.append(f"{name}: sha256 differs from the manifest")
        return problems


def write_manifest(root: Path, *, config: PopulationConfig, seed: int, code: str,
                   items: Sequence[Checkpoint]) -> None:
    """Hash every regular file under ``root`` (but the manifest, the partial key and hidden files; links are not
    followed: :mod:`bnconvention.formats.links`) and write ``manifest.json``."""
    found = folder_files(root, ignore=(MANIFEST_NAME, "partial.json", ".*"))
    files = {name: file_sha256(root / name) for name in found.files}
    manifest = PopulationManifest(root=root, format=POPULATION_FORMAT, seed=seed, code_sha256=code,
                                  config=config.to_dict(), folders={i.name: i.folder for i in items}, files=files,
                                  counts=plan_counts(items))
    text = json.dumps(manifest.to_dict(), indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(root / MANIFEST_NAME, text.encode("utf-8"))


def _safe_relative(name: Any) -> bool:
    return (isinstance(name, str) and bool(name) and "\\" not in name and not PurePosixPath(name).is_absolute()
            and all(part not in ("", ".", "..") for part in name.split("/")))


def read_population_manifest(root: Path | str) -> PopulationManifest:
    """Parse ``root/manifest.json``; :class:`~bnconvention.errors.JSONInputError` if it is malformed."""
    root = Path(root)
    path = root / MANIFEST_NAME
    data = loads_strict(path.read_bytes(), source=str(path))
    try:
        files = dict(data["files"])
        folders = {str(c["name"]): str(c["folder"]) for c in data["checkpoints"]}
        if not all(_safe_relative(k) and isinstance(v, str) for k, v in files.items()) or not all(
                _safe_relative(f) for f in folders.values()):
            raise TypeError("files and folders must be relative paths inside the population")
        return PopulationManifest(root=root, format=str(data["format"]), seed=int(data["seed"]),
                                  code_sha256=str(data["code_sha256"]), config=dict(data["config"]),
                                  folders=folders, files=files, counts=dict(data["counts"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise JSONInputError(f"{path} is not a population manifest ({exc}); delete the folder and build the "
                             "population again", source=path) from exc
