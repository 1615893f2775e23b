"""The example releases and the validator's fixture releases are what examples/make_examples.py writes.

The generator trains nothing and reduces nothing in floating point: every tensor is a seeded integer over a power of
two, exact in float32, so the files are the same bytes on every CPU, thread count and BLAS kernel, and are compared
byte for byte (issue 10: trained weights made the committed files CPU-dependent).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load

ROOT = Path(__file__).resolve().parent.parent
EXPECTED_FILES = [
    "examples/broken/card-header-disagree/README.md", "examples/broken/card-header-disagree/model.safetensors",
    "examples/broken/digest-mismatch/README.md", "examples/broken/digest-mismatch/model.safetensors",
    "examples/broken/undeclared/README.md", "examples/broken/undeclared/model.safetensors",
    "examples/releases/convnet-bn/README.md", "examples/releases/convnet-bn/model.safetensors",
    "examples/releases/convnet-gn/README.md", "examples/releases/convnet-gn/model.safetensors",
    "tests/fixtures/releases/annotated/README.md",
    "tests/fixtures/releases/annotated/bnconvention/refit-792dfa41b94c.json",
    "tests/fixtures/releases/annotated/model.safetensors",
    "tests/fixtures/releases/card-only/README.md", "tests/fixtures/releases/card-only/model.safetensors",
    "tests/fixtures/releases/layer-mismatch/README.md", "tests/fixtures/releases/layer-mismatch/model.safetensors",
]


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("bnc_make_examples", ROOT / "examples" / "make_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(generator) -> dict[str, bytes]:
    return generator.build()


def test_generator_writes_exactly_the_committed_files(generator, generated: dict[str, bytes]) -> None:
    assert sorted(generated) == EXPECTED_FILES
    # nothing else lies in the generator's folders (a renamed annotation would leave its old file behind)
    assert generator.committed_outputs() == EXPECTED_FILES


def test_generation_does_not_depend_on_the_thread_count(generator, generated: dict[str, bytes]) -> None:
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        assert generator.build() == generated
    finally:
        torch.set_num_threads(threads)


def test_committed_examples_are_current(generated: dict[str, bytes]) -> None:
    stale = [rel for rel, data in generated.items() if (ROOT / rel).read_bytes() != data]
    assert stale == [], "run: .venv/bin/python examples/make_examples.py (and review the diff)"


@pytest.mark.parametrize("rel", [f for f in EXPECTED_FILES if f.endswith(".safetensors")])
def test_every_committed_tensor_is_dyadic(generator, rel: str) -> None:
    # What makes the bytes platform-independent: each float is a small integer over 2**SCALE_BITS, so it was written
    # without rounding and no CPU can compute another value for it.
    tensors = load((ROOT / rel).read_bytes())
    scale = 2 ** generator.SCALE_BITS
    for name, tensor in tensors.items():
        if tensor.is_floating_point():
            scaled = tensor.double() * scale
            assert torch.equal(scaled, scaled.round()), name
            assert float(scaled.abs().max()) <= 4 * scale, name


def test_annotation_binds_to_the_annotated_weights() -> None:
    # Internal consistency of the fixture: the annotation's subject digests are those of the weights beside it, and
    # its file name is its own digest (the validator checks the same; this pins the generator's intent).
    from bnconvention.canonical import canonical_sha256
    from bnconvention.digests import file_digests
    from bnconvention.locations import annotation_filename

    folder = ROOT / "tests" / "fixtures" / "releases" / "annotated"
    [path] = sorted((folder / "bnconvention").glob("*.json"))
    annotation = json.loads(path.read_text(encoding="utf-8"))
    digests = file_digests(folder / "model.safetensors")
    assert (annotation["subject"]["trainable_sha256"], annotation["subject"]["running_sha256"]) == (
        digests.trainable_sha256, digests.running_sha256)
    assert path.name == Path(annotation_filename(canonical_sha256(annotation))).name
