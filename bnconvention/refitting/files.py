"""Files around a refit: read an ``.npz`` pool, and the dtype a loaded model computes in.

* Weights in and out (every layout, names mapped, half precision through float32) are
  :mod:`bnconvention.refitting.weights`: ``load_checkpoint_weights`` and ``save_refit_weights``.
* :func:`read_npz_pool`: one array of an ``.npz`` (``allow_pickle=False``), ``N×...``; uint8 is scaled by 1/255.
* :func:`model_dtype`: the floating dtype of a model's tensors, which a pool is converted to.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bnconvention.errors import UnsupportedModelError, UntrustedInputError


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
    """The floating dtype of the model's parameters (float32 when it has none); half precision is refused (a
    checkpoint loaded by :func:`~bnconvention.refitting.weights.load_checkpoint_weights` is already float32 or
    float64)."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point():
            if tensor.dtype not in (torch.float32, torch.float64):
                raise UnsupportedModelError(
                    f"the model holds {tensor.dtype} tensors (e.g. {name!r}); refits and audits compute in float32 "
                    "or float64: load the checkpoint with bnconvention.refitting.weights.load_checkpoint_weights, "
                    "which reads half-precision files exactly into float32")
            return tensor.dtype
    return torch.float32
