"""Which architecture a checkpoint is built with: the repo's own declaration, then timm's or
transformers' own config.json, then the spec's model; refusals name the file and fall through only to a usable
source; and ``bnconvention audit`` on a timm or transformers release with a spec that names no model."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import yaml
from architectures_support import timm_release, transformers_resnet, write_json

from bnconvention.architectures.resolve import (
    Architecture,
    architecture_from_config,
    parse_config,
    read_config,
    resolve_architecture,
)
from bnconvention.audit.measure.checkpoint import choose_model
from bnconvention.audit.measure.data import load_audit_data
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.cli.main import main
from bnconvention.errors import (
    ArchitectureConfigError,
    AuditSpecError,
    FactoryNotAllowedError,
    JSONInputError,
    UntrustedInputError,
    UsageError,
)
from bnconvention.hub_audit.audit_task import choose_repo_spec, spec_for_repo

TIMM = {"architecture": "resnet10t", "num_classes": 10, "model_args": {"num_classes": 10, "in_chans": 1}}
OURS = {"architecture": {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}}}
SPEC_MODEL = Architecture(factory="zoo/convnet-gn", kwargs={}, source="spec")
BASE = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}}


# --- one file -----------------------------------------------------------------------------------------------------


def test_each_form_of_a_config_names_its_factory():
    assert architecture_from_config(OURS, source="s").factory == "zoo/convnet-bn"
    assert architecture_from_config(TIMM, source="s").factory == "timm/resnet10t"
    transformers = {"architectures": ["ResNetForImageClassification"], "model_type": "resnet"}
    assert architecture_from_config(transformers, source="s").factory == "transformers/ResNetForImageClassification"
    # the older sidecar forms of our own declaration keep working
    assert architecture_from_config({"architecture": "torchvision/resnet18", "num_classes": 3,
                                     "architecture_kwargs": {"num_classes": 3}}, source="s") == Architecture(
        factory="torchvision/resnet18", kwargs={"num_classes": 3}, source="s")
    assert architecture_from_config({"factory": "zoo/convnet-gn"}, source="s").factory == "zoo/convnet-gn"
    assert architecture_from_config({"num_classes": 3}, source="s") is None
    assert architecture_from_config(None, source="s") is None


def test_our_declaration_may_name_a_library_model_under_the_same_rules():
    found = architecture_from_config({"architecture": {"factory": "timm/resnet10t", "kwargs": {"num_classes": 3}}},
                                     source="s")
    assert (found.factory, found.kwargs) == ("timm/resnet10t", {"num_classes": 3})
    with pytest.raises(ArchitectureConfigError, match="'checkpoint_path' is a loading option"):
        architecture_from_config({"architecture": {"factory": "timm/resnet10t",
                                                   "kwargs": {"checkpoint_path": "/x"}}}, source="s")
    with pytest.raises(ArchitectureConfigError, match="asks for remote code"):
        architecture_from_config({"architecture": {"factory": "transformers/ResNetForImageClassification",
                                                   "kwargs": {"auto_map": {"a": "b"}}}}, source="s")


def test_our_declaration_comes_before_the_library_config_in_the_same_file():
    both = {**TIMM, **OURS, "model_type": "resnet", "architectures": ["ResNetForImageClassification"]}
    assert architecture_from_config(both, source="s").factory == "zoo/convnet-bn"


def test_a_declared_factory_outside_the_allowlist_is_refused_naming_the_file():
    with pytest.raises(FactoryNotAllowedError, match=r"^org/m/config.json: model factory 'evil_h7:build' is not "
                                                     "allowlisted"):
        architecture_from_config({"architecture": {"factory": "evil_h7:build"}}, source="org/m/config.json")
    assert "evil_h7" not in sys.modules
    with pytest.raises(UntrustedInputError, match="kwargs are not plain JSON values"):
        architecture_from_config({"architecture": {"factory": "zoo/convnet-bn", "kwargs": {"width": {"a": 1}}}},
                                 source="s")


@pytest.mark.parametrize(("data", "error", "message"), [
    pytest.param(b"{not json", JSONInputError, "org/m/config.json: ", id="not-json"),
    pytest.param(b"[1, 2]", UntrustedInputError, "a config is a JSON object, found list", id="not-an-object"),
    pytest.param(b'{"a": 1, "a": 2}', JSONInputError, "duplicate object key 'a'", id="duplicate-key"),
    pytest.param(b'{"a": NaN}', JSONInputError, "NaN is not valid JSON", id="nan"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, JSONInputError, "JSON nested too deeply to parse",
                 id="nested-too-deeply"),
    pytest.param(b'{"a": "' + b"x" * 1_000_001 + b'"}', UntrustedInputError, "over the 1000000-byte limit",
                 id="too-big"),
])
def test_a_broken_config_is_one_line_naming_the_file(data, error, message):
    with pytest.raises(error, match=message) as caught:
        parse_config(data, source="org/m/config.json")
    assert str(caught.value).startswith("org/m/config.json: ") and "\n" not in str(caught.value)


def test_reading_a_config_file_stops_after_the_limit(tmp_path):
    assert read_config(tmp_path / "config.json") is None
    big = tmp_path / "config.json"
    big.write_bytes(b" " * 2_000_000 + b"{}")
    with pytest.raises(UntrustedInputError, match="1000001 bytes, over the 1000000-byte limit"):
        read_config(big, source="org/m/config.json")


# --- the order ----------------------------------------------------------------------------------------------------


def test_the_first_file_that_names_a_usable_architecture_wins():
    found = resolve_architecture([(None, "sidecar"), (OURS, "sidecar2"), (TIMM, "config")], fallback=SPEC_MODEL)
    assert (found.architecture.factory, found.architecture.source, found.passed_over) == (
        "zoo/convnet-bn", "sidecar2", ())


def test_a_refused_file_is_passed_over_with_a_note_when_a_later_source_is_usable():
    refused = {"architecture": "hf-hub:org/other", "num_classes": 3}
    found = resolve_architecture([(refused, "org/m/model.json"), (TIMM, "org/m/config.json")])
    assert found.architecture.factory == "timm/resnet10t"
    assert len(found.passed_over) == 1 and found.passed_over[0].startswith("org/m/model.json: ")
    fallback = resolve_architecture([(refused, "org/m/config.json")], fallback=SPEC_MODEL)
    assert fallback.architecture is SPEC_MODEL
    assert fallback.passed_over[0].endswith("; the spec's model was used instead")


def test_without_a_usable_source_the_first_refusal_is_the_error():
    with pytest.raises(ArchitectureConfigError, match="^org/m/config.json: 'resnet9000' is not in timm's"):
        resolve_architecture([({"architecture": "resnet9000", "num_classes": 3}, "org/m/config.json")])
    assert resolve_architecture([({"num_classes": 3}, "org/m/config.json")]) is None


# --- local audit: the spec's model, else the sidecar, else the folder's config.json ------------------------------


def test_local_audit_takes_the_spec_model_then_the_sidecar_then_config_json(tmp_path):
    weights = tmp_path / "model.safetensors"
    no_model = parse_spec(BASE)
    with pytest.raises(AuditSpecError, match="neither model.json nor config.json beside model.safetensors"):
        choose_model(weights, no_model, None)
    write_json(tmp_path / "config.json", TIMM)
    chosen = choose_model(weights, no_model, None)
    assert (chosen.factory, chosen.source) == ("timm/resnet10t", str(tmp_path / "config.json"))
    assert choose_model(weights, no_model, OURS).factory == "zoo/convnet-bn"  # the sidecar comes first
    with_model = parse_spec({**BASE, "model": {"factory": "zoo/convnet-gn"}})
    assert choose_model(weights, with_model, OURS).factory == "zoo/convnet-gn"  # the user's own spec wins locally


# --- hub audit: the repo's own files, else the spec's model -------------------------------------------------------


def test_hub_takes_the_repo_config_before_the_spec_model():
    spec = parse_spec({**BASE, "model": {"factory": "zoo/convnet-gn"}})
    repo_spec, source = spec_for_repo(spec, repo_id="org/timm-r", config=TIMM)
    assert source == "repo" and repo_spec.model.factory == "timm/resnet10t"
    assert repo_spec.model.kwargs == {"num_classes": 10, "in_chans": 1}
    transformers = {"architectures": ["ResNetForImageClassification"], "model_type": "resnet",
                    "id2label": {"0": "a", "1": "b"}, "transformers_version": "5.24.0"}
    repo_spec, source = spec_for_repo(spec, repo_id="org/tr", config=transformers)
    assert source == "repo" and repo_spec.model.factory == "transformers/ResNetForImageClassification"
    assert repo_spec.model.kwargs == {"architectures": ["ResNetForImageClassification"], "model_type": "resnet",
                                      "id2label": {"0": "a", "1": "b"}}
    assert spec_for_repo(spec, repo_id="org/none", config=None) == (spec, "spec")


def test_hub_falls_back_to_the_spec_model_for_a_refused_config_and_says_why():
    spec = parse_spec({**BASE, "model": {"factory": "zoo/convnet-gn"}})
    remote = {"architectures": ["ResNetForImageClassification"], "model_type": "resnet", "auto_map": {"a": "b"}}
    repo_spec, source, passed_over = choose_repo_spec(spec, repo_id="org/remote", config=remote)
    assert (repo_spec.model.factory, source) == ("zoo/convnet-gn", "spec")
    assert passed_over == ("org/remote/config.json: /auto_map asks for remote code, which is never run (no "
                           "trust_remote_code); audit it with your own factory: --allow-factory "
                           "package.module:function and a model: section in the spec; the spec's model was used "
                           "instead",)


def test_hub_without_a_spec_model_refuses_naming_the_repo_and_file():
    spec = parse_spec(BASE)
    with pytest.raises(ArchitectureConfigError, match="^org/bad/config.json: model_type 'nope' is unknown"):
        spec_for_repo(spec, repo_id="org/bad", config={"model_type": "nope", "architectures": ["X"]})
    with pytest.raises(UsageError, match="^org/empty: it has no config.json, and the spec has no model section"):
        spec_for_repo(spec, repo_id="org/empty", config=None)
    with pytest.raises(UsageError, match="^org/plain: its config.json names no architecture"):
        spec_for_repo(spec, repo_id="org/plain", config={"num_classes": 3})


# --- bnconvention audit on a timm or transformers release, spec without model, no --allow-factory -----------------

AUDIT_SPEC = {**BASE, "cells": ["df", "dr", "dt"], "replicates": 2, "published_source": "spec",
              "refit": {"pool_size": 64, "batch_size": 32}, "recoverability": {"images": 8}}


@pytest.mark.slow
# the digits pool is grey 16x16: one-channel models, saved by the libraries' own code
@pytest.mark.parametrize(("release", "factory"), [
    pytest.param(lambda folder: timm_release(folder, "resnet10t", num_classes=10, in_chans=1), "timm/resnet10t",
                 id="timm"),
    pytest.param(lambda folder: transformers_resnet(folder, num_labels=10, num_channels=1),
                 "transformers/ResNetForImageClassification", id="transformers"),
])
def test_audit_of_a_library_release_needs_no_model_section_and_no_factory(tmp_path, capsys, release, factory):
    folder = tmp_path / "release"
    original = release(folder)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(AUDIT_SPEC), encoding="utf-8")
    out = tmp_path / "out"
    code = main(["audit", str(folder / "model.safetensors"), "--spec", str(spec), "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    result = json.loads((out / "result.json").read_text())
    assert result["factory"] == factory
    # the shipped test accuracy is the library's own model's, on the same test split under the eval transform
    data = load_audit_data(parse_spec(AUDIT_SPEC))
    with torch.inference_mode():
        output = original(data.eval_transform(data.test.x, generator=None))
    scores = output if isinstance(output, torch.Tensor) else output.logits
    expected = float((scores.argmax(dim=1) == data.test.y).sum()) / len(data.test.y)
    shipped = {cell["metric"]: cell["shipped"] for cell in result["annotation"]["cells"]}
    assert shipped["dt"] == expected
    assert main(["validate", str(out / "annotation.json")]) == 0


def test_audit_of_a_release_whose_config_is_refused_is_one_line_and_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "release"
    timm_release(folder, "resnet10t", num_classes=10, in_chans=1)
    config = json.loads((folder / "config.json").read_text())
    write_json(folder / "config.json", {**config, "architecture": "hf-hub:someone/else"})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(AUDIT_SPEC), encoding="utf-8")
    out = tmp_path / "out"
    code = main(["audit", str(folder / "model.safetensors"), "--spec", str(spec), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"bnconvention: architecture refused: {folder / 'config.json'}: the timm architecture "
                   "'hf-hub:someone/else' is not a plain timm model name (source prefixes such as 'hf-hub:' and "
                   "paths are never followed); name a model of timm's registry\n")
    assert not out.exists()


def test_census_preflight_resolves_each_release_from_its_own_folder(tmp_path):
    from bnconvention.audit.census.run import discover_checkpoints, preflight

    timm_release(tmp_path / "timm", "resnet10t", num_classes=10, in_chans=1)
    transformers_resnet(tmp_path / "tr", num_labels=10, num_channels=1)
    spec = parse_spec(AUDIT_SPEC)
    items = preflight(discover_checkpoints([tmp_path / "timm", tmp_path / "tr"]), spec, load_audit_data(spec))
    assert sorted((item.choice.factory, item.choice.source) for item in items) == [
        ("timm/resnet10t", str(tmp_path / "timm" / "config.json")),
        ("transformers/ResNetForImageClassification", str(tmp_path / "tr" / "config.json"))]
