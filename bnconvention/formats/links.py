"""One rule for every command that copies, uploads or hashes a folder: symbolic links are not followed.

A release folder is the author's files. A link in it points anywhere: ``/dev/zero`` (a copy that fills the disk),
``/etc/hostname`` (a file of this machine uploaded to the Hub), a folder outside the release. So ``push-to-hub``
(which copies the folder), ``publish`` (which uploads it) and the dataset digest (which hashes it) read regular files
only: a link, to a file, a folder, a device or nowhere, is passed over and named, as is any other file that is not a
regular one (a FIFO, a socket, a device node); nothing behind it is read. A file is opened with ``O_NOFOLLOW`` and
checked to be regular from the open descriptor, so a file swapped for a link after the walk is not followed either.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> _ = (root / "model.safetensors").write_bytes(b"x")
>>> (root / "hostname").symlink_to("/etc/hostname")
>>> folder_files(root)
FolderFiles(files=('model.safetensors',), skipped=('hostname',))
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FolderFiles", "copy_folder", "folder_files", "skipped_line", "upload_ignore_patterns"]

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class FolderFiles:
    """A folder's regular files and what was passed over (links, special files), as sorted relative POSIX paths."""

    files: tuple[str, ...]
    skipped: tuple[str, ...]


def _ignored(name: str, ignore: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in ignore)


def folder_files(root: str | os.PathLike[str], *, ignore: Iterable[str] = ()) -> FolderFiles:
    """The regular files under ``root`` and the entries passed over, without following any link (``ignore``: name
    patterns left out of both, e.g. a killed write's temporary files)."""
    patterns = tuple(ignore)
    base = Path(root)
    files: list[str] = []
    skipped: list[str] = []
    for current, dirs, names in os.walk(base, followlinks=False):
        here = Path(current)
        for name in list(dirs):
            if os.path.islink(here / name):  # os.walk lists a link to a folder among the folders
                dirs.remove(name)
                if not _ignored(name, patterns):
                    skipped.append((here / name).relative_to(base).as_posix())
        dirs.sort()
        for name in names:
            if _ignored(name, patterns):
                continue
            relative = (here / name).relative_to(base).as_posix()
            try:
                mode = os.lstat(here / name).st_mode
            except FileNotFoundError:  # gone since the walk listed it
                continue
            (files if stat.S_ISREG(mode) else skipped).append(relative)
    return FolderFiles(files=tuple(sorted(files)), skipped=tuple(sorted(skipped)))


def skipped_line(root: str | os.PathLike[str], relative: str) -> str:
    """``name -> target`` for a link (``name`` for another special file): what a command says it passed over."""
    path = Path(root) / relative
    try:
        return f"{relative} -> {os.readlink(path)}"
    except OSError:
        return relative


def copy_folder(source: str | os.PathLike[str], target: str | os.PathLike[str], *,
                ignore: Iterable[str] = ()) -> FolderFiles:
    """Copy the regular files of ``source`` into the new folder ``target`` (modes and times kept), following no link;
    what was copied and what was passed over."""
    found = folder_files(source, ignore=ignore)
    Path(target).mkdir(parents=True)
    skipped = list(found.skipped)
    copied: list[str] = []
    for relative in found.files:
        origin, destination = Path(source) / relative, Path(target) / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(origin, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:  # a link now (ELOOP), or gone
            skipped.append(relative)
            continue
        with os.fdopen(descriptor, "rb") as reader:
            info = os.fstat(reader.fileno())
            if not stat.S_ISREG(info.st_mode):
                skipped.append(relative)
                continue
            with open(destination, "wb") as writer:
                while chunk := reader.read(_CHUNK):
                    writer.write(chunk)
        os.chmod(destination, stat.S_IMODE(info.st_mode))
        os.utime(destination, ns=(info.st_atime_ns, info.st_mtime_ns))
        copied.append(relative)
    return FolderFiles(files=tuple(copied), skipped=tuple(sorted(skipped)))


def upload_ignore_patterns(skipped: Iterable[str]) -> list[str]:
    """``upload_folder`` patterns that leave out each passed-over entry (and, for a link to a folder, what is under
    it): huggingface_hub lists a folder with ``Path.glob`` and ``is_file``, which follow links."""
    patterns: list[str] = []
    for relative in skipped:
        escaped = glob.escape(relative)
        patterns += [escaped, f"{escaped}/*"]
    return patterns
