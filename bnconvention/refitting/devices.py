"""Which device a refit or an audit computes on: ``auto``, ``cpu``, ``cuda`` or ``mps``.

``auto`` picks an available accelerator (CUDA first, then Apple's MPS) and the CPU when there is none; ``cuda`` and
``mps`` are refused with :class:`~bnconvention.errors.DeviceUnavailableError` when this machine or torch build lacks
them, rather than silently running elsewhere. :data:`Device` is the one list of names: the Python type of every
``device=`` argument and the choices of every ``--device`` option.

The statistics do not depend on the device beyond float32 rounding of the forward: the exact rule's sums are
float64 on the device where it has float64 (CPU, CUDA) and float64 on the CPU after a per-sample float32 sum where
it has not (MPS, :mod:`~bnconvention.refitting.moments`).

>>> resolve_device("cpu")
device(type='cpu')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from bnconvention.errors import DeviceUnavailableError

# torch is imported inside the functions that use it: importing this module does not import torch.
if TYPE_CHECKING:
    import torch

Device = Literal["auto", "cpu", "cuda", "mps"]
DEVICES: tuple[str, ...] = get_args(Device)

__all__ = ["DEVICES", "Device", "available_accelerator", "resolve_device"]


def available_accelerator() -> str | None:
    """``"cuda"`` or ``"mps"`` when torch can use one here, else None."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "mps" if _mps_available() else None


def _mps_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(name: str) -> torch.device:
    """The torch device ``name`` stands for on this machine; unknown or unavailable names are a clear error."""
    import torch

    if name not in DEVICES:
        raise DeviceUnavailableError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")
    if name == "auto":
        return torch.device(available_accelerator() or "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda
        why = f"torch {torch.__version__} was built with CUDA {built} but no CUDA device is visible" if built else (
            f"torch {torch.__version__} was built without CUDA")
        raise DeviceUnavailableError(f"device 'cuda' is not available: {why}; use --device cpu (or auto)")
    if name == "mps" and not _mps_available():
        raise DeviceUnavailableError("device 'mps' is not available: this is not an Apple-silicon machine with a "
                                     "torch built for MPS; use --device cpu (or auto)")
    return torch.device(name)
