"""Write the example releases and the validator's fixture releases: the same bytes on every machine.

    .venv/bin/python examples/make_examples.py           # rewrite the examples and tests/fixtures/releases/
    .venv/bin/python examples/make_examples.py --check   # exit 1 if a committed file differs

The examples are package data (``bnconvention/examples/files/``, what ``bnconvention examples write DIR`` writes
out for users); this repository's ``examples/`` folder is that command's output, refreshed here after the package
files (``audit/digits-zoo.yaml`` is written by hand in the package, the releases by this script).

Two tiny networks, a BatchNorm one and its GroupNorm twin. Nothing is trained: every tensor is written from seeded
integers scaled by a power of two (dyadic values, exact in float32), so no floating-point reduction is involved and
the files are byte-identical whatever the CPU, thread count or BLAS kernels (tests/test_examples.py compares them
byte for byte and checks that every value is dyadic). The declared fitting convention is an illustration of a
training-mode declaration, said so in each card. Each release is a folder with ``model.safetensors`` (written by
``safetensors.torch``; the record stamped under ``__metadata__["bnconvention.record"]`` as canonical JSON) and a
``README.md`` card (the record as the ``bnconvention`` block of the YAML front matter, plus a human-readable
section).

- ``releases/``: ``convnet-bn`` (declared BN model) and ``convnet-gn`` (GroupNorm, channel absent).
- ``broken/``: ``undeclared`` (BN weights, no record), ``digest-mismatch`` (running statistics changed
  after the record was written), ``card-header-disagree`` (the card claims another convention than the header).
- ``tests/fixtures/releases/``: ``annotated`` (a declared release with a refit annotation under ``bnconvention/``),
  ``card-only`` (the declaration lives only in the card), ``layer-mismatch`` (the record omits a layer and
  misstates a width).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import struct
import sys
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import save

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from bnconvention.authoring.card_stamp import stamp_card_text  # noqa: E402
from bnconvention.authoring.declaration import declare, make_convention  # noqa: E402
from bnconvention.authoring.stamp import stamped_header_bytes  # noqa: E402
from bnconvention.data.digits import DIGITS_TRAIN_TRANSFORM  # noqa: E402
from bnconvention.formats.canonical import canonical_json, canonical_sha256  # noqa: E402
from bnconvention.formats.digests import model_digests  # noqa: E402
from bnconvention.formats.safetensors_header import parse_header  # noqa: E402
from bnconvention.standard.locations import annotation_filename  # noqa: E402
from bnconvention.standard.models import Producer, to_dict  # noqa: E402
from bnconvention.standard.naming import record_ids_sha256  # noqa: E402

PACKAGED = "bnconvention/examples/files"  # where the examples live; examples/ is a copy (bnconvention examples write)
PRODUCER = Producer(tool="bnconvention", version="0.1.0")  # pinned so the files do not change with releases
SEED = "bnconvention-examples/1"
DIGITS_RECORDS = 1797
DECLARED_STEPS = 30  # the illustrative training run the record declares: 30 batches of 64, EMA m=0.1
# Every value is an integer in [-BOUND, BOUND] divided by 2**SCALE_BITS: at most 8 significant bits, exact in
# float32 (and in bfloat16), so writing them involves no rounding anywhere.
BOUND, SCALE_BITS = 64, 5
SYNTHETIC = ("Weights and running statistics are seeded dyadic values (not trained), so this file has the same bytes "
             "on every machine; the declared convention is an illustration.")


class TinyNet(torch.nn.Module):
    """conv-norm-ReLU, conv-norm-ReLU, global average pool, linear: about 800 parameters."""

    def __init__(self, norm: str) -> None:
        super().__init__()

        def norm_layer(channels: int) -> torch.nn.Module:
            return torch.nn.BatchNorm2d(channels) if norm == "bn" else torch.nn.GroupNorm(2, channels)

        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), norm_layer(4), torch.nn.ReLU(),
            torch.nn.Conv2d(4, 8, 3, padding=1, bias=False), norm_layer(8), torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def seeded_integers(name: str, count: int, *, low: int, high: int) -> list[int]:
    """``count`` integers in ``[low, high]`` drawn from sha256 of (SEED, name, index): no RNG whose algorithm could
    change with a library or platform."""
    span = high - low + 1
    return [low + int.from_bytes(hashlib.sha256(f"{SEED}:{name}:{i}".encode()).digest()[:8], "little") % span
            for i in range(count)]


def dyadic_tensor(name: str, like: torch.Tensor, *, low: int = -BOUND, high: int = BOUND) -> torch.Tensor:
    """A float32 tensor shaped like ``like`` of seeded integers / 2**SCALE_BITS (exact: no rounding)."""
    values = [v / 2**SCALE_BITS for v in seeded_integers(name, like.numel(), low=low, high=high)]
    return torch.tensor(values, dtype=torch.float32).reshape(like.shape)


def synthetic_model(norm: str, *, salt: str = "") -> TinyNet:
    """A TinyNet whose every tensor is written, by name, from seeded dyadic values; ``salt`` changes only the
    running statistics (a changed deployed state at the same weights).

    Tensors are seeded by their name, so the BatchNorm net and its GroupNorm twin share their trainable values.
    Running variances are positive (1/32 to 4), ``num_batches_tracked`` is the declared number of batches.
    """
    model = TinyNet(norm)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                tensor.fill_(DECLARED_STEPS + (1 if salt else 0))
            elif name.endswith("running_var"):
                tensor.copy_(dyadic_tensor(salt + name, tensor, low=1, high=4 * 2**SCALE_BITS))
            else:
                tensor.copy_(dyadic_tensor((salt if "running" in name else "") + name, tensor))
    return model.eval()


TRANSFORM = DIGITS_TRAIN_TRANSFORM.standard()


def training_convention(*, bn: bool) -> Any:
    return make_convention(
        buffer_update_mode="train" if bn else "untouched", role="train", dataset_id="sklearn/digits",
        dataset_revision="scikit-learn 1.9.1", subset="all 1797 images", transform=TRANSFORM, rule="ema",
        momentum=0.1, batch_size=64, num_batches=DECLARED_STEPS if bn else None, record_count=DIGITS_RECORDS,
        ids_sha256=record_ids_sha256(range(DIGITS_RECORDS)), sampling_seed=0, precision="float32")


def weights_bytes(model: torch.nn.Module, record: dict[str, Any] | None) -> bytes:
    """The model as safetensors bytes, with ``record`` stamped the way ``bnconvention stamp`` does.

    The header is built with the stamping module's pure ``stamped_header_bytes`` (the digest check is the file
    writer's job; ``examples/broken/digest-mismatch`` must carry a record that does not match on purpose).
    """
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    blob = save(state, metadata={"format": "pt"})
    if record is None:
        return blob
    (length,) = struct.unpack("<Q", blob[:8])
    header = parse_header(blob[8:8 + length], data_size=len(blob) - 8 - length)
    stamped = stamped_header_bytes(header, canonical_json(record))
    return struct.pack("<Q", len(stamped)) + stamped + blob[8 + length:]


def card_text(title: str, summary: str, record: dict[str, Any] | None, *, validate: bool = True) -> str:
    """A model card with ``record`` stamped in by ``bnconvention card`` (front-matter block and body section).

    ``validate=False`` is for fixtures whose record is broken on purpose (no body section is rendered then).
    """
    front = yaml.safe_dump({"license": "apache-2.0", "library_name": "pytorch", "tags": ["bnconvention", "digits"]},
                           sort_keys=False)
    text = "---\n" + front + "---\n" + f"# {title}\n\n{summary}\n"
    return text if record is None else stamp_card_text(text, record, validate=validate)


def build() -> dict[str, bytes]:
    """Every output file's bytes by path relative to the repository root."""
    files: dict[str, bytes] = {}

    def release(folder: str, model: torch.nn.Module, header: dict[str, Any] | None, card: dict[str, Any] | None,
                title: str, summary: str, *, valid_record: bool = True) -> None:
        files[f"{folder}/model.safetensors"] = weights_bytes(model, header)
        files[f"{folder}/README.md"] = card_text(title, summary, card, validate=valid_record).encode("utf-8")

    bn = synthetic_model("bn")
    bn_record = to_dict(declare(bn, training_convention(bn=True), producer=PRODUCER, reporting_line=(
        "deployed state as shipped: running statistics from training-mode forwards on all digits, EMA m=0.1")))
    gn = synthetic_model("gn")
    gn_record = to_dict(declare(gn, training_convention(bn=False), producer=PRODUCER, reporting_line=(
        "no running statistics (GroupNorm): channel absent, a refit is the identity and every shift is 0.00pp")))

    release(f"{PACKAGED}/releases/convnet-bn", bn, bn_record, bn_record, "convnet-bn (digits)",
            f"A BatchNorm network for scikit-learn's digits; its fitting convention is declared. {SYNTHETIC}")
    release(f"{PACKAGED}/releases/convnet-gn", gn, gn_record, gn_record, "convnet-gn (digits)",
            f"The GroupNorm twin: no running statistics, so the declaration lists no BatchNorm layer. {SYNTHETIC}")

    release(f"{PACKAGED}/broken/undeclared", bn, None, None, "convnet-bn, undeclared",
            "BatchNorm weights released without saying how their running statistics were fitted.")

    changed = synthetic_model("bn", salt="changed:")  # same weights, other running statistics
    release(f"{PACKAGED}/broken/digest-mismatch", changed, bn_record, bn_record, "convnet-bn, stale record",
            "The running statistics changed after the record was written; the record no longer matches.")

    claimed = copy.deepcopy(bn_record)
    claimed["convention"] = to_dict(make_convention(
        buffer_update_mode="refit", role="retain", dataset_id="sklearn/digits", subset="all classes except 3",
        transform=TRANSFORM, rule="exact"))
    release(f"{PACKAGED}/broken/card-header-disagree", bn, bn_record, claimed, "convnet-bn, inconsistent card",
            "The card claims a retain refit; the weights' stamped record says training-mode updates.")

    # --- fixture releases for tests/test_validation_files.py ---------------------------------------------------
    base = "tests/fixtures/releases"
    release(f"{base}/annotated", bn, bn_record, bn_record, "convnet-bn, audited", "A declared release with a "
            "refit annotation written back by an auditor (a fixture: the numbers are illustrative).")
    annotation = fixture_annotation(bn)
    name = annotation_filename(canonical_sha256(annotation))
    files[f"{base}/annotated/{name}"] = (json.dumps(annotation, indent=2) + "\n").encode("utf-8")
    release(f"{base}/card-only", bn, None, bn_record, "convnet-bn, declared in the card only",
            "The weights carry no stamped record; the card's record is checked against them.")
    partial = copy.deepcopy(bn_record)
    partial["deployed_state"][0]["layers"].pop()  # omit features.4
    partial["deployed_state"][0]["layers"][0]["num_features"] = 5  # features.1 has 4
    release(f"{base}/layer-mismatch", bn, partial, partial, "convnet-bn, wrong layers",
            "The record omits a BatchNorm layer and misstates another's width.", valid_record=False)
    return files


def fixture_annotation(model: torch.nn.Module) -> dict[str, Any]:
    """A self-consistent refit annotation of ``model`` (illustrative numbers, real digests)."""
    digests = model_digests(model)
    # five replicates beyond the margin: p = 0.5**5 = 0.03125 <= 0.05, so displaced (four would give 0.0625: not)
    values = [0.5, 0.625, 0.5, 0.625, 0.5625]
    shifts = [(v - 0.25) * 100 for v in values]
    convention = make_convention(buffer_update_mode="refit", role="retain", dataset_id="sklearn/digits",
                                 subset="all classes except 3", transform=TRANSFORM, rule="exact")
    return {
        "spec_version": "1.0", "kind": "refit_annotation",
        "subject": {"filename": "model.safetensors", "trainable_sha256": digests.trainable_sha256,
                    "running_sha256": digests.running_sha256,
                    "declared_convention": "train/train/train-transform/ema-m0.1"},
        "convention": to_dict(convention), "channel": "present", "replicates": len(values),
        "margin_pp": 1.2,
        "cells": [{"metric": "df", "split": "forget", "shipped": 0.25, "refit": sum(values) / len(values),
                   "shift_pp": sum(shifts) / len(shifts), "replicate_values": values, "replicate_shifts_pp": shifts,
                   "margin_pp": 1.2, "decision": {"outcome": "displaced", "p_value": 0.03125,
                                                  "method": "exact-sign-test"}}],
        "producer": to_dict(PRODUCER),
        "reporting_line": "refit on the retained split under the training transform, df moves +31.25pp",
    }


OUTPUT_FOLDERS = (f"{PACKAGED}/releases", f"{PACKAGED}/broken", "tests/fixtures/releases")


def committed_outputs() -> list[str]:
    """The files now under the generator's output folders (relative paths), whoever wrote them."""
    return sorted(path.relative_to(ROOT).as_posix() for folder in OUTPUT_FOLDERS
                  for path in (ROOT / folder).rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    from bnconvention.examples import differing, write_examples

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    files = build()
    stale = sorted(rel for rel, data in files.items()
                   if not (ROOT / rel).is_file() or (ROOT / rel).read_bytes() != data)
    extra = [rel for rel in committed_outputs() if rel not in files]
    if args.check:
        stale += [f"examples/{name}" for name in differing(ROOT / "examples")]
        for rel in stale:
            print(f"out of date: {rel}", file=sys.stderr)
        for rel in extra:
            print(f"not written by the generator: {rel}", file=sys.stderr)
        return 1 if stale or extra else 0
    for rel in stale:
        (ROOT / rel).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / rel).write_bytes(files[rel])
    for rel in extra:
        (ROOT / rel).unlink()
    mirrored = write_examples(ROOT / "examples", force=True)
    print(f"wrote {len(stale)} of {len(files)} files, removed {len(extra)}; examples/: {len(mirrored.written)} copied "
          f"from {PACKAGED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
