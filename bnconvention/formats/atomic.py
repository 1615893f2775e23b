"""Atomic file writes: a temporary file next to the target, fsync, rename, fsync of the directory.

Either the old file or the complete new one is at the path afterwards, whatever happens in between.

Temporary files are ours by name and by lock: ``.<target name>.<8 random characters><suffix>``, created with mode
0o666 so the user's umask decides the permissions of a new file (``mkstemp`` would make it 0600), and held under an
exclusive ``flock`` from creation until it is renamed over the target. A process that is killed in between leaves
the file behind but not the lock (the kernel drops it with the process), so :func:`remove_stale_temps` can tell a
leftover from a write in progress: it removes only files with that exact name pattern for that target, owned by
this user, whose lock it can take. :data:`TEMP_GLOBS` are the patterns an upload must leave out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from bnconvention.errors import UsageError
from bnconvention.formats.json_types import JsonObject

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locks, so stale files are never removed
    fcntl = None  # type: ignore[assignment]

STAMP_TEMP_SUFFIX = ".bnc-stamp.tmp"  # the copy a safetensors stamp writes before renaming it over the original
WRITE_TEMP_SUFFIX = ".bnc-write.tmp"  # every other atomic write (cards, records, reports)
TEMP_GLOBS = (f"*{STAMP_TEMP_SUFFIX}", f"*{WRITE_TEMP_SUFFIX}")  # never uploaded (bnconvention publish)
_TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # the alphabet of tempfile.mkstemp, which older versions used
_TEMP_RANDOM = 8


def _temp_pattern(target: Path, suffix: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(target.name)}\.[{_TEMP_CHARS}]{{{_TEMP_RANDOM}}}{re.escape(suffix)}")


def _try_lock(fd: int) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _is_file_at(path: Path, st: os.stat_result) -> bool:
    """Whether ``path`` still names the file ``st`` describes (not removed or replaced meanwhile)."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def create_temp(target: Path, *, suffix: str = WRITE_TEMP_SUFFIX) -> tuple[int, Path]:
    """A new empty file next to ``target``, opened read-write and locked: ``(fd, path)``. Close ``fd`` only after
    the file has been renamed or removed, so that the lock covers its whole life at that path."""
    directory = target.parent if str(target.parent) else Path(".")
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        random = "".join(secrets.choice(_TEMP_CHARS) for _ in range(_TEMP_RANDOM))
        path = directory / f".{target.name}.{random}{suffix}"
        try:
            fd = os.open(path, flags, 0o666)  # the umask applies, as for any file the user creates
        except FileExistsError:
            continue
        # A cleaner may have taken the unlocked new file for a leftover; it then removes it: use another name.
        if _try_lock(fd) and _is_file_at(path, os.fstat(fd)):
            return fd, path
        os.close(fd)
    raise FileExistsError(f"{directory}: could not create a temporary file next to {target.name}")


def remove_stale_temps(target: Path, *, suffix: str) -> list[Path]:
    """Remove the temporary files a killed write to ``target`` left behind; returns what was removed.

    Only files named exactly like ours for this target, regular, owned by this user and not locked by a live
    writer (a concurrent write of the same target keeps its file) are removed. Errors leave a file where it is.
    """
    if fcntl is None:
        return []
    directory = target.parent if str(target.parent) else Path(".")
    pattern = _temp_pattern(target, suffix)
    try:
        names = sorted(entry.name for entry in os.scandir(directory) if pattern.fullmatch(entry.name))
    except OSError:
        return []
    return [directory / name for name in names if _remove_if_stale(directory / name)]


def _remove_if_stale(path: Path) -> bool:
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or not _try_lock(fd):
            return False
        if not _is_file_at(path, st):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


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
def atomic_output(path: Path, *, mode: str = "wb", keep_mode_of: Path | None = None) -> Iterator[IO[Any]]:
    """Yield a file object whose content replaces ``path`` atomically when the block exits without error.

    The temporary file (:func:`create_temp`) lives in the target's directory (same filesystem, so ``os.replace``
    is atomic) and is removed if the block raises. The permissions of ``keep_mode_of`` (default: the existing
    target) are carried over; a new file gets the permissions the umask gives (0644 under the usual 022).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = create_temp(path, suffix=WRITE_TEMP_SUFFIX)
    try:
        source_mode = keep_mode_of or (path if path.exists() else None)
        if source_mode is not None:
            os.chmod(tmp, os.stat(source_mode).st_mode & 0o7777)
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
            os.replace(tmp, path)  # still open, so still locked: no cleaner can take it for a leftover
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


def refuse_foreign_folder(out_dir: Path, *, what: str, is_ours: Callable[[Path], bool]) -> None:
    """Before a build replaces ``out_dir`` (:func:`replace_directory`): refuse a file, or a non-empty folder that
    ``is_ours`` does not recognise as an earlier build of ``what`` (e.g. ``"zoo"``); an unreadable one is not ours."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{what} output {out_dir} exists and is not a folder; choose another --out")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        try:
            ours = is_ours(out_dir)
        except (ValueError, OSError):
            ours = False
        if not ours:
            raise UsageError(f"{what} output {out_dir} is a non-empty folder without a {what} manifest.json; a build "
                             "replaces the whole folder, so choose an empty or new --out (or delete the folder "
                             "yourself)")


PARTIAL_KEY = "partial.json"  # what a resumable build's .partial folder was started for


def prepare_partial(partial: Path, key: JsonObject, *, resume: bool) -> None:
    """The ``.partial`` folder of a resumable build: kept when ``resume`` and it was started for the same ``key``
    (format, seed, code digest...), so finished work survives an interruption; otherwise emptied and stamped with
    ``key``. The build removes ``partial / PARTIAL_KEY`` before :func:`replace_directory`."""
    key_path = partial / PARTIAL_KEY
    if resume and key_path.is_file():
        try:
            if json.loads(key_path.read_text("utf-8")) == key:
                return
        except (ValueError, OSError):
            pass
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    atomic_write_bytes(key_path, json.dumps(key, sort_keys=True).encode("utf-8"))


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
