"""Write the example releases and the validator's fixture releases (deterministic: same bytes every run).

    .venv/bin/python examples/make_examples.py           # rewrite the examples and tests/fixtures/releases/
    .venv/bin/python examples/make_examples.py --check   # exit 1 if a committed file differs

The examples are package data (``bnconvention/examples/files/``, what ``bnconvention examples write DIR`` writes
out for users); this repository's ``examples/`` folder is that command's output, refreshed here after the package
files (``audit/digits-zoo.yaml`` is written by hand in the package, the releases by this script).

Two tiny networks are trained for a few steps on scikit-learn's bundled digits (8x8, no download): a BatchNorm one
and its GroupNorm twin. Each release is a folder with ``model.safetensors`` (written by ``safetensors.torch``; the
record stamped under ``__metadata__["bnconvention.record"]`` as canonical JSON) and a ``README.md`` card (the record
as the ``bnconvention`` block of the YAML front matter, plus a human-readable section).

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

from bnconvention.canonical import canonical_json, canonical_sha256  # noqa: E402
from bnconvention.declaration import declare, make_convention, make_transform  # noqa: E402
from bnconvention.digests import model_digests  # noqa: E402
from bnconvention.card_stamp import stamp_card_text  # noqa: E402
from bnconvention.locations import annotation_filename  # noqa: E402
from bnconvention.safetensors_header import parse_header  # noqa: E402
from bnconvention.stamp import stamped_header_bytes  # noqa: E402
from bnconvention.standard.models import Producer, to_dict  # noqa: E402
from bnconvention.standard.naming import record_ids_sha256  # noqa: E402

PACKAGED = "bnconvention/examples/files"  # where the examples live; examples/ is a copy (bnconvention examples write)
PRODUCER = Producer(tool="bnconvention", version="0.1.0")  # pinned so the files do not change with releases
FORGET_CLASS = 3


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


def digits_tensor() -> tuple[torch.Tensor, torch.Tensor]:
    """The digits as float32 images in [0, 1] (pixel / 16) and labels; the training transform has no augmentation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return images, torch.tensor(digits.target, dtype=torch.int64)


def train(norm: str, images: torch.Tensor, labels: torch.Tensor, *, steps: int = 30,
          batch_size: int = 64) -> TinyNet:
    torch.manual_seed(0)
    model = TinyNet(norm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.train()
    for step in range(steps):
        start = (step * batch_size) % (len(images) - batch_size)
        x, y = images[start:start + batch_size], labels[start:start + batch_size]
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    return model


TRANSFORM = make_transform(mode="train", reference="examples/make_examples.py:digits_tensor")


def training_convention(*, steps: int, bn: bool, n_records: int) -> Any:
    return make_convention(
        buffer_update_mode="train" if bn else "untouched", role="train", dataset_id="sklearn/digits",
        dataset_revision="scikit-learn 1.9.1", subset="all 1797 images", transform=TRANSFORM, rule="ema",
        momentum=0.1, batch_size=64, num_batches=steps if bn else None, record_count=n_records,
        ids_sha256=record_ids_sha256(range(n_records)), sampling_seed=0, precision="float32")


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
    torch.set_num_threads(1)
    images, labels = digits_tensor()
    steps = 30
    files: dict[str, bytes] = {}

    def release(folder: str, model: torch.nn.Module, header: dict[str, Any] | None, card: dict[str, Any] | None,
                title: str, summary: str, *, valid_record: bool = True) -> None:
        files[f"{folder}/model.safetensors"] = weights_bytes(model, header)
        files[f"{folder}/README.md"] = card_text(title, summary, card, validate=valid_record).encode("utf-8")

    bn = train("bn", images, labels, steps=steps)
    bn_record = to_dict(declare(bn, training_convention(steps=steps, bn=True, n_records=len(images)),
                                producer=PRODUCER, reporting_line=(
        "deployed state as shipped: running statistics from training-mode forwards on all digits, EMA m=0.1")))
    gn = train("gn", images, labels, steps=steps)
    gn_record = to_dict(declare(gn, training_convention(steps=steps, bn=False, n_records=len(images)),
                                producer=PRODUCER, reporting_line=(
        "no running statistics (GroupNorm): channel absent, a refit is the identity and every shift is 0.00pp")))

    release(f"{PACKAGED}/releases/convnet-bn", bn, bn_record, bn_record, "convnet-bn (digits)",
            "A BatchNorm network trained for 30 steps on scikit-learn's digits; its fitting convention is declared.")
    release(f"{PACKAGED}/releases/convnet-gn", gn, gn_record, gn_record, "convnet-gn (digits)",
            "The GroupNorm twin: no running statistics, so the declaration lists no BatchNorm layer.")

    release(f"{PACKAGED}/broken/undeclared", bn, None, None, "convnet-bn, undeclared",
            "BatchNorm weights released without saying how their running statistics were fitted.")

    corrupted = copy.deepcopy(bn)
    corrupted.train()  # BN corruption: train-mode forwards on the forget class after the record was written
    with torch.no_grad():
        corrupted(images[labels == FORGET_CLASS][:64])
    corrupted.eval()
    release(f"{PACKAGED}/broken/digest-mismatch", corrupted, bn_record, bn_record, "convnet-bn, stale record",
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
    files["examples/PLATFORM"] = (platform_fingerprint() + "\n").encode("utf-8")
    return files


def platform_fingerprint() -> str:
    """What the tensor bytes depend on: the torch build and the CPU kernels it dispatches to.

    Training in float32 sums in an order that depends on the vector width the CPU offers, so another CPU may write
    other (equally valid) weights; byte comparisons of regenerated files are only meaningful on a matching platform.
    """
    return f"torch {torch.__version__}; cpu capability {torch.backends.cpu.get_cpu_capability()}"


def fixture_annotation(model: torch.nn.Module) -> dict[str, Any]:
    """A self-consistent refit annotation of ``model`` (illustrative numbers, real digests)."""
    digests = model_digests(model)
    values = [0.5, 0.625, 0.5, 0.625]
    shifts = [(v - 0.25) * 100 for v in values]
    convention = make_convention(buffer_update_mode="refit", role="retain", dataset_id="sklearn/digits",
                                 subset="all classes except 3", transform=TRANSFORM, rule="exact")
    return {
        "spec_version": "1.0", "kind": "refit_annotation",
        "subject": {"filename": "model.safetensors", "trainable_sha256": digests.trainable_sha256,
                    "running_sha256": digests.running_sha256,
                    "declared_convention": "train/train/train-transform/ema-m0.1"},
        "convention": to_dict(convention), "channel": "present", "replicates": 4, "margin_pp": 1.2,
        "cells": [{"metric": "df", "split": "forget", "shipped": 0.25, "refit": sum(values) / 4,
                   "shift_pp": sum(shifts) / 4, "replicate_values": values, "replicate_shifts_pp": shifts,
                   "margin_pp": 1.2, "decision": {"outcome": "displaced", "p_value": 0.0625,
                                                  "method": "exact-sign-test"}}],
        "producer": to_dict(PRODUCER),
        "reporting_line": "refit on the retained split under the training transform, df moves +31.25pp",
    }


def main(argv: list[str] | None = None) -> int:
    from bnconvention.examples import differing, write_examples

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    files = build()
    stale = sorted(rel for rel, data in files.items()
                   if not (ROOT / rel).is_file() or (ROOT / rel).read_bytes() != data)
    if args.check:
        stale += [f"examples/{name}" for name in differing(ROOT / "examples")]
        for rel in stale:
            print(f"out of date: {rel}", file=sys.stderr)
        return 1 if stale else 0
    for rel in stale:
        (ROOT / rel).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / rel).write_bytes(files[rel])
    mirrored = write_examples(ROOT / "examples", force=True)
    print(f"wrote {len(stale)} of {len(files)} files; examples/: {len(mirrored.written)} copied from {PACKAGED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
