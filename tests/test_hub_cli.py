"""``bnconvention hub ...`` and ``hub_scripts/``: the whole flow on a small organisation (census, audit, push,
validate), publish end to end, exit codes, output formats, and a token that never shows up anywhere."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml

from bnconvention.cli.main import main
from bnconvention.hubserver import LocalHub
from bnconvention.safetensors_header import read_header

ORG = "tiny"
TOKEN = "hf_cli_secret_do_not_print_3141"
OTHER_TOKEN = "hf_bad_secret_never_valid_2718"
SPEC = {
    "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
    "cells": ["df", "dr", "dt"], "replicates": 2,
    "refit": {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 64},
    "recoverability": None, "provenance": None, "published_source": "sidecar",
}



@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, zoo):
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "alice"}, orgs={ORG: ["alice"]},
                  durable=False) as server:
        store = server.store
        store.commit(f"{ORG}/bn", files={"model.safetensors": zoo.weights_path("bn-relabel-eval").read_bytes(),
                                         "config.json": zoo.config_path("bn-relabel-eval").read_bytes(),
                                         "README.md": b"---\nlicense: mit\n---\n# relabel\n"}, author="alice")
        store.commit(f"{ORG}/gn", files={"model.safetensors": zoo.weights_path("gn-base").read_bytes()},
                     author="alice")
        store.commit(f"{ORG}/empty", files={"README.md": b"# nothing\n"}, author="alice")
        yield server


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, hub: LocalHub):
    monkeypatch.setenv("BNC_TEST_HUB_TOKEN", TOKEN)
    return ["--endpoint", hub.endpoint, "--token-env", "BNC_TEST_HUB_TOKEN", "--no-progress", "--retry-delay",
            "0.001"]


def _no_token_anywhere(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, *folders: Path,
                       token: str = TOKEN) -> str:
    out, err = capsys.readouterr()
    assert token not in out and token not in err
    assert all(token not in record.getMessage() for record in caplog.records)
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                assert token.encode() not in path.read_bytes(), path
    return out


def test_census_audit_push_validate_through_the_cli(env: list[str], tmp_path: Path, hub: LocalHub,
                                                    capsys: pytest.CaptureFixture[str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    out = tmp_path / "hub-tiny"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))

    assert main(["hub", "census", ORG, *env, "--out", str(out)]) == 0
    text = _no_token_anywhere(capsys, caplog, out)
    assert "census of tiny: 3 model repos" in text and "3 repos read, 0 reused from the journal" in text
    census = json.loads((out / "census.json").read_text())
    assert {r["repo_id"]: r["status"] for r in census["repos"]} == {
        "tiny/bn": "undeclared", "tiny/empty": "no_weights", "tiny/gn": "channel_absent"}
    assert (out / "census.md").read_text().startswith("# BatchNorm census of `tiny`")

    assert main(["hub", "census", ORG, *env, "--out", str(out), "--format", "json"]) == 0
    printed = json.loads(_no_token_anywhere(capsys, caplog, out))
    assert printed["run"] == {"read": 0, "reused": 3, "failed": 0, "seconds": printed["run"]["seconds"]}

    assert main(["hub", "audit", ORG, *env, "--out", str(out), "--spec", str(spec), "--no-plots"]) == 0
    text = _no_token_anywhere(capsys, caplog, out)
    assert text.startswith("tiny/bn model.safetensors: audited: deployed state as shipped; refit on the retained")
    assert (out / "audits" / "tiny" / "bn" / "model" / "annotation.json").is_file()
    assert main(["hub", "audit", ORG, *env, "--out", str(out), "--spec", str(spec), "--format", "json"]) == 0
    printed = json.loads(_no_token_anywhere(capsys, caplog, out))
    assert [(a["repo_id"], a["status"], a["files"][0]["filename"]) for a in printed["audits"]] == [
        ("tiny/bn", "audited", "model.safetensors")]
    assert "result" not in printed["audits"][0]["files"][0] and printed["summary"]["counts"]["checkpoints"] == 1

    assert main(["hub", "push", ORG, *env, "--out", str(out), "--dry-run"]) == 0
    text = _no_token_anywhere(capsys, caplog, out)
    assert "tiny/bn: would open a pull request on" in text and "tiny/bn: dry-run: not pushed (--dry-run)" in text
    assert hub.store.list_discussions("tiny/bn") == []

    assert main(["hub", "push", ORG, *env, "--out", str(out)]) == 0
    text = _no_token_anywhere(capsys, caplog, out)
    assert "tiny/bn: opened #1" in text
    assert main(["hub", "push", ORG, *env, "--out", str(out), "--format", "json"]) == 0
    outcomes = json.loads(_no_token_anywhere(capsys, caplog, out))
    assert [(o["repo_id"], o["status"], o["pr_num"]) for o in outcomes] == [("tiny/bn", "opened", 1)]

    assert main(["hub", "validate", "tiny/bn", *env, "--revision", "refs/pr/1", "--format", "json"]) == 0
    issues = json.loads(_no_token_anywhere(capsys, caplog))
    assert [i["code"] for i in issues] == ["declaration.missing"]
    assert main(["hub", "validate", ORG, *env, "--format", "github"]) == 0
    text = _no_token_anywhere(capsys, caplog)
    assert text.startswith("::warning file=tiny/bn/model.safetensors,title=declaration.missing::")
    assert main(["hub", "validate", ORG, *env, "--require-declaration"]) == 1
    assert "FAIL  tiny/bn/model.safetensors" in _no_token_anywhere(capsys, caplog)


def test_a_refused_token_is_reported_without_showing_it(tmp_path: Path, hub: LocalHub, monkeypatch,
                                                        capsys: pytest.CaptureFixture[str],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("BNC_BAD_TOKEN", OTHER_TOKEN)
    code = main(["hub", "push", ORG, "--endpoint", hub.endpoint, "--token-env", "BNC_BAD_TOKEN", "--no-progress",
                 "--retry-delay", "0.001", "--out", str(tmp_path / "out")])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("bnconvention: error: HTTP 401")
    _no_token_anywhere(capsys, caplog, tmp_path, token=OTHER_TOKEN)
    assert OTHER_TOKEN not in err


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["hub", "validate", ORG, "--revision", "refs/pr/1"], "names a revision of one repo",
                 id="revision-needs-a-repo"),
    pytest.param(["hub", "census", "not/an-org"], "is not an organisation or user name", id="bad-org"),
    pytest.param(["hub", "audit", ORG, "--spec", "missing.yaml"], "does not exist", id="missing-spec"),
    pytest.param(["hub", "audit", ORG, "--spec", "x.yaml", "--workers", "0"], "--workers must be a positive",
                 id="no-workers"),
    pytest.param(["hub", "census", ORG, "--retries", "0"], "--retries must be at least 1", id="no-retries"),
])
def test_usage_errors_exit_2(argv: list[str], message: str, hub: LocalHub, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--endpoint", hub.endpoint]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("script", ["census", "audit", "push", "validate", "publish"])
def test_hub_scripts_are_thin_entry_points(script: str, repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"hub_script_{script}", repo_root / "hub_scripts" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as caught:
        module.main(["--help"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: bnconvention hub {script} ")


def test_library_never_imports_hub_scripts(repo_root: Path) -> None:
    import ast

    for path in (repo_root / "bnconvention").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(name.split(".")[0] == "hub_scripts" for name in names), path


# --- publish --------------------------------------------------------------------------------------------------------


@pytest.fixture
def release(tmp_path: Path, zoo) -> tuple[Path, Path]:
    """A release folder (unstamped weights, a card without a block) and the declaration to publish."""
    from bnconvention.declaration import declare
    from bnconvention.standard.models import FittingConvention, to_dict

    folder = tmp_path / "release"
    folder.mkdir()
    shutil.copyfile(zoo.weights_path("bn-badteacher-eval"), folder / "model.safetensors")
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# Bad teacher\n\nUnlearned with BadTeacher.\n")
    convention = FittingConvention.model_validate(zoo.config("bn-badteacher-eval")["convention"])
    record = tmp_path / "record.json"
    record.write_text(json.dumps(to_dict(declare(zoo.load_model("bn-badteacher-eval"), convention))))
    return folder, record


def test_publish_end_to_end_then_validated_on_the_server(release: tuple[Path, Path], env: list[str], hub: LocalHub,
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    folder, record = release
    assert main(["hub", "publish", str(folder), "--repo", f"{ORG}/published", "--record", str(record), *env]) == 0
    out = _no_token_anywhere(capsys, caplog)
    assert "model.safetensors: frozen/train/train-transform/ema-m0.1" in out
    assert "stamped: model.safetensors, README.md" in out
    assert "server-side validation of tiny/published: passes" in out
    weights = tmp_path / "served.safetensors"
    weights.write_bytes(hub.store.read_file(f"{ORG}/published", "model.safetensors"))
    assert "bnconvention.record" in read_header(weights).metadata
    card = hub.store.read_file(f"{ORG}/published", "README.md").decode()
    assert "bnconvention:" in card and "Unlearned with BadTeacher." in card

    assert main(["hub", "validate", f"{ORG}/published", *env, "--require-declaration", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []

    # the same release again, as a pull request: nothing to stamp, the pull request revision validates
    assert main(["hub", "publish", str(folder), "--repo", f"{ORG}/published", "--create-pr", *env,
                 "--commit-message", "republish"]) == 0
    out = capsys.readouterr().out
    assert "stamped: nothing (already stamped)" in out and "passes" in out


def test_publish_refuses_a_release_that_does_not_validate(tmp_path: Path, env: list[str], hub: LocalHub,
                                                          capsys: pytest.CaptureFixture[str], zoo) -> None:
    folder = tmp_path / "undeclared"
    folder.mkdir()
    shutil.copyfile(zoo.weights_path("bn-ga-train"), folder / "model.safetensors")
    assert main(["hub", "publish", str(folder), "--repo", f"{ORG}/never", *env]) == 1
    assert "no declaration" in capsys.readouterr().err
    assert not hub.store.repo_exists(f"{ORG}/never")
