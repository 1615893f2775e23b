"""Bad metadata and bad data in a real organisation: each repo whose ``config.json`` names something
outside the libraries' registries, asks for remote code or passes arguments that are not plain JSON, and each repo
whose data cannot be had (a dataset revision that does not exist, a missing column, a forget-ids file that does not
match its digest) fails alone, with one line naming the repo and its file; the crawl goes on, the other repos are
audited, and nothing the metadata names is imported.

The bad repos are added to a clone of ``helpers.real_org`` by the owner (timm's resnet10t weights under each bad
config), and ``hub audit --redo`` audits only them and one good repo.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import pytest
import yaml
from helpers.real_org import ORG, OWNER, RealOrg, audit_spec

from bnconvention.standard.naming import record_ids_sha256

pytestmark = pytest.mark.slow  # one audit of a handful of real repos (about 15 s on 2 cores)

FORGET_IDS = list(range(0, 80, 2))  # train rows (the hub dataset's ids are row indexes, train rows first)
EVIL_MODULE = "bnc_evil_module_never_imported"


def _configs(timm: dict[str, Any], transformers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """repo name -> the config.json it carries (the weights are timm's resnet10t, or transformers' resnet)."""
    hf_remote = {**transformers, "auto_map": {"AutoModelForImageClassification": f"{EVIL_MODULE}.EvilModel"}}
    return {
        "bad-unregistered": {**timm, "architecture": "resnet10t_from_elsewhere"},
        "bad-hf-hub-name": {**timm, "architecture": "hf-hub:someone/else"},
        "bad-model-type": {**transformers, "model_type": "evil_vision",
                           "architectures": ["EvilVisionForImageClassification"]},
        "bad-remote-code": hf_remote,
        "bad-kwargs": {**timm, "model_args": {**timm.get("model_args", {}),
                                              "act_layer": {"module": EVIL_MODULE, "name": "Act"}}},
        "ids-good": timm, "ids-tampered": timm, "data-bad-revision": timm, "data-bad-column": timm,
    }


def _seed_bad_repos(org: RealOrg) -> None:
    store = org.hub.store
    timm_files = {name: bytes(store.read_file(f"{ORG}/timm-resnet10t", name))
                  for name in ("model.safetensors", "config.json")}
    hf_files = {name: bytes(store.read_file(f"{ORG}/hf-resnet", name))
                for name in ("model.safetensors", "config.json", "preprocessor_config.json")}
    configs = _configs(json.loads(timm_files["config.json"]), json.loads(hf_files["config.json"]))
    for name, config in configs.items():
        files = dict(hf_files if "model_type" in config else timm_files)
        files["config.json"] = json.dumps(config, indent=2).encode()
        if name.startswith("ids-"):
            ids = FORGET_IDS if name == "ids-good" else [*FORGET_IDS[:-1], 1]  # one id swapped
            files["forget.txt"] = ("# forget set\n" + "\n".join(map(str, ids)) + "\n").encode()
        store.commit(f"{ORG}/{name}", files=files, author=OWNER)


def _spec(org: RealOrg) -> dict[str, Any]:
    spec = audit_spec(org)
    dataset = spec["dataset"]
    spec["rules"] = [*spec["rules"],
                     {"name": "ids from the model repo", "match": {"repo": f"{ORG}/ids-*"},
                      "splits": {"forget_index": "forget.txt", "index_files_in": "model_repo",
                                 "forget_ids_sha256": record_ids_sha256(FORGET_IDS)}},
                     {"name": "a revision that does not exist", "match": {"repo": f"{ORG}/data-bad-revision"},
                      "dataset": {**dataset, "revision": "0" * 40}},
                     {"name": "a column that does not exist", "match": {"repo": f"{ORG}/data-bad-column"},
                      "dataset": {**dataset, "image_column": "pixels"}}]
    return copy.deepcopy(spec)


@pytest.fixture(scope="module")
def refusals(real_org: RealOrg, tmp_path_factory: pytest.TempPathFactory):
    from test_real_org_journey import run_cli

    root = tmp_path_factory.mktemp("refusals")
    spec = root / "audit.yaml"
    spec.write_text(yaml.safe_dump(_spec(real_org), sort_keys=False), encoding="utf-8")
    with real_org.clone(root / "hub") as org:
        _seed_bad_repos(org)
        names = [*_configs({}, {}), "timm-resnet10t"]
        redo = [arg for name in names for arg in ("--redo", f"{ORG}/{name}")]
        code, printed = run_cli(org, ["hub", "audit", ORG, "--spec", str(spec), "--out", str(root / "crawl"),
                                      "--no-plots", "--format", "json", *redo], token=org.auditor_token)
        files = {a["repo_id"].split("/")[1]: a["files"] for a in json.loads(printed)["audits"]}
        yield {"code": code, "files": files, "modules": set(sys.modules)}


def _reason(refusals: dict[str, Any], name: str) -> str:
    (item,) = refusals["files"][name]
    assert item["status"] == "failed", item
    reason = str(item["reason"])
    assert "\n" not in reason and "/tmp" not in reason and "bnc-hub-audit-" not in reason, reason
    return reason


@pytest.mark.parametrize(("name", "expected"), [
    ("bad-unregistered", "'resnet10t_from_elsewhere'"),
    ("bad-hf-hub-name", "hf-hub:"),
    ("bad-model-type", "'evil_vision'"),
    ("bad-remote-code", "remote code"),
    ("bad-kwargs", "not plain JSON"),
])
def test_a_config_naming_what_is_not_registered_fails_its_repo_alone(refusals, name: str, expected: str) -> None:
    reason = _reason(refusals, name)
    assert f"{ORG}/{name}/config.json" in reason and expected in reason, reason


@pytest.mark.parametrize(("name", "expected"), [
    ("ids-tampered", f"{ORG}/ids-tampered/forget.txt"),
    ("data-bad-revision", "revision '0000000000"),
    ("data-bad-column", "'pixels'"),
])
def test_data_that_cannot_be_had_fails_its_repo_alone(refusals, name: str, expected: str) -> None:
    assert expected in _reason(refusals, name)


def test_the_crawl_goes_on_and_imports_nothing_the_metadata_names(refusals) -> None:
    assert refusals["code"] == 1  # failures are reported in the exit code
    audited = sorted(name for name, items in refusals["files"].items() if items[0]["status"] == "audited")
    assert audited == ["ids-good", "timm-resnet10t"]
    assert EVIL_MODULE not in refusals["modules"]
    assert not [m for m in refusals["modules"] if "evil" in m]
