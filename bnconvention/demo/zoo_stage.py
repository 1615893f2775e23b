"""The demo's zoo: the digits zoo built with :class:`~bnconvention.authoring.recorder.BNRecorder` observing each
variant's training, so the authors' declarations are measured rather than typed.

The zoo saves ``<variant>.observation.json`` (``to_dict(recorder.observation())``) next to each variant. Observing
changes nothing in training: the weights are byte-identical to an unobserved build with the same seed. A zoo that
already holds every variant and its observation, built by the current code, is reused as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

from bnconvention.authoring.recorder import BNRecorder
from bnconvention.errors import JSONInputError
from bnconvention.standard.models import to_dict
from bnconvention.zoo import VARIANTS, ZooManifest, build_zoo, code_sha256, read_manifest
from bnconvention.zoo.variants import ZOO_FORMAT

ZOO_SEED = 0


class RecorderObserver:
    """What the zoo's ``observe`` hook yields: forwards split tags to the recorder, and saves its observation."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    def set_split(self, split: str) -> None:
        self.recorder.set_split(split)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self.recorder.observation())


@contextlib.contextmanager
def observe_with_recorder(name: str, model: Any) -> Iterator[RecorderObserver]:
    """The zoo's ``observe`` hook: a recorder around one variant's training (``name`` is the variant)."""
    recorder = BNRecorder(model, split="train")
    with recorder:
        yield RecorderObserver(recorder)


def observed_zoo(zoo_dir: Path) -> ZooManifest | None:
    """The zoo in ``zoo_dir`` when it is complete, intact, built by this code and observed; else ``None``."""
    if not (zoo_dir / "manifest.json").is_file():
        return None
    try:
        manifest = read_manifest(zoo_dir)
    except (JSONInputError, ValueError, OSError):
        return None
    if (manifest.format, manifest.seed, manifest.code_sha256) != (ZOO_FORMAT, ZOO_SEED, code_sha256()):
        return None
    names = [spec.name for spec in VARIANTS]
    if not set(names) <= set(manifest.variants):
        return None
    if any(manifest.observation_path(name) is None for name in names) or manifest.verify():
        return None
    return manifest


def prepare_zoo(zoo_dir: Path, *, progress: bool) -> tuple[ZooManifest, bool]:
    """``(zoo, reused)``: reuse an observed zoo in ``zoo_dir`` or build one there (about half a minute).

    Two demos sharing a zoo folder (parallel test sessions) check and build under one lock, so the second one finds
    the first one's build instead of replacing it while the first one reads it.
    """
    found = observed_zoo(zoo_dir)
    if found is not None:
        return found, True
    zoo_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(zoo_dir.parent / f".{zoo_dir.name}.demo.lock")):
        found = observed_zoo(zoo_dir)
        if found is not None:
            return found, True
        manifest = build_zoo(zoo_dir, seed=ZOO_SEED, progress=progress, observe=observe_with_recorder)
    return manifest, False


__all__ = ["ZOO_SEED", "RecorderObserver", "observe_with_recorder", "observed_zoo", "prepare_zoo"]
