"""Build the digits zoo: deterministic, cached, atomic, resumable, observable.

``build_zoo(out_dir)`` trains every variant of :data:`bnconvention.zoo.variants.VARIANTS` and writes, per variant,
``<name>.safetensors`` (weights only, ``safetensors.torch.save_file``, no pickle) and ``<name>.json`` (its config),
plus ``manifest.json`` with the sha256 of every file, the seed and the code version.

* Deterministic: one torch thread during the build, every generator seeded from ``(seed, variant)``; the same seed
  on the same machine and library versions gives the same bytes.
* Cached: a build whose manifest matches (format, seed, code version) and whose files hash correctly is reused.
* Atomic: the build happens in ``.<out>.partial`` next to ``out_dir`` and is renamed into place when complete; a
  file lock next to ``out_dir`` serialises concurrent builders (parallel pytest workers).
* Resumable: an interrupted build keeps its finished variants in the partial folder and continues from there.
* Observable: ``observe(name, model)`` returns a context manager wrapped around each variant's training; the object
  it yields gets ``set_split("train" | "retain" | "forget")`` before every batch if it has that method, and if it
  has ``to_dict()`` the result is saved as ``<name>.observation.json``. A build with ``observe`` never reuses or
  resumes a previous one (there would be nothing to observe).

Build notes (hyperparameters, measured on this data with forget class 3, exact/``update_bn`` refit on retain):
BadTeacher-style distillation in eval mode at Adam 1e-3 for 3 epochs ships 0 % forget accuracy and returns to
~100 % after a refit (at 1e-4 for one epoch it barely forgets: 84 % shipped); eval-mode random relabelling (Adam
1e-3, 3 epochs) likewise goes from 0 % to ~100 %. Gradient ascent with train-mode BN is knife-edge (SGD 1e-2: 8
steps leave 36 % forget accuracy, 12 reach 0 % and refit back to 92 %, 20 refit back to only 24 %, 30 stay at 0 %).
The GroupNorm twins have no running statistics, so a refit leaves every prediction unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from bnconvention.errors import UsageError
from bnconvention.formats.atomic import (
    PARTIAL_KEY,
    atomic_write_bytes,
    prepare_partial,
    refuse_foreign_folder,
    replace_directory,
)
from bnconvention.zoo.manifest import (
    MANIFEST_NAME,
    ZooManifest,
    code_sha256,
    file_sha256,
    manifest_bytes,
    read_manifest,
)
from bnconvention.zoo.methods import accuracy
from bnconvention.zoo.variants import (
    FORGET_CLASSES,
    VARIANTS,
    ZOO_FORMAT,
    SplitTensors,
    VariantSpec,
    batch_count,
    new_model,
    run_variant,
    split_tensors,
    variant,
    variant_config,
)

ObserveHook = Callable[[str, Any], AbstractContextManager[Any]]


def default_zoo_dir(cache_root: Path | str, *, seed: int = 0) -> Path:
    """``<cache_root>/zoo-<code version, 12 hex>-seed<seed>``: a folder name that changes whenever the code does."""
    return Path(cache_root) / f"zoo-{code_sha256()[:12]}-seed{seed}"


def _with_parents(names: Iterable[str] | None) -> list[str]:
    if names is None:
        return [spec.name for spec in VARIANTS]
    wanted: set[str] = set()
    for name in names:
        spec: VariantSpec | None = variant(name)
        while spec is not None:
            wanted.add(spec.name)
            spec = variant(spec.parent) if spec.parent else None
    return [spec.name for spec in VARIANTS if spec.name in wanted]


def _reusable(out_dir: Path, *, seed: int, names: Sequence[str], code: str) -> ZooManifest | None:
    if not (out_dir / MANIFEST_NAME).is_file():
        return None
    try:
        manifest = read_manifest(out_dir)
    except (ValueError, OSError):
        return None
    if (manifest.format, manifest.seed, manifest.code_sha256) != (ZOO_FORMAT, seed, code):
        return None
    if not set(names) <= set(manifest.variants) or manifest.verify():
        return None
    return manifest


def build_zoo(out_dir: Path | str, *, seed: int = 0, progress: bool = True, observe: ObserveHook | None = None,
              variants: Sequence[str] | None = None, force: bool = False) -> ZooManifest:
    """Build the zoo into ``out_dir`` (or reuse a matching, intact build there) and return its manifest.

    ``variants`` restricts the build to those names and their parents (default: all 14). ``force`` rebuilds even
    when a matching build exists.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"the zoo seed must be a non-negative integer, got {seed!r}")
    out_dir = Path(out_dir).resolve()  # "." or ".." have no usable name for the partial folder and the lock
    names = _with_parents(variants)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    code = code_sha256()
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):
        if observe is None and not force:
            manifest = _reusable(out_dir, seed=seed, names=names, code=code)
            if manifest is not None:
                return manifest
        _refuse_foreign_folder(out_dir)
        partial = out_dir.parent / f".{out_dir.name}.partial"
        prepare_partial(partial, {"format": ZOO_FORMAT, "seed": seed, "code_sha256": code,
                                  "observed": observe is not None}, resume=observe is None and not force)
        _build_into(partial, seed=seed, names=names, progress=progress, observe=observe)
        _finish(partial, seed=seed, names=names, code=code)
        replace_directory(partial, out_dir)
    return read_manifest(out_dir)


def _refuse_foreign_folder(out_dir: Path) -> None:
    """A build replaces ``out_dir``: never do that to a file or to a non-empty folder that is not a zoo."""
    refuse_foreign_folder(out_dir, what="zoo", is_ours=lambda folder: read_manifest(folder).format == ZOO_FORMAT)


def _done(partial: Path, name: str) -> bool:
    # the config is written last, so its presence marks a finished variant
    return (partial / f"{name}.json").is_file() and (partial / f"{name}.safetensors").is_file()


def _build_into(partial: Path, *, seed: int, names: Sequence[str], progress: bool,
                observe: ObserveHook | None) -> None:
    data = split_tensors(FORGET_CLASSES)
    specs = [variant(name) for name in names]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: reductions run in a fixed order, so the bytes are reproducible
    try:
        with tqdm(total=sum(batch_count(s, data) for s in specs), unit="batch", desc="zoo", file=sys.stderr,
                  disable=not progress, dynamic_ncols=True) as bar:
            for spec in specs:
                bar.set_description(f"zoo {spec.name}")
                if _done(partial, spec.name):
                    bar.update(batch_count(spec, data))
                    continue
                _build_variant(partial, spec, data, seed=seed, observe=observe, tick=bar.update)
    finally:
        torch.set_num_threads(threads)


def _build_variant(partial: Path, spec: VariantSpec, data: SplitTensors, *, seed: int,
                   observe: ObserveHook | None, tick: Callable[[int], Any]) -> None:
    model = new_model(spec, seed=seed)
    parent_state = None
    if spec.parent is not None:
        # always from the file, so a resumed build trains from exactly the bytes a fresh one would
        parent_state = load_file(str(partial / f"{spec.parent}.safetensors"))
        model.load_state_dict(parent_state, strict=True)
    context = observe(spec.name, model) if observe is not None else contextlib.nullcontext(None)
    with context as observer:
        run_variant(spec, model, data, seed=seed, parent_state=parent_state, observer=observer, progress=tick)
    model.eval()
    test_forget = data.y["test"] == FORGET_CLASSES[0]
    for cls in FORGET_CLASSES[1:]:
        test_forget |= data.y["test"] == cls
    shipped = {
        "forget": accuracy(model, data.x["forget"], data.y["forget"]),
        "retain": accuracy(model, data.x["retain"], data.y["retain"]),
        "test": accuracy(model, data.x["test"], data.y["test"]),
        "test_forget_classes": accuracy(model, data.x["test"][test_forget], data.y["test"][test_forget]),
    }
    to_dict = getattr(observer, "to_dict", None)
    if callable(to_dict):
        text = json.dumps(to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
        atomic_write_bytes(partial / f"{spec.name}.observation.json", text.encode("utf-8"))
    weights = partial / f"{spec.name}.safetensors"
    temporary = partial / f".{spec.name}.safetensors.tmp"
    save_file({key: value.detach().contiguous() for key, value in model.state_dict().items()}, str(temporary))
    os.replace(temporary, weights)
    config = variant_config(spec, data, seed=seed, shipped_accuracy=shipped)
    atomic_write_bytes(partial / f"{spec.name}.json",
                       (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _finish(partial: Path, *, seed: int, names: Sequence[str], code: str) -> None:
    data = split_tensors(FORGET_CLASSES)
    files: dict[str, str] = {}
    umask = os.umask(0)
    os.umask(umask)
    for name in names:
        for suffix in (".safetensors", ".json", ".observation.json"):
            path = partial / f"{name}{suffix}"
            if path.is_file():
                os.chmod(path, 0o666 & ~umask)  # temporary files are created 0600; a zoo is meant to be shared
                files[path.name] = file_sha256(path)
    manifest = ZooManifest(
        root=partial, format=ZOO_FORMAT, seed=seed, code_sha256=code, variants=tuple(names), files=files,
        data={"dataset_id": "sklearn/digits", "forget_classes": list(FORGET_CLASSES), "split_sizes": data.sizes,
              "split_ids_sha256": {role: data.ids_sha256(role) for role in data.sizes}},
    )
    atomic_write_bytes(partial / MANIFEST_NAME, manifest_bytes(manifest))
    os.chmod(partial / MANIFEST_NAME, 0o666 & ~umask)
    (partial / PARTIAL_KEY).unlink()


def _swap_into_place(partial: Path, out_dir: Path) -> None:
    replace_directory(partial, out_dir)
