"""``bnconvention hub reproduce ORG/NAME --pr N`` on the local Hub: the annotation ``hub push`` opened a pull request
with is reproduced (exit 0); an edited one is not (exit 1, the cell named); an annotated commit that no longer exists
is named (exit 2), and so is a dataset revision the Hub no longer has (the dataset repo's history super-squashed, as
``HfApi.super_squash_history`` does: the pinned commit answers 404 ``RevisionNotFound``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bnconvention.cli.main import main
from bnconvention.hubserver import LocalHub

ORG = "repro"
REPO = f"{ORG}/bn"
TOKEN = "hf_reproduce_secret_4242"
SPEC = {
    "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
    "cells": ["df", "dr", "dt"], "criteria": ["df <= 0.05"], "replicates": 2,
    "refit": {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 64},
    "recoverability": None, "provenance": None, "published_source": "sidecar",
}


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory, zoo):
    """A BatchNorm repo audited by ``hub audit`` and its annotation pushed by ``hub push`` (pull request #1)."""
    folder = tmp_path_factory.mktemp("hub-reproduce")
    with LocalHub(folder / "hub", tokens={TOKEN: "alice"}, orgs={ORG: ["alice"]}, durable=False) as hub, \
            pytest.MonkeyPatch.context() as patch:
        hub.store.commit(REPO, files={"model.safetensors": zoo.weights_path("bn-relabel-eval").read_bytes(),
                                      "config.json": zoo.config_path("bn-relabel-eval").read_bytes()},
                         author="alice")
        patch.setenv("BNC_TEST_REPRO_TOKEN", TOKEN)
        env = ["--endpoint", hub.endpoint, "--token-env", "BNC_TEST_REPRO_TOKEN", "--no-progress"]
        spec = folder / "spec.yaml"
        spec.write_text(yaml.safe_dump(SPEC))
        out = ["--out", str(folder / "out")]
        assert main(["hub", "audit", ORG, *env, *out, "--spec", str(spec), "--no-plots"]) == 0
        assert main(["hub", "push", ORG, *env, *out]) == 0
        yield {"hub": hub, "env": env, "spec": spec}


def _reproduce(pushed, capsys: pytest.CaptureFixture[str], pr: int) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["hub", "reproduce", REPO, "--pr", str(pr), "--spec", str(pushed["spec"]), *pushed["env"]])
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
    return code, captured.out, captured.err


def _annotation(hub: LocalHub, pr: int = 1) -> tuple[str, dict]:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=TOKEN)
    (path,) = [p for p in api.list_repo_files(REPO, revision=f"refs/pr/{pr}") if p.startswith("bnconvention/refit-")]
    return path, json.loads(Path(api.hf_hub_download(REPO, path, revision=f"refs/pr/{pr}")).read_text())


def _open_pr(hub: LocalHub, path: str, annotation: dict) -> int:
    """A pull request adding ``annotation`` at ``path``, as someone who edited the pushed one would open it."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=hub.endpoint, token=TOKEN)
    info = api.create_commit(REPO, operations=[CommitOperationAdd(path, json.dumps(annotation).encode())],
                             commit_message="an edited annotation", create_pr=True)
    return int(info.pr_num)


def test_an_annotation_is_reproduced_from_its_pull_request(pushed, capsys) -> None:
    code, out, err = _reproduce(pushed, capsys, 1)
    assert (code, err) == (0, ""), err
    path, annotation = _annotation(pushed["hub"])
    lines = out.splitlines()
    assert lines[0] == f"{REPO}@refs/pr/1:{path}: {REPO}/model.safetensors@{annotation['subject']['revision']}"
    assert lines[-1].startswith("reproduced: 3 cells and 1 verdicts within ± 0.01")


def test_an_edited_replicate_value_is_not_reproduced(pushed, capsys) -> None:
    path, annotation = _annotation(pushed["hub"])
    cell = next(c for c in annotation["cells"] if c["metric"] == "dt")
    cell["replicate_values"][1] = cell["replicate_values"][1] - 0.1
    pr = _open_pr(pushed["hub"], path.replace("refit-", "refit-edited-"), annotation)
    code, out, _ = _reproduce(pushed, capsys, pr)
    assert code == 1
    assert out.splitlines()[-1] == "not reproduced: dt differs"


def test_an_annotated_commit_that_no_longer_exists_is_named(pushed, capsys) -> None:
    path, annotation = _annotation(pushed["hub"])
    annotation["subject"]["revision"] = "0" * 40
    pr = _open_pr(pushed["hub"], path.replace("refit-", "refit-gone-"), annotation)
    code, out, err = _reproduce(pushed, capsys, pr)
    assert (code, out) == (2, "")
    assert err.startswith(f"bnconvention: cannot reproduce: the annotated weights {REPO}@{'0' * 40} are "
                          "unavailable: ")


def test_a_pull_request_that_does_not_exist_is_named(pushed, capsys) -> None:
    code, _, err = _reproduce(pushed, capsys, 99)
    assert code == 2 and err.startswith(f"bnconvention: cannot reproduce: pull request #99 of {REPO} cannot be read")


DATA = f"{ORG}/digits"
DATA_REPO = f"{ORG}/bn-data"


def _digits_parquet(folder: Path) -> None:
    """A few hundred of the digits (16x16 grayscale PNGs, ``datasets``' own parquet), train and test splits."""
    import datasets
    import numpy as np
    from PIL import Image

    from bnconvention.data.digits import digits_arrays

    arrays = digits_arrays()
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=[str(i) for i in
                                                                                              range(10)]),
                                  "rid": datasets.Value("int64")})
    (folder / "data").mkdir(parents=True)
    for split, rows in (("train", ~arrays.is_test[:480]), ("test", arrays.is_test[:480])):
        index = np.flatnonzero(rows)
        images = [Image.fromarray((arrays.x[i, 0] * 255).round().astype(np.uint8), mode="L") for i in index]
        columns = {"img": images, "label": arrays.y[index].tolist(), "rid": arrays.ids[index].tolist()}
        shard = folder / "data" / f"{split}-00000-of-00001.parquet"
        datasets.Dataset.from_dict(columns, features=features).to_parquet(str(shard))


@pytest.fixture(scope="module")
def pushed_with_data(tmp_path_factory: pytest.TempPathFactory, zoo):
    """``pushed``, its pool a ``datasets`` dataset repo on the same Hub read at the commit its upload made."""
    from helpers.real_org import library_endpoint
    from huggingface_hub import HfApi

    folder = tmp_path_factory.mktemp("hub-reproduce-data")
    with LocalHub(folder / "hub", tokens={TOKEN: "alice"}, orgs={ORG: ["alice"]}, durable=False) as hub, \
            pytest.MonkeyPatch.context() as patch, library_endpoint(hub.endpoint):
        hub.store.commit(DATA_REPO, files={"model.safetensors": zoo.weights_path("bn-relabel-eval").read_bytes(),
                                           "config.json": zoo.config_path("bn-relabel-eval").read_bytes()},
                         author="alice")
        _digits_parquet(folder / "dataset")
        api = HfApi(endpoint=hub.endpoint, token=TOKEN)
        api.create_repo(DATA, repo_type="dataset")
        sha = api.upload_folder(folder_path=str(folder / "dataset"), repo_id=DATA, repo_type="dataset").oid
        patch.setenv("BNC_TEST_REPRO_TOKEN", TOKEN)
        env = ["--endpoint", hub.endpoint, "--token-env", "BNC_TEST_REPRO_TOKEN", "--no-progress"]
        spec = folder / "spec.yaml"
        spec.write_text(yaml.safe_dump({**SPEC, "dataset": {
            "kind": "hub", "repo": DATA, "revision": sha, "image_column": "img", "label_column": "label",
            "id_column": "rid", "channels": 1}}))
        out = ["--out", str(folder / "out")]
        assert main(["hub", "audit", ORG, *env, *out, "--spec", str(spec), "--no-plots"]) == 0
        assert main(["hub", "push", ORG, *env, *out]) == 0
        yield {"hub": hub, "env": env, "spec": spec, "sha": sha}


def test_a_dataset_revision_that_no_longer_exists_is_named(pushed_with_data, capsys) -> None:
    hub, sha = pushed_with_data["hub"], pushed_with_data["sha"]
    reproduce = ["hub", "reproduce", DATA_REPO, "--pr", "1", "--spec", str(pushed_with_data["spec"]),
                 *pushed_with_data["env"]]
    capsys.readouterr()
    assert main(reproduce) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("reproduced: 3 cells")

    head = hub.store.super_squash(DATA, repo_type="dataset")  # the dataset repo's history rewritten
    assert head != sha and hub.store.resolve(DATA, repo_type="dataset").commit.id == head
    code = main(reproduce)
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, ""), captured.err
    assert TOKEN not in captured.err
    (line,) = captured.err.splitlines()
    assert line.startswith(f"bnconvention: cannot reproduce: the annotated dataset {DATA}@{sha} is unavailable: ")
    assert "HTTP 404" in line and "Revision Not Found" in line, line
