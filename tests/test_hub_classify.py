"""The census classification as a pure function of headers and card (no network), and its failure entries."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from pydantic import ValidationError
from safetensors.numpy import save as save_numpy

from bnconvention.formats.canonical import canonical_json
from bnconvention.formats.safetensors_header import parse_header
from bnconvention.hub.classify import (
    CheckpointReport,
    bound_checkpoint,
    check_layers,
    classify_checkpoint,
    declared_verdict,
    failed_repo,
    stamped_records,
    undeclared_verdict,
)
from bnconvention.hub.client import make_client
from bnconvention.hub.headers import RemoteHeader, WeightsSet
from bnconvention.standard.models import Declaration, to_dict
from bnconvention.validation import Issue

TOKEN = "hf_classify_secret_1618"


def _bn_file(metadata: dict[str, str] | None = None, *, features: int = 4) -> bytes:
    tensors = {"conv.weight": np.zeros((features, 1, 3, 3), dtype=np.float32),
               "bn.weight": np.ones(features, dtype=np.float32), "bn.bias": np.zeros(features, dtype=np.float32),
               "bn.running_mean": np.zeros(features, dtype=np.float32),
               "bn.running_var": np.ones(features, dtype=np.float32),
               "bn.num_batches_tracked": np.zeros((), dtype=np.int64)}
    return save_numpy(tensors, metadata=metadata)


def _weights(data: bytes, name: str = "model.safetensors") -> WeightsSet:
    length = int.from_bytes(data[:8], "little")
    header = parse_header(data[8:8 + length], data_size=len(data) - 8 - length)
    remote = RemoteHeader(filename=name, header=header, file_size=len(data), bytes_read=8 + length, requests=1)
    return WeightsSet(name=name, kind="single", headers=[remote])


@pytest.fixture(scope="module")
def record() -> dict:
    """A valid declaration of the BN file above (built with the production builder)."""
    import torch
    from safetensors.torch import load

    from bnconvention.authoring.declaration import declare, make_convention, make_transform
    model = torch.nn.Sequential()
    model.add_module("conv", torch.nn.Conv2d(1, 4, 3, bias=False))
    model.add_module("bn", torch.nn.BatchNorm2d(4))
    model.load_state_dict(load(_bn_file()))
    convention = make_convention(buffer_update_mode="train", role="train", dataset_id="sklearn/digits",
                                 subset="all", transform=make_transform(mode="train"), rule="ema", momentum=0.1)
    return to_dict(declare(model, convention))


def _classify(data: bytes, *, card: dict | None = None):
    return classify_checkpoint(_weights(data), card_record=card, card_bound=card is not None, source="org/m")


def test_consistent_declaration_in_the_header(record: dict) -> None:
    report = _classify(_bn_file({"bnconvention.record": canonical_json(record)}), card=record)
    assert (report.status, report.record_source, report.bn_layers) == ("declared_consistent", "header", 1)
    # "1 BatchNorm layer", not "1 BatchNorm layers" (counted nouns)
    assert report.reason == "1 BatchNorm layer declared as train/train/train-transform/ema-m0.1 (header); layers " \
                            "match the header"


def test_card_only_declaration(record: dict) -> None:
    report = _classify(_bn_file(), card=record)
    assert (report.status, report.record_source) == ("declared_consistent", "card")


def test_undeclared_and_channel_absent() -> None:
    assert _classify(_bn_file()).status == "undeclared"
    gn = save_numpy({"gn.weight": np.ones(4, dtype=np.float32), "gn.bias": np.zeros(4, dtype=np.float32)})
    report = _classify(gn)
    assert (report.status, report.reason) == ("channel_absent",
                                              "no BatchNorm running statistics (channel absent), nothing declared")


def test_card_that_disagrees_with_the_header(record: dict) -> None:
    other = copy.deepcopy(record)
    other["reporting_line"] = "something else"
    report = _classify(_bn_file({"bnconvention.record": canonical_json(record)}), card=other)
    assert report.status == "declared_inconsistent"
    # "1 difference", not "1 differences" (counted nouns)
    assert report.reason == "the card's record differs from the header's (first at /reporting_line; 1 difference)"
    assert [(f.code, f.path) for f in report.findings] == [("release.card_header_mismatch", "/reporting_line")]


def test_refit_annotation_in_the_header_is_the_wrong_kind(record: dict) -> None:
    annotation = {"spec_version": "1.0", "kind": "refit_annotation"}
    report = _classify(_bn_file({"bnconvention.record": json.dumps(annotation)}))
    assert report.status == "declared_inconsistent"
    assert report.reason.startswith("the declared record (header) is invalid: schema.required")


@pytest.mark.parametrize(("change", "code", "path"), [
    pytest.param(lambda layers: layers[0].update(name="other"), "layers.missing_in_file",
                 "/deployed_state/0/layers/0", id="renamed-layer"),
    pytest.param(lambda layers: layers[0].update(num_features=8), "layers.num_features_mismatch",
                 "/deployed_state/0/layers/0/num_features", id="num-features"),
    pytest.param(lambda layers: layers.clear(), "layers.undeclared", "/deployed_state/0/layers", id="no-layers"),
])
def test_check_layers_against_the_header(record: dict, change, code: str, path: str) -> None:
    data = copy.deepcopy(record)
    change(data["deployed_state"][0]["layers"])
    declaration = Declaration.model_validate(data)
    findings = check_layers(declaration, _weights(_bn_file()).tensors())
    assert (findings[0].code, findings[0].path) == (code, path)


def test_failed_repo_keeps_the_token_out_of_the_reason() -> None:
    client = make_client(endpoint="http://127.0.0.1:9", token=TOKEN)
    entry = failed_repo("org/m", "abc", ConnectionError(f"refused while sending Bearer {TOKEN}"), client)
    assert entry.status == "unreadable"
    assert entry.reason == "the Hub failed while reading it: ConnectionError: refused while sending Bearer ***"


# --- the stages of the classification and its findings (the validator's issues, no Finding type) ------------------


def test_the_shards_of_a_checkpoint_must_carry_one_record(record: dict) -> None:
    stamped = {"bnconvention.record": canonical_json(record)}
    other = {"bnconvention.record": canonical_json({**record, "reporting_line": "other"})}
    headers = [(name, _weights(_bn_file(md), name).headers[0].header)
               for name, md in (("a.safetensors", stamped), ("b.safetensors", other))]
    found, verdict = stamped_records(headers, source="org/m")
    assert found == [] and verdict is not None
    assert (verdict.status, verdict.reason) == ("declared_inconsistent", "the shards carry different records")
    same, none = stamped_records([headers[0], ("c.safetensors", headers[0][1])], source="org/m")
    assert none is None and [name for name, _ in same] == ["a.safetensors", "c.safetensors"]


def test_a_stamped_record_that_is_not_json() -> None:
    header = _weights(_bn_file({"bnconvention.record": "{not json"})).headers[0].header
    _, verdict = stamped_records([("model.safetensors", header)], source="org/m")
    assert verdict is not None and verdict.reason == "model.safetensors: the stamped record is not valid JSON"
    assert [i.code for i in verdict.findings] == ["safetensors.record_not_json"]


def test_declared_verdict_maps_issue_codes_to_classes(record: dict) -> None:
    shapes = {name: info.shape for name, info in _weights(_bn_file()).tensors().items()}
    verdict, name = declared_verdict(("model.safetensors", record), None, shapes=shapes, bn=["bn"], source="org/m")
    assert (verdict.status, verdict.findings, name) == ("declared_consistent", [], record["convention"]["name"])
    renamed = copy.deepcopy(record)
    renamed["deployed_state"][0]["layers"][0]["name"] = "other"
    verdict, _ = declared_verdict(None, renamed, shapes=shapes, bn=["bn"], source="org/m")
    assert verdict.status == "declared_inconsistent"
    assert verdict.reason.startswith("the declaration does not match the header's running buffers: "
                                     "layers.missing_in_file: layer \"other\" is declared with running statistics "
                                     "but the header has no other.running_mean")
    assert all(isinstance(issue, Issue) and issue.file == "README.md" for issue in verdict.findings)
    assert undeclared_verdict([]).status == "channel_absent" and undeclared_verdict(["bn"]).status == "undeclared"


def test_findings_are_stored_as_code_path_message_and_read_back_as_issues(record: dict) -> None:
    other = copy.deepcopy(record)
    other["reporting_line"] = "something else"
    report = _classify(_bn_file({"bnconvention.record": canonical_json(record)}), card=other)
    stored = report.model_dump(mode="json")["findings"]
    assert [sorted(f) for f in stored] == [["code", "message", "path"]]
    again = CheckpointReport.model_validate_json(report.model_dump_json())
    assert again.findings == [Issue(code="release.card_header_mismatch", severity="error", file="",
                                    path="/reporting_line", message=report.findings[0].message)]
    # a census journal written before findings were issues reads back the same way
    old = {**report.model_dump(mode="json"), "findings": [{"code": "digests.running_mismatch", "message": "stale"}]}
    assert CheckpointReport.model_validate(old).findings[0].path == ""
    with pytest.raises(ValidationError):
        CheckpointReport.model_validate({**old, "findings": [{"code": "x", "message": "m", "extra": 1}]})


def test_the_card_binds_to_the_only_checkpoint_or_to_the_one_carrying_its_record(record: dict) -> None:
    stamped = _weights(_bn_file({"bnconvention.record": canonical_json(record)}), "a.safetensors")
    plain = _weights(_bn_file(), "b.safetensors")
    assert bound_checkpoint([plain], None) is plain
    assert bound_checkpoint([plain, stamped], record) is stamped
    assert bound_checkpoint([plain, stamped], None) is None
    assert bound_checkpoint([plain, stamped], {**record, "reporting_line": "other"}) is None
