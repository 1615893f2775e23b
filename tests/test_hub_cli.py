"""``bnconvention hub ...`` and ``hub_scripts/``: the whole flow on a small organisation (census, audit, push,
validate), publish end to end, exit codes, output formats, and a token that never shows up anywhere."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from bnconvention.cli.main import main
from bnconvention.formats.safetensors_header import read_header
from bnconvention.hubserver import FaultRule, LocalHub

ORG = "tiny"
# the publish test's releases: an organisation of their own, so the census of ORG reads the same repos whichever
# test ran first
PUBLISH_ORG = "tiny-releases"
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
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "alice"},
                  orgs={ORG: ["alice"], PUBLISH_ORG: ["alice"]}, durable=False) as server:
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
    census = json.loads((out / "org-census.json").read_text())
    assert {r["repo_id"]: r["status"] for r in census["repos"]} == {
        "tiny/bn": "undeclared", "tiny/empty": "no_weights", "tiny/gn": "channel_absent"}
    assert (out / "org-census.md").read_text().startswith("# BatchNorm census of `tiny`")

    assert main(["hub", "census", ORG, *env, "--out", str(out), "--format", "json"]) == 0
    printed = json.loads(_no_token_anywhere(capsys, caplog, out))
    assert printed["run"] == {"read": 0, "reused": 3, "failed": 0, "seconds": printed["run"]["seconds"]}

    assert main(["hub", "audit", ORG, *env, "--out", str(out), "--spec", str(spec), "--no-plots"]) == 0
    text = _no_token_anywhere(capsys, caplog, out)
    assert text.startswith("tiny/bn model.safetensors: audited: deployed state as shipped; refit on the retained")
    assert len(list((out / "audits" / "tiny" / "bn" / "model").glob("spec-*/annotation.json"))) == 1
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
    pytest.param(["hub", "audit", ORG, "--spec", "x.yaml", "--workers", "2", "--ray-address", "auto"],
                 "--ray-address needs --executor ray", id="ray-address-needs-ray"),
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
    from bnconvention.authoring.declaration import declare
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
    assert main(["hub", "publish", str(folder), "--repo", f"{PUBLISH_ORG}/published", "--record", str(record),
                 *env]) == 0
    out = _no_token_anywhere(capsys, caplog)
    assert "model.safetensors: frozen/train/train-transform/ema-m0.1" in out
    assert "stamped: model.safetensors, README.md" in out
    assert f"server-side validation of {PUBLISH_ORG}/published: passes" in out
    weights = tmp_path / "served.safetensors"
    weights.write_bytes(hub.store.read_file(f"{PUBLISH_ORG}/published", "model.safetensors"))
    assert "bnconvention.record" in read_header(weights).metadata
    card = hub.store.read_file(f"{PUBLISH_ORG}/published", "README.md").decode()
    assert "bnconvention:" in card and "Unlearned with BadTeacher." in card

    assert main(["hub", "validate", f"{PUBLISH_ORG}/published", *env, "--require-declaration", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []

    # the same release again, as a pull request: nothing to stamp, the pull request revision validates
    assert main(["hub", "publish", str(folder), "--repo", f"{PUBLISH_ORG}/published", "--create-pr", *env,
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


# --- failures of the Hub, in one line -----------------------------------------------------------------------------


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _hub_argv(command: str, tmp_path: Path, release: tuple[Path, Path]) -> list[str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    folder, record = release
    return {
        "census": ["hub", "census", ORG, "--out", str(tmp_path / "out")],
        "audit": ["hub", "audit", ORG, "--spec", str(spec), "--out", str(tmp_path / "out")],
        "push": ["hub", "push", ORG, "--out", str(tmp_path / "out")],
        "validate-org": ["hub", "validate", ORG],
        "validate-repo": ["hub", "validate", f"{ORG}/bn"],
        "publish": ["hub", "publish", str(folder), "--repo", f"{ORG}/never-published", "--record", str(record)],
    }[command]


@pytest.mark.parametrize("failure", ["unreachable", "drop"])
@pytest.mark.parametrize("command", ["census", "audit", "push", "validate-org", "validate-repo", "publish"])
def test_every_hub_command_reports_a_network_failure_in_one_line(
        command: str, failure: str, hub: LocalHub, tmp_path: Path, release: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: httpx2 transport errors are not OSErrors, so they ended in a 90-line traceback
    monkeypatch.setenv("BNC_TEST_HUB_TOKEN", TOKEN)
    endpoint = hub.endpoint if failure == "drop" else f"http://127.0.0.1:{_closed_port()}"
    rule = hub.faults.add(FaultRule(kind="drop")) if failure == "drop" else None
    try:
        code = main([*_hub_argv(command, tmp_path, release), "--endpoint", endpoint, "--token-env",
                     "BNC_TEST_HUB_TOKEN", "--no-progress", "--retries", "2", "--retry-delay", "0.001"])
    finally:
        if rule is not None:
            hub.faults.remove(rule)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    phrase = "dropped the connection" if failure == "drop" else "could not be reached"
    assert last.startswith(f"bnconvention: network error: the Hub at {endpoint} {phrase} ("), last
    assert TOKEN not in err


def test_an_organisation_without_models_is_an_error(env: list[str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: "0 model repos, 0 bytes read" and exit 0
    assert main(["hub", "census", "no-such-org", *env, "--out", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"bnconvention: error: no-such-org has no model repos at {env[1]}: no such user or organisation, or none "
        "of its models is visible to this token (check the name and --token-env)"]
    assert captured.out == "" and not (tmp_path / "out" / "org-census.json").exists()
    assert main(["hub", "validate", "no-such-org", *env]) == 1


def test_retries_are_said_on_stderr(env: list[str], hub: LocalHub, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: retries went to a logger without a handler, so a slow census said nothing
    rule = hub.faults.add(FaultRule(kind="status", status=503, retry_after=0, path="^/api/models$", count=2))
    try:
        assert main(["hub", "census", ORG, *env, "--out", str(tmp_path / "out")]) == 0
    finally:
        hub.faults.remove(rule)
    retried = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bnconvention: retrying")]
    assert retried == [f"bnconvention: retrying list models of {ORG} (page 1) after HTTP 503: injected fault: HTTP "
                       f"503 (retry {n} of 4, in 0.00 s)" for n in (1, 2)]


def test_a_trickled_header_is_bounded_by_the_request_timeout(env: list[str], hub: LocalHub, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: --timeout bounded the gaps between bytes only; a header range trickled at 2 bytes/s
    # kept a census busy for 15 s on 30 bytes
    import time

    rule = hub.faults.add(FaultRule(kind="trickle", rate_bps=20.0, path=f"^/{ORG}/bn/resolve/"))
    started = time.monotonic()
    try:
        code = main(["hub", "census", ORG, *env, "--out", str(tmp_path / "out"), "--timeout", "0.5",
                     "--retries", "2"])
    finally:
        hub.faults.remove(rule)
    elapsed = time.monotonic() - started
    captured = capsys.readouterr()
    assert code == 1
    assert "1 failed; rerun to retry them" in captured.out
    failed = [line for line in captured.err.splitlines() if line.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith(f"failed: {ORG}/bn: the Hub failed while reading it: ")
    assert "no complete response within the 0.5 s request time bound (--timeout)" in failed[0]
    assert elapsed < 60  # two tries of 0.5 s plus the other repos; 4,096 bytes at 20 B/s would take 205 s


def _census_json(out: Path) -> dict:
    return json.loads((out / "org-census.json").read_text(encoding="utf-8"))


def test_an_endless_listing_stops_at_once_and_says_so(env: list[str], hub: LocalHub, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: a listing whose rel="next" never ends was followed forever;: then
    # for 1,000 pages (the default --max-pages) before the census stopped, with nothing reported
    rule = hub.faults.add(FaultRule(kind="endless", path="^/api/models$"))
    hub.reset_stats()
    try:
        code = main(["hub", "census", ORG, *env, "--out", str(tmp_path / "out")])
    finally:
        hub.faults.remove(rule)
    captured = capsys.readouterr()
    stopped = (f"the model listing of {ORG} at {hub.endpoint} loops: page 2 lists no model not already listed (its "
               "next link repeats the listing)")
    assert code == 1
    assert len([r for r in hub.stats if r.path == "/api/models"]) == 2  # noticed on the first repeated page
    assert captured.err.strip().splitlines()[-1] == f"bnconvention: {stopped}"
    census = _census_json(tmp_path / "out")
    listed = census["repos_total"]  # every repo of the org: each page repeats the first
    assert f"incomplete: {stopped}; the census covers the {listed} repos listed before it stopped" in captured.out
    assert census["listing"] == {"complete": False, "pages": 2, "repos": listed, "stopped": stopped}
    assert "**Incomplete**: the model listing" in (tmp_path / "out" / "org-census.md").read_text(encoding="utf-8")


def test_a_listing_stops_at_its_page_budget_and_says_so(env: list[str], hub: LocalHub, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # the budget is said in the census report, never a silent truncation
    monkeypatch.setattr(hub.context, "page_size", 1)
    hub.reset_stats()
    code = main(["hub", "census", ORG, *env, "--out", str(tmp_path / "out"), "--max-pages", "2"])
    captured = capsys.readouterr()
    stopped = (f"the model listing of {ORG} at {hub.endpoint} stopped at the page budget: 2 pages read (--max-pages "
               "2), 2 models listed, and the server sent a next page; raise --max-pages for a larger organisation")
    assert code == 1
    assert len([r for r in hub.stats if r.path == "/api/models"]) == 2
    assert captured.err.strip().splitlines()[-1] == f"bnconvention: {stopped}"
    assert _census_json(tmp_path / "out")["listing"] == {"complete": False, "pages": 2, "repos": 2,
                                                          "stopped": stopped}
    assert _census_json(tmp_path / "out")["repos_total"] == 2
    # the whole listing within its budget is complete, and says nothing
    assert main(["hub", "census", ORG, *env, "--out", str(tmp_path / "all"), "--max-pages", "50"]) == 0
    assert "listing" not in _census_json(tmp_path / "all") and "incomplete" not in capsys.readouterr().out


def test_a_listing_stops_at_its_repo_budget_and_says_so(env: list[str], hub: LocalHub, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hub", "census", ORG, *env, "--out", str(tmp_path / "out"), "--max-repos", "2"])
    captured = capsys.readouterr()
    stopped = (f"the model listing of {ORG} at {hub.endpoint} stopped at the repo budget: 2 models listed "
               "(--max-repos 2) in 1 page, and the listing holds more; raise --max-repos for a larger organisation")
    assert code == 1
    assert captured.err.strip().splitlines()[-1] == f"bnconvention: {stopped}"
    census = _census_json(tmp_path / "out")
    assert census["listing"]["stopped"] == stopped and census["repos_total"] == 2
    assert main(["hub", "census", ORG, *env, "--out", str(tmp_path / "o2"), "--max-repos", "0"]) == 2
    assert "--max-repos must be at least 1, got 0" in capsys.readouterr().err


def test_hub_audit_says_the_listing_stopped(env: list[str], hub: LocalHub, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], repo_root: Path) -> None:
    rule = hub.faults.add(FaultRule(kind="endless", path="^/api/models$"))
    try:
        code = main(["hub", "audit", ORG, *env, "--out", str(tmp_path / "out"), "--spec",
                     str(repo_root / "examples" / "audit" / "digits-zoo.yaml"), "--replicates", "2", "--max-repos",
                     "1"])
    finally:
        hub.faults.remove(rule)
    assert code == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"bnconvention: the model listing of {ORG} at {hub.endpoint} stopped at the repo budget: 1 model listed "
        "(--max-repos 1) in 1 page, and the listing holds more; raise --max-repos for a larger organisation; audited "
        "the repos listed before it stopped")


def _fake_listing(monkeypatch: pytest.MonkeyPatch, client, pages: dict[str, tuple[list[str], str | None]]) -> None:
    def get_json(self, url, params=None):  # type: ignore[no-untyped-def]
        from urllib.parse import parse_qs, urlsplit

        names, following = pages[parse_qs(urlsplit(url).query).get("cursor", [""])[0]]
        return ([{"id": f"{ORG}/{name}", "sha": "a" * 40} for name in names],
                {} if following is None else {"next": {"url": following}})
    monkeypatch.setattr(type(client), "get_json", get_json)


def test_a_listing_that_loops_is_refused(hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    from bnconvention.errors import HubError
    from bnconvention.hub.client import make_client
    from bnconvention.hub.crawl import list_org_models

    client = make_client(endpoint=hub.endpoint)
    base = f"{hub.endpoint}/api/models?cursor="
    _fake_listing(monkeypatch, client, {"": (["a"], base + "1"), "1": (["b"], base + "2"), "2": (["c"], base + "1")})
    with pytest.raises(HubError, match="loops: page 4 links back to a page already read"):
        list_org_models(client, ORG)


def test_a_next_link_repeating_a_cursor_stops_the_listing(hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    # a fresh URL around a cursor already read (another parameter changed) is the same page
    from bnconvention.hub.client import make_client
    from bnconvention.hub.crawl import ListingEnd, iter_org_models

    client = make_client(endpoint=hub.endpoint)
    base = f"{hub.endpoint}/api/models?cursor="
    _fake_listing(monkeypatch, client, {"": (["a"], base + "1"), "1": (["b"], base + "1&page=2")})
    end = ListingEnd()
    assert [r.repo_id for r in iter_org_models(client, ORG, end=end)] == [f"{ORG}/a", f"{ORG}/b"]
    assert end.section().model_dump() == {"complete": False, "pages": 2, "repos": 2, "stopped": (
        f"the model listing of {ORG} at {hub.endpoint} loops: page 3 repeats the cursor '1' of a page already read")}


# --- summaries count outcomes by kind; reruns retry failures ------------------------------------------------------


def test_hub_subcommand_help_states_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("census", "audit", "push", "validate"):
        with pytest.raises(SystemExit):
            main(["hub", command, "--help"])
        assert "exit codes: 0 " in " ".join(capsys.readouterr().out.split()), command


def _commit_bn_repo(hub: LocalHub, zoo, repo_id: str, *, factory: str | None = None) -> None:
    config = json.loads(zoo.config_path("bn-relabel-eval").read_bytes())
    if factory is not None:
        config["architecture"]["factory"] = factory
    hub.store.commit(repo_id, files={"model.safetensors": zoo.weights_path("bn-relabel-eval").read_bytes(),
                                     "config.json": json.dumps(config).encode()}, author="alice")


def test_failed_audits_are_retried_and_redo_selects(env: list[str], hub: LocalHub, tmp_path: Path, zoo,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: a failure was journaled as final, so after fixing its cause (--allow-factory) the
    # rerun printed the old failure and "0 repos audited, 5 reused from the journal"
    from bnconvention.architectures import factories

    monkeypatch.setattr(factories, "_user_allowed", {})  # --allow-factory is per process: undo it afterwards
    org, target = "retry-org", "bnconvention.zoo.models:convnet_bn"
    _commit_bn_repo(hub, zoo, f"{org}/custom", factory=target)  # a factory of its own: needs --allow-factory
    _commit_bn_repo(hub, zoo, f"{org}/plain")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    argv = ["hub", "audit", org, *env, "--out", str(tmp_path / "out"), "--spec", str(spec), "--no-plots"]

    def run(*extra: str) -> tuple[int, str, str]:
        code = main([*argv, *extra])
        captured = capsys.readouterr()
        return code, captured.out.strip().splitlines()[-1], captured.err

    code, summary, err = run()
    assert code == 1 and summary.startswith("2 BatchNorm repos: 1 audited, 1 failed; outputs in")
    assert "1 audit failed: rerun to retry (after fixing the cause); --redo-failed retries only those" in err
    code, summary, _ = run("--allow-factory", target)
    assert code == 0 and summary.startswith("2 BatchNorm repos: 1 audited; 1 reused from the journal (1 audited)")
    code, summary, _ = run()
    assert code == 0 and summary.startswith("2 BatchNorm repos: 2 reused from the journal (2 audited); outputs")
    code, summary, _ = run("--redo", f"{org}/plain")
    assert code == 0 and summary.startswith("2 BatchNorm repos: 1 audited; 1 reused from the journal (1 audited)")
    _commit_bn_repo(hub, zoo, f"{org}/late")
    code, summary, _ = run("--redo-failed")  # nothing failed last time; the new repo is not selected
    assert code == 0 and summary.startswith(
        "3 BatchNorm repos: 2 reused from the journal (2 audited); 1 left for a later run; outputs in")
    assert main([*argv, "--redo", f"{org}/nothing-here"]) == 2
    assert "--redo retry-org/nothing-here: not a BatchNorm repo of the census of retry-org" in capsys.readouterr().err


def test_push_summary_counts_outcomes_by_kind(env: list[str], hub: LocalHub, tmp_path: Path, zoo,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: a second push printed "opened #1" above "0 pull requests opened"
    org = "summary-org"
    _commit_bn_repo(hub, zoo, f"{org}/one")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = ["--out", str(tmp_path / "out")]
    assert main(["hub", "audit", org, *env, *out, "--spec", str(spec), "--no-plots"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("1 BatchNorm repo: 1 audited; outputs in")
    assert main(["hub", "push", org, *env, *out]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [f"{org}/one: opened #1", "1 repo: 1 pull request opened"]
    assert main(["hub", "push", org, *env, *out]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        f"{org}/one: opened #1 (by an earlier run, per the journal)",
        "1 repo: 1 reused from the journal (1 pull request opened)"]


def test_validate_has_one_rule_for_a_repo_with_nothing_to_validate(env: list[str], hub: LocalHub, zoo,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: "hub validate ORG" skipped a pickle-only repo and exited 0 while
    # "hub validate ORG/that-repo" exited 2
    org = "rules-org"
    hub.store.commit(f"{org}/pickle", files={"pytorch_model.bin": b"\x80\x04N."}, author="alice")
    hub.store.commit(f"{org}/gn", files={"model.safetensors": zoo.weights_path("gn-base").read_bytes()},
                     author="alice")
    reports = {}
    for target in (org, f"{org}/pickle"):
        assert main(["hub", "validate", target, *env, "--format", "json"]) == 2, target
        reports[target] = [(i["file"], i["code"]) for i in json.loads(capsys.readouterr().out)]
    assert reports[org] == reports[f"{org}/pickle"] == [(f"{org}/pickle", "input.nothing_to_validate")]


def test_validate_and_census_never_build_card_data_from_a_large_card(hub: LocalHub, zoo, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: model_info built ModelCardData from the card, whose tag de-duplication
    # (huggingface_hub.repocard_data._to_unique_list) is quadratic: 350,000 tags (a legal 3.4 MB card) stalled
    # hub validate. Deterministic: the quadratic function must not be called at all.
    import huggingface_hub.repocard_data

    from bnconvention.hub.client import make_client
    from bnconvention.hub.crawl import census_entries, census_org
    from bnconvention.hub.journal import Journal
    from bnconvention.hub.retry import RetryPolicy
    from bnconvention.hub.validate import validate_hub

    org = "cards-org"
    card = "---\nlicense: mit\ntags:\n" + "".join(f"- tag-{i}\n" for i in range(5000)) + "---\n# many tags\n"
    hub.store.commit(f"{org}/big", files={"README.md": card.encode(), "model.safetensors":
                                          zoo.weights_path("gn-base").read_bytes()}, author="alice")

    def quadratic(tags):  # noqa: ANN001, ANN202 - the signature of the replaced function
        raise AssertionError("ModelCardData was built from the card (quadratic in its tags)")

    monkeypatch.setattr(huggingface_hub.repocard_data, "_to_unique_list", quadratic)
    client = make_client(endpoint=hub.endpoint, retry=RetryPolicy(attempts=2, base_delay=0.001))
    for target in (org, f"{org}/big"):
        result = validate_hub(client, target)
        assert (result.exit_code, result.report.issues) == (0, []), result.report.issues
        assert [repo for repo, _ in result.checked] == [f"{org}/big"]
    with Journal(tmp_path / "journal.sqlite", org=org, endpoint=hub.endpoint) as journal:
        census_org(client, org, journal=journal)
        census = list(census_entries(journal))
    assert [(r.repo_id, r.status, r.card) for r in census] == [(f"{org}/big", "channel_absent", "no_block")]


def test_push_passes_over_foreign_files_under_bnconvention_one_rule(env: list[str], hub: LocalHub, tmp_path: Path,
                                                                     zoo, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: a 50 MB file under bnconvention/ on main failed the repo's push on every rerun,
    # while a malformed one was skipped. The bound is lowered here so the oversized file stays small.
    from bnconvention.hub import proposals

    monkeypatch.setattr(proposals, "MAX_ANNOTATION_BYTES", 1000)
    org = "foreign-org"
    _commit_bn_repo(hub, zoo, f"{org}/m")
    hub.store.commit(f"{org}/m", files={"bnconvention/huge.json": b'{"x": "' + b"y" * 5000 + b'"}',
                                        "bnconvention/broken.json": b"{not json"}, author="alice")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = ["--out", str(tmp_path / "out")]
    assert main(["hub", "audit", org, *env, *out, "--spec", str(spec), "--no-plots"]) == 0
    capsys.readouterr()
    assert main(["hub", "push", org, *env, *out]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [f"{org}/m: opened #1", "1 repo: 1 pull request opened"]


# --- the one skeleton of the journaled commands (census, audit, push), on its own ----------------------------------


def _hub_args(tmp_path: Path, command: str, *extra: str):
    import argparse

    from bnconvention.cli import hub_cmd

    parser = argparse.ArgumentParser()
    hub_cmd.register(parser.add_subparsers())
    return parser.parse_args(["hub", command, *extra, "--endpoint", "http://127.0.0.1:9", "--out",
                              str(tmp_path / "out"), "--no-progress"])


def test_run_journaled_checks_prepares_works_with_the_journal_open_then_reports(tmp_path: Path) -> None:
    from bnconvention.cli.hub_cmd import _run_journaled

    calls: list[str] = []

    def work(args, prepared, client, journal, out):
        calls.append(f"work {prepared} {out.name}")
        journal.record("census", f"{ORG}/x", revision="c", status="read", payload={})
        return journal

    def report(args, journal, client, out):
        calls.append("report")
        with pytest.raises(Exception, match="closed"):  # the journal is closed before the report
            journal.get("census", f"{ORG}/x")
        return 7

    args = _hub_args(tmp_path, "census", ORG)
    assert _run_journaled(args, prepare=lambda a: calls.append("prepare") or "opts", work=work, report=report) == 7
    assert calls == ["prepare", "work opts out", "report"]
    assert (tmp_path / "out" / "journal.sqlite").is_file()


def test_run_journaled_refuses_a_bad_org_before_the_options_and_bad_options_before_the_client(
        tmp_path: Path) -> None:
    from bnconvention.cli.hub_cmd import _run_journaled
    from bnconvention.errors import UsageError

    def refuse(args):
        raise UsageError("options refused")

    def never(*args):
        raise AssertionError("must not run")

    with pytest.raises(UsageError, match="is not an organisation"):
        _run_journaled(_hub_args(tmp_path, "census", "a/b"), prepare=refuse, work=never, report=never)
    bad_retries = _hub_args(tmp_path, "census", ORG, "--retries", "0")
    with pytest.raises(UsageError, match="options refused"):
        _run_journaled(bad_retries, prepare=refuse, work=never, report=never)
    with pytest.raises(UsageError, match="--retries must be at least 1"):
        _run_journaled(bad_retries, prepare=lambda a: None, work=never, report=never)
    assert not (tmp_path / "out").exists()  # nothing opened, nothing written


def test_run_journaled_turns_a_hub_failure_into_one_scrubbed_error(tmp_path: Path, monkeypatch) -> None:
    from bnconvention.cli.hub_cmd import _run_journaled
    from bnconvention.errors import HubError

    monkeypatch.setenv("BNC_TEST_HUB_TOKEN", TOKEN)
    args = _hub_args(tmp_path, "push", ORG, "--token-env", "BNC_TEST_HUB_TOKEN")

    def work(args, prepared, client, journal, out):
        raise OSError(f"403 Forbidden for token {TOKEN}")

    with pytest.raises(HubError) as caught:
        _run_journaled(args, prepare=lambda a: None, work=work, report=lambda *a: 0)
    assert TOKEN not in str(caught.value) and "403 Forbidden" in str(caught.value)


# --- long commands speak when redirected ----------------------------------------------------------------------------


def test_hub_audit_redirected_says_each_repo_as_it_finishes(hub: LocalHub, zoo, tmp_path: Path) -> None:
    # Regression: with its output going to a file, hub audit printed nothing until the very end
    org, names = "log-org", ("alpha", "beta", "gamma")
    for name in names:
        _commit_bn_repo(hub, zoo, f"{org}/{name}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    stdout_path = tmp_path / "stdout.txt"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_XET": "1", "BNC_TEST_HUB_TOKEN": TOKEN}
    command = [sys.executable, "-m", "bnconvention", "hub", "audit", org, "--endpoint", hub.endpoint, "--token-env",
               "BNC_TEST_HUB_TOKEN", "--retry-delay", "0.001", "--out", str(tmp_path / "out"), "--spec", str(spec),
               "--no-plots"]
    heard: list[tuple[str, bool, int]] = []  # (stderr line, process still running, stdout bytes so far) on arrival
    with stdout_path.open("w") as stdout:  # both streams redirected: stdout to a file, stderr to a pipe
        process = subprocess.Popen(command, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)

        def listen() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                heard.append((line.rstrip("\n"), process.poll() is None, stdout_path.stat().st_size))

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        try:
            assert process.wait(timeout=300) == 0, "\n".join(line for line, _, _ in heard)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        listener.join(timeout=30)
    repo_line = re.compile(rf"^\[hub audit\] ({org}/\w+): audited \(1 file\), after \d+ s$")
    finished = [(m.group(1), alive, size) for line, alive, size in heard if (m := repo_line.match(line))]
    assert sorted(repo for repo, _, _ in finished) == [f"{org}/{name}" for name in names], heard
    first, alive, size = finished[0]
    assert alive and size == 0, heard  # said while the others were still being audited, long before the report
    assert heard[0][0] == f"[hub audit] {org}: census (reusing the journal), then each BatchNorm repo's audit"
    report = stdout_path.read_text().splitlines()
    assert report[-1].startswith("3 BatchNorm repos: 3 audited; outputs in")
    assert [line.split()[0] for line in report[:-1]] == sorted(repo for repo, _, _ in finished)


def test_hub_audit_stage_lines_follow_the_progress_flag(env: list[str], hub: LocalHub, zoo, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The rule the demo's stage lines follow: on any stream unless --no-progress; a rerun names the repos it reuses."""
    org = "lines-org"
    _commit_bn_repo(hub, zoo, f"{org}/one")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    argv = ["hub", "audit", org, *[a for a in env if a != "--no-progress"], "--out", str(tmp_path / "out"),
            "--spec", str(spec), "--no-plots"]
    assert main(argv) == 0
    first = capsys.readouterr().err.splitlines()
    assert len(first) == 2 and re.fullmatch(rf"\[hub audit\] {org}/one: audited \(1 file\), after \d+ s", first[1])
    assert main(argv) == 0
    assert capsys.readouterr().err.splitlines()[1:] == [
        f"[hub audit] {org}/one: audited (1 file), reused from the journal"]
    assert main([*argv, "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
