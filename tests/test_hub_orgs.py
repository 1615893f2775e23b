"""Organisations as they are, end to end through the real client on the local Hub: the
zoo-based organisation of the hub tests with narrower models beside it and a card whose model-index huggingface_hub's
own ``metadata_update`` wrote.

- two specs into one ``--out``: neither overwrites the other's rows, ``hub push`` offers every audited repo, and a
  repo audited under both gets a second pull request with the second spec's annotation only;
- one spec with rules: every repo audited with its own model, refit and published cells in one run;
- published cells read from the card's model-index, refit cells pushed beside them, and the pull request validates;
- failure reasons name the repo and its file, never the temporary download folder.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from helpers.hub_org import build_org, seed
from helpers.real_org import library_endpoint

from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.card import decode_card, parse_card_metadata
from bnconvention.hub.client import make_client
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import RetryPolicy
from bnconvention.hub.validate import validate_hub
from bnconvention.hub_audit.audit import audit_org
from bnconvention.hub_audit.audit_task import relabel_reason
from bnconvention.hub_audit.entries import RepoAudit
from bnconvention.hub_audit.push import markers_in, push_org
from bnconvention.hubserver import LocalHub
from bnconvention.validation.model_index import CODE, REFIT_METRIC_CONFIG

MULTI, RULED = "multi-org", "ruled-org"
OWNER_TOKEN, AUDITOR_TOKEN = "hf_owner_orgs_1", "hf_auditor_orgs_2"
FAST = RetryPolicy(attempts=6, base_delay=0.001, max_delay=0.005)
ZOO_REPOS = ("bn-declared-01", "bn-declared-nocfg-01", "bn-undeclared-01", "bn-declared-sharded-01", "gn-01")
BASE = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}, "cells": ["df", "dr", "dt"],
        "replicates": 2, "refit": {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 64},
        "recoverability": None, "provenance": None, "staleness": False}
WIDE = {**BASE, "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}}}
NARROW = {**BASE, "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 8}},
          "refit": {**BASE["refit"], "pool_size": 48}}
RULES = {**WIDE, "rules": [
    {"name": "narrow by name", "match": {"repo": f"{RULED}/narrow-*"},
     "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 8}}},
    {"name": "narrow by config", "match": {"config": {"family": "narrow"}},
     "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 8}}},
    {"name": "zoo declared", "match": {"config": {"architecture.factory": "zoo/*"}},
     "refit": {**BASE["refit"], "pool_size": 32}},
    {"name": "model-index", "match": {"repo": "*/indexed-*"}, "published_source": "model_index"},
]}


def narrow_weights() -> bytes:
    """A width-8 BatchNorm ConvNet, random initialisation: another architecture than the zoo's width 16."""
    import torch
    from safetensors.torch import save

    from bnconvention.zoo.models import convnet_bn

    torch.manual_seed(8)
    return save({name: t.contiguous() for name, t in convnet_bn(width=8).state_dict().items()})


def publish_model_index(hub: LocalHub, repo_id: str, shipped: dict[str, float]) -> None:
    """The authors' published numbers, written into the card by huggingface_hub's own metadata_update."""
    from huggingface_hub import EvalResult, ModelCardData, metadata_update

    results = [EvalResult(task_type="image-classification", dataset_type="sklearn/digits", dataset_name="Digits",
                          metric_type="accuracy", metric_name=f"{split} accuracy", metric_value=shipped[split])
               for split in ("forget", "retain", "test")]
    index = ModelCardData(model_name=repo_id.split("/")[1], eval_results=results).to_dict()["model-index"]
    with library_endpoint(hub.endpoint):
        metadata_update(repo_id, {"model-index": index}, token=OWNER_TOKEN, overwrite=True)


def seed_org(hub: LocalHub, zoo, org: str) -> None:
    seed(hub, [r for r in build_org(zoo, org) if r.repo_id.split("/")[1] in ZOO_REPOS])
    narrow = narrow_weights()
    hub.store.commit(f"{org}/narrow-01", files={"model.safetensors": narrow}, author="owner")
    hub.store.commit(f"{org}/family-01", files={"model.safetensors": narrow, "config.json": json.dumps(
        {"family": "narrow", "num_classes": 10}).encode()}, author="owner")
    hub.store.commit(f"{org}/indexed-01", files={
        "model.safetensors": zoo.weights_path("bn-relabel-eval").read_bytes(),
        "config.json": zoo.config_path("bn-relabel-eval").read_bytes(),
        "README.md": b"---\nlicense: mit\npipeline_tag: image-classification\n---\n# relabel\n"}, author="owner")
    publish_model_index(hub, f"{org}/indexed-01", zoo.config("bn-relabel-eval")["shipped_accuracy"])


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, zoo):
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={OWNER_TOKEN: "owner", AUDITOR_TOKEN: "auditor"},
                  orgs={MULTI: ["owner"], RULED: ["owner"]}, durable=False) as server:
        for org in (MULTI, RULED):
            seed_org(server, zoo, org)
        yield server


@pytest.fixture(scope="module")
def auditor(hub: LocalHub):
    return make_client(endpoint=hub.endpoint, token=AUDITOR_TOKEN, retry=FAST)


def _sha(spec: dict) -> str:
    return canonical_sha256(parse_spec(spec).model_dump(mode="json"))


def _by_repo(run) -> dict[str, RepoAudit]:
    return {a.repo_id.split("/")[1]: a for a in run.audits}


def _prs(hub: LocalHub, repo_id: str) -> list[dict]:
    return [d for d in hub.store.list_discussions(repo_id) if d.get("pr")]


def _pr_markers(hub: LocalHub, repo_id: str, num: int) -> set[str]:
    details = hub.store.get_discussion(repo_id, num)
    return markers_in(next(e for e in details["events"] if e["type"] == "comment")["data"]["latest"]["raw"])


# --- two specs, one --out ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_specs(hub: LocalHub, auditor, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("two-specs")
    with Journal(out / "journal.sqlite", org=MULTI, endpoint=hub.endpoint) as journal:
        wide = audit_org(auditor, MULTI, parse_spec(WIDE), journal=journal, out=out, plots=False)
        first_push = push_org(auditor, MULTI, journal=journal)
        narrow = audit_org(auditor, MULTI, parse_spec(NARROW), journal=journal, out=out, plots=False)
        second_push = push_org(auditor, MULTI, journal=journal)
        rows = {(e.repo_id.split("/")[1], e.key): e.status for e in journal.entries("audit")}
        yield {"out": out, "wide": wide, "narrow": narrow, "first": first_push, "second": second_push,
               "rows": rows}


@pytest.mark.slow  # the module audits two organisations (about 10 s together)
def test_each_spec_audits_what_fits_it(two_specs) -> None:
    wide, narrow = _by_repo(two_specs["wide"]), _by_repo(two_specs["narrow"])
    assert {r: a.status for r, a in wide.items()} == {
        "bn-declared-01": "audited", "bn-declared-nocfg-01": "audited", "bn-undeclared-01": "audited",
        "bn-declared-sharded-01": "audited", "family-01": "failed", "indexed-01": "audited", "narrow-01": "failed"}
    assert {r: a.status for r, a in narrow.items() if a.status != "skipped"} == {
        "bn-declared-01": "audited", "bn-declared-nocfg-01": "failed", "bn-undeclared-01": "audited",
        "bn-declared-sharded-01": "failed", "family-01": "audited", "indexed-01": "audited", "narrow-01": "audited"}


@pytest.mark.slow  # the module audits two organisations (about 10 s together)
def test_rows_of_the_second_spec_never_overwrite_the_first(two_specs) -> None:
    # Regression: the second spec's failures replaced the first spec's audited rows
    wide, narrow = _sha(WIDE), _sha(NARROW)
    rows = two_specs["rows"]
    assert rows[("bn-declared-nocfg-01", wide)] == "audited" and rows[("bn-declared-nocfg-01", narrow)] == "failed"
    assert rows[("narrow-01", wide)] == "failed" and rows[("narrow-01", narrow)] == "audited"
    folder = two_specs["out"] / "audits" / MULTI / "bn-declared-01" / "model"
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"spec-{wide[:12]}", f"spec-{narrow[:12]}"])
    annotations = {p.read_text() for p in folder.glob("spec-*/annotation.json")}
    assert len(annotations) == 2  # two conventions (pool sizes 64 and 48), both kept


@pytest.mark.slow  # the module audits two organisations (about 10 s together)
def test_push_offers_every_audited_repo_and_proposes_each_annotation_once(two_specs, hub: LocalHub) -> None:
    # Regression: after the second spec, hub push offered only the second spec's repos
    first = {o.repo_id.split("/")[1]: o.status for o in two_specs["first"].outcomes}
    assert first == dict.fromkeys(["bn-declared-01", "bn-declared-nocfg-01", "bn-undeclared-01",
                                   "bn-declared-sharded-01", "indexed-01"], "opened")
    second = {o.repo_id.split("/")[1]: o.status for o in two_specs["second"].outcomes}
    assert second == {"bn-declared-01": "opened", "bn-declared-nocfg-01": "opened", "bn-undeclared-01": "opened",
                      "bn-declared-sharded-01": "opened", "family-01": "opened", "indexed-01": "opened",
                      "narrow-01": "opened"}
    assert two_specs["second"].reused_ids == {f"{MULTI}/bn-declared-nocfg-01",  # nothing new there
                                              f"{MULTI}/bn-declared-sharded-01"}
    repo_id = f"{MULTI}/bn-declared-01"
    wide_sha = _by_repo(two_specs["wide"])["bn-declared-01"].files[0].annotation_sha256
    narrow_sha = _by_repo(two_specs["narrow"])["bn-declared-01"].files[0].annotation_sha256
    assert [_pr_markers(hub, repo_id, pr["num"]) for pr in sorted(_prs(hub, repo_id), key=lambda p: p["num"])] == [
        {wide_sha}, {narrow_sha}]  # the second pull request carries the second spec's annotation only
    assert len(_prs(hub, f"{MULTI}/bn-declared-nocfg-01")) == 1


@pytest.mark.slow  # the module audits two organisations (about 10 s together)
def test_failure_reasons_name_the_repo_and_its_file(two_specs) -> None:
    # Regression: the reason named a temporary download folder ending in 0/repo/model.safetensors
    reason = _by_repo(two_specs["wide"])["narrow-01"].files[0].reason
    assert reason.startswith(f"{MULTI}/narrow-01/model.safetensors: the tensors do not fit the model built by "
                             "factory 'zoo/convnet-bn' (from spec)")
    assert tempfile.gettempdir() not in reason and "bnc-hub-audit" not in reason and "0/repo" not in reason


def test_relabel_names_the_sidecar_and_the_card_as_the_repo_files(tmp_path: Path) -> None:
    folder = tmp_path / "3"
    text = (f"{folder}/repo/sub/model.json: no architecture; {folder}/repo/sub/README.md: bad YAML; "
            f"{folder}/repo/sub/model.safetensors: truncated; {folder}/cache/x")
    assert relabel_reason(text, folder=folder, repo_id="o/m", filename="sub/model.safetensors") == (
        "o/m/config.json: no architecture; o/m/README.md: bad YAML; o/m/sub/model.safetensors: truncated; o/m/cache/x")


# --- one spec with rules -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ruled(hub: LocalHub, auditor, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("ruled")
    with Journal(out / "journal.sqlite", org=RULED, endpoint=hub.endpoint) as journal:
        run = audit_org(auditor, RULED, parse_spec(RULES), journal=journal, out=out, plots=False)
        pushed = push_org(auditor, RULED, journal=journal)
        yield {"run": run, "pushed": pushed}


@pytest.mark.slow  # the module audits two organisations (about 10 s together)
def test_one_spec_with_rules_audits_a_mixed_organisation(ruled) -> None:
    audits = _by_repo(ruled["run"])
    assert {r: a.status for r, a in audits.items() if a.status != "skipped"} == dict.fromkeys(
        ["bn-declared-01", "bn-declared-nocfg-01", "bn-undeclared-01", "bn-declared-sharded-01", "family-01",
         "indexed-01", "narrow-01"], "audited")
    rules = {r: a.files[0].rules for r, a in audits.items() if a.status == "audited"}
    assert rules == {"bn-declared-01": ["zoo declared"], "bn-declared-nocfg-01": [], "bn-declared-sharded-01": [],
                     "bn-undeclared-01": ["zoo declared"], "family-01": ["narrow by config"],
                     "indexed-01": ["zoo declared", "model-index"],
                     "narrow-01": ["narrow by name"]}
    pools = {r: a.files[0].result.annotation.convention.data.record_count for r, a in audits.items()
             if a.status == "audited"}
    assert pools == {"bn-declared-01": 32, "bn-declared-nocfg-01": 64, "bn-declared-sharded-01": 64,
                     "bn-undeclared-01": 32, "family-01": 64,
                     "indexed-01": 32, "narrow-01": 64}


@pytest.mark.slow  # the module audits two organisations (about 10 s together)
def test_published_cells_come_from_the_model_index_huggingface_hub_wrote(ruled, zoo) -> None:
    item = _by_repo(ruled["run"])["indexed-01"].files[0]
    shipped = zoo.config("bn-relabel-eval")["shipped_accuracy"]
    anchoring = item.result.annotation.anchoring
    assert anchoring is not None
    assert {c.metric: c.published for c in anchoring.cells} == {
        "df": shipped["forget"], "dr": shipped["retain"], "dt": shipped["test"]}
    assert item.published_origins is not None and sorted(item.published_origins) == ["df", "dr", "dt"]
    assert item.published_origins["df"]["name"] == "forget accuracy"


@pytest.mark.slow  # the module audits two organisations (about 10 s together)
def test_the_pull_request_shows_refit_beside_published_and_validates(ruled, hub: LocalHub, auditor) -> None:
    from huggingface_hub import ModelCard

    repo_id = f"{RULED}/indexed-01"
    item = _by_repo(ruled["run"])["indexed-01"].files[0]
    num = next(o.pr_num for o in ruled["pushed"].outcomes if o.repo_id == repo_id)
    before = decode_card(hub.store.read_file(repo_id, "README.md"))
    after = decode_card(hub.store.read_file(repo_id, "README.md", revision=f"refs/pr/{num}"))
    index = parse_card_metadata(after)["model-index"]
    assert index[0] == parse_card_metadata(before)["model-index"][0]  # the authors' results, kept
    ours = index[1]["results"]
    assert len(ours) == 1 and ours[0]["dataset"] == index[0]["results"][0]["dataset"]
    convention = item.result.annotation.convention.name
    assert [(m["name"], m["value"]) for m in ours[0]["metrics"]] == [
        (f"{split} accuracy (BatchNorm refit: {convention})", cell.refit)
        for split, cell in zip(("forget", "retain", "test"), item.result.annotation.cells, strict=True)]
    card = ModelCard(after)  # huggingface_hub reads both side by side
    assert {r.metric_config for r in card.data.eval_results} == {REFIT_METRIC_CONFIG, None}
    checked = validate_hub(auditor, repo_id, revision=f"refs/pr/{num}")
    assert checked.exit_code == 0 and [i for i in checked.report.issues if i.code == CODE] == []
