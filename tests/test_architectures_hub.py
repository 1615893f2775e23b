"""``hub audit`` of an organisation of timm and transformers releases: each repo's architecture
from its own config.json, the spec naming no model and no --allow-factory; refused configs fail their repo with one
line naming the repo and file, and the crawl goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from architectures_support import timm_release, transformers_resnet

from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.hub.client import make_client
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import RetryPolicy
from bnconvention.hub_audit.audit import audit_org
from bnconvention.hubserver import LocalHub

ORG = "lib-org"
OWNER, AUDITOR = "hf_owner_secret_5c6d", "hf_auditor_secret_7e8f"
SPEC = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]}, "cells": ["df", "dr", "dt"],
        "replicates": 2, "refit": {"pool_size": 64, "batch_size": 32}, "recoverability": None, "provenance": None}


def _files(folder: Path, **config_changes: object) -> dict[str, bytes]:
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    if config_changes:
        config = {**json.loads(files["config.json"]), **config_changes}
        files["config.json"] = json.dumps(config).encode()
    return {**files, "README.md": b"---\nlicense: mit\n---\n# A release\n"}


@pytest.mark.slow
def test_hub_audit_of_timm_and_transformers_releases_needs_no_user_code(tmp_path: Path) -> None:
    # the digits pool is grey 16x16: one-channel models, saved by timm's and transformers' own code
    timm_release(tmp_path / "timm", "resnet10t", num_classes=10, in_chans=1)
    transformers_resnet(tmp_path / "tr", num_labels=10, num_channels=1)
    repos = {
        "timm-resnet10t": _files(tmp_path / "timm"),
        "tr-resnet": _files(tmp_path / "tr"),
        "timm-hub-name": _files(tmp_path / "timm", architecture="hf-hub:someone/else"),
        "tr-remote-code": _files(tmp_path / "tr", auto_map={"AutoModelForImageClassification": "net.Net"}),
    }
    with LocalHub(tmp_path / "hub", tokens={OWNER: "owner", AUDITOR: "auditor"}, orgs={ORG: ["owner"]},
                  durable=False) as hub:
        for name, files in repos.items():
            hub.store.commit(f"{ORG}/{name}", files=files, author="owner")
        client = make_client(endpoint=hub.endpoint, token=AUDITOR,
                             retry=RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.005))
        journal = Journal(tmp_path / "journal.sqlite", org=ORG, endpoint=hub.endpoint)
        try:
            run = audit_org(client, ORG, parse_spec(SPEC), journal=journal, out=tmp_path / "out", plots=False)
        finally:
            journal.close()
    audits = {a.repo_id.split("/")[1]: a for a in run.audits}
    assert {name: a.status for name, a in audits.items()} == {
        "timm-resnet10t": "audited", "tr-resnet": "audited", "timm-hub-name": "failed", "tr-remote-code": "failed"}
    assert [(f.factory, f.architecture_source) for f in audits["timm-resnet10t"].files] == [
        ("timm/resnet10t", "repo")]
    assert [(f.factory, f.architecture_source) for f in audits["tr-resnet"].files] == [
        ("transformers/ResNetForImageClassification", "repo")]
    assert audits["timm-hub-name"].reason == (
        f"model.safetensors: {ORG}/timm-hub-name/config.json: the timm architecture 'hf-hub:someone/else' is not a "
        "plain timm model name (source prefixes such as 'hf-hub:' and paths are never followed); name a model of "
        "timm's registry")
    assert audits["tr-remote-code"].reason.startswith(
        f"model.safetensors: {ORG}/tr-remote-code/config.json: /auto_map asks for remote code")
