"""Index files of record ids, where they may live, and the digest that binds them.

An index file is UTF-8 text, one integer record id per line; blank lines and ``#`` comments are ignored, an id
listed twice is an error. It may sit in the spec's folder (a path the user wrote), in a dataset repo on the Hub or
in the model repo. A file from a repo is someone else's data: the spec binds it by ``ids_sha256``, the standard's
:func:`~bnconvention.standard.naming.record_ids_sha256` of the ids it lists, and a file whose ids hash to anything
else is refused in one line before any split is built. Names inside a repo are relative POSIX paths without ``..``.

>>> record_ids_sha256([2, 1]) == IndexFile(ids=(1, 2), name="f.txt", source="f.txt").sha256
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bnconvention.errors import DigestMismatchError, UntrustedInputError, UsageError
from bnconvention.standard.naming import record_ids_sha256

MAX_INDEX_BYTES = 64 * 1024 * 1024

__all__ = ["IndexFile", "check_repo_path", "load_index_file", "parse_index_text", "read_index_file"]


@dataclass(frozen=True)
class IndexFile:
    """The ids of an index file, its name (for split descriptions) and where it came from (for messages)."""

    ids: tuple[int, ...]
    name: str
    source: str

    @property
    def sha256(self) -> str:
        return record_ids_sha256(self.ids)


def parse_index_text(data: bytes, *, source: str) -> list[int]:
    """The record ids of an index file's bytes (see the module docstring); errors name ``source`` and the line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedInputError(f"{source}: not UTF-8 text at byte {exc.start}", source=source) from exc
    ids: list[int] = []
    seen: set[int] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        try:
            value = int(content, 10)
        except ValueError:
            raise UntrustedInputError(f"{source}:{number}: expected one integer record id, found {content[:40]!r}",
                                      source=source) from None
        if value in seen:
            raise UntrustedInputError(f"{source}:{number}: record id {value} is listed twice", source=source)
        seen.add(value)
        ids.append(value)
    if not ids:
        raise UntrustedInputError(f"{source}: no record ids found; write one integer id per line", source=source)
    return ids


def read_index_file(path: Path | str) -> list[int]:
    """Record ids from a text file: one integer per line; blank lines and ``#`` comments are ignored."""
    path = Path(path)
    return parse_index_text(_read_bounded(path, source=str(path)), source=str(path))


def load_index_file(path: Path | str, *, source: str | None = None,
                    expected_sha256: str | None = None) -> IndexFile:
    """An index file with its provenance; ``expected_sha256`` (the spec's ``ids_sha256``) must match its ids.

    ``source`` is how messages name the file (``ORG/REPO/forget.txt`` for a file downloaded from a repo, so a
    temporary download folder never reaches a message); by default its path.
    """
    path = Path(path)
    where = source or str(path)
    index = IndexFile(ids=tuple(parse_index_text(_read_bounded(path, source=where), source=where)),
                      name=PurePosixPath(where).name, source=where)
    if expected_sha256 is not None and index.sha256 != expected_sha256:
        raise DigestMismatchError(
            f"{where}: its {len(index.ids)} record ids hash to ids_sha256 {index.sha256}, not the "
            f"{expected_sha256} the spec binds it to; the file is not the one the spec was written for",
            expected=expected_sha256, found=index.sha256)
    return index


def check_repo_path(name: str, *, what: str) -> PurePosixPath:
    """A file name inside a repo: relative, POSIX, no ``..``, no empty or hidden-control segments."""
    pure = PurePosixPath(name)
    if (not name or "\\" in name or pure.is_absolute() or any(part in ("", ".", "..") for part in name.split("/"))):
        raise UsageError(f"{what} {name!r} is not a relative path inside the repo (use 'folder/file.txt', without "
                         "'..' or a leading '/')")
    return pure


def _read_bounded(path: Path, *, source: str) -> bytes:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise FileNotFoundError(f"index file {source} does not exist") from None
    if size > MAX_INDEX_BYTES:
        raise UntrustedInputError(f"{source}: {size} bytes, over the {MAX_INDEX_BYTES}-byte limit of an index file",
                                  source=source)
    return path.read_bytes()
