"""Atomic file writes: a temporary file next to the target, fsync, rename, fsync of the directory.

Either the old file or the complete new one is at the path afterwards, whatever happens in between.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path: Path, *, mode: str = "wb", keep_mode_of: Path | None = None) -> Iterator[IO]:  # type: ignore[type-arg]
    """Yield a file object whose content replaces ``path`` atomically when the block exits without error.

    The temporary file lives in the target's directory (same filesystem, so ``os.replace`` is atomic) and is removed
    if the block raises. File permissions of ``keep_mode_of`` (default: the existing target) are carried over.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        source_mode = keep_mode_of or (path if path.exists() else None)
        if source_mode is not None:
            os.chmod(tmp, os.stat(source_mode).st_mode & 0o7777)
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_directory(directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    with atomic_output(Path(path), mode="wb") as handle:
        handle.write(data)


def atomic_write_text(path: Path, text: str, *, newline: str | None = "") -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically; ``newline=""`` writes line endings exactly as given."""
    data = text.encode("utf-8") if newline == "" else text.replace("\n", newline or os.linesep).encode("utf-8")
    atomic_write_bytes(Path(path), data)


def replace_directory(partial: Path, target: Path) -> None:
    """Move the fully built folder ``partial`` to ``target``, replacing what is there.

    Two renames (the old folder aside, the new one in) and an fsync of the parent: a reader sees the old folder or
    the new one, never a half-built one; the old one is deleted last.
    """
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    if target.exists():
        os.replace(target, old)
    os.replace(partial, target)
    fsync_directory(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sync_generated_file(path: Path, text: str, *, check: bool, command: str) -> int:
    """Write generated ``text`` to ``path`` (atomically, only if it changed), or with ``check`` only compare.

    Returns an exit code: 1 when ``check`` finds the file out of date (the message names ``command`` to fix it).
    """
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if current == text:
        return 0
    if check:
        print(f"{path} is out of date; run: {command}", file=sys.stderr)
        return 1
    atomic_write_text(path, text)
    print(f"wrote {path}", file=sys.stderr)
    return 0
