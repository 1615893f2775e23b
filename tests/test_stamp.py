"""Stamping records into safetensors headers (bnconvention.authoring.stamp and the ``stamp`` command).

Fixtures: ``tests/fixtures/stamp/`` (tiny real safetensors file, its record, the golden stamped file); regenerate
with ``.venv/bin/python tests/fixtures/stamp/make_fixtures.py`` and review the diff.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from bnconvention.authoring import stamp as stamp_module
from bnconvention.authoring.stamp import (
    DEFAULT_RESERVE,
    PAGE_SIZE,
    ensure_writable,
    read_stamped_record,
    stamp_file,
    stamped_header_bytes,
    stamped_header_size,
)
from bnconvention.cli.main import main
from bnconvention.errors import (
    DigestMismatchError,
    JSONInputError,
    RecordError,
    SafetensorsHeaderError,
    StampError,
    UsageError,
)
from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.digests import data_section_sha256, file_digests
from bnconvention.formats.safetensors_header import parse_header, read_header
from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY
from bnconvention.standard.models import Declaration, RefitAnnotation, parse_record

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stamp"
TINY = FIXTURES / "tiny.safetensors"
GOLDEN = FIXTURES / "tiny.stamped.safetensors"
RECORD: dict = json.loads((FIXTURES / "record.json").read_text(encoding="utf-8"))
WORKER = Path(__file__).resolve().parent / "helpers" / "stamp_crash_worker.py"


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    shutil.copyfile(TINY, path)
    return path


@pytest.fixture
def record_file(tmp_path: Path) -> Path:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(RECORD), encoding="utf-8")
    return path


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw_header(path: Path) -> dict:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length])


def with_reporting_line(line: str) -> dict:
    record = copy.deepcopy(RECORD)
    record["reporting_line"] = line
    return record


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# --- the pure header function ---------------------------------------------------------------------------------------

SMALL = (b'{"__metadata__":{"a":"1","bnconvention.record":"old","z":"2"},'
         b'"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')


def test_existing_record_is_replaced_in_its_position_and_padded_to_the_old_length() -> None:
    header = parse_header(SMALL + b" " * 40, data_size=1)
    new = stamped_header_bytes(header, '{"k":1}')
    body = (b'{"__metadata__":{"a":"1","bnconvention.record":"{\\"k\\":1}","z":"2"},'
            b'"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')
    assert new == body + b" " * (len(SMALL) + 40 - len(body))


def test_a_header_that_does_not_fit_grows_by_whole_blocks() -> None:
    header = parse_header(SMALL, data_size=1)
    new = stamped_header_bytes(header, "x" * 10, reserve=16)
    body = SMALL.replace(b'"old"', b'"xxxxxxxxxx"')
    assert new == body + b" " * (114 + 4096 - 121)  # the old 114 bytes plus one block: the data offset mod 4096 stays
    assert len(stamped_header_bytes(header, "x" * 10, reserve=4096 - 7)) == 114 + 4096
    assert len(stamped_header_bytes(header, "x" * 10, reserve=4096 - 6)) == 114 + 2 * 4096


def test_a_header_without_metadata_gets_it_first_and_foreign_formatting_is_compacted() -> None:
    old = json.dumps({"b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                      "ä": {"dtype": "U8", "shape": [0], "data_offsets": [1, 1]}}).encode()
    new = stamped_header_bytes(parse_header(old, data_size=1), "r", reserve=0)
    assert new.rstrip(b" ") == ('{"__metadata__":{"bnconvention.record":"r"},'
                                '"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                '"ä":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}}').encode()


@pytest.mark.parametrize(("old", "new", "span"), [
    pytest.param(b"abcdef", b"abcdef", None, id="equal"),
    pytest.param(b"abcdef", b"Xbcdef", (0, 1), id="first-byte"),
    pytest.param(b"abcdef", b"abcdeX", (5, 6), id="last-byte"),
    pytest.param(b"abcdef", b"aXcdYf", (1, 5), id="two-bytes"),
    pytest.param(b"\0\0\0", b"\0\1\0", (1, 2), id="zero-bytes"),
])
def test_changed_span(old: bytes, new: bytes, span: tuple[int, int] | None) -> None:
    assert stamp_module._changed_span(old, new) == span


def test_changed_span_agrees_with_a_byte_loop() -> None:
    rng = random.Random(7)
    for _ in range(500):
        old = bytes(rng.randrange(3) for _ in range(rng.randint(1, 40)))
        new = bytearray(old)
        for _ in range(rng.randint(0, 3)):
            new[rng.randrange(len(old))] = rng.randrange(3)
        differing = [i for i in range(len(old)) if old[i] != new[i]]
        expected = (differing[0], differing[-1] + 1) if differing else None
        assert stamp_module._changed_span(old, bytes(new)) == expected


@pytest.mark.parametrize("reserve", [pytest.param(-1, id="negative"), pytest.param(True, id="bool"),
                                     pytest.param(1 << 30, id="too-large"), pytest.param(1.5, id="float")])
def test_bad_reserve_is_a_usage_error(reserve: object) -> None:
    with pytest.raises(UsageError, match="reserve must be an integer"):
        stamped_header_bytes(parse_header(SMALL, data_size=1), "r", reserve=reserve)  # type: ignore[arg-type]


# --- round trips ----------------------------------------------------------------------------------------------------


def test_first_stamp_gives_the_golden_file(weights: Path) -> None:
    result = stamp_file(weights, RECORD)
    assert (result.method, result.header_size, result.padding, result.digests_checked) == ("rewrite", 9128, 6542, True)
    assert result.record_sha256 == hashlib.sha256(canonical_json(RECORD).encode()).hexdigest()
    assert weights.read_bytes() == GOLDEN.read_bytes()


def test_stamped_file_reads_back_with_the_real_safetensors_parser(weights: Path) -> None:
    stamp_file(weights, RECORD)
    with safe_open(str(weights), framework="pt") as handle:
        metadata = handle.metadata()
    assert metadata == {"format": "pt", "library": "fixture-writer 1.0",
                        SAFETENSORS_METADATA_KEY: canonical_json(RECORD)}
    original, stamped = load_file(str(TINY)), load_file(str(weights))
    assert list(stamped) == list(original)
    for name, tensor in original.items():
        assert stamped[name].dtype == tensor.dtype and torch.equal(stamped[name], tensor), name
    assert data_section_sha256(weights) == data_section_sha256(TINY)
    assert read_stamped_record(weights) == parse_record(RECORD)


def test_header_entries_keep_their_order_and_values(weights: Path) -> None:
    before = raw_header(TINY)
    stamp_file(weights, RECORD)
    after = raw_header(weights)
    assert list(after) == list(before)
    assert list(after["__metadata__"]) == ["library", "format", SAFETENSORS_METADATA_KEY]
    assert {k: v for k, v in after.items() if k != "__metadata__"} == \
        {k: v for k, v in before.items() if k != "__metadata__"}


def test_a_file_without_metadata_gets_a_metadata_entry(tmp_path: Path) -> None:
    path = tmp_path / "bare.safetensors"
    save_file(load_file(str(TINY)), str(path))  # no metadata at all
    assert "__metadata__" not in raw_header(path)
    stamp_file(path, RECORD)
    header = raw_header(path)
    assert list(header)[0] == "__metadata__"
    assert header["__metadata__"] == {SAFETENSORS_METADATA_KEY: canonical_json(RECORD)}
    assert isinstance(read_stamped_record(path), Declaration)


def test_stamping_the_same_record_twice_writes_nothing(weights: Path) -> None:
    stamp_file(weights, RECORD)
    first, stat_first = weights.read_bytes(), os.stat(weights)
    result = stamp_file(weights, parse_record(RECORD))  # a model or a dict: the same record
    assert result.method == "unchanged"
    assert weights.read_bytes() == first
    assert os.stat(weights).st_mtime_ns == stat_first.st_mtime_ns and os.stat(weights).st_ino == stat_first.st_ino


def test_restamp_fits_the_reserved_padding_and_is_written_in_place(weights: Path) -> None:
    stamp_file(weights, RECORD)
    inode, size = os.stat(weights).st_ino, weights.stat().st_size
    result = stamp_file(weights, with_reporting_line("refit on the retained split; cell moves +2.47pp"))
    assert (result.method, result.header_size) == ("in_place", 9128)
    assert os.stat(weights).st_ino == inode and weights.stat().st_size == size
    assert data_section_sha256(weights) == data_section_sha256(TINY)
    assert read_stamped_record(weights).reporting_line == "refit on the retained split; cell moves +2.47pp"
    # A then B then A: the bytes depend on the record only, not on the history.
    assert stamp_file(weights, RECORD).method == "in_place"
    assert weights.read_bytes() == GOLDEN.read_bytes()


def test_restamp_that_does_not_fit_rewrites_with_a_fresh_reserve(weights: Path) -> None:
    first = stamp_file(weights, RECORD, reserve=0)
    assert (first.header_size, first.padding) == (936 + 4096, 2446)  # one block was enough for the record
    longer = with_reporting_line(RECORD["reporting_line"] + "." * (first.padding + 1))
    result = stamp_file(weights, longer)
    assert result.method == "rewrite" and (result.header_size - first.header_size) % 4096 == 0
    assert result.padding >= DEFAULT_RESERVE
    assert data_section_sha256(weights) == data_section_sha256(TINY)
    assert read_stamped_record(weights).reporting_line == longer["reporting_line"]


def test_a_change_spanning_two_pages_is_not_written_in_place(tmp_path: Path) -> None:
    # Enough tensors that the header JSON runs past the first page: a longer reporting line shifts every byte after
    # the record, so the changed bytes cross a page boundary and one page write cannot be atomic.
    tensors = load_file(str(TINY)) | {f"extra.{i:03d}": torch.zeros(1) for i in range(80)}
    path = tmp_path / "big-header.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    stamp_file(path, RECORD, check_digests=False)
    header = read_header(path)
    assert header.header_size - header.padding > PAGE_SIZE
    inode = os.stat(path).st_ino
    record = with_reporting_line(RECORD["reporting_line"] + "!")
    expected_header = stamped_header_bytes(header, canonical_json(record))
    result = stamp_file(path, record, check_digests=False)
    assert (result.method, result.header_size) == ("rewrite", header.header_size)  # same length, new file
    assert os.stat(path).st_ino != inode
    data = path.read_bytes()
    assert data[8:8 + header.header_size] == expected_header


def test_in_place_can_be_turned_off(weights: Path) -> None:
    stamp_file(weights, RECORD)
    result = stamp_file(weights, with_reporting_line("x"), allow_in_place=False)
    assert result.method == "rewrite"
    assert stamp_file(weights, RECORD, allow_in_place=False).method == "rewrite"
    assert weights.read_bytes() == GOLDEN.read_bytes()


def test_progress_bar_goes_to_stderr(weights: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stamp_file(weights, RECORD, progress=True)
    out, err = capsys.readouterr()
    assert out == "" and "stamp: copying tensor data" in err
    assert weights.read_bytes() == GOLDEN.read_bytes()


def test_rewrite_keeps_the_file_mode(weights: Path) -> None:
    os.chmod(weights, 0o640)
    stamp_file(weights, RECORD)
    assert weights.stat().st_mode & 0o7777 == 0o640


def test_a_symlink_is_followed_and_kept(tmp_path: Path, weights: Path) -> None:
    link = tmp_path / "link.safetensors"
    link.symlink_to(weights.name)
    stamp_file(link, RECORD)
    assert link.is_symlink() and os.readlink(link) == weights.name
    assert weights.read_bytes() == GOLDEN.read_bytes()


def test_a_refit_annotation_is_checked_against_the_subject_digests(weights: Path) -> None:
    digests = file_digests(TINY)
    annotation = {
        "spec_version": "1.0", "kind": "refit_annotation",
        "subject": {"filename": "model.safetensors", "trainable_sha256": digests.trainable_sha256,
                    "running_sha256": digests.running_sha256},
        "convention": RECORD["convention"], "channel": "present", "replicates": 1, "margin_pp": 1.2,
        "cells": [], "producer": {"tool": "bnconvention", "version": "0.1.0"},
        "reporting_line": "shipped state audited; no cell evaluated",
    }
    assert stamp_file(weights, annotation).method == "rewrite"
    assert isinstance(read_stamped_record(weights), RefitAnnotation)
    annotation["subject"]["trainable_sha256"] = "0" * 64
    before = weights.read_bytes()
    with pytest.raises(DigestMismatchError, match="digests.trainable_sha256"):
        stamp_file(weights, annotation)
    assert weights.read_bytes() == before


# --- reading ----------------------------------------------------------------------------------------------------


def test_read_stamped_record_of_an_unstamped_file_is_none() -> None:
    assert read_stamped_record(TINY) is None


@pytest.mark.parametrize(("text", "error", "match"), [
    pytest.param('{"kind":"declaration","spec_version":"1.0"}', RecordError, "required property", id="not-a-record"),
    pytest.param("{not json", JSONInputError, "not valid JSON", id="not-json"),
])
def test_read_stamped_record_rejects_a_bad_stamped_text(tmp_path: Path, text: str, error: type, match: str) -> None:
    header = read_header(TINY)
    new = stamped_header_bytes(header, text)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(new)) + new + TINY.read_bytes()[header.data_offset:])
    with pytest.raises(error, match=match):
        read_stamped_record(path)


# --- bad input: clear error, non-zero exit, input byte-identical -------------------------------------------------


def _tiny_bytes() -> bytes:
    return TINY.read_bytes()


BAD_FILES = [
    # Regression: a zip archive was reported as "header length ... exceeds ...", not named
    pytest.param(lambda: b"PK\x03\x04 a zip archive, not a safetensors file" * 4, "model.safetensors: is a zip archive",
                 id="not-safetensors"),
    pytest.param(lambda: b"", "shorter than the 8-byte header length", id="empty"),
    pytest.param(lambda: _tiny_bytes()[:-10], "tensors cover 204 bytes but the data section holds 194", id="truncated"),
    pytest.param(lambda: struct.pack("<Q", 10**6) + _tiny_bytes()[8:], "exceeds the 1140 bytes after the length field",
                 id="length-beyond-file"),
    pytest.param(lambda: struct.pack("<Q", 16) + b"{not json at all" + b"\0" * 8, "not valid JSON",
                 id="header-not-json"),
    pytest.param(lambda: struct.pack("<Q", 8) + b"{\xff\xfe}    " + b"", "not valid UTF-8", id="header-not-utf8"),
]


@pytest.mark.parametrize(("make", "match"), BAD_FILES)
def test_a_malformed_file_is_refused_and_left_as_it_was(tmp_path: Path, record_file: Path, make, match: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.safetensors"
    data = make()
    path.write_bytes(data)
    with pytest.raises(SafetensorsHeaderError, match=match):
        stamp_file(path, RECORD)
    code, _, err = run_cli(["stamp", str(path), "--record", str(record_file)], capsys)
    assert code == 2
    assert err.startswith("bnconvention: unreadable input: ") and err.count("\n") == 1 and match in err
    assert path.read_bytes() == data and sorted(os.listdir(tmp_path)) == ["model.safetensors", "record.json"]


def test_a_directory_is_not_a_safetensors_file(tmp_path: Path) -> None:
    with pytest.raises(SafetensorsHeaderError, match="not a regular file"):
        stamp_file(tmp_path, RECORD)


@pytest.mark.parametrize(("edit", "match"), [
    pytest.param(lambda r: r["convention"]["accumulation"].update(momentum=2), "/convention/accumulation",
                 id="momentum-out-of-range"),
    pytest.param(lambda r: r.pop("digests"), '"digests" is a required property', id="missing-digests"),
    pytest.param(lambda r: r.update(kind="statement"), "kind", id="unknown-kind"),
    pytest.param(lambda r: r.update(spec_version=1.0), "spec_version", id="spec-version-number"),
])
def test_a_record_that_fails_the_schema_is_refused(weights: Path, tmp_path: Path, edit, match: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    record = copy.deepcopy(RECORD)
    edit(record)
    with pytest.raises(RecordError, match=match):
        stamp_file(weights, record)
    bad = tmp_path / "bad-record.json"
    bad.write_text(json.dumps(record), encoding="utf-8")
    code, _, err = run_cli(["stamp", str(weights), "--record", str(bad)], capsys)
    assert code == 1 and err.startswith("bnconvention: invalid record: ")
    assert weights.read_bytes() == TINY.read_bytes()


def test_a_record_file_that_is_not_json_is_unreadable_input(weights: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "record.json"
    bad.write_bytes(b'{"kind": "declaration", "kind": "declaration"}')
    code, _, err = run_cli(["stamp", str(weights), "--record", str(bad)], capsys)
    assert code == 2 and "duplicate object key 'kind'" in err
    assert weights.read_bytes() == TINY.read_bytes()


def _set_layer(index: int, **values: object):
    def edit(record: dict) -> None:
        record["deployed_state"][0]["layers"][index].update(values)
    return edit


def _drop_last_layer(record: dict) -> None:
    layers = record["deployed_state"][0]["layers"]
    layers.pop()
    record["digests"]["running_sha256"] = layers[0]["running_sha256"]  # one layer: the two digests coincide


def _untracked_first_layer(record: dict) -> None:
    layers = record["deployed_state"][0]["layers"]
    layers[0]["track_running_stats"] = False
    del layers[0]["running_sha256"]
    record["digests"]["running_sha256"] = layers[1]["running_sha256"]  # one running layer left


@pytest.mark.parametrize(("edit", "match"), [
    pytest.param(_untracked_first_layer, "at /deployed_state/0/layers/0/track_running_stats: false contradicts the "
                 "file, which stores running buffers for layer \"1\"", id="untracked-layer-with-buffers"),
    pytest.param(lambda r: r["digests"].update(trainable_sha256="0" * 64), "digests.trainable_sha256 is 0000",
                 id="trainable"),
    pytest.param(lambda r: r["digests"].update(running_sha256="1" * 64), "digests.running_sha256 is 1111",
                 id="running"),
    pytest.param(_set_layer(1, running_sha256="2" * 64), "layer '4' running_sha256 is 2222", id="layer-running"),
    pytest.param(_set_layer(0, name="9"), "at /deployed_state/0/layers/0: layer \"9\" is declared with running "
                 "statistics but the file has no 9.running_mean/9.running_var", id="layer-name"),
    pytest.param(_set_layer(0, num_features=5), "at /deployed_state/0/layers/0/num_features: 5 is not the length of "
                 "1.running_mean in the file: its shape is \\[2\\]", id="num-features"),
    pytest.param(_drop_last_layer, "at /deployed_state/0/layers: \"4\" has running buffers in the file but is not "
                 "among the declared layers", id="undeclared-layer"),
])
def test_digests_that_do_not_match_are_refused(weights: Path, tmp_path: Path, edit, match: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    record = copy.deepcopy(RECORD)
    edit(record)
    with pytest.raises(DigestMismatchError, match=match):
        stamp_file(weights, record)
    bad = tmp_path / "other-record.json"
    bad.write_text(json.dumps(record), encoding="utf-8")
    code, _, err = run_cli(["stamp", str(weights), "--record", str(bad)], capsys)
    assert code == 1 and err.startswith("bnconvention: digest mismatch: ")
    assert weights.read_bytes() == TINY.read_bytes()


def test_digest_check_can_be_skipped(weights: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = copy.deepcopy(RECORD)
    record["digests"]["trainable_sha256"] = "0" * 64
    bad = tmp_path / "other-record.json"
    bad.write_text(json.dumps(record), encoding="utf-8")
    code, out, _ = run_cli(["stamp", str(weights), "--record", str(bad), "--no-check-digests"], capsys)
    assert code == 0 and "digests not checked" in out
    assert read_stamped_record(weights).digests.trainable_sha256 == "0" * 64


def test_a_read_only_file_is_refused(weights: Path, record_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.chmod(weights, 0o444)
    with pytest.raises(StampError, match="file is read-only"):
        stamp_file(weights, RECORD)
    code, _, err = run_cli(["stamp", str(weights), "--record", str(record_file)], capsys)
    assert code == 1 and "read-only" in err
    assert weights.read_bytes() == TINY.read_bytes() and weights.stat().st_mode & 0o777 == 0o444


def test_one_read_only_rule_for_weights_and_cards(tmp_path: Path) -> None:
    """the card and the weights share ensure_writable; a file without write bits is read-only even for
    root, whom os.access lets write anything."""
    path = tmp_path / "README.md"
    path.write_text("# card\n", "utf-8")
    ensure_writable(path, os.stat(path))  # writable: nothing raised, nothing else to check
    os.chmod(path, 0o444)
    with pytest.raises(StampError) as caught:
        ensure_writable(path, os.stat(path), what="card", shown="shown/README.md")
    assert str(caught.value) == ("shown/README.md: card is read-only (mode -r--r--r--); make it writable "
                                 "(chmod u+w shown/README.md) to stamp it; nothing was changed")


def test_a_read_only_directory_refuses_the_rewrite_but_not_an_in_place_update(weights: Path, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o555)
    try:
        with pytest.raises(StampError, match="directory is read-only"):
            stamp_file(weights, RECORD)
        assert weights.read_bytes() == TINY.read_bytes() and os.listdir(tmp_path) == ["model.safetensors"]
        os.chmod(tmp_path, 0o755)
        stamp_file(weights, RECORD)
        os.chmod(tmp_path, 0o555)
        assert stamp_file(weights, with_reporting_line("updated in a read-only folder")).method == "in_place"
    finally:
        os.chmod(tmp_path, 0o755)


def test_a_failed_temporary_file_creation_is_a_stamp_error(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(stamp_module, "create_temp", refuse)
    with pytest.raises(StampError, match="Permission denied; the original file is unchanged"):
        stamp_file(weights, RECORD)
    assert weights.read_bytes() == TINY.read_bytes()


# --- failures in the middle of a rewrite ------------------------------------------------------------------------


def test_a_full_disk_mid_copy_leaves_the_original_and_no_temporary_file(weights: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def fill_then_fail(src, dst, **kwargs: object) -> None:  # type: ignore[no-untyped-def]
        dst.write(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(stamp_module, "_copy_range", fill_then_fail)
    with pytest.raises(StampError, match="the disk is full; the original file is unchanged"):
        stamp_file(weights, RECORD)
    assert weights.read_bytes() == TINY.read_bytes()
    assert os.listdir(weights.parent) == ["model.safetensors"]


def test_not_enough_free_space_is_refused_before_writing(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stamp_module.shutil, "disk_usage", lambda _: SimpleNamespace(total=10**9, used=10**9, free=100))
    with pytest.raises(StampError, match="9340 bytes are needed for the stamped copy but only 100 are free"):
        stamp_file(weights, RECORD)
    assert weights.read_bytes() == TINY.read_bytes() and os.listdir(weights.parent) == ["model.safetensors"]


def test_an_interrupt_mid_copy_removes_the_temporary_file(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(stage: str) -> None:
        if stage == "copy":
            raise KeyboardInterrupt

    monkeypatch.setattr(stamp_module, "_checkpoint", interrupt)
    with pytest.raises(KeyboardInterrupt):
        stamp_file(weights, RECORD)
    assert weights.read_bytes() == TINY.read_bytes() and os.listdir(weights.parent) == ["model.safetensors"]


def test_copy_falls_back_when_the_kernel_copy_is_unsupported(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def unsupported(*args: object) -> int:
        calls.append(args)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(stamp_module.os, "copy_file_range", unsupported)
    stamp_file(weights, RECORD)
    assert len(calls) == 1 and weights.read_bytes() == GOLDEN.read_bytes()


def test_copy_works_without_copy_file_range(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(stamp_module.os, "copy_file_range")
    stamp_file(weights, RECORD)
    assert weights.read_bytes() == GOLDEN.read_bytes()


def test_a_chunked_kernel_copy_gives_the_same_bytes(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stages = []
    monkeypatch.setattr(stamp_module, "_COPY_CHUNK", 7)
    monkeypatch.setattr(stamp_module, "_checkpoint", stages.append)
    stamp_file(weights, RECORD)
    assert weights.read_bytes() == GOLDEN.read_bytes()
    # The copy starts at the block boundary before the data (offset 0 here): 1148 bytes in chunks of 7.
    assert stages.count("copy") == 164
    assert [s for s in stages if s != "copy"] == ["header-read", "temp-created", "temp-data-copied",
                                                   "temp-header-written", "temp-synced", "renamed",
                                                   "directory-synced"]


# --- crash safety: SIGKILL at random points -------------------------------------------------------------------------


class CrashWorker:
    """The torch-free worker process (tests/helpers/stamp_crash_worker.py), one per test."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        self.process = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        self.hello = self._read()

    def _read(self) -> dict:
        return json.loads(self.process.stdout.readline())  # type: ignore[union-attr]

    def ask(self, job: dict) -> dict:
        self.process.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=30)


def _crash_file(path: Path) -> dict:
    """The tiny model plus a 256 KiB tensor (many copy chunks to be killed in); returns a record matching it."""
    tensors = load_file(str(TINY)) | {"zz.payload": torch.arange(65536, dtype=torch.float32)}
    save_file(tensors, str(path), metadata={"format": "pt"})
    record = copy.deepcopy(RECORD)
    record["digests"]["trainable_sha256"] = file_digests(path).trainable_sha256
    return record


# The stages after which the new file is in place: a kill from then on must leave the new file, before it the old.
NEW_FROM = {"rewrite": "renamed", "in_place": "in-place-written"}


@pytest.mark.slow
def test_a_killed_stamp_leaves_the_complete_old_or_the_complete_new_file(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "source.safetensors"
    record = _crash_file(source)
    tensors = load_file(str(source))
    record_a = record | {"reporting_line": "first record"}
    record_b = record | {"reporting_line": "second record, a little longer"}
    chunk = 16384

    def stamped(start: bytes, name: str, method: str) -> tuple[bytes, list[str]]:
        """Stamp record_b over ``start`` here, recording the stages the worker's children will pass."""
        path = tmp_path / name
        path.write_bytes(start)
        stages: list[str] = []
        with monkeypatch.context() as patch:
            patch.setattr(stamp_module, "_checkpoint", stages.append)
            patch.setattr(stamp_module, "_COPY_CHUNK", chunk)
            assert stamp_file(path, record_b, check_digests=False).method == method
        return path.read_bytes(), stages

    unstamped = source.read_bytes()
    stamped_a = tmp_path / "a.safetensors"
    stamped_a.write_bytes(unstamped)
    stamp_file(stamped_a, record_a, check_digests=False)
    scenarios = {}  # name: (starting bytes, the only acceptable new bytes, stages, pause per stage)
    for name, start in (("rewrite", unstamped), ("in_place", stamped_a.read_bytes())):
        new, stages = stamped(start, f"{name}.safetensors", name)
        scenarios[name] = (start, new, stages, 0.001 if name == "rewrite" else 0.01)
    assert scenarios["rewrite"][2].count("copy") == 17  # 256 KiB + the tiny model in 16 KiB chunks
    target = tmp_path / "work" / "model.safetensors"
    target.parent.mkdir()
    worker = CrashWorker()
    rng = random.Random(20240501)
    try:
        assert worker.hello == {"ready": True, "torch_imported": False}

        def trial(name: str, *, kill_after: float = 30.0, kill_at: int | None = None) -> dict:
            start, new, _, pause = scenarios[name]
            target.write_bytes(start)
            answer = worker.ask({"path": str(target), "record": record_b, "kill_after": kill_after,
                                 "kill_at_checkpoint": kill_at, "pause": pause, "chunk": chunk})
            assert answer["killed"] or answer["exit"] == 0, answer
            digest = hashlib.sha256(target.read_bytes()).hexdigest()
            old_sha, new_sha = hashlib.sha256(start).hexdigest(), hashlib.sha256(new).hexdigest()
            assert digest in {old_sha, new_sha}, f"{name}: killed after {answer['elapsed']:.4f}s, torn file"
            metadata = _parses(target, tensors)  # the real safetensors parser reads it, tensors intact
            if digest == new_sha:
                assert metadata[SAFETENSORS_METADATA_KEY] == canonical_json(record_b)
            for leftover in target.parent.iterdir():  # a SIGKILL may leave the temporary copy, nothing else
                if leftover != target:
                    assert leftover.name.startswith(".model.safetensors.") and leftover.name.endswith(".bnc-stamp.tmp")
                    leftover.unlink()
            answer["outcome"] = "new" if digest == new_sha else "old"
            return answer

        # 1. Killed exactly at every stage: the outcome is known in advance.
        for name, (_, _, stages, _) in scenarios.items():
            switch = stages.index(NEW_FROM[name])
            for index, stage in enumerate(stages):
                answer = trial(name, kill_at=index + 1)
                assert answer["killed"], (name, stage)
                assert answer["outcome"] == ("new" if index >= switch else "old"), (name, index, stage)
        # 2. Killed at random times, also inside system calls: calibrate how long an unkilled stamp takes, then
        #    kill once in each of n equal slices of 1.3 times that (stratified over the whole stamp).
        duration = {name: max(trial(name)["elapsed"] for _ in range(2)) for name in scenarios}
        plans = [(name, (i + rng.random()) / n * 1.3 * duration[name])
                 for name, n in (("rewrite", 20), ("in_place", 12)) for i in range(n)]
        rng.shuffle(plans)
        killed = 0
        for name, kill_after in plans:
            killed += trial(name, kill_after=kill_after)["killed"]
        # 3. With digest checking on too, stamping stays torch-free (the validator path imports this module).
        target.write_bytes(unstamped)
        probe = worker.ask({"probe": str(target), "record": record_b})
    finally:
        worker.close()
    assert probe == {"method": "rewrite", "torch_imported": False}
    assert killed >= 16, f"only {killed} of 32 timed kills landed before the stamp finished"


def _parses(path: Path, expected: dict[str, torch.Tensor]) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
        assert sorted(handle.keys()) == sorted(expected)
        for name, tensor in expected.items():
            assert torch.equal(handle.get_tensor(name), tensor), name
    return metadata


# --- the command ------------------------------------------------------------------------------------------------


def test_stamp_command_stamps_weights_and_card(weights: Path, record_file: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    card = tmp_path / "README.md"
    card.write_text("---\nlicense: mit\n---\n# Model\n", encoding="utf-8")
    code, out, _ = run_cli(["stamp", str(weights), "--record", str(record_file), "--card", str(card)], capsys)
    assert code == 0
    assert out == (f"{weights}: header rewritten, tensor data copied unchanged (digests match; header 9128 bytes, "
                   f"6542 spare)\n{card}: updated\n")
    assert weights.read_bytes() == GOLDEN.read_bytes()
    code, out, _ = run_cli(["stamp", str(weights), "--record", str(record_file), "--card", str(card)], capsys)
    assert code == 0 and "already stamped with this record, unchanged" in out and out.endswith(": unchanged\n")


def test_validate_accepts_what_stamp_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = tmp_path / "release"
    release.mkdir()
    shutil.copyfile(TINY, release / "model.safetensors")
    shutil.copyfile(Path(__file__).resolve().parent / "fixtures" / "cards" / "crlf.md", release / "README.md")
    record = tmp_path / "record.json"
    record.write_text(json.dumps(RECORD), encoding="utf-8")
    assert main(["stamp", str(release / "model.safetensors"), "--record", str(record),
                 "--card", str(release / "README.md")]) == 0
    capsys.readouterr()
    assert main(["validate", str(release)]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "0 errors, 0 warnings" in out and "agrees with" in out


def test_stamp_command_checks_the_card_before_touching_the_weights(weights: Path, record_file: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    card = tmp_path / "README.md"
    card.write_bytes(b"---\nlicense: [mit\n---\n# Model\n")
    code, _, err = run_cli(["stamp", str(weights), "--record", str(record_file), "--card", str(card)], capsys)
    assert code == 2 and "invalid YAML front matter" in err
    assert weights.read_bytes() == TINY.read_bytes()
    assert card.read_bytes() == b"---\nlicense: [mit\n---\n# Model\n"


def test_stamp_command_reports_a_missing_file(tmp_path: Path, record_file: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["stamp", str(tmp_path / "missing.safetensors"), "--record", str(record_file)], capsys)
    assert code == 2 and err.startswith("bnconvention: file not found:")


def test_the_stamp_module_does_not_import_torch() -> None:
    code = ("import sys; import bnconvention.authoring.stamp, bnconvention.authoring.card_stamp; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert out.stdout.strip() == "False"


# --- the header limit, "__metadata__": null, leftovers of killed stamps ---------------------------------------------


def test_a_stamp_never_grows_a_header_past_the_formats_limit() -> None:
    # Regression: the limit was 100 MiB, so a stamp could write a header safetensors refuses to open
    with pytest.raises(StampError, match="100003096 bytes, over the 100000000-byte limit"):
        stamped_header_size(header_size=99_999_000, body_size=99_999_100, reserve=0)
    assert stamped_header_size(header_size=100_000_000, body_size=5, reserve=4096) == 100_000_000
    assert stamped_header_size(header_size=96, body_size=97, reserve=0) == 96 + 4096


def test_a_header_with_null_metadata_is_stamped(tmp_path: Path) -> None:
    # safetensors reads "__metadata__": null as no metadata; so do we, and the stamp fills it in where it is
    header = raw_header(TINY)
    header["__metadata__"] = None
    body = json.dumps(header).encode()
    data = TINY.read_bytes()[8 + struct.unpack("<Q", TINY.read_bytes()[:8])[0]:]
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)
    assert read_header(path).metadata is None
    stamp_file(path, RECORD)
    with safe_open(str(path), framework="pt") as handle:
        assert handle.metadata() == {SAFETENSORS_METADATA_KEY: canonical_json(RECORD)}


LEFTOVER = ".model.safetensors.7sl1bkq0.bnc-stamp.tmp"  # a leftover as a killed stamp leaves it


def test_a_stamp_removes_the_temporary_copies_killed_stamps_of_the_same_file_left(weights: Path) -> None:
    directory = weights.parent
    ours = directory / LEFTOVER
    ours.write_bytes(b"half a copy")
    kept = [".other.safetensors.7sl1bkq0.bnc-stamp.tmp",  # another file's
            ".model.safetensors.7sl1bkq0x.bnc-stamp.tmp",  # not our random part
            ".model.safetensors.7sl1bkq0.tmp",  # not our suffix
            "model.safetensors.7sl1bkq0.bnc-stamp.tmp"]  # not hidden: not a name we make
    for name in kept:
        (directory / name).write_bytes(b"someone else's")
    result = stamp_file(weights, RECORD)
    assert result.method == "rewrite" and result.removed_temps == (ours,)
    assert sorted(os.listdir(directory)) == sorted(["model.safetensors", *kept])


def test_a_temporary_copy_locked_by_a_live_stamp_is_left_alone(weights: Path) -> None:
    import fcntl

    live = weights.parent / ".model.safetensors.abcd1234.bnc-stamp.tmp"
    live.write_bytes(b"a copy in progress")
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running stamp holds on its copy until it is renamed
        assert stamp_file(weights, RECORD).removed_temps == ()
        assert live.read_bytes() == b"a copy in progress"
    finally:
        os.close(fd)  # the writer ends (or dies): the lock goes with it
    result = stamp_file(weights, RECORD)
    assert (result.method, result.removed_temps) == ("unchanged", (live,)) and not live.exists()


def test_the_copy_a_stamp_is_writing_is_locked_against_cleaners(weights: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from bnconvention.formats.atomic import remove_stale_temps

    seen: list[tuple[str, list[Path]]] = []

    def cleaner_runs_now(stage: str) -> None:  # a concurrent stamp of the same file, at every stage of this one
        seen.append((stage, remove_stale_temps(weights, suffix=".bnc-stamp.tmp")))

    monkeypatch.setattr(stamp_module, "_checkpoint", cleaner_runs_now)
    assert stamp_file(weights, RECORD).method == "rewrite"
    assert "temp-data-copied" in [stage for stage, _ in seen]
    assert all(removed == [] for _, removed in seen)


def test_a_stamp_after_a_killed_one_removes_its_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = work / "model.safetensors"
    record = _crash_file(target)
    start = target.read_bytes()
    stages: list[str] = []
    probe = tmp_path / "probe.safetensors"
    probe.write_bytes(start)
    with monkeypatch.context() as patch:
        patch.setattr(stamp_module, "_checkpoint", stages.append)
        stamp_file(probe, record, check_digests=False)
    worker = CrashWorker()
    try:
        answer = worker.ask({"path": str(target), "record": record, "kill_after": 30.0, "pause": 0.0,
                             "kill_at_checkpoint": stages.index("temp-data-copied") + 1, "chunk": 16384})
    finally:
        worker.close()
    leftovers = [work / name for name in os.listdir(work) if name != "model.safetensors"]
    assert answer["killed"] and target.read_bytes() == start and len(leftovers) == 1
    record_path = tmp_path / "record.json"
    record_path.write_text(json.dumps(record), encoding="utf-8")
    code, out, _ = run_cli(["stamp", str(target), "--record", str(record_path), "--no-check-digests"], capsys)
    assert code == 0 and os.listdir(work) == ["model.safetensors"]
    assert f"{leftovers[0]}: removed (the copy an earlier, killed stamp of {target} left behind)" in out
    assert read_stamped_record(target) is not None
