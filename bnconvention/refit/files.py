"""Files around a refit: load weights into a model strictly, write the refit weights atomically, read an ``.npz`` pool.

* :func:`load_weights`: the header is checked with our strict parser first (a malformed file is an
  :class:`~bnconvention.errors.UntrustedInputError`), then every tensor name, shape and dtype must match the model's
  ``state_dict`` (:class:`~bnconvention.errors.CheckpointMismatchError` otherwise; dtypes are never converted, since
  the digests would then describe other bytes); tensors are read with ``safetensors`` (no pickle).
* :func:`save_weights`: the model's ``state_dict`` serialized by ``safetensors`` and written through a temporary file
  in the target's directory, renamed into place: the target is either untouched or complete. Metadata keys of the
  source file survive unchanged, except ``bnconvention.record``, which is replaced by the refit's declaration (its
  digests describe the written tensors; the source's record described the old running statistics).
* :func:`read_npz_pool`: one array of an ``.npz`` (``allow_pickle=False``), ``N×...``; uint8 is scaled by 1/255.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bnconvention.errors import CheckpointMismatchError, UnsupportedModelError, UntrustedInputError

# torch, numpy and safetensors.torch are imported inside the functions that use them: importing this module does
# not import torch.
if TYPE_CHECKING:
    import torch

    from bnconvention.formats.safetensors_header import SafetensorsHeader


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def load_weights(model: torch.nn.Module, path: str | os.PathLike[str], *, factory: str = "the factory"
                 ) -> SafetensorsHeader:
    """Load ``path`` into ``model`` with ``strict=True`` after checking names, shapes and dtypes; returns the header."""
    from safetensors.torch import load_file

    from bnconvention.formats.digests import torch_dtype_name
    from bnconvention.formats.safetensors_header import read_header

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} does not exist or is not a file")
    header = read_header(path)
    expected = model.state_dict()
    problems = []
    missing = [name for name in expected if name not in header.tensors]
    unexpected = [name for name in header.tensors if name not in expected]
    if missing:
        problems.append(f"missing from the file: {_names(missing)}")
    if unexpected:
        problems.append(f"not in the model: {_names(unexpected)}")
    for name, tensor in expected.items():
        info = header.tensors.get(name)
        if info is None:
            continue
        if tuple(info.shape) != tuple(tensor.shape):
            problems.append(f"{name!r} has shape {list(info.shape)} in the file but {list(tensor.shape)} in the model")
        elif info.dtype != torch_dtype_name(tensor.dtype):
            problems.append(f"{name!r} is {info.dtype} in the file but {torch_dtype_name(tensor.dtype)} in the model")
    if problems:
        raise CheckpointMismatchError(
            f"{path}: the tensors do not fit the model built by {factory}: {'; '.join(problems)}; name the "
            "architecture (and --arch-kwargs) the weights were saved from")
    try:
        state = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the safetensors parser's own errors on untrusted bytes
        raise UntrustedInputError(f"{path}: safetensors could not read the tensors ({exc})", source=path) from exc
    model.load_state_dict(state, strict=True)
    return header


def save_weights(model: torch.nn.Module, path: str | os.PathLike[str], *, record_text: str | None,
                 source_metadata: dict[str, str] | None = None) -> None:
    """Write ``model.state_dict()`` to ``path`` atomically, with the source's metadata and the record stamped."""
    from safetensors.torch import save

    from bnconvention.formats.atomic import atomic_write_bytes
    from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY

    metadata = {k: v for k, v in (source_metadata or {}).items() if k != SAFETENSORS_METADATA_KEY}
    if record_text is not None:
        metadata[SAFETENSORS_METADATA_KEY] = record_text
    tensors = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    atomic_write_bytes(Path(path), save(tensors, metadata=metadata or None))


@dataclass(frozen=True)
class NpzPool:
    """The inputs of an ``.npz`` pool as one tensor, with what describes it in a record."""

    x: torch.Tensor
    path: Path
    key: str
    file_sha256: str

    @property
    def record_count(self) -> int:
        return int(self.x.shape[0])


def read_npz_pool(path: str | os.PathLike[str], *, key: str = "x", dtype: torch.dtype | None = None) -> NpzPool:
    """Array ``key`` of an ``.npz`` as a float tensor (uint8 scaled by 1/255), leading dimension = samples."""
    import numpy as np
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pool file {str(path)!r} does not exist or is not a file")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if key not in archive.files:
                raise UntrustedInputError(f"{path}: no array {key!r} in the archive (arrays: {sorted(archive.files)});"
                                          " name the input array with --pool-key", source=path)
            array = archive[key]
    except UntrustedInputError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise UntrustedInputError(f"{path}: not a readable .npz archive of plain arrays ({exc})", source=path) from exc
    if array.ndim < 2 or array.shape[0] == 0:
        raise UntrustedInputError(f"{path}: array {key!r} has shape {list(array.shape)}; a pool needs N samples along "
                                  "the first axis and at least one more axis (e.g. N×C×H×W)", source=path)
    if array.dtype == np.uint8:
        x = torch.from_numpy(np.ascontiguousarray(array)).to(torch.float32) / 255.0
    elif array.dtype.kind == "f":
        x = torch.from_numpy(np.ascontiguousarray(array))
    else:
        raise UntrustedInputError(f"{path}: array {key!r} has dtype {array.dtype}; a pool holds float images or uint8 "
                                  "pixels (scaled by 1/255)", source=path)
    if dtype is not None:
        x = x.to(dtype)
    if not bool(torch.isfinite(x).all()):
        raise UntrustedInputError(f"{path}: array {key!r} holds NaN or infinite values", source=path)
    return NpzPool(x=x, path=path, key=key, file_sha256=digest.hexdigest())


def model_dtype(model: torch.nn.Module) -> Any:
    """The floating dtype of the model's parameters (float32 when it has none); half precision is refused."""
    import torch

    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point():
            if tensor.dtype not in (torch.float32, torch.float64):
                raise UnsupportedModelError(
                    f"the model holds {tensor.dtype} tensors (e.g. {name!r}); refits and audits need float32 or "
                    "float64 weights: save a float32 copy of the checkpoint (model.float()) and build the model in "
                    "float32")
            return tensor.dtype
    return torch.float32
