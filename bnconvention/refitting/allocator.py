"""Keep glibc from handing large tensors back to the kernel between forwards: the cause of bimodal refit timings.

Measured (``benchmarks/refit.py``; the zoo ConvNet, 512 images 32x32 in batches of 128, 2 threads, glibc 2.36): with
glibc's default allocator settings an eval forward page-faulted 30,000-60,000 times (120-240 MB of fresh pages)
and the exact pass 15,000-27,000 times, the counts changing from call to call. glibc serves allocations above its
*mmap threshold* with fresh ``mmap`` pages and returns heap tops above its *trim threshold* to the kernel; both
thresholds move with the allocation history (each freed mapped block raises them), so whether an 8 MiB activation
is recycled or faulted in anew depends on what ran before. On a virtual machine under load every fault is expensive,
so the same pass ran at 1x or 4x an eval forward depending on the history: the ConvNet's bimodal ratio
(docs/statistics.md#cost-a-refit-and-an-audit-against-their-floors).
With both thresholds fixed (mmap 128 MiB, trim 512 MiB; fixing them also stops glibc adjusting them) the same run
page-faulted 0-30 times per call and an eval forward took 40 % less CPU time.

:func:`tune_malloc` sets them once per process; the ``bnconvention`` command line calls it at start (commands are
processes of their own), the library never does it behind a caller's back. It does nothing when the user already
chose (``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the environment, or ``BNC_MALLOC_TUNING=0``), off
glibc, or when ``mallopt`` refuses. The price is memory held rather than returned: up to the trim threshold of freed
heap stays mapped to the process until it exits or reuses it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

MMAP_THRESHOLD = 128 * 2**20
TRIM_THRESHOLD = 512 * 2**20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_USER_CHOICES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "LD_PRELOAD")

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_malloc"]


def tune_malloc(environ: dict[str, str] | None = None) -> bool:
    """Fix glibc's mmap and trim thresholds for this process; True when both were set (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("BNC_MALLOC_TUNING", "1") == "0" or any(name in env for name in _USER_CHOICES):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl, or no C library to load: nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
