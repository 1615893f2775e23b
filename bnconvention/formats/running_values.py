"""Running statistics that cannot be: NaN or infinite means and variances, negative variances.

A BatchNorm layer's ``running_var`` is a variance: finite and never below zero; its ``running_mean`` is finite. A
file whose buffers break that has a shipped state nobody can evaluate as it is (a NaN or negative variance makes
``sqrt(var + eps)`` NaN, and every output after it), whatever its record says. :func:`impossible_statistics` reads
the running buffers' bytes straight from a safetensors file (never importing torch or numpy: ``validate`` runs in a
core install), decodes float64, float32, float16 and bfloat16, and returns one :class:`ImpossibleValues` per
buffer and kind of problem; integer buffers cannot hold NaN and are not checked.

``validate`` reports each as an issue (``statistics.nonfinite``, ``statistics.negative_variance``), ``declare`` and
``stamp`` refuse the file with :class:`~bnconvention.errors.ImpossibleStatisticsError`, and the audit refuses the
checkpoint with it before any computation (:func:`ensure_possible_statistics`).

>>> import struct
>>> scan_buffer("F32", [struct.pack("<4f", 1.0, -0.5, float("nan"), -2.0)], variance=True)
{'nan': (1, 2, nan), 'negative': (2, 1, -0.5)}
>>> bf16 = struct.pack("<f", -0.5)[2:] + struct.pack("<f", float("inf"))[2:]
>>> scan_buffer("BF16", [bf16], variance=False)
{'infinite': (1, 1, inf)}
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Literal

from bnconvention.errors import ImpossibleStatisticsError, SafetensorsHeaderError
from bnconvention.formats.checkpoint_files import CheckpointFiles
from bnconvention.formats.digests import bn_layers_from_tensor_names
from bnconvention.formats.safetensors_header import SafetensorsHeader, TensorInfo, read_header
from bnconvention.formats.text import elide

Problem = Literal["nan", "infinite", "negative"]
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
_CHUNK = 1 << 20  # bytes per read: a multiple of every item size
_WORDS = {"nan": ("NaN value", "NaN values"), "infinite": ("infinite value", "infinite values"),
          "negative": ("negative value", "negative values")}


@dataclass(frozen=True)
class ImpossibleValues:
    """``count`` values of one kind (``nan``, ``infinite``, ``negative``) in one running buffer of one layer; the
    first at ``first_index`` (the channel) with ``first_value``."""

    layer: str
    buffer: Literal["running_mean", "running_var"]
    problem: Problem
    count: int
    first_index: int
    first_value: float

    @property
    def code(self) -> str:
        """The validation code that reports it."""
        return "statistics.negative_variance" if self.problem == "negative" else "statistics.nonfinite"

    def describe(self) -> str:
        """``layer 'bn1' running_var has 3 negative values (first at channel 2: -0.5)``."""
        singular, many = _WORDS[self.problem]
        return (f"layer {elide(self.layer)!r} {self.buffer} has {self.count} {singular if self.count == 1 else many} "
                f"(first at channel {self.first_index}: {self.first_value!r})")


def _floats(dtype: str, chunk: bytes) -> Iterable[float]:
    """The little-endian floats of ``chunk`` (whole items) as Python floats."""
    if dtype == "F16":
        return (value for (value,) in struct.iter_unpack("<e", chunk))
    if dtype == "BF16":
        # a bfloat16 is the upper half of a float32: put its two bytes in the high half of each 4-byte item
        widened = bytearray(2 * len(chunk))
        widened[2::4], widened[3::4] = chunk[0::2], chunk[1::2]
        chunk, dtype = bytes(widened), "F32"
    values = array("d" if dtype == "F64" else "f")
    values.frombytes(chunk)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def scan_buffer(dtype: str, chunks: Iterable[bytes], *, variance: bool) -> dict[Problem, tuple[int, int, float]]:
    """``problem -> (count, first index, first value)`` over one buffer's bytes (in chunks of whole items): NaN and
    infinite values, and negative ones when ``variance``. Empty when every value is possible or the dtype is not a
    float."""
    size = FLOAT_DTYPES.get(dtype)
    if size is None:
        return {}
    found: dict[Problem, tuple[int, int, float]] = {}
    index, rest = 0, b""
    for piece in chunks:
        data = rest + bytes(piece)
        whole = len(data) - len(data) % size
        data, rest = data[:whole], data[whole:]
        values = _floats(dtype, data)
        if not isinstance(values, array):
            values = array("d", values)
        # the common case in C: a finite sum (no NaN, no infinity) and, for a variance, no value below zero
        if values and math.isfinite(sum(values)) and (not variance or min(values) >= 0):
            index += len(values)
            continue
        for value in values:
            problem: Problem | None = None
            if value != value:
                problem = "nan"
            elif math.isinf(value):
                problem = "infinite"
            elif variance and value < 0:
                problem = "negative"
            if problem is not None:
                count, first, first_value = found.get(problem, (0, index, value))
                found[problem] = (count + 1, first, first_value)
            index += 1
    return {problem: found[problem] for problem in ("nan", "infinite", "negative") if problem in found}


def _chunks(handle: BinaryIO, offset: int, count: int, *, source: str) -> Iterator[bytes]:
    handle.seek(offset)
    while count:
        chunk = handle.read(min(_CHUNK, count))
        if not chunk:
            raise SafetensorsHeaderError(f"{source}: file ended inside tensor data", source=source)
        count -= len(chunk)
        yield chunk


def impossible_statistics(files: CheckpointFiles | tuple[str | os.PathLike[str], SafetensorsHeader], *,
                          layers: Sequence[str] | None = None) -> list[ImpossibleValues]:
    """Every impossible value of the running buffers of a checkpoint (every shard) or of one file ``(path,
    header)``: per layer (``layers``, default: those recognisable from tensor names) and buffer, in layer order. The
    buffers are streamed in chunks (memory independent of their size)."""
    sources: list[tuple[str | os.PathLike[str], SafetensorsHeader]] = (
        [(shard.path, shard.header) for shard in files.shards] if isinstance(files, CheckpointFiles) else [files])
    where: dict[str, tuple[int, TensorInfo]] = {
        name: (index, info) for index, (_, header) in enumerate(sources) for name, info in header.tensors.items()}
    if layers is None:
        layers = bn_layers_from_tensor_names({name: info.shape for name, (_, info) in where.items()})
    found: list[ImpossibleValues] = []
    with contextlib.ExitStack() as stack:
        handles: dict[int, BinaryIO] = {}
        for layer in layers:
            for buffer in ("running_mean", "running_var"):
                name = f"{layer}.{buffer}" if layer else buffer
                if name not in where:
                    continue
                index, info = where[name]
                if info.dtype not in FLOAT_DTYPES:
                    continue
                path, header = sources[index]
                if index not in handles:
                    handles[index] = stack.enter_context(open(path, "rb"))
                chunks = _chunks(handles[index], header.data_offset + info.begin, info.nbytes, source=str(path))
                for problem, (count, first, value) in scan_buffer(info.dtype, chunks,
                                                                  variance=buffer == "running_var").items():
                    found.append(ImpossibleValues(layer=layer, buffer=buffer, problem=problem,
                                                  count=count, first_index=first, first_value=value))
    return found


def describe_all(found: Sequence[ImpossibleValues], *, limit: int = 3) -> str:
    """The first ``limit`` findings joined by ``; ``, and how many more there are."""
    shown = "; ".join(item.describe() for item in found[:limit])
    more = len(found) - limit
    return shown + (f"; and {more} more" if more > 0 else "")


def ensure_possible_statistics(files: CheckpointFiles | str | os.PathLike[str]
                               | tuple[str | os.PathLike[str], SafetensorsHeader], *, source: str | None = None,
                               layers: Sequence[str] | None = None, consequence: str = "") -> None:
    """Raise :class:`~bnconvention.errors.ImpossibleStatisticsError` when the running buffers of ``files`` (a
    checkpoint, a safetensors file's path, or its path and header) hold NaN, infinite or negative-variance values:
    one line naming the file, the layer and the buffer (``model.safetensors: layer 'bn1' running_var has 3 negative
    values (first at channel 2: -0.5)``), followed by ``consequence`` (what the caller will not do)."""
    if isinstance(files, CheckpointFiles):
        found = impossible_statistics(files, layers=layers)
        shown = source or str(files.path)
    elif isinstance(files, tuple):
        found = impossible_statistics(files, layers=layers)
        shown = source or str(files[0])
    else:
        found = impossible_statistics((files, read_header(files)), layers=layers)
        shown = source or str(files)
    if not found:
        return
    first = found[0]
    message = f"{shown}: {describe_all(found)}"
    raise ImpossibleStatisticsError(message + (f"; {consequence}" if consequence else ""), source=shown,
                                    layer=first.layer, buffer=first.buffer)


__all__ = ["ImpossibleValues", "describe_all", "ensure_possible_statistics", "impossible_statistics", "scan_buffer"]
