"""The example releases and the validator's fixture releases are what examples/make_examples.py writes.

The generator trains nothing and reduces nothing in floating point: every tensor is a seeded integer over a power of
two, exact in float32, so the files are the same bytes on every CPU, thread count and BLAS kernel, and are compared
byte for byte (trained weights made the committed files CPU-dependent). The examples ship as package
data, and the repository's examples/ folder is what ``bnconvention examples write`` makes of it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = "bnconvention/examples/files"
EXPECTED_FILES = sorted([
    *(f"{PACKAGED}/{release}/{name}" for release in ("broken/card-header-disagree", "broken/digest-mismatch",
                                                     "broken/undeclared", "releases/convnet-bn", "releases/convnet-gn")
      for name in ("README.md", "model.safetensors")),
    "tests/fixtures/releases/annotated/README.md",
    "tests/fixtures/releases/annotated/bnconvention/refit-704ef37d920d.json",
    "tests/fixtures/releases/annotated/model.safetensors",
    "tests/fixtures/releases/card-only/README.md", "tests/fixtures/releases/card-only/model.safetensors",
    "tests/fixtures/releases/layer-mismatch/README.md", "tests/fixtures/releases/layer-mismatch/model.safetensors",
])
# examples/ holds the packaged examples (bnconvention examples write examples) and the generator
REPO_ONLY = {"make_examples.py"}


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
    from bnconvention.formats.canonical import canonical_sha256
    from bnconvention.formats.digests import file_digests
    from bnconvention.standard.locations import annotation_filename

    folder = ROOT / "tests" / "fixtures" / "releases" / "annotated"
    [path] = sorted((folder / "bnconvention").glob("*.json"))
    annotation = json.loads(path.read_text(encoding="utf-8"))
    digests = file_digests(folder / "model.safetensors")
    assert (annotation["subject"]["trainable_sha256"], annotation["subject"]["running_sha256"]) == (
        digests.trainable_sha256, digests.running_sha256)
    assert path.name == Path(annotation_filename(canonical_sha256(annotation))).name


# --- the examples as package data -----------------------------------------------------------------------------------


def test_repository_examples_are_the_packaged_ones() -> None:
    # one source: examples/ is what `bnconvention examples write examples` writes (make_examples.py refreshes it)
    from bnconvention.examples import differing, example_files

    assert differing(ROOT / "examples") == [], "run: .venv/bin/python examples/make_examples.py"
    on_disk = {p.relative_to(ROOT / "examples").as_posix() for p in (ROOT / "examples").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert on_disk - REPO_ONLY == set(example_files())


def test_packaged_examples_are_what_the_docs_use() -> None:
    from bnconvention.examples import AUDIT_SPEC, example_files

    names = set(example_files())
    assert AUDIT_SPEC in names
    assert {n.split("/")[0] + "/" + n.split("/")[1] for n in names if n.count("/") == 2} == {
        "broken/card-header-disagree", "broken/digest-mismatch", "broken/undeclared", "releases/convnet-bn",
        "releases/convnet-gn"}


def test_package_data_ships_every_example_and_names_no_missing_file() -> None:
    # what pyproject's package-data globs select is what an installed bnconvention has (a pattern matching nothing,
    # like the old "schema_data/*.json", would hide a missing file)
    import tomllib

    package = ROOT / "bnconvention"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["package-data"]
    selected: set[str] = set()
    for pattern in patterns["bnconvention"]:
        matched = {p.relative_to(package).as_posix() for p in package.glob(pattern) if p.is_file()}
        assert matched, f"package-data pattern {pattern!r} matches no file"
        selected |= matched
    from bnconvention.examples import example_files

    assert {f"examples/files/{name}" for name in example_files()} <= selected


def test_write_examples_writes_every_file_and_keeps_changed_ones(tmp_path: Path) -> None:
    from bnconvention.errors import UsageError
    from bnconvention.examples import example_files, write_examples

    first = write_examples(tmp_path / "ex")
    assert sorted(first.written) == sorted(example_files()) and first.unchanged == ()
    assert all((tmp_path / "ex" / name).read_bytes() == data for name, data in example_files().items())
    assert write_examples(tmp_path / "ex").written == ()  # identical files are left alone
    spec = tmp_path / "ex" / "audit" / "digits-zoo.yaml"
    spec.write_text("mine")
    (tmp_path / "ex" / "releases" / "convnet-bn" / "README.md").unlink()
    with pytest.raises(UsageError, match="differ from the examples"):
        write_examples(tmp_path / "ex")
    assert spec.read_text() == "mine"  # nothing was written, the missing file included
    assert not (tmp_path / "ex" / "releases" / "convnet-bn" / "README.md").exists()
    forced = write_examples(tmp_path / "ex", force=True)
    assert sorted(forced.written) == ["audit/digits-zoo.yaml", "releases/convnet-bn/README.md"]


def test_write_examples_refuses_what_is_in_the_way(tmp_path: Path) -> None:
    from bnconvention.errors import UsageError
    from bnconvention.examples import write_examples

    (tmp_path / "ex").mkdir()
    (tmp_path / "ex" / "audit").write_text("a file where a folder belongs")
    with pytest.raises(UsageError, match="cannot be written"):
        write_examples(tmp_path / "ex", force=True)
    assert sorted(p.name for p in (tmp_path / "ex").iterdir()) == ["audit"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is not a folder"):
        write_examples(tmp_path / "file")


def test_examples_write_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bnconvention.cli.main import main

    assert main(["examples", "write", str(tmp_path / "ex")]) == 0
    assert "12 of 12 example files written" in capsys.readouterr().out
    assert main(["examples", "write", str(tmp_path / "ex")]) == 0
    assert "0 of 12 example files written, 12 already up to date" in capsys.readouterr().out
    assert main(["examples"]) == 2


def test_demo_spec_is_read_from_the_packaged_example() -> None:
    import yaml

    from bnconvention.demo import DEMO_SPEC
    from bnconvention.examples import AUDIT_SPEC, read_example

    assert yaml.safe_load(read_example(AUDIT_SPEC)) == DEMO_SPEC
