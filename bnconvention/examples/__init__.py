"""The examples the docs use, shipped with the package: the audit spec of the digits zoo, two good releases and three
broken ones (``bnconvention examples write DIR`` writes them out).

The files under ``files/`` are the single source: the package data an installed ``bnconvention`` reads (through
:mod:`importlib.resources`, so a zipped install works too), and what the repository's ``examples/`` folder holds,
written by ``examples/make_examples.py`` and checked by ``tests/test_examples.py``.

* ``audit/digits-zoo.yaml`` — the audit spec of the digits zoo (the census design of docs/statistics.md; the demo's
spec);
* ``audit/digits-population.yaml`` — the audit spec of the population (``bnconvention zoo build --population``),
  written by :func:`bnconvention.zoo.population_spec.example_spec_text` (checked by tests/test_population.py);
* ``releases/convnet-bn``, ``releases/convnet-gn`` — a declared BatchNorm release and its GroupNorm twin;
* ``broken/undeclared``, ``broken/digest-mismatch``, ``broken/card-header-disagree`` — what the validator flags.

>>> from bnconvention.examples import example_files
>>> sorted(example_files())[0]
'audit/digits-zoo.yaml'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.formats.text import plural

DEFAULT_DIR = "examples"
AUDIT_SPEC = "audit/digits-zoo.yaml"


def _root() -> Traversable:
    return files(__name__).joinpath("files")


def _walk(folder: Traversable, prefix: PurePosixPath) -> dict[str, Traversable]:
    found: dict[str, Traversable] = {}
    for entry in folder.iterdir():
        name = prefix / entry.name
        if entry.is_dir():
            found.update(_walk(entry, name))
        elif entry.is_file() and not entry.name.startswith("."):
            found[str(name)] = entry
    return found


def example_files() -> dict[str, bytes]:
    """Every example file's bytes by its path relative to the examples folder (POSIX separators), sorted."""
    found = _walk(_root(), PurePosixPath())
    return {name: found[name].read_bytes() for name in sorted(found)}


def read_example(name: str) -> bytes:
    """One example file's bytes (``name`` as in :func:`example_files`, e.g. :data:`AUDIT_SPEC`)."""
    entry = _root().joinpath(*PurePosixPath(name).parts)
    if not entry.is_file():
        raise UsageError(f"no example file {name!r}; the examples are: {', '.join(example_files())}")
    return entry.read_bytes()


def differing(folder: str | os.PathLike[str]) -> list[str]:
    """The example files that ``folder`` lacks or holds with other bytes (what :func:`write_examples` changes)."""
    return _differing(Path(folder), example_files())


def _differing(root: Path, wanted: dict[str, bytes]) -> list[str]:
    return [name for name, data in wanted.items()
            if not (root / name).is_file() or (root / name).read_bytes() != data]


def _blocked(root: Path, name: str) -> bool:
    """Whether ``root/name`` is something other than a file, or a folder above it is something other than a
    folder: writing the example there would fail halfway."""
    target = root / name
    if target.exists() and not target.is_file():
        return True
    parent = target.parent
    while parent != root:
        if parent.exists() and not parent.is_dir():
            return True
        parent = parent.parent
    return False


@dataclass(frozen=True)
class WrittenExamples:
    folder: Path
    written: tuple[str, ...]
    unchanged: tuple[str, ...]


def write_examples(folder: str | os.PathLike[str] = DEFAULT_DIR, *, force: bool = False) -> WrittenExamples:
    """Write every example file under ``folder`` (created if missing); files already identical are left alone.

    An existing file with other bytes is the user's: without ``force`` nothing at all is written and
    :class:`~bnconvention.errors.UsageError` names the files; with ``force`` they are replaced. Every check runs
    before the first write, and each file is written atomically.
    """
    root = Path(folder)
    if root.exists() and not root.is_dir():
        raise UsageError(f"examples folder {root} exists and is not a folder; choose another DIR")
    wanted = example_files()
    changed = _differing(root, wanted)
    blocked = [name for name in changed if _blocked(root, name)]
    if blocked:
        raise UsageError(f"{root / blocked[0]} cannot be written: something other than a file is at its place, or "
                         "a file where one of its folders belongs; nothing was written: choose another DIR")
    conflicts = [name for name in changed if (root / name).exists()]
    if conflicts and not force:
        shown = ", ".join(str(root / name) for name in conflicts[:3]) + (" ..." if len(conflicts) > 3 else "")
        raise UsageError(f"{plural(len(conflicts), 'file')} in {root} differ from the examples ({shown}); nothing was "
                         "written: choose another DIR, or pass --force to replace them")
    for name in changed:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(root / name, wanted[name])
    return WrittenExamples(folder=root, written=tuple(changed),
                           unchanged=tuple(name for name in wanted if name not in changed))


__all__ = ["AUDIT_SPEC", "DEFAULT_DIR", "WrittenExamples", "differing", "example_files", "read_example",
           "write_examples"]
