"""Spec rules: one spec for a mixed organisation, each repo with its own sections, chosen by
repo-id pattern or config.json field; and the spec's model-index fields (item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from bnconvention.audit.spec.audit_spec import (
    DEFAULT_MODEL_INDEX_METRICS,
    generate_audit_spec_schema,
    load_spec,
    parse_spec,
)
from bnconvention.audit.spec.rules import apply_rules, config_field, matches
from bnconvention.errors import AuditSpecError

MINIMAL = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
           "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}}}
TIMM = {"architecture": "resnet18", "num_classes": 10, "pretrained_cfg": {"architecture": "resnet18"}}
TRANSFORMERS = {"model_type": "resnet", "architectures": ["ResNetForImageClassification"]}
RULES = [
    {"name": "narrow", "match": {"repo": ["lab/narrow-*", "lab/tiny"]}, "model": {"factory": "zoo/convnet-bn",
                                                                                 "kwargs": {"width": 8}}},
    {"name": "timm", "match": {"config": {"pretrained_cfg.architecture": "RESNET*"}},
     "refit": {"pool_size": 32}, "published_source": "model_index"},
    {"match": {"config": {"architectures": "*ForImageClassification", "model_type": "resnet"}},
     "splits": {"forget_classes": [1, 2]}, "refit": {"pool_size": 16}},
]


@pytest.fixture(scope="module")
def spec():
    return parse_spec({**MINIMAL, "rules": RULES})


@pytest.mark.parametrize(("repo_id", "config", "names"), [
    pytest.param("lab/narrow-01", None, ["narrow"], id="repo-pattern"),
    pytest.param("LAB/Tiny", None, ["narrow"], id="repo-case-insensitive"),
    pytest.param("lab/timm-r18", TIMM, ["timm"], id="dotted-config-field"),
    pytest.param("lab/hf-r18", TRANSFORMERS, ["rule 3"], id="list-field-and-plain-field"),
    pytest.param("lab/narrow-hf", TRANSFORMERS, ["narrow", "rule 3"], id="two-rules"),
    pytest.param("lab/other", {"model_type": "vit", "architectures": ["ViTForImageClassification"]}, [],
                 id="no-rule"),
    pytest.param("lab/hf-cfg", {"architectures": "ResNetForImageClassification"}, [], id="every-condition-holds"),
])
def test_rules_that_match_are_named(spec, repo_id: str, config, names: list[str]) -> None:
    assert apply_rules(spec, repo_id=repo_id, config=config)[1] == names


def test_a_repo_no_rule_matches_keeps_the_spec_as_written(spec) -> None:
    assert apply_rules(spec, repo_id="lab/other", config=None)[0] is spec


def test_matching_sections_replace_the_spec_s_and_later_rules_win(spec) -> None:
    narrow, _ = apply_rules(spec, repo_id="lab/narrow-hf", config=TRANSFORMERS)
    assert narrow.model is not None and narrow.model.kwargs == {"width": 8}  # rule 1
    assert narrow.splits.forget_classes == [1, 2] and narrow.refit.pool_size == 16  # rule 3
    assert narrow.refit.batch_size == 128  # sections are replaced whole: rule 3's refit has the defaults
    assert narrow.rules == [] and narrow.sha256() != spec.sha256()
    timm, _ = apply_rules(spec, repo_id="lab/timm-r18", config=TIMM)
    assert (timm.published_source, timm.refit.pool_size, timm.model) == ("model_index", 32, spec.model)


def test_config_values_are_data_compared_by_pattern_or_equality() -> None:
    assert config_field({"a": {"b": 3}}, "a.b") == (True, 3) and config_field({"a": 1}, "a.b") == (False, None)
    from bnconvention.audit.spec.rules import RuleMatch

    def holds(config_match: dict, config: object) -> bool:
        return matches(RuleMatch.model_validate({"config": config_match}), repo_id="x/y", config=config)

    assert holds({"num_classes": 10}, {"num_classes": 10}) and not holds({"num_classes": 10}, {"num_classes": "10"})
    assert not holds({"flag": True}, {"flag": 1}) and holds({"flag": True}, {"flag": True})
    assert not holds({"architecture": "resnet*"}, {"architecture": {"factory": "resnet18"}})
    assert not holds({"model_type": "resnet"}, None)  # no config.json: no config condition holds


@pytest.mark.parametrize(("rule", "field", "message"), [
    pytest.param({"match": {}, "dataset": {"kind": "digits"}}, "/rules/0/match", "rule 1 has no condition",
                 id="no-condition"),
    pytest.param({"match": {"repo": "lab/*"}}, "/rules/0", "rule 1 changes nothing", id="no-section"),
    pytest.param({"match": {"repo": "lab/*"}, "dataset": {"kind": "npz"}}, "/rules/0/dataset/path",
                 "rule 1: dataset kind 'npz' needs a path", id="invalid-section"),
    pytest.param({"match": {"repo": "lab/*"}, "published_source": "sidecar"}, "/rules/0/published_source",
                 "rule 1: published_source is 'sidecar' but the spec also lists published cells", id="combination"),
    pytest.param({"match": {"repo": "lab/*"}, "model_index_metrics": {"forget accuracy": "df(1)"}},
                 "/rules/0/model_index_metrics/forget accuracy", "rule 1: ", id="metric-not-a-cell"),
    pytest.param({"match": {"config": {"x": [1]}}, "refit": {}}, "/rules/0/match/config/x", "", id="list-value"),
])
def test_a_rule_that_cannot_give_a_valid_spec_is_refused_naming_the_rule(rule: dict, field: str,
                                                                         message: str) -> None:
    with pytest.raises(AuditSpecError) as caught:
        parse_spec({**MINIMAL, "published": {"df": 0.1}, "rules": [rule]})
    assert caught.value.field is not None and caught.value.field.startswith(field)
    assert message in str(caught.value)


def test_rule_paths_are_relative_to_the_spec_file(tmp_path: Path) -> None:
    rule = {"match": {"repo": "lab/*"}, "dataset": {"kind": "npz", "path": "pools/cifar.npz"},
            "splits": {"forget_index": "ids/forget.txt"}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**MINIMAL, "rules": [rule]}))
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.rules[0].dataset is not None and spec.rules[0].dataset.path == str(tmp_path / "pools/cifar.npz")
    assert spec.rules[0].splits is not None and spec.rules[0].splits.forget_index == str(tmp_path / "ids/forget.txt")
    ruled, _ = apply_rules(spec, repo_id="lab/x", config=None)
    assert ruled.dataset.path == str(tmp_path / "pools/cifar.npz")


def test_the_schema_accepts_rules_and_model_index_fields() -> None:
    document = {**MINIMAL, "rules": RULES, "published_source": "model_index",
                "model_index_metrics": {"Forget Acc.": "df"}}
    assert list(Draft202012Validator(generate_audit_spec_schema()).iter_errors(document)) == []
    assert parse_spec(MINIMAL).model_index_metrics == DEFAULT_MODEL_INDEX_METRICS
    with pytest.raises(AuditSpecError, match="cell 'df \\+' is not a valid expression") as caught:
        parse_spec({**MINIMAL, "model_index_metrics": {"forget accuracy": "df +"}})
    assert caught.value.field == "/model_index_metrics/forget accuracy"


def test_model_index_and_spec_cells_may_be_given_together() -> None:
    spec = parse_spec({**MINIMAL, "published_source": "model_index", "published": {"dt": 0.9}})
    assert spec.published_for("model") == {"dt": 0.9}
