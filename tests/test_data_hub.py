"""A dataset repo on the (local) Hub read by ``datasets`` at a pinned revision, honouring ``HF_ENDPOINT``.

``datasets`` reads ``HF_ENDPOINT`` once, when it is imported, so the reads run in a fresh interpreter started with
``HF_ENDPOINT`` pointing at a :class:`~bnconvention.hubserver.LocalHub` started here: exactly how a user points the
library at another Hub. The repo holds parquet shards written by ``datasets``' own ``to_parquet`` and an index file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bnconvention.hubserver import LocalHub
from bnconvention.standard.naming import record_ids_sha256

datasets = pytest.importorskip("datasets")

TOKEN = "hub-data-token"
REPO = "alice/tiny-images"
FORGET_IDS = [100, 104]

# Every case runs in one child process (one import of torch and datasets); each prints one JSON line.
CHILD = r'''
import json, sys
from bnconvention.audit.measure.data import load_audit_data
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.data.pools import load_dataset

args = json.loads(sys.argv[1])
base = {"kind": "hub", "repo": args["repo"], "image_column": "img", "label_column": "fine", "id_column": "rid"}

def attempt(name, make):
    try:
        out = make()
    except Exception as exc:
        out = {"error": type(exc).__name__, "message": str(exc), "field": getattr(exc, "field", None)}
    print(json.dumps({"case": name, **out}), flush=True)

def loaded(**changes):
    d = load_dataset({**base, **changes}, endpoint=args.get("endpoint"))
    return {"ids": d.ids.tolist(), "is_test": d.is_test.tolist(), "classes": list(d.classes), "id": d.dataset_id,
            "revision": d.revision, "hub_repo": d.hub_repo, "x": d.x.flatten().tolist()[:64]}

def audit(**splits):
    spec = parse_spec({"spec_version": "1.0", "kind": "audit_spec", "recoverability": None,
                       "dataset": {**base, "revision": args["sha"]},
                       "splits": {"index_files_in": "dataset_repo", **splits}})
    data = load_audit_data(spec)
    return {"forget": data.forget.ids.tolist(), "revision": data.dataset_revision}

attempt("pinned", lambda: loaded(revision=args["sha"]))
attempt("branch", lambda: loaded(revision="main"))
attempt("bad-revision", lambda: loaded(revision="0" * 40))
attempt("missing-column", lambda: loaded(revision=args["sha"], image_column="image"))
attempt("missing-split", lambda: loaded(revision=args["sha"], test_split="validation"))
attempt("missing-repo", lambda: loaded(repo="alice/nothing-here", revision="main"))
attempt("ids-bound", lambda: audit(forget_index="splits/forget.txt", forget_ids_sha256=args["digest"]))
attempt("ids-mismatch", lambda: audit(forget_index="splits/forget.txt", forget_ids_sha256="0" * 64))
attempt("ids-missing", lambda: audit(forget_index="splits/absent.txt", forget_ids_sha256=args["digest"]))
'''


def _split(n: int, *, seed: int, first_id: int) -> datasets.Dataset:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (n, 6, 6, 3), dtype=np.uint8)
    features = datasets.Features({"img": datasets.Image(), "fine": datasets.ClassLabel(names=["a", "b", "c"]),
                                  "rid": datasets.Value("int64")})
    return datasets.Dataset.from_dict({"img": [Image.fromarray(p) for p in pixels], "fine": [i % 3 for i in range(n)],
                                       "rid": list(range(first_id, first_id + n))}, features=features)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A dataset repo with parquet shards (two for train) and an index file; yields (hub, commit sha, folder)."""
    from huggingface_hub import HfApi

    folder = tmp_path_factory.mktemp("dataset-repo")
    (folder / "data").mkdir()
    (folder / "splits").mkdir()
    train = _split(8, seed=1, first_id=100)
    train.shard(2, 0, contiguous=True).to_parquet(str(folder / "data" / "train-00000-of-00002.parquet"))
    train.shard(2, 1, contiguous=True).to_parquet(str(folder / "data" / "train-00001-of-00002.parquet"))
    _split(3, seed=2, first_id=900).to_parquet(str(folder / "data" / "test-00000-of-00001.parquet"))
    (folder / "splits" / "forget.txt").write_text("".join(f"{i}\n" for i in FORGET_IDS))
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "alice"}, durable=False) as hub:
        api = HfApi(endpoint=hub.endpoint, token=TOKEN)
        api.create_repo(REPO, repo_type="dataset")
        commit = api.upload_folder(folder_path=str(folder), repo_id=REPO, repo_type="dataset")
        yield hub, commit.oid, folder


def _run_child(hub: LocalHub, sha: str, tmp_path: Path, *, endpoint: str | None = None) -> dict[str, dict]:
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN, "HF_HOME": str(tmp_path / "hf-home"),
           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    args = {"repo": REPO, "sha": sha, "digest": record_ids_sha256(FORGET_IDS), "endpoint": endpoint}
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return {row["case"]: row for row in map(json.loads, run.stdout.splitlines())}


@pytest.mark.slow
def test_a_dataset_repo_is_read_by_datasets_from_hf_endpoint(published, tmp_path) -> None:
    from bnconvention.data.pools import load_dataset

    hub, sha, folder = published
    cases = _run_child(hub, sha, tmp_path, endpoint=hub.endpoint)

    pinned = cases["pinned"]
    assert "error" not in pinned, pinned
    assert pinned["ids"] == list(range(100, 108)) + [900, 901, 902]
    assert pinned["is_test"] == [False] * 8 + [True] * 3
    assert (pinned["classes"], pinned["id"], pinned["revision"], pinned["hub_repo"]) == (["a", "b", "c"], REPO, sha,
                                                                                        REPO)
    # the same pixels as the repo's files read locally
    local = load_dataset({"kind": "parquet", "path": folder, "image_column": "img", "label_column": "fine"})
    assert np.allclose(pinned["x"], local.x.flatten()[:64].tolist(), rtol=0, atol=0)
    # a branch is resolved to the commit it points at, which the annotation records
    assert cases["branch"]["revision"] == sha

    bad = cases["bad-revision"]
    assert (bad["error"], bad["message"]) == ("UntrustedInputError", f"dataset {REPO}: revision '{'0' * 40}' does "
                                              f"not exist on {hub.endpoint}; pin a commit sha or tag of the dataset "
                                              "repo")
    assert cases["missing-column"]["error"] == "UsageError"
    assert f"dataset {REPO}@{sha} split 'train' has no column 'image'" in cases["missing-column"]["message"]
    assert cases["missing-split"]["message"] == (f"dataset {REPO}@{sha} has no split 'validation'; its splits are "
                                                 "['test', 'train']; set test_split to one of them (or test_split: "
                                                 "null)")
    assert cases["missing-repo"]["error"] == "UntrustedInputError"
    for row in cases.values():
        assert "\n" not in row.get("message", ""), row

    assert cases["ids-bound"] == {"case": "ids-bound", "forget": FORGET_IDS, "revision": sha}
    mismatch = cases["ids-mismatch"]
    assert (mismatch["error"], mismatch["field"]) == ("AuditSpecError", "/splits/forget_ids_sha256")
    assert mismatch["message"].startswith(f"index file: {REPO}/splits/forget.txt: its 2 record ids hash to")
    missing = cases["ids-missing"]
    assert (missing["error"], missing["field"]) == ("AuditSpecError", "/splits/forget_index")
