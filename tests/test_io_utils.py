"""Atomic writes, folder replacement and generated-file syncing."""

from __future__ import annotations

from pathlib import Path

import pytest

from bnconvention.io_utils import (
    atomic_output,
    atomic_write_bytes,
    file_sha256,
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
