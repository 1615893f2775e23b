"""Atomic writes, folder replacement and generated-file syncing."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bnconvention.formats.atomic import (
    STAMP_TEMP_SUFFIX,
    TEMP_GLOBS,
    WRITE_TEMP_SUFFIX,
    atomic_output,
    atomic_write_bytes,
    atomic_write_text,
    create_temp,
    file_sha256,
    remove_stale_temps,
    replace_directory,
    sync_generated_file,
)


def test_atomic_write_replaces_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"old")
    target.chmod(0o640)
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_atomic_output_leaves_the_original_and_no_temp_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"), atomic_output(target) as handle:
        handle.write(b"half")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_replace_directory_swaps_whole_folders(tmp_path: Path) -> None:
    target, partial = tmp_path / "out", tmp_path / "partial"
    target.mkdir()
    (target / "stale.txt").write_text("old")
    partial.mkdir()
    (partial / "new.txt").write_text("new")
    replace_directory(partial, target)
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_file_sha256_matches_hashlib(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"x" * (3 << 20))
    import hashlib

    assert file_sha256(path) == hashlib.sha256(b"x" * (3 << 20)).hexdigest()


def test_sync_generated_file_checks_then_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "doc.md"
    path.write_text("old\n", encoding="utf-8")
    assert sync_generated_file(path, "new\n", check=True, command="make docs") == 1
    assert path.read_text(encoding="utf-8") == "old\n"
    assert "run: make docs" in capsys.readouterr().err
    assert sync_generated_file(path, "new\n", check=False, command="make docs") == 0
    assert path.read_text(encoding="utf-8") == "new\n"
    assert sync_generated_file(path, "new\n", check=True, command="make docs") == 0


# --- permissions of new files, our temporary files ----------------------------------------------------------------


@pytest.fixture
def umask():  # type: ignore[no-untyped-def]
    """Set the process umask for one test, restoring the old one after it."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o027])
def test_a_new_file_gets_the_permissions_the_umask_gives(tmp_path: Path, umask, mask: int) -> None:
    # Regression: record.json and new cards came out 0600 whatever the umask (mkstemp's mode)
    umask(mask)
    atomic_write_bytes(tmp_path / "record.json", b"{}")
    atomic_write_text(tmp_path / "notes.md", "x\n")
    assert (tmp_path / "record.json").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "notes.md").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_rewritten_file_keeps_its_mode_whatever_the_umask(tmp_path: Path, umask) -> None:
    umask(0o077)
    target = tmp_path / "README.md"
    target.write_bytes(b"old")
    target.chmod(0o664)
    atomic_write_bytes(target, b"new")
    assert target.stat().st_mode & 0o777 == 0o664


def test_a_new_card_gets_the_permissions_the_umask_gives(tmp_path: Path, umask, fixtures_dir: Path) -> None:
    from bnconvention.authoring.card_stamp import stamp_card_file

    umask(0o022)
    record = json.loads((fixtures_dir / "stamp" / "record.json").read_text(encoding="utf-8"))
    assert stamp_card_file(tmp_path / "README.md", record).created
    assert (tmp_path / "README.md").stat().st_mode & 0o777 == 0o644


def test_temporary_files_are_named_ours_and_locked_while_open(tmp_path: Path) -> None:
    target = tmp_path / "README.md"
    fd, path = create_temp(target, suffix=WRITE_TEMP_SUFFIX)
    try:
        assert re.fullmatch(r"\.README\.md\.[a-z0-9_]{8}\.bnc-write\.tmp", path.name)
        assert remove_stale_temps(target, suffix=WRITE_TEMP_SUFFIX) == []  # a write in progress
    finally:
        os.close(fd)
    assert remove_stale_temps(target, suffix=WRITE_TEMP_SUFFIX) == [path]  # its writer is gone: a leftover
    assert list(tmp_path.iterdir()) == []


def test_a_card_stamp_removes_what_a_killed_write_of_that_card_left(tmp_path: Path, fixtures_dir: Path) -> None:
    from bnconvention.authoring.card_stamp import stamp_card_file

    record = json.loads((fixtures_dir / "stamp" / "record.json").read_text(encoding="utf-8"))
    leftover = tmp_path / ".README.md.q8w7e6r5.bnc-write.tmp"
    leftover.write_bytes(b"half a card")
    other = tmp_path / ".MODEL.md.q8w7e6r5.bnc-write.tmp"
    other.write_bytes(b"another file's")
    stamp_card_file(tmp_path / "README.md", record)
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "README.md"]


def test_upload_patterns_cover_every_temporary_file_we_make(tmp_path: Path) -> None:
    from fnmatch import fnmatch

    for suffix in (WRITE_TEMP_SUFFIX, STAMP_TEMP_SUFFIX):
        fd, path = create_temp(tmp_path / "model.safetensors", suffix=suffix)
        os.close(fd)
        assert any(fnmatch(f"sub/{path.name}", pattern) for pattern in TEMP_GLOBS)
    assert not any(fnmatch("model.safetensors", pattern) or fnmatch("README.md", pattern) for pattern in TEMP_GLOBS)
