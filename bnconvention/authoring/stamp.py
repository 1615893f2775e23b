"""Stamp a record into a safetensors file's header, never touching the tensor data (and never importing torch).

The record goes under :data:`~bnconvention.standard.locations.SAFETENSORS_METADATA_KEY` in ``__metadata__`` as the
canonical JSON of the record. Every other header entry (foreign metadata keys, ``format``, every tensor entry) keeps
its value and its position; the data section after the header stays byte-identical.

What the new file holds is decided by the pure :func:`stamped_header_bytes`:

- the new header JSON fits the old header length: it is padded with trailing spaces to exactly that length, so the
  data section does not move;
- otherwise the header grows by the fewest whole 4 KiB blocks that leave ``reserve`` spare bytes, so later
  re-stamps fit, and the data section keeps its offset modulo 4096 (its alignment, and block sharing, below).

How it is written is decided by :func:`stamp_file`, and is crash-safe either way ("complete old or complete new"):

- **in place** only when the header length is unchanged *and* every byte that differs lies inside one memory page of
  the file. That is a single ``pwrite`` of at most one page, then ``fsync``. A process killed during that write
  cannot leave it half done: Linux copies a page of a buffered write as one unit and checks for fatal signals only
  between pages. (Against power loss, a one-page write is as atomic as the device's write unit, 4 KiB on current
  disks; pass ``allow_in_place=False`` to always use the copy below.)
- **rewrite** otherwise: the data section is copied by the kernel (``os.copy_file_range``, falling back to
  ``shutil.copyfileobj``) into a temporary file next to the original, from block-aligned offsets so that XFS and
  btrfs share the blocks (a reflink) instead of copying them; then the new length and header are written, the copy
  is fsynced, renamed over the original, and the directory fsynced. The original's permission bits are kept. On any
  error the temporary file is removed and the original is untouched. (A SIGKILL can leave that temporary file,
  ``.<name>.<random>.bnc-stamp.tmp``, behind; never a changed original. The next stamp of the same file removes
  it, unless a live stamp still holds its lock: see :func:`bnconvention.formats.atomic.remove_stale_temps`.)

>>> import json, struct
>>> from bnconvention.formats.safetensors_header import parse_header
>>> old = json.dumps({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}).encode()
>>> new = stamped_header_bytes(parse_header(old, data_size=1), '{"kind":"declaration"}', reserve=64)
>>> new[:40]
b'{"__metadata__":{"bnconvention.record":"'
>>> (len(new) - len(old)) % 4096, new.endswith(b" " * 64)
(0, True)
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import shutil
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel
from tqdm import tqdm

from bnconvention.errors import DigestMismatchError, RecordError, SafetensorsHeaderError, StampError, UsageError
from bnconvention.formats.atomic import STAMP_TEMP_SUFFIX, create_temp, fsync_directory, remove_stale_temps
from bnconvention.formats.canonical import canonical_json, canonical_sha256
from bnconvention.formats.digests import file_digests
from bnconvention.formats.running_values import ensure_possible_statistics
from bnconvention.formats.safetensors_header import (
    MAX_HEADER_BYTES,
    METADATA_KEY,
    PREFIX_BYTES,
    SafetensorsHeader,
    header_length,
    parse_header,
    read_header,
)
from bnconvention.formats.text import plural
from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY, record_from_header
from bnconvention.standard.models import BatchNormState, Declaration, RefitAnnotation, to_dict
from bnconvention.validation import ensure_valid_record
from bnconvention.validation.consistency import layer_issues

StampMethod: TypeAlias = Literal["unchanged", "in_place", "rewrite"]

DEFAULT_RESERVE = 4096  # spaces kept after the header JSON so that later re-stamps fit without moving the data
MAX_RESERVE = 16 * 1024 * 1024
PAGE_SIZE = mmap.PAGESIZE
BLOCK = 4096  # headers grow by multiples of this: a filesystem block on every common filesystem
_COPY_CHUNK = 64 * 1024 * 1024  # bytes per copy_file_range call: bounds the time between progress updates
_FALLBACK_ERRNOS = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.ETXTBSY, errno.EBADF}

__all__ = [
    "DEFAULT_RESERVE",
    "StampMethod",
    "StampResult",
    "check_record_matches_file",
    "checked_record",
    "ensure_writable",
    "read_stamped_record",
    "stamp_file",
    "stamped_header_bytes",
    "stamped_header_size",
]


def _checkpoint(stage: str) -> None:
    """Called at every stage of a stamp; a no-op. The crash-safety test replaces it to pause between stages."""


@dataclass(frozen=True)
class StampResult:
    """What :func:`stamp_file` did.

    ``method`` is ``"unchanged"`` when the file already held exactly these header bytes (nothing was written),
    ``"in_place"`` for a one-page header write, ``"rewrite"`` for a new file renamed over the old one.
    """

    path: Path
    method: StampMethod
    header_size: int  # header length N after the stamp
    padding: int  # trailing spaces left in the header: room for later in-place re-stamps
    record_sha256: str  # sha256 of the record's canonical JSON
    digests_checked: bool
    removed_temps: tuple[Path, ...] = ()  # leftovers of earlier killed stamps of this file, removed by this one


# --- the record -----------------------------------------------------------------------------------------------------


def checked_record(record: Declaration | RefitAnnotation | Mapping[str, Any], *,
                   source: str = "record") -> tuple[Declaration | RefitAnnotation, dict[str, Any]]:
    """The record parsed and as a JSON dict, or :class:`RecordError` if the validator finds an error in it."""


    data = to_dict(record) if isinstance(record, BaseModel) else record
    if not isinstance(data, Mapping):
        raise RecordError(f"{source}: a record is a JSON object, found {type(data).__name__}", source=source)
    # The validator's record check: schema, models and semantic rules (canonical name, digest consistency, ...).
    model = ensure_valid_record(dict(data), source=source)
    return model, to_dict(model)


def check_record_matches_file(path: str | os.PathLike[str], record: Declaration | RefitAnnotation, *,
                              header: SafetensorsHeader | None = None) -> None:
    """Raise :class:`DigestMismatchError` unless ``record`` describes exactly the tensors of the file at ``path``.

    A declaration's BatchNorm layers must be the file's (names, ``num_features`` = length of the running tensors),
    and its digests (trainable, all running statistics, per layer) must be the file's. A refit annotation's subject
    digests must be the file's. Reads every tensor once, in chunks (memory independent of the file size).
    """
    header = header or read_header(path)
    where = str(path)
    if isinstance(record, RefitAnnotation):
        found = file_digests(path, header=header)
        found.check_against(trainable_sha256=record.subject.trainable_sha256,
                            running_sha256=record.subject.running_sha256, where=where)
        return
    layers = [layer for state in record.deployed_state if isinstance(state, BatchNormState)
              for layer in state.layers]
    shapes = {name: info.shape for name, info in header.tensors.items()}
    issues, _ = layer_issues(record, shapes, display="the file", source=where)
    if issues:
        first = issues[0]
        more = f" ({plural(len(issues) - 1, 'more problem')}: run bnconvention validate)" if len(issues) > 1 else ""
        raise DigestMismatchError(f"{where}: the record does not describe this file: at {first.path or '/'}: "
                                  f"{first.message}{more}", field=first.path)
    found = file_digests(path, bn_layers=[layer.name for layer in layers], header=header)
    found.check_against(trainable_sha256=record.digests.trainable_sha256,
                        running_sha256=record.digests.running_sha256,
                        layer_running_sha256={layer.name: layer.running_sha256 for layer in layers}, where=where)


# --- the pure header transformation -----------------------------------------------------------------------------


def stamped_header_bytes(header: SafetensorsHeader, record_text: str, *, reserve: int = DEFAULT_RESERVE) -> bytes:
    """The header bytes (without the 8-byte length) of ``header`` with ``record_text`` stamped in.

    The record replaces the value of :data:`SAFETENSORS_METADATA_KEY` where it is, or is appended to
    ``__metadata__``; a header without ``__metadata__`` gets one in front, where safetensors writes it. The result
    is exactly ``header.header_size`` bytes when it fits (trailing spaces), else it grows by the fewest 4 KiB blocks
    that leave at least ``reserve`` trailing spaces (so the data section keeps its offset modulo 4096).
    """
    if not isinstance(reserve, int) or isinstance(reserve, bool) or not 0 <= reserve <= MAX_RESERVE:
        raise UsageError(f"reserve must be an integer number of bytes from 0 to {MAX_RESERVE}, got {reserve!r}")
    raw = header.raw
    if METADATA_KEY in raw:
        entries = {key: (_with_record(header.metadata, record_text) if key == METADATA_KEY else value)
                   for key, value in raw.items()}
    else:
        entries = {METADATA_KEY: {SAFETENSORS_METADATA_KEY: record_text}, **raw}
    # Compact and UTF-8, as safetensors itself writes headers (the reader refused lone surrogates already).
    body = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    size = stamped_header_size(header_size=header.header_size, body_size=len(body), reserve=reserve)
    return body + b" " * (size - len(body))


def stamped_header_size(*, header_size: int, body_size: int, reserve: int) -> int:
    """The header length after a stamp whose JSON is ``body_size`` bytes; :class:`StampError` past the format's limit.

    Unchanged when the JSON fits; otherwise grown by whole blocks: the data section keeps its offset modulo
    :data:`BLOCK`, so the copy can share the data's disk blocks (a reflink on XFS/btrfs) instead of copying them,
    and keeps the writer's 8-byte alignment.

    >>> stamped_header_size(header_size=4000, body_size=4100, reserve=64)
    8096
    """
    size = header_size if body_size <= header_size else (
        header_size + -(-(body_size + reserve - header_size) // BLOCK) * BLOCK)
    if size > MAX_HEADER_BYTES:
        raise StampError(f"the stamped header would be {size} bytes, over the {MAX_HEADER_BYTES}-byte limit of the "
                         "safetensors format (safetensors refuses to open it); the record is too large")
    return size


def _with_record(metadata: dict[str, str] | None, record_text: str) -> dict[str, str]:
    updated = dict(metadata or {})  # an existing key keeps its position; a new one goes last ("null": none yet)
    updated[SAFETENSORS_METADATA_KEY] = record_text
    return updated


def _changed_span(old: bytes, new: bytes) -> tuple[int, int] | None:
    """``(first, end)`` of the bytes that differ between two equally long headers, ``None`` when equal.

    >>> _changed_span(b"abcdef", b"abXdYf")
    (2, 5)
    """
    diff = int.from_bytes(old, "big") ^ int.from_bytes(new, "big")  # one pass in C, not a Python loop
    if not diff:
        return None
    first = len(old) - (diff.bit_length() + 7) // 8
    last = len(old) - 1 - ((diff & -diff).bit_length() - 1) // 8
    return first, last + 1


# --- file I/O -------------------------------------------------------------------------------------------------------


def _read_header_at(fd: int, *, source: str) -> tuple[bytes, SafetensorsHeader]:
    """The raw header bytes and the checked header of the open file ``fd``."""
    file_size = os.fstat(fd).st_size
    length = header_length(os.pread(fd, PREFIX_BYTES, 0), file_size=file_size, source=source)
    data = os.pread(fd, length, 8)
    if len(data) != length:
        raise SafetensorsHeaderError(f"{source}: file ended after {len(data)} of {length} header bytes", source=source,
                                     reason="truncated")
    return data, parse_header(data, data_size=file_size - 8 - length, source=source)


def read_stamped_record(path: str | os.PathLike[str]) -> Declaration | RefitAnnotation | None:
    """The record stamped in a safetensors file's header, checked against the schema; ``None`` if there is none.

    Raises :class:`SafetensorsHeaderError` for a malformed file, :class:`~bnconvention.errors.JSONInputError` when
    the stamped text is not JSON, :class:`RecordError` when it is not a valid record.
    """
    source = str(path)
    data = record_from_header(read_header(path), source=source)
    if data is None:
        return None
    return checked_record(data, source=f"{source} __metadata__[{SAFETENSORS_METADATA_KEY!r}]")[0]


def ensure_writable(path: Path, st: os.stat_result, *, what: str = "file", shown: str | None = None) -> None:
    """:class:`StampError` unless the file at ``path`` (``st``: its stat) may be stamped: the one read-only rule of
    weights files and cards. ``shown``: the name the message uses (default ``path``).

    Root passes ``os.access`` whatever the mode; a file without write bits was still made read-only on purpose, so
    the mode is checked too.
    """
    if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
        name = str(path) if shown is None else shown
        raise StampError(f"{name}: {what} is read-only (mode {stat.filemode(st.st_mode)}); make it writable "
                         f"(chmod u+w {name}) to stamp it; nothing was changed")


def _ensure_directory_writable(directory: Path, needed: int) -> None:
    st = os.stat(directory)
    if not st.st_mode & 0o222 or not os.access(directory, os.W_OK | os.X_OK):
        raise StampError(f"{directory}: directory is read-only (mode {stat.filemode(st.st_mode)}); the stamped copy "
                         "is written next to the original before it replaces it: make the directory writable "
                         "(chmod u+w) or copy the file elsewhere; nothing was changed")
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise StampError(f"{directory}: {needed} bytes are needed for the stamped copy but only {free} are free; "
                         "free some space and retry; nothing was changed")


def stamp_file(path: str | os.PathLike[str], record: Declaration | RefitAnnotation | Mapping[str, Any], *,
               check_digests: bool = True, reserve: int = DEFAULT_RESERVE, allow_in_place: bool = True,
               progress: bool = False) -> StampResult:
    """Stamp ``record`` into the safetensors file at ``path`` (a symlink is followed; the link stays).

    Raises :class:`RecordError` (record fails the schema), :class:`SafetensorsHeaderError` (not a readable
    safetensors file), :class:`DigestMismatchError` (``check_digests`` and the record describes other tensors),
    :class:`StampError` (read-only file or directory, full disk, any I/O error). In every failure case the file is
    unchanged. Stamping the same record again is a no-op.
    """
    model, data = checked_record(record)
    record_text = canonical_json(data)
    target = Path(os.path.realpath(path))
    source = str(path)
    try:
        if not stat.S_ISREG(os.stat(target).st_mode):  # before opening: a FIFO would block the open
            raise SafetensorsHeaderError(f"{source}: not a regular file, so not a safetensors file", source=source)
        with open(target, "rb") as handle:
            old, header = _read_header_at(handle.fileno(), source=source)
            st = os.fstat(handle.fileno())
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise StampError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    _checkpoint("header-read")
    ensure_possible_statistics((target, header), source=source, consequence=(
        "nothing was stamped: a record cannot describe a shipped state that cannot be evaluated (refit the "
        "statistics, or release the state they had before they broke)"))
    if check_digests:
        check_record_matches_file(target, model, header=header)
    new = stamped_header_bytes(header, record_text, reserve=reserve)
    parse_header(new, data_size=header.data_size, source=f"{source} (stamped header)")  # never write what we can't read
    removed = tuple(remove_stale_temps(target, suffix=STAMP_TEMP_SUFFIX))  # a killed stamp's copy is garbage
    result = StampResult(path=target, method="unchanged", header_size=len(new),
                         padding=len(new) - len(new.rstrip(b" ")), record_sha256=canonical_sha256(data),
                         digests_checked=check_digests, removed_temps=removed)
    if new == old:
        return result
    ensure_writable(target, st)
    span = _changed_span(old, new) if len(new) == len(old) else None
    if allow_in_place and span is not None and (8 + span[0]) // PAGE_SIZE == (8 + span[1] - 1) // PAGE_SIZE:
        _write_in_place(target, old, new, span, source=source)
        return _replace(result, method="in_place")
    _rewrite(target, header, new, mode=st.st_mode, progress=progress, source=source)
    return _replace(result, method="rewrite")


def _replace(result: StampResult, *, method: StampMethod) -> StampResult:
    return replace(result, method=method)


def _write_in_place(target: Path, old: bytes, new: bytes, span: tuple[int, int], *, source: str) -> None:
    first, end = span
    try:
        fd = os.open(target, os.O_RDWR)
    except OSError as exc:
        raise StampError(f"{source}: cannot open for writing: {exc.strerror or exc}; nothing was changed") from exc
    try:
        if os.pread(fd, 8 + len(old), 0) != struct.pack("<Q", len(old)) + old:
            raise StampError(f"{source}: the header changed while stamping (another writer?); nothing was "
                             "changed by this stamp: retry")
        _checkpoint("in-place-before-write")
        written = os.pwrite(fd, new[first:end], 8 + first)  # one page at most: all or nothing
        if written != end - first:
            raise StampError(f"{source}: short write ({written} of {end - first} bytes) while stamping in place")
        _checkpoint("in-place-written")
        os.fsync(fd)
        _checkpoint("in-place-synced")
    except OSError as exc:
        if isinstance(exc, StampError):
            raise
        raise StampError(f"{source}: writing the header in place failed: {exc.strerror or exc}; the write is one "
                         "page, so the file holds either the old or the new header") from exc
    finally:
        os.close(fd)


def _rewrite(target: Path, header: SafetensorsHeader, new: bytes, *, mode: int, progress: bool,
             source: str) -> None:
    directory = target.parent
    total = 8 + len(new) + header.data_size
    _ensure_directory_writable(directory, total)
    tmp: Path | None = None
    try:
        fd, tmp = create_temp(target, suffix=STAMP_TEMP_SUFFIX)  # locked until closed: never taken for a leftover
        _checkpoint("temp-created")
        with os.fdopen(fd, "r+b") as out, open(target, "rb") as src:
            os.fchmod(out.fileno(), stat.S_IMODE(mode))
            # Copy from the block boundary at or before the data section: both offsets are then block-aligned
            # (the header grew by whole blocks), which lets the kernel share the blocks instead of copying bytes.
            # The few old header bytes this also copies are overwritten by the new header right after.
            start = header.data_offset - header.data_offset % BLOCK
            shift = len(new) - header.header_size
            _copy_range(src, out, src_offset=start, dst_offset=start + shift, count=header.file_size - start,
                        progress=progress, source=source)
            _checkpoint("temp-data-copied")
            out.seek(0)
            out.write(struct.pack("<Q", len(new)) + new)
            out.flush()
            _checkpoint("temp-header-written")
            if os.fstat(out.fileno()).st_size != total:
                raise StampError(f"{source}: the stamped copy is {os.fstat(out.fileno()).st_size} bytes, expected "
                                 f"{total}; the original is unchanged")
            os.fsync(out.fileno())
            _checkpoint("temp-synced")
            os.replace(tmp, target)  # while the copy is open, so still locked
            tmp = None
        _checkpoint("renamed")
        fsync_directory(directory)
        _checkpoint("directory-synced")
    except StampError:
        raise
    except OSError as exc:
        reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
        raise StampError(f"{source}: writing the stamped copy in {directory} failed: {reason}; the original file is "
                         "unchanged and the temporary copy was removed") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _copy_range(src: Any, dst: Any, *, src_offset: int, dst_offset: int, count: int, progress: bool,
                source: str) -> None:
    """Copy ``count`` bytes kernel-side where possible (no pass through user space), else with copyfileobj."""
    with tqdm(total=count, unit="B", unit_scale=True, desc="stamp: copying tensor data", disable=not progress,
              leave=False) as bar:
        done = 0
        use_kernel = hasattr(os, "copy_file_range")
        while done < count and use_kernel:
            _checkpoint("copy")
            try:
                n = os.copy_file_range(src.fileno(), dst.fileno(), min(_COPY_CHUNK, count - done),
                                       src_offset + done, dst_offset + done)
            except OSError as exc:
                if done == 0 and exc.errno in _FALLBACK_ERRNOS:
                    use_kernel = False
                    break
                raise
            if n == 0:
                raise StampError(f"{source}: the file ended {count - done} bytes early while copying (changed while "
                                 "stamping?); the original is unchanged")
            done += n
            bar.update(n)
        if done < count:
            src.seek(src_offset)
            dst.seek(dst_offset)
            _checkpoint("copy")
            shutil.copyfileobj(src, dst, 8 * 1024 * 1024)
            bar.update(count)
