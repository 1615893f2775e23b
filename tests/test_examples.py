"""The example releases and the validator's fixture releases are what examples/make_examples.py writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_committed_examples_are_regenerated_byte_for_byte() -> None:
    spec = importlib.util.spec_from_file_location("bnc_make_examples", ROOT / "examples" / "make_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = module.build()
    assert sorted(files) == [
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
    stale = [rel for rel, data in files.items() if (ROOT / rel).read_bytes() != data]
    assert stale == [], "run: .venv/bin/python examples/make_examples.py (and review the diff)"
