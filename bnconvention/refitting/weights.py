"""A checkpoint's tensors into a model and back: every layout, names mapped, half precision through float32.

Loading (:func:`load_checkpoint_weights`): the checkpoint (a ``.safetensors`` file, a shard index, or a folder
holding one; :func:`bnconvention.formats.checkpoint_files.open_checkpoint`) is checked header by header, its names
mapped onto the model's ``state_dict`` (:mod:`bnconvention.refitting.keymap`), every name and shape must fit
(:class:`~bnconvention.errors.CheckpointMismatchError` otherwise, one line naming the missing and unexpected
tensors), and the tensors are read with ``safetensors`` (never a pickle).

Dtypes (the rule of ``docs/statistics.md``, "Half-precision checkpoints"): floating tensors are held in float32, or
float64 when the file or the model already uses float64. Every float16 and bfloat16 value is exactly a float32
value, so the float32 copy holds the file's numbers; a model the factory built in half precision is converted
to that dtype first. Integer tensors (``num_batches_tracked``) must have the model's dtype. Digests always describe
the file's own bytes: :meth:`LoadedWeights.stored_state` converts the model back to the file's names and dtypes,
which gives the file's bytes exactly while θ is untouched.

Writing (:func:`save_refit_weights`): the checkpoint's own layout, a single file or the same shards with the
index copied byte for byte. Trainable tensors are copied from the source file (θ bytes unchanged by
construction), running statistics converted to their dtype in the file (round to nearest), each shard's
metadata kept with the record stamped in every shard. Each file is written atomically; the index last.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save

from bnconvention.errors import CheckpointMismatchError, UnsupportedModelError, UntrustedInputError, UsageError
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.formats.checkpoint_files import CheckpointFiles, is_index_path, open_checkpoint
from bnconvention.formats.digests import (
    DigestSet,
    bn_layer_names,
    running_names_for_layer,
    state_dict_digests,
    torch_dtype_name,
)
from bnconvention.formats.safetensors_header import SafetensorsHeader
from bnconvention.refitting.keymap import KeyMap, KeyProblems, match_keys
from bnconvention.standard.deployed import TensorDigests
from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY
from bnconvention.standard.models import Declaration

HALF_DTYPES = ("F16", "BF16")
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


@dataclass(frozen=True)
class LoadedWeights:
    """What was loaded into the model: the checkpoint's files, how names mapped, each tensor's dtype in the file."""

    files: CheckpointFiles
    keys: KeyMap
    file_dtypes: dict[str, str]  # file name -> safetensors dtype
    notes: list[str] = field(default_factory=list)  # names mapped, dtypes converted: for the audit's warnings

    @property
    def header(self) -> SafetensorsHeader:
        return self.files.header

    def bn_layers_in_file(self, model: torch.nn.Module) -> list[str]:
        """The model's BatchNorm layers under the file's names (for digests of the stored tensors)."""
        to_file = self.keys.to_file()
        layers = []
        for layer in bn_layer_names(model):
            stored = to_file.get(f"{layer}.running_mean" if layer else "running_mean")
            layers.append(stored[: -len("running_mean")].rstrip(".") if stored else layer)
        return layers

    def stored_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The model's tensors as the file stores them: the file's names and dtypes (exact for θ, see above)."""
        state = model.state_dict()
        out = {}
        for stored, name in self.keys.to_model.items():
            tensor = state[name]
            dtype = self.file_dtypes[stored]
            out[stored] = tensor if torch_dtype_name(tensor.dtype) == dtype else tensor.to(_torch_dtype(dtype))
        return out

    def stored_digests(self, model: torch.nn.Module) -> DigestSet:
        """Digests of :meth:`stored_state`: equal to the file's when nothing changed the model."""
        return state_dict_digests(self.stored_state(model), self.bn_layers_in_file(model))

    def running_in_file(self, model: torch.nn.Module) -> list[str]:
        """The file names of the model's BatchNorm running buffers (what a refit rewrites)."""
        stored = list(self.keys.to_model)
        return [n for layer in self.bn_layers_in_file(model) for n in running_names_for_layer(layer, stored)]

    def half_running(self, model: torch.nn.Module) -> dict[str, str]:
        """Model names of the running buffers the file stores in half precision -> that dtype."""
        return {self.keys.to_model[s]: self.file_dtypes[s] for s in self.running_in_file(model)
                if self.file_dtypes[s] in HALF_DTYPES}

    def round_running(self, model: torch.nn.Module) -> None:
        """Round the model's running statistics to their dtype in the file, as a written refit stores them."""
        half = self.half_running(model)
        if not half:
            return
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                if name in half:
                    buffer.copy_(buffer.to(_torch_dtype(half[name])).to(buffer.dtype))


def _torch_dtype(name: str) -> torch.dtype:
    return {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}[name]


def storage_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Model names whose tensors share storage (tied weights) -> one key per group; names alone are left out."""
    groups: dict[tuple[int, int, tuple[int, ...]], list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if tensor.numel():
            # a model without storage (meta device, built to check its sizes) ties by sharing the tensor itself
            where = id(tensor) if tensor.is_meta else tensor.untyped_storage().data_ptr()
            key = (where, tensor.storage_offset(), tuple(tensor.shape))
            groups.setdefault(key, []).append(name)
    return {name: names[0] for names in groups.values() if len(names) > 1 for name in names}


def compute_dtype(model: torch.nn.Module, file_dtypes: dict[str, str], *, where: str) -> torch.dtype:
    """float64 when the file or the model holds float64 tensors, float32 otherwise (the rule above)."""
    odd = sorted({d for d in file_dtypes.values() if d.startswith("F") and d not in FLOAT_DTYPES})
    if odd:
        name = next(n for n, d in file_dtypes.items() if d == odd[0])
        raise UnsupportedModelError(f"{where}: tensor {name!r} is {odd[0]}; audits and refits read F16, BF16, F32 "
                                    "and F64 checkpoints")
    model_floats = {t.dtype for t in model.state_dict().values() if t.is_floating_point()}
    wide = "F64" in file_dtypes.values() or torch.float64 in model_floats
    return torch.float64 if wide else torch.float32


def fit_model(model: torch.nn.Module, files: CheckpointFiles, *, factory: str) -> tuple[KeyMap, list[str]]:
    """The name mapping under which ``files`` fits ``model`` (raises one line naming the differences), and notes."""
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    file_shapes = {name: tuple(info.shape) for name, info in files.tensors().items()}
    found = match_keys(file_shapes, shapes, base_prefix=str(getattr(model, "base_model_prefix", "") or ""),
                       aliases=storage_aliases(model))
    if isinstance(found, KeyProblems):
        raise CheckpointMismatchError(
            f"{files.path}: the tensors do not fit the model built by {factory}: {found.describe()}; name the "
            "architecture (and its arguments) the weights were saved from")
    notes = [f"tensor names mapped onto the model: {found.note}"] if found.note else []
    return found, notes


def _check_dtypes(model: torch.nn.Module, keys: KeyMap, file_dtypes: dict[str, str], *, where: str) -> None:
    state = model.state_dict()
    for stored, name in keys.to_model.items():
        found, expected = file_dtypes[stored], torch_dtype_name(state[name].dtype)
        if state[name].is_floating_point() != (found in FLOAT_DTYPES) or (
                not state[name].is_floating_point() and found != expected):
            raise CheckpointMismatchError(f"{where}: tensor {stored!r} is {found} in the file but {expected} in the "
                                          "model; only floating tensors are converted (exactly, to float32 or "
                                          "float64)")


def _to_compute_dtype(model: torch.nn.Module, dtype: torch.dtype) -> list[str]:
    floats = sorted({str(t.dtype).removeprefix("torch.") for t in model.state_dict().values()
                     if t.is_floating_point() and t.dtype != dtype})
    if not floats:
        return []
    model.to(dtype)
    return [f"the model was built in {', '.join(floats)}; it runs as a {str(dtype).removeprefix('torch.')} copy "
            "(docs/statistics.md, half-precision checkpoints)"]


def load_checkpoint_weights(model: torch.nn.Module, path: str | os.PathLike[str], *,
                            factory: str = "the factory") -> LoadedWeights:
    """Load the checkpoint at ``path`` into ``model`` (strictly, by the rules above); returns what was loaded."""
    files = open_checkpoint(path)
    keys, notes = fit_model(model, files, factory=factory)
    file_dtypes = {name: info.dtype for name, info in files.tensors().items()}
    _check_dtypes(model, keys, file_dtypes, where=str(files.path))
    dtype = compute_dtype(model, file_dtypes, where=str(files.path))
    notes += _to_compute_dtype(model, dtype)
    half = sorted({d for d in file_dtypes.values() if d in HALF_DTYPES})
    if half:
        notes.append(f"the file stores {'/'.join(half)} tensors, read exactly into {str(dtype).removeprefix('torch.')}"
                     "; digests describe the file's own bytes (docs/statistics.md, half-precision checkpoints)")
    state = _read_tensors(files, keys, model, dtype)
    model.load_state_dict(state, strict=True)
    return LoadedWeights(files=files, keys=keys, file_dtypes=file_dtypes, notes=notes)


def _read_tensors(files: CheckpointFiles, keys: KeyMap, model: torch.nn.Module, dtype: torch.dtype
                  ) -> dict[str, torch.Tensor]:
    """Every file tensor under its model name, floats in ``dtype``; stored-once tied tensors filled in."""
    state: dict[str, Any] = {}
    for shard in files.shards:
        try:
            with safe_open(str(shard.path), framework="pt") as handle:
                for stored in shard.header.tensors:
                    tensor = handle.get_tensor(stored)
                    state[keys.to_model[stored]] = tensor.to(dtype) if tensor.is_floating_point() else tensor
        except Exception as exc:  # noqa: BLE001 - the safetensors parser's own errors on untrusted bytes
            raise UntrustedInputError(f"{shard.path}: safetensors could not read the tensors ({exc})",
                                      source=shard.path) from exc
    for missing, stored_as in keys.aliases.items():
        state[missing] = state[stored_as]
    return state


# --- writing a refit back -------------------------------------------------------------------------------------------


def output_paths(loaded: LoadedWeights, out: str | os.PathLike[str]) -> tuple[Path, dict[str, Path]]:
    """Where a refit of ``loaded`` goes: the main path (file or index) and each shard's target (by shard name).

    A single file goes to ``out`` (a folder: the source's file name in it). A sharded checkpoint goes to the folder
    ``out`` (or beside the index ``out`` names), shard names unchanged; it never replaces its own shards."""
    out = Path(out)
    files = loaded.files
    if files.kind == "single":
        target = out / files.path.name if out.is_dir() else out
        return target, {files.shards[0].name: target}
    if out.name.endswith(".safetensors") and not is_index_path(out):
        raise UsageError(f"{files.path.name} is sharded: --out names a folder or a .safetensors.index.json, and the "
                         "refit keeps the shards")
    index = out if is_index_path(out) else out / files.path.name
    if index.parent.resolve() == files.path.parent.resolve():
        raise UsageError(f"--out {out} is the folder of the sharded input; write the refit to another folder (its "
                         "shards keep their names)")
    return index, {shard.name: index.parent / shard.name for shard in files.shards}


def save_refit_weights(model: torch.nn.Module, loaded: LoadedWeights, out: str | os.PathLike[str], *,
                       record_text: str | None) -> Path:
    """Write the refit model in the source's layout (see the module docstring); returns the file or index written."""


    main, targets = output_paths(loaded, out)
    stored = loaded.stored_state(model)
    running = set(loaded.running_in_file(model))
    blobs = []
    for shard in loaded.files.shards:
        tensors = {}
        with safe_open(str(shard.path), framework="pt") as handle:
            for name in shard.header.tensors:  # θ from the source's bytes, φ from the refit model
                tensors[name] = stored[name].detach().contiguous() if name in running else handle.get_tensor(name)
        metadata = {k: v for k, v in (shard.header.metadata or {}).items() if k != SAFETENSORS_METADATA_KEY}
        if record_text is not None:
            metadata[SAFETENSORS_METADATA_KEY] = record_text
        blobs.append((targets[shard.name], save(tensors, metadata=metadata or None)))
    if main.parent != Path(""):
        main.parent.mkdir(parents=True, exist_ok=True)
    for target, blob in blobs:
        atomic_write_bytes(target, blob)
    if loaded.files.kind == "sharded":
        atomic_write_bytes(main, loaded.files.path.read_bytes())
    return main


def stored_declaration(declaration: Declaration, loaded: LoadedWeights, model: torch.nn.Module, *,
                       before: DigestSet) -> Declaration:
    """A refit's declaration in the file's terms: layer names and digests of the tensors as written (file names
    and dtypes), θ/φ before from the source file. Unchanged when names and dtypes are the model's own."""
    after = loaded.stored_digests(model)
    model_to_layer = dict(zip(_model_layers(model), loaded.bn_layers_in_file(model), strict=True))
    states = []
    for state in declaration.deployed_state:
        layers = [layer.model_copy(update={"name": model_to_layer.get(layer.name, layer.name),
                                           "running_sha256": after.layer_running_sha256.get(
                                               model_to_layer.get(layer.name, layer.name))})
                  for layer in getattr(state, "layers", [])]
        states.append(state.model_copy(update={"layers": layers}) if hasattr(state, "layers") else state)
    update: dict[str, Any] = {
        "deployed_state": states,
        "digests": TensorDigests(algorithm=declaration.digests.algorithm, trainable_sha256=after.trainable_sha256,
                                 running_sha256=after.running_sha256),
    }
    if declaration.refit is not None:
        staleness = declaration.refit.staleness
        renamed = [item.model_copy(update={"name": model_to_layer.get(item.name, item.name)})
                   for item in staleness.layers]
        update["refit"] = declaration.refit.model_copy(update={
            "trainable_sha256_before": before.trainable_sha256, "trainable_sha256_after": after.trainable_sha256,
            "running_sha256_before": before.running_sha256, "running_sha256_after": after.running_sha256,
            "staleness": staleness.model_copy(update={"layers": renamed}),
            "warnings": [*declaration.refit.warnings, *loaded.notes]})
    return declaration.model_copy(update=update)


def _model_layers(model: torch.nn.Module) -> list[str]:
    return bn_layer_names(model)


__all__ = [
    "LoadedWeights",
    "compute_dtype",
    "fit_model",
    "load_checkpoint_weights",
    "output_paths",
    "save_refit_weights",
    "storage_aliases",
    "stored_declaration",
]
