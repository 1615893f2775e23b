"""A seeded Hub organisation for the hub tests: 150 model repos of every census class, each with the class it must
get, built from the digits zoo (BatchNorm and GroupNorm checkpoints) and small generated files.

The repos are committed straight into the local Hub's store (``hub.store.commit``), which is fast; the tests then
read them only through huggingface_hub. Blobs are content-addressed, so the many repos sharing a checkpoint cost
one file on disk.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

BN_VARIANTS = ("bn-badteacher-eval", "bn-relabel-eval", "bn-ga-train")
GN_VARIANTS = ("gn-base", "gn-badteacher-eval", "gn-relabel-eval")
CARD_BASE = "---\nlicense: mit\ntags:\n- digits\n---\n# {name}\n\nA digits classifier.\n"


@dataclass(frozen=True)
class SeedRepo:
    repo_id: str
    files: dict[str, bytes]
    expected: str  # the census class
    audited: bool = False  # the audit loads it (a BatchNorm checkpoint, single-file or sharded)


# --- building files -------------------------------------------------------------------------------------------------


def split_safetensors(data: bytes) -> tuple[bytes, bytes]:
    """(8-byte length + header, data section) of a safetensors file."""
    (length,) = struct.unpack("<Q", data[:8])
    return data[: 8 + length], data[8 + length:]


def with_record_text(data: bytes, record_text: str) -> bytes:
    """The file with ``record_text`` in ``__metadata__['bnconvention.record']`` (tensor bytes untouched)."""
    from bnconvention.authoring.stamp import stamped_header_bytes
    from bnconvention.formats.safetensors_header import parse_header

    head, body = split_safetensors(data)
    header = parse_header(head[8:], data_size=len(body))
    new = stamped_header_bytes(header, record_text)
    return struct.pack("<Q", len(new)) + new + body


def stamped(data: bytes, record: Mapping[str, Any]) -> bytes:
    from bnconvention.formats.canonical import canonical_json

    return with_record_text(data, canonical_json(dict(record)))


def card(name: str, record: Mapping[str, Any] | None = None) -> bytes:
    from bnconvention.authoring.card_stamp import stamp_card_text

    text = CARD_BASE.format(name=name)
    if record is not None:
        text = stamp_card_text(text, dict(record))
    return text.encode("utf-8")


def shards(data: bytes, *, record: Mapping[str, Any] | None = None,
           prefix: str = "model") -> dict[str, bytes]:
    """The checkpoint as two shards and their index (the record, if any, stamped in the first shard)."""
    from safetensors.torch import load, save

    tensors = load(data)
    names = list(tensors)
    half = len(names) // 2
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    for number, chunk in enumerate((names[:half], names[half:]), start=1):
        shard = f"{prefix}-{number:05d}-of-00002.safetensors"
        blob = save({n: tensors[n] for n in chunk})
        if record is not None and number == 1:
            blob = stamped(blob, record)
        files[shard] = blob
        weight_map.update(dict.fromkeys(chunk, shard))
    files[f"{prefix}.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": sum(len(b) for b in files.values())}, "weight_map": weight_map},
        indent=2).encode()
    return files


def declaration(zoo: Any, name: str) -> dict[str, Any]:
    """The declaration of a zoo variant (its convention from the zoo config, digests from its tensors)."""
    from bnconvention.authoring.declaration import declare
    from bnconvention.standard.models import FittingConvention, to_dict

    convention = FittingConvention.model_validate(zoo.config(name)["convention"])
    return to_dict(declare(zoo.load_model(name), convention))


def channel_absent_declaration(zoo: Any, name: str) -> dict[str, Any]:
    from bnconvention.authoring.declaration import declare, make_convention, make_transform

    convention = make_convention(buffer_update_mode="untouched", role="train", dataset_id="sklearn/digits",
                                 subset="all classes, train split",
                                 transform=make_transform(mode="train", resize="8x8 to 16x16"), rule="ema",
                                 momentum=0.1)
    from bnconvention.standard.models import to_dict

    return to_dict(declare(zoo.load_model(name), convention))


# --- the organisation -------------------------------------------------------------------------------------------


def build_org(zoo: Any, org: str) -> list[SeedRepo]:
    """150 repos, numbered per template; 23 BatchNorm repos the audit loads (12 single-file, 11 sharded)."""
    weights = {name: zoo.weights_path(name).read_bytes() for name in BN_VARIANTS + GN_VARIANTS}
    configs = {name: zoo.config_path(name).read_bytes() for name in BN_VARIANTS + GN_VARIANTS}
    records = {name: declaration(zoo, name) for name in BN_VARIANTS}
    gn_record = channel_absent_declaration(zoo, "gn-base")

    def wrong_features(record: dict[str, Any]) -> dict[str, Any]:
        bad = json.loads(json.dumps(record))
        bad["deployed_state"][0]["layers"][1]["num_features"] += 8
        return bad

    def repos() -> Iterator[tuple[str, dict[str, bytes], str, bool]]:
        # BatchNorm, single file: every one is audited (12 audits in all)
        for v in BN_VARIANTS:  # stamped header and card, architecture declared in config.json
            yield "bn-declared", {"model.safetensors": stamped(weights[v], records[v]),
                                  "README.md": card(v, records[v]), "config.json": configs[v]}, \
                "declared_consistent", True
        # no config.json: the audit takes the spec's model
        yield "bn-declared-nocfg", {"model.safetensors": stamped(weights["bn-ga-train"], records["bn-ga-train"]),
                                    "pytorch_model.bin": b"\x80\x04N."}, "declared_consistent", True
        yield "bn-card-only", {"model.safetensors": weights["bn-relabel-eval"],
                               "README.md": card("bn-relabel-eval", records["bn-relabel-eval"]),
                               "config.json": configs["bn-relabel-eval"]}, "declared_consistent", True
        for v in BN_VARIANTS:
            yield "bn-undeclared", {"model.safetensors": weights[v], "config.json": configs[v],
                                    "README.md": card(v)}, "undeclared", True
        yield "bn-wrong-features", {"model.safetensors": stamped(weights["bn-ga-train"],
                                                                 wrong_features(records["bn-ga-train"])),
                                    "config.json": configs["bn-ga-train"]}, "declared_inconsistent", True
        invalid = {"spec_version": "1.0", "kind": "declaration"}
        yield "bn-invalid-record", {"model.safetensors": stamped(weights["bn-relabel-eval"], invalid),
                                    "config.json": configs["bn-relabel-eval"]}, "declared_inconsistent", True
        # the card carries another variant's record: same architecture, so the layers fit, but card != header
        yield "bn-card-disagrees", {"model.safetensors": stamped(weights["bn-badteacher-eval"],
                                                                 records["bn-badteacher-eval"]),
                                    "README.md": card("x", records["bn-relabel-eval"]),
                                    "config.json": configs["bn-badteacher-eval"]}, "declared_inconsistent", True
        yield "bn-record-not-json", {"model.safetensors": with_record_text(weights["bn-ga-train"], "{not json")}, \
            "declared_inconsistent", True
        # BatchNorm, sharded: classified from every shard's header; the audit downloads the index and its shards
        for _ in range(5):
            yield "bn-declared-sharded", {**shards(weights["bn-ga-train"], record=records["bn-ga-train"]),
                                          "README.md": card("sharded", None)}, "declared_consistent", True
        for _ in range(5):
            yield "bn-undeclared-sharded", shards(weights["bn-relabel-eval"]), "undeclared", True
        # a stale declaration: its running digests are the base model's (which the eval-mode variants still carry),
        # shipped with weights whose buffers a train-mode unlearning run changed afterwards; the layers still fit the
        # header, only the buffers' bytes differ
        stale = json.loads(json.dumps(records["bn-ga-train"]))
        stale["deployed_state"] = records["bn-relabel-eval"]["deployed_state"]
        stale["digests"]["running_sha256"] = records["bn-relabel-eval"]["digests"]["running_sha256"]
        # (sharded: the running buffers are read from two files)
        yield "bn-stale-sharded", {**shards(weights["bn-ga-train"], record=stale),
                                   "config.json": configs["bn-ga-train"]}, "declared_inconsistent", True
        # no running statistics
        for i in range(59):
            v = GN_VARIANTS[i % 3]
            yield "gn", {"model.safetensors": weights[v], "config.json": configs[v]}, "channel_absent", False
        for _ in range(15):
            yield "gn-declared", {"model.safetensors": stamped(weights["gn-base"], gn_record),
                                  "README.md": card("gn", gn_record)}, "channel_absent", False
        for _ in range(10):
            yield "gn-sharded", shards(weights["gn-relabel-eval"]), "channel_absent", False
        # no safetensors weights
        for _ in range(20):
            yield "card-only", {"README.md": card("nothing")}, "no_weights", False
        for _ in range(10):
            yield "pickle-only", {"pytorch_model.bin": b"\x80\x04N.", "README.md": card("pickle")}, "no_weights", \
                False
        # unreadable
        for _ in range(5):
            yield "truncated", {"model.safetensors": weights["bn-ga-train"][:5000]}, "unreadable", False
        for _ in range(4):
            bad = b"{" + b"x" * 30
            yield "bad-header", {"model.safetensors": struct.pack("<Q", len(bad)) + bad}, "unreadable", False
        for _ in range(2):
            files = shards(weights["gn-base"])
            files.pop("model-00002-of-00002.safetensors")
            yield "missing-shard", files, "unreadable", False
        for _ in range(2):
            yield "bad-index", {"model.safetensors.index.json": b'{"weight_map": {"a": "../x.safetensors"}}',
                                "model-00001-of-00001.safetensors": weights["gn-base"]}, "unreadable", False

    counters: dict[str, int] = {}
    out: list[SeedRepo] = []
    for template, files, expected, audited in repos():
        counters[template] = counters.get(template, 0) + 1
        out.append(SeedRepo(repo_id=f"{org}/{template}-{counters[template]:02d}", files=files, expected=expected,
                            audited=audited))
    return out


def seed(hub: Any, repos: list[SeedRepo], *, author: str = "owner") -> None:
    for repo in repos:
        hub.store.commit(repo.repo_id, files=repo.files, message="release", author=author)
