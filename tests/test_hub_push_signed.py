"""A signed annotation's pull request: ``hub push`` adds the ``<file>.sig`` ``bnconvention sign`` wrote
beside the annotation under ``--out`` to the same commit, the description says it is signed, a rerun finds the pull
request, ``bnconvention verify`` of the downloaded annotation and signature passes, and a signature that no longer
covers the annotation is refused, naming the file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bnconvention.cli.main import main
from bnconvention.hubserver import LocalHub

TOKEN = "hf_signed_push_secret_do_not_print_2718"
ORG = "signed-push"
REPO = f"{ORG}/bn0"
SPEC = {
    "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
    "cells": ["df", "dr", "dt"], "replicates": 2,
    "refit": {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 64},
    "recoverability": None, "provenance": None, "published_source": "sidecar",
}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, zoo) -> Iterator[LocalHub]:
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "alice"}, orgs={ORG: ["alice"]},
                  durable=False) as server:
        server.store.commit(REPO, files={
            "model.safetensors": zoo.weights_path("bn-relabel-eval").read_bytes(),
            "config.json": zoo.config_path("bn-relabel-eval").read_bytes(),
            "README.md": b"---\nlicense: mit\n---\n# relabel\n"}, author="alice")
        yield server


@pytest.fixture(scope="module")
def audited(hub: LocalHub, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An --out folder with the audit of REPO (nothing pushed): copy it, never write it."""
    out = tmp_path_factory.mktemp("audited") / "out"
    spec = out.parent / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNC_TEST_HUB_TOKEN", TOKEN)
        assert main(["hub", "audit", ORG, "--endpoint", hub.endpoint, "--token-env", "BNC_TEST_HUB_TOKEN",
                     "--no-progress", "--out", str(out), "--spec", str(spec), "--no-plots"]) == 0
    return out


def _push(hub: LocalHub, out: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> int:
    monkeypatch.setenv("BNC_TEST_HUB_TOKEN", TOKEN)
    return main(["hub", "push", ORG, "--endpoint", hub.endpoint, "--token-env", "BNC_TEST_HUB_TOKEN",
                 "--no-progress", "--retry-delay", "0.001", "--out", str(out), *extra])


def _annotation(out: Path) -> Path:
    (found,) = sorted((out / "audits" / REPO).rglob("annotation.json"))
    return found


def test_a_stale_signature_is_refused_naming_the_file(audited: Path, hub: LocalHub, keys, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    # the signed-push test, if it ran first, left its pull request: this one adds none
    pull_requests = [d for d in hub.store.list_discussions(REPO) if d.get("isPullRequest") or d.get("pr")]
    out = tmp_path / "out"
    shutil.copytree(audited, out)
    annotation = _annotation(out)
    # the same record in other bytes, signed: the signature does not cover the bytes the pull request adds
    annotation.write_text(json.dumps(json.loads(annotation.read_text()), indent=4) + "\n")
    assert main(["sign", str(annotation), "--private-key", str(keys[0])]) == 0
    capsys.readouterr()
    assert _push(hub, out, monkeypatch, "--dry-run", "--format", "json") == 1
    captured = capsys.readouterr()
    assert f"{annotation}.sig no longer matches its annotation (changed since signing); sign it again: " \
           "bnconvention sign annotation.json --private-key KEY.pem" in captured.out
    assert [d for d in hub.store.list_discussions(REPO) if d.get("isPullRequest") or d.get("pr")] == pull_requests


def test_a_signed_annotation_is_pushed_with_its_signature_and_verifies(
        audited: Path, hub: LocalHub, keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from huggingface_hub import hf_hub_download

    from bnconvention.hub.proposals import markers_in

    out = tmp_path / "out"
    shutil.copytree(audited, out)
    annotation = _annotation(out)
    assert main(["sign", str(annotation), "--private-key", str(keys[0])]) == 0
    signature = annotation.with_name("annotation.json.sig")
    again = tmp_path / "again"
    shutil.copytree(out, again)  # a second --out whose journal knows nothing of the push
    assert _push(hub, out, monkeypatch) == 0
    (pr,) = [d for d in hub.store.list_discussions(REPO) if d.get("isPullRequest") or d.get("pr")]
    ref = f"refs/pr/{pr['num']}"
    details = hub.store.get_discussion(REPO, pr["num"])
    description = next(e for e in details["events"] if e["type"] == "comment")["data"]["latest"]["raw"]
    (digest,) = markers_in(description)
    path = f"bnconvention/refit-{digest[:12]}.json"
    assert hub.store.read_file(REPO, f"{path}.sig", revision=ref) == signature.read_bytes()
    assert hub.store.read_file(REPO, path, revision=ref) == annotation.read_bytes()
    assert f"Signed: `{path}.sig`" in description
    assert signature.relative_to(out).as_posix() in description

    # a rerun from another --out finds the pull request instead of opening a second one
    capsys.readouterr()
    assert _push(hub, again, monkeypatch, "--format", "json") == 0
    assert "already carries these annotations" in capsys.readouterr().out
    assert len([d for d in hub.store.list_discussions(REPO) if d.get("isPullRequest") or d.get("pr")]) == 1

    # the downloaded annotation, its signature and the weights verify with the public key
    release = tmp_path / "release"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name, revision in ((path, ref), (f"{path}.sig", ref), ("model.safetensors", "main")):
        hf_hub_download(REPO, name, revision=revision, local_dir=release, endpoint=hub.endpoint, token=TOKEN)
    capsys.readouterr()
    assert main(["verify", str(release / path), "--public-key", str(keys[1])]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{release / path}: verified"
    (release / path).write_text((release / path).read_text().replace('"replicates": 2', '"replicates": 3'))
    assert main(["verify", str(release / path), "--public-key", str(keys[1])]) == 1
    assert str(release / path) in capsys.readouterr().err
