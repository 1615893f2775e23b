"""The example releases and the validator's fixture releases are what examples/make_examples.py writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXPECTED_FILES = [
    "examples/PLATFORM",
    "examples/broken/card-header-disagree/README.md", "examples/broken/card-header-disagree/model.safetensors",
    "examples/broken/digest-mismatch/README.md", "examples/broken/digest-mismatch/model.safetensors",
    "examples/broken/undeclared/README.md", "examples/broken/undeclared/model.safetensors",
    "examples/releases/convnet-bn/README.md", "examples/releases/convnet-bn/model.safetensors",
    "examples/releases/convnet-gn/README.md", "examples/releases/convnet-gn/model.safetensors",
    "tests/fixtures/releases/annotated/README.md",
    "tests/fixtures/releases/annotated/bnconvention/refit-ed3f88a723ea.json",
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


def test_generator_writes_exactly_the_committed_files(generated: dict[str, bytes]) -> None:
    assert sorted(generated) == EXPECTED_FILES
    assert all((ROOT / rel).is_file() for rel in EXPECTED_FILES)


def test_generation_is_deterministic(generator, generated: dict[str, bytes]) -> None:
    assert generator.build() == generated


def test_committed_examples_are_current(generator, generated: dict[str, bytes]) -> None:
    committed_platform = (ROOT / "examples" / "PLATFORM").read_text().strip()
    if committed_platform != generator.platform_fingerprint():
        # Float32 training sums in a CPU-dependent order: another CPU writes other, equally valid weights.
        pytest.skip(f"examples were generated on '{committed_platform}', this is "
                    f"'{generator.platform_fingerprint()}': byte comparison is only meaningful on the same platform")
    stale = [rel for rel, data in generated.items() if (ROOT / rel).read_bytes() != data]
    assert stale == [], "run: .venv/bin/python examples/make_examples.py (and review the diff)"
