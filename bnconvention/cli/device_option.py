"""``--device auto|cpu|cuda|mps``: where ``refit``, ``audit``, ``census`` and ``hub audit`` compute.

The choices are :data:`bnconvention.refitting.devices.DEVICES` (the ``Device`` type of the library's ``device=``
arguments), so the CLI and the library cannot drift apart. :func:`chosen_device` resolves the choice before any work
starts: ``--device cuda`` on a machine without CUDA is a one-line error (exit 2), never a silent CPU run.
"""

from __future__ import annotations

import argparse

from bnconvention.refitting.allocator import tune_malloc
from bnconvention.refitting.devices import DEVICES, Device, resolve_device

HELP = ("where to compute: auto (an available accelerator, CUDA then MPS, else the CPU), cpu, cuda or mps "
        "(default: cpu)")


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=DEVICES, default="cpu", help=HELP)


def chosen_device(args: argparse.Namespace) -> Device:
    """The device ``--device`` names on this machine (``auto`` resolved), checked before any work starts. The
    commands that take ``--device`` are the ones that compute, so this is also where their process fixes glibc's
    allocator thresholds (:func:`bnconvention.refitting.allocator.tune_malloc`: no history-dependent page faults)."""
    device = resolve_device(args.device).type
    tune_malloc()
    return device  # type: ignore[return-value]


__all__ = ["HELP", "add_device_option", "chosen_device"]
