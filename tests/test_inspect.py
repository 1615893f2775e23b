"""``bnconvention inspect`` on a weights file, a card and a release folder, in text and JSON, and on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bnconvention.authoring.card_stamp import stamp_card_file
from bnconvention.authoring.declaration import make_transform
from bnconvention.authoring.inspection import inspect_path
from bnconvention.authoring.recorder import BNRecorder
from bnconvention.authoring.stamp import stamp_file
from bnconvention.cli.main import main
from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.digests import bn_layer_names
from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY
from bnconvention.standard.models import to_dict
from bnconvention.zoo.models import convnet_bn, convnet_gn

NAME = "train/retain/train-transform/ema-m0.1"
LAYERS = [{"name": "features.1", "num_features": 4}, {"name": "features.11", "num_features": 8},
          {"name": "features.4", "num_features": 4}, {"name": "features.8", "num_features": 8}]


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A release folder: model.safetensors and README.md, both stamped with the recorder's declaration."""
    root = tmp_path_factory.mktemp("release")
    torch.manual_seed(0)
    model = convnet_bn(width=4)
    with BNRecorder(model, split="retain") as rec, torch.no_grad():
        model.train()
        model(torch.rand(8, 1, 16, 16))
    record = rec.declaration(dataset_id="sklearn/digits", subset="retain", transform=make_transform(mode="train"),
                             reporting_line="deployed state as shipped")
    weights = root / "model.safetensors"
    save_file(model.state_dict(), str(weights), metadata={"format": "pt"})
    stamp_file(weights, record)
    stamp_card_file(root / "README.md", record)
    return root


@pytest.fixture
def copy_of(release: Path, tmp_path: Path) -> Path:
    target = tmp_path / "release"
    shutil.copytree(release, target)
    return target


def inspect_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["inspect", str(path), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_stamped_weights_file(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = inspect_json(release / "model.safetensors", capsys)
    assert code == 0
    weights, card = out["files"]
    assert (weights["file"], card["file"]) == (f"{release}/model.safetensors", f"{release}/README.md")
    assert weights["kind"] == "weights" and weights["readable"]
    assert weights["tensors"] == 26
    assert weights["metadata_keys"] == ["format"]
    assert weights["batchnorm_layers"] == LAYERS
    assert weights["record"] == {
        "valid": True, "kind": "declaration", "convention": NAME, "canonical_name": NAME, "name_matches": True,
        "buffer_update_mode": "train", "role": "retain", "rule": "ema", "layers": 4, "contradictions": [],
        "reporting_line": "deployed state as shipped"}
    assert (weights["digests"], weights["card_agrees"], weights["issues"]) == ("match", True, [])
    assert (out["errors"], out["warnings"], out["exit_code"]) == (0, 0, 0)


def test_text_output_of_a_weights_file(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(release / "model.safetensors")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{release}/model.safetensors (weights)"
    assert "  other metadata keys: format" in lines
    assert ("  BatchNorm layers from the header: 4: features.1 (4), features.11 (8), features.4 (4), "
            "features.8 (8)") in lines
    assert f"  record: declaration, convention {NAME}" in lines
    assert "  buffer-update mode train, split retain, rule ema, 4 BatchNorm layers declared" in lines
    assert "  digests: match" in lines
    assert "  card and header: agree" in lines
    assert lines[-1] == "0 errors, 0 warnings"  # counted nouns through text.plural


def test_a_card(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = inspect_json(release / "README.md", capsys)
    assert code == 0
    card = out["files"][0]
    assert (card["file"], card["kind"], card["record"]["convention"], card["digests"]) == (
        f"{release}/README.md", "card", NAME, "match")
    assert main(["inspect", str(release / "README.md")]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{release}/README.md (card)\n  record: declaration, convention {NAME}\n")


def test_a_release_folder(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = inspect_json(release, capsys)
    assert code == 0
    assert [(f["file"], f["kind"]) for f in out["files"]] == [
        (f"{release}/README.md", "card"), (f"{release}/model.safetensors", "weights")]
    assert main(["inspect", str(release)]) == 0
    assert "card and header: agree" in capsys.readouterr().out


def test_card_and_header_that_disagree(copy_of: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = copy_of / "README.md"
    card.write_text(card.read_text(encoding="utf-8").replace("deployed state as shipped", "something else"),
                    encoding="utf-8")
    code, out = inspect_json(copy_of, capsys)
    assert code == 1
    weights = next(f for f in out["files"] if f["kind"] == "weights")
    assert weights["card_agrees"] is False
    card_view = next(f for f in out["files"] if f["kind"] == "card")
    assert card_view["digests"] == "not-checked"
    assert [i["code"] for i in card_view["issues"]] == ["release.card_header_mismatch"]
    assert main(["inspect", str(copy_of)]) == 1
    captured = capsys.readouterr()
    assert "  card and header: DISAGREE" in captured.out
    assert captured.err.startswith("bnconvention: inspection found errors: release.card_header_mismatch: ")


def test_digests_that_do_not_match_the_tensors(copy_of: Path, release: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    other = convnet_bn(width=4)  # other random weights, same layout
    weights = copy_of / "model.safetensors"
    save_file(other.state_dict(), str(weights), metadata={"format": "pt"})
    (copy_of / "README.md").unlink()
    record = json.loads(json.dumps(to_dict(inspect_path(release / "model.safetensors").files[0].record.parsed)))
    stamp_file(weights, record, check_digests=False)
    code, out = inspect_json(weights, capsys)
    assert code == 1
    (view,) = out["files"]
    assert view["digests"] == "mismatch"
    assert {i["code"] for i in view["issues"]} >= {"digests.trainable_mismatch", "digests.running_mismatch"}


def test_an_unstamped_file_and_a_model_without_batchnorm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bn, gn = tmp_path / "bn", tmp_path / "gn"
    bn.mkdir()
    gn.mkdir()
    save_file(convnet_bn(width=4).state_dict(), str(bn / "model.safetensors"))
    save_file(convnet_gn(width=4).state_dict(), str(gn / "model.safetensors"))
    code, out = inspect_json(bn / "model.safetensors", capsys)
    (view,) = out["files"]
    assert (code, view["record"], view["digests"], view["card_agrees"]) == (0, None, None, None)
    assert [i["code"] for i in view["issues"]] == ["declaration.missing"]
    assert main(["inspect", str(gn / "model.safetensors")]) == 0
    assert "  BatchNorm layers from the header: none (channel absent)" in capsys.readouterr().out


def test_a_record_file(tmp_path: Path, release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "record.json"
    view = inspect_path(release / "model.safetensors").files[0]
    assert view.record is not None
    record.write_text(json.dumps(view.record.data), encoding="utf-8")
    code, out = inspect_json(record, capsys)
    assert code == 0
    assert (out["files"][0]["kind"], out["files"][0]["record"]["convention"], out["files"][0]["digests"]) == (
        "record", NAME, "not-checked")


def test_names_that_disagree_with_the_fields_are_shown(copy_of: Path, capsys: pytest.CaptureFixture[str]) -> None:
    view = inspect_path(copy_of / "model.safetensors").files[0]
    assert view.record is not None
    data = json.loads(json.dumps(view.record.data))
    data["convention"]["name"] = "frozen/retain/train-transform/ema-m0.1"
    (copy_of / "README.md").unlink()
    # stamping refuses such a record, so write the header the way a foreign tool would
    weights = copy_of / "model.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt",
                                                               SAFETENSORS_METADATA_KEY: canonical_json(data)})
    code, out = inspect_json(copy_of / "model.safetensors", capsys)
    record = out["files"][0]["record"]
    assert (code, record["convention"], record["canonical_name"], record["name_matches"]) == (
        1, "frozen/retain/train-transform/ema-m0.1", NAME, False)


@pytest.mark.parametrize(("name", "code", "message"), [
    pytest.param("not_safetensors.safetensors", "safetensors.truncated", "not a safetensors file",
                 id="not-safetensors"),
    pytest.param("truncated.safetensors", "safetensors.truncated",
                 "header length 1000 exceeds the 35 bytes after the length field", id="truncated"),
    pytest.param("header_not_json.safetensors", "safetensors.invalid_header", "header is not valid JSON",
                 id="header-not-json"),
    pytest.param("malformed_card/README.md", "card.invalid_yaml", "invalid YAML front matter at line 3 column 33",
                 id="malformed-card"),
])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_bad_input_is_a_clear_error(fixtures_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    name: str, code: str, message: str, fmt: str) -> None:
    source = fixtures_dir / "inspect" / name
    target = tmp_path / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    before = target.read_bytes()
    assert main(["inspect", str(target), "--format", fmt]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"bnconvention: unreadable input: {code}: {target}: ")
    assert message in captured.err
    if fmt == "json":
        view = json.loads(captured.out)["files"][0]
        assert (view["readable"], view["record"], [i["code"] for i in view["issues"]]) == (False, None, [code])
    else:
        assert captured.out.startswith(f"{target} (")
        assert "  unreadable\n" in captured.out
    assert target.read_bytes() == before


def test_a_path_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope.safetensors")]) == 2
    assert "bnconvention: unreadable input: input.unreadable: " in capsys.readouterr().err


def test_the_layers_seen_from_the_header_are_the_models(release: Path) -> None:
    view = inspect_path(release / "model.safetensors").files[0]
    assert sorted(layer.name for layer in view.batchnorm_layers) == sorted(bn_layer_names(convnet_bn(width=4)))


def test_weights_declared_by_the_card_alone(copy_of: Path, release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = copy_of / "model.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt"})  # the same tensors, no record
    code, out = inspect_json(weights, capsys)
    assert code == 0
    view, card = out["files"]
    assert (view["record"], view["digests"], view["card_agrees"]) == (None, "match", None)
    assert (card["record"]["convention"], card["digests"]) == (NAME, "match")
