"""The auditor's journey on the real organisation (``helpers.real_org``), through the CLI as a user runs it:
``hub audit`` with a spec that names no model and no ``--allow-factory`` (each repo's architecture from its own
``config.json``, the data a ``datasets`` repo on the same Hub, the preprocessing from each repo), then ``hub push``
and ``hub validate`` of every pull request, and timm and transformers loading those pull requests.

The journey runs once per module on a clone of the organisation (it opens pull requests). Replicates and pools are
small: the assertions are about what ran, what it read and what it touched, not about the statistics.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.real_org import ORG, REPOS, RealOrg, RealRepo, audit_spec, read_index

from bnconvention.cli.main import main
from bnconvention.validation.model_index import REFIT_METRIC_CONFIG

pytestmark = pytest.mark.slow  # one journey over nine real BatchNorm releases (about 30 s on 2 cores)

TOKEN_ENV = "BNC_JOURNEY_TOKEN"
AUDITED = sorted(r.name for r in REPOS if r.census.startswith(("undeclared", "declared")))
NOT_AUDITED = sorted(r.name for r in REPOS if r.name not in AUDITED)  # LayerNorm releases, the pickle-only repo
CELL_METRICS = {"df": "forget accuracy", "dr": "retain accuracy", "dt": "test accuracy"}


def run_cli(org: RealOrg, args: list[str], *, token: str) -> tuple[int, str]:
    """``bnconvention ARGS --endpoint ... --token-env ... --no-progress`` as the auditor runs it: exit code and
    stdout."""
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, org.libraries(), contextlib.redirect_stdout(stdout):
        for name, value in org.env(token=token).items():
            patch.setenv(name, value)
        patch.setenv(TOKEN_ENV, token)
        code = main([*args, "--endpoint", org.endpoint, "--token-env", TOKEN_ENV, "--no-progress"])
    return code, stdout.getvalue()


@pytest.fixture(scope="module")
def journey(real_org: RealOrg, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("journey")
    spec = root / "audit.yaml"
    spec.write_text(yaml.safe_dump(audit_spec(real_org), sort_keys=False), encoding="utf-8")
    out = root / "crawl"
    with real_org.clone(root / "hub") as org:
        token = org.auditor_token
        audit = run_cli(org, ["hub", "audit", ORG, "--spec", str(spec), "--out", str(out), "--no-plots",
                              "--format", "json"], token=token)
        push = run_cli(org, ["hub", "push", ORG, "--out", str(out), "--format", "json"], token=token)
        opened = {o["repo_id"].split("/")[1]: o["pr_num"] for o in json.loads(push[1]) if o["status"] == "opened"}
        validated = {name: run_cli(org, ["hub", "validate", f"{ORG}/{name}", "--revision", f"refs/pr/{num}",
                                         "--format", "json"], token=token)
                     for name, num in opened.items()}
        yield {"org": org, "out": out, "audit": audit, "push": push, "opened": opened, "validated": validated}


def _files(journey: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """repo name -> its audited files, as ``hub audit --format json`` prints them."""
    printed = json.loads(journey["audit"][1])
    return {a["repo_id"].split("/")[1]: a["files"] for a in printed["audits"]}


def _result(journey: dict[str, Any], name: str) -> dict[str, Any]:
    folder = journey["out"] / "audits" / ORG / name
    (path,) = folder.glob("*/spec-*/result.json")
    return dict(json.loads(path.read_text()))


# --- hub audit -------------------------------------------------------------------------------------------------------


def test_every_batchnorm_release_is_audited_from_its_own_config(journey) -> None:
    code, _ = journey["audit"]
    files = _files(journey)
    assert code == 0
    assert {name: [f["status"] for f in items] for name, items in files.items() if name in AUDITED} == {
        name: ["audited"] for name in AUDITED}
    for repo in REPOS:
        if repo.name in AUDITED:
            (item,) = files[repo.name]
            prefix = "timm/" if repo.library == "timm" else "transformers/"
            assert item["factory"] == prefix + repo.architecture and item["architecture_source"] == "repo", item


def test_releases_without_running_statistics_are_not_audited(journey) -> None:
    files = _files(journey)
    assert not any(item["status"] == "audited" for name in NOT_AUDITED for item in files.get(name, []))
    assert all(item["status"] != "failed" for items in files.values() for item in items)


def _repo(name: str) -> RealRepo:
    return next(r for r in REPOS if r.name == name)


def _download_checkpoint(org: RealOrg, repo: RealRepo, folder: Path) -> Path:
    """The release's checkpoint (the file, or the index and its shards) as the store holds it on main."""
    names = ["model.safetensors"]
    if repo.layout == "sharded":
        names = ["model.safetensors.index.json", *sorted(set(read_index(org, repo)["weight_map"].values()))]
    for name in names:
        (folder / name).write_bytes(bytes(org.hub.store.read_file(repo.repo_id, name)))
    return folder / names[0]


@pytest.mark.parametrize("name", AUDITED)
def test_each_annotation_binds_to_the_released_bytes(journey, name: str, tmp_path: Path) -> None:
    """θ and φ of the annotation are the digests of the file's own bytes on the Hub (every shard; half precision
    as stored), computed here independently of the audit."""
    from bnconvention.formats.checkpoint_files import open_checkpoint
    from bnconvention.formats.digests import checkpoint_digests

    repo = _repo(name)
    digests = checkpoint_digests(open_checkpoint(_download_checkpoint(journey["org"], repo, tmp_path)))
    subject = _result(journey, name)["annotation"]["subject"]
    assert subject["repo"] == repo.repo_id
    assert (subject["trainable_sha256"], subject["running_sha256"]) == (digests.trainable_sha256,
                                                                        digests.running_sha256)


def test_the_sharded_release_has_the_single_files_digests(journey) -> None:
    """hf-resnet and hf-resnet-sharded are one model pushed twice: digests over all shards are the single file's."""
    single, sharded = (_result(journey, n)["annotation"]["subject"] for n in ("hf-resnet", "hf-resnet-sharded"))
    assert sharded["filename"] == "model.safetensors.index.json"
    assert (sharded["trainable_sha256"], sharded["running_sha256"]) == (single["trainable_sha256"],
                                                                        single["running_sha256"])


def test_the_data_is_the_dataset_repo_at_its_pinned_revision(journey) -> None:
    org = journey["org"]
    for name in AUDITED:
        data = _result(journey, name)["annotation"]["convention"]["data"]
        assert data["dataset"] == {"id": org.dataset.repo_id, "revision": org.dataset.revision}, name


def test_the_preprocessing_is_each_repos_own(journey) -> None:
    for name in AUDITED:
        transform = _result(journey, name)["annotation"]["convention"]["transform"]
        reference = str(transform.get("reference"))
        if _repo(name).library == "transformers":  # the image processor: evaluation preprocessing
            assert transform["mode"] == "eval", (name, transform)
            assert reference.startswith(f"{ORG}/{name}/preprocessor_config.json"), (name, transform)
        else:  # timm's pretrained_cfg, train variant (random resized crop, flip)
            assert transform["mode"] == "train", (name, transform)
            assert reference.startswith(f"{ORG}/{name}/config.json pretrained_cfg"), (name, transform)


# --- hub push, hub validate, the libraries on the pull requests -----------------------------------------------------


def test_push_opens_one_pull_request_per_audited_release(journey) -> None:
    code, _ = journey["push"]
    assert code == 0 and sorted(journey["opened"]) == AUDITED


def _errors(printed: str) -> list[tuple[str, str]]:
    """(code, path) of the errors in ``hub validate --format json`` output."""
    return sorted((i["code"], i["path"]) for i in json.loads(printed) if i["severity"] == "error")


@pytest.mark.parametrize("name", AUDITED)
def test_every_pull_request_validates(journey, name: str) -> None:
    """A pull request adds no error: none at all, but for the re-pushed release, whose card declares the
    weights it replaced (the census's declared_inconsistent): the pull request keeps exactly main's errors."""
    code, printed = journey["validated"][name]
    if _repo(name).census != "declared_inconsistent":
        assert (code, _errors(printed)) == (0, []), printed
        return
    main_code, main_printed = run_cli(journey["org"], ["hub", "validate", f"{ORG}/{name}", "--format", "json"],
                                      token=journey["org"].auditor_token)
    assert code == main_code == 1
    assert _errors(printed) == _errors(main_printed) != []
    assert {c for c, _ in _errors(printed)} == {"digests.layer_mismatch"} or all(
        c.startswith("digests.") for c, _ in _errors(printed)), _errors(printed)


@pytest.mark.parametrize("name", [n for n in AUDITED if _repo(n).library == "timm"][:2])
def test_timm_loads_each_pull_request_with_mains_weights(journey, name: str) -> None:
    import timm
    import torch

    org = journey["org"]
    with org.libraries():
        main_model = timm.create_model(f"hf-hub:{ORG}/{name}", pretrained=True)
        pr_model = timm.create_model(f"hf-hub:{ORG}/{name}@refs/pr/{journey['opened'][name]}", pretrained=True)
    main_state, pr_state = main_model.state_dict(), pr_model.state_dict()
    assert main_state.keys() == pr_state.keys()
    assert all(torch.equal(main_state[k], pr_state[k]) for k in main_state)


@pytest.mark.parametrize("name", [n for n in AUDITED if _repo(n).library == "transformers"])
def test_transformers_loads_each_pull_request_with_mains_weights(journey, name: str) -> None:
    import torch
    from transformers import AutoModelForImageClassification

    org = journey["org"]
    with org.libraries():
        main_model = AutoModelForImageClassification.from_pretrained(f"{ORG}/{name}")
        pr_model = AutoModelForImageClassification.from_pretrained(
            f"{ORG}/{name}", revision=f"refs/pr/{journey['opened'][name]}")
    main_state, pr_state = main_model.state_dict(), pr_model.state_dict()
    assert main_state.keys() == pr_state.keys()
    assert all(torch.equal(main_state[k], pr_state[k]) for k in main_state)


def test_the_pull_requests_put_refit_cells_in_the_cards_model_index(journey) -> None:
    """Shipped and refit side by side in the Hub's eval-results view: the card of each pull request, read by
    huggingface_hub, carries the refit cells as model-index results that name the refit convention, with the
    annotation's values."""
    from huggingface_hub import ModelCard

    org = journey["org"]
    for name in AUDITED:
        revision = f"refs/pr/{journey['opened'][name]}"
        card = ModelCard(bytes(org.hub.store.read_file(f"{ORG}/{name}", "README.md", revision=revision)).decode())
        cells = {c["metric"]: c for c in _result(journey, name)["annotation"]["cells"]}
        ours = [r for r in card.data.eval_results or [] if r.metric_config == REFIT_METRIC_CONFIG]
        by_state = {(r.metric_args["cell"], r.metric_args["state"]): r for r in ours}
        assert sorted(by_state) == sorted((cell, state) for cell in cells for state in ("shipped", "refit")), name
        for cell, metric in CELL_METRICS.items():
            refit, shipped = by_state[(cell, "refit")], by_state[(cell, "shipped")]
            assert refit.metric_name.startswith(metric) and "BatchNorm refit: refit/retain/" in refit.metric_name
            assert (shipped.metric_value, refit.metric_value) == (cells[cell]["shipped"], cells[cell]["refit"])
            assert refit.dataset_type == journey["org"].dataset.repo_id, (name, refit)
