"""One writer per output ("lost or duplicated work"): ``hub census|audit|push`` lock ``--out`` and the
journal, a second run refuses in one line naming the first, a killed holder's lock is taken over and said, a census
reports every repo it listed whoever shares its journal, and a pull request is opened at most once per annotation
when two pushes run at once. The concurrency tests start the two runs as two real processes against the local Hub.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bnconvention.cli.main import main
from bnconvention.errors import OutputInUseError
from bnconvention.hub.journal import Journal
from bnconvention.hub.locking import HOLDER_SUFFIX, LOCK_NAME, Holder, output_lock, repo_lock
from bnconvention.hubserver import FaultRule, LocalHub

TOKEN = "hf_lock_secret_do_not_print_1618"
CENSUS_ORG, PUSH_ORG = "lock-census", "lock-push"
CENSUS_REPOS = [f"{CENSUS_ORG}/m{i}" for i in range(6)]
PUSH_REPOS = [f"{PUSH_ORG}/bn{i}" for i in range(2)]
SPEC = {
    "spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
    "cells": ["df", "dr", "dt"], "replicates": 2,
    "refit": {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 64},
    "recoverability": None, "provenance": None, "published_source": "sidecar",
}
SINCE = r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, zoo) -> Iterator[LocalHub]:
    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "alice"},
                  orgs={CENSUS_ORG: ["alice"], PUSH_ORG: ["alice"]}, durable=False) as server:
        for repo_id in CENSUS_REPOS:
            server.store.commit(repo_id, files={"model.safetensors": zoo.weights_path("gn-base").read_bytes()},
                                author="alice")
        for repo_id in PUSH_REPOS:
            server.store.commit(repo_id, files={
                "model.safetensors": zoo.weights_path("bn-relabel-eval").read_bytes(),
                "config.json": zoo.config_path("bn-relabel-eval").read_bytes(),
                "README.md": b"---\nlicense: mit\n---\n# relabel\n"}, author="alice")
        yield server


@pytest.fixture(scope="module")
def audited(hub: LocalHub, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An --out folder whose journal holds the audits of PUSH_ORG (nothing pushed yet): copy it, never write it."""
    out = tmp_path_factory.mktemp("audited") / "out"
    spec = out.parent / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNC_TEST_HUB_TOKEN", TOKEN)
        assert main(["hub", "audit", PUSH_ORG, "--endpoint", hub.endpoint, "--token-env", "BNC_TEST_HUB_TOKEN",
                     "--no-progress", "--out", str(out), "--spec", str(spec), "--no-plots"]) == 0
    return out


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1", "BNC_TEST_HUB_TOKEN": TOKEN}


def _start(hub: LocalHub, tmp_path: Path, command: str, org: str, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "bnconvention", "hub", command, org, "--endpoint", hub.endpoint, "--token-env",
            "BNC_TEST_HUB_TOKEN", "--retry-delay", "0.001", "--no-progress", *extra]
    return subprocess.Popen(argv, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


def _wait_until_holding(process: subprocess.Popen[str], lock: Path, timeout: float = 120) -> Holder:
    """The holder ``process`` wrote beside ``lock`` once it took it (fails if it ended first)."""
    holder_path = lock.with_name(lock.name + HOLDER_SUFFIX)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = Holder.parse(holder_path.read_bytes()) if holder_path.is_file() else None
        if holder is not None and holder.pid == process.pid:
            return holder
        if process.poll() is not None:
            code, out, err = _finish(process)
            pytest.fail(f"the first run ended (exit {code}) before it was seen holding {lock}:\n{out}\n{err}")
        time.sleep(0.02)
    pytest.fail(f"the first run did not take {lock} within {timeout} s")


def _refusal(what: str, pid: int, command: str, fix: str) -> re.Pattern[str]:
    return re.compile(rf"bnconvention: output in use: {re.escape(what)} is being written by another run: pid {pid} "
                      rf"on {re.escape(socket.gethostname())} \({re.escape(command)}\), {SINCE}; "
                      rf"{re.escape(fix)}")


def _census_repos(out: Path) -> list[str]:
    return sorted(r["repo_id"] for r in json.loads((out / "org-census.json").read_text())["repos"])


@pytest.fixture
def slow_census(hub: LocalHub) -> Iterator[FaultRule]:
    """Every header read of CENSUS_ORG waits at a gate the test opens (``rule.gate.set()``) once it has seen what it
    waits for: the first census is still running however slow the machine is."""
    rule = hub.faults.add(FaultRule(kind="gate", path=f"^/{CENSUS_ORG}/"))
    try:
        yield rule
    finally:
        rule.gate.set()
        hub.faults.remove(rule)


# --- the lock on its own ------------------------------------------------------------------------------------------


def test_a_second_holder_is_refused_naming_the_first_then_the_lock_is_free(tmp_path: Path) -> None:
    out, journal = tmp_path / "out", tmp_path / "elsewhere" / "journal.sqlite"
    with output_lock(out, journal, command="bnconvention hub census lab"):
        holder = Holder.parse((out / (LOCK_NAME + HOLDER_SUFFIX)).read_bytes())
        assert holder is not None and (holder.pid, holder.command) == (os.getpid(), "bnconvention hub census lab")
        assert (journal.parent / ("journal.sqlite.lock" + HOLDER_SUFFIX)).is_file()
        with pytest.raises(OutputInUseError) as caught, \
                output_lock(tmp_path / "other-out", journal, command="bnconvention hub push lab"):
            pytest.fail("two holders")
        assert _refusal(f"the journal {journal}", os.getpid(), "bnconvention hub census lab",
                        "wait for it to end, or pass another --journal").fullmatch(
            f"bnconvention: output in use: {caught.value}")
        assert caught.value.holder == {"pid": os.getpid(), "host": socket.gethostname(),
                                       "command": "bnconvention hub census lab", "since": holder.since}
        assert not (tmp_path / "other-out" / (LOCK_NAME + HOLDER_SUFFIX)).exists()  # the refused run kept nothing
    assert not (out / (LOCK_NAME + HOLDER_SUFFIX)).exists()  # a clean release: nothing to recover
    heard: list[str] = []
    with output_lock(out, journal, command="again", on_recovered=heard.append):
        pass
    assert heard == []


def test_a_killed_holders_lock_is_taken_over_and_said(tmp_path: Path) -> None:
    out, journal = tmp_path / "out", tmp_path / "out" / "journal.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from bnconvention.hub.locking import output_lock\n"
         "with output_lock(Path(sys.argv[1]), Path(sys.argv[2]), command='bnconvention hub audit lab'):\n"
         "    print('held', flush=True)\n    time.sleep(600)\n", str(out), str(journal)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(OutputInUseError, match=rf"pid {holder.pid} on .* \(bnconvention hub audit lab\)"), \
                output_lock(out, journal, command="second"):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    heard: list[str] = []
    with output_lock(out, journal, command="third", on_recovered=heard.append):
        now = Holder.parse((out / (LOCK_NAME + HOLDER_SUFFIX)).read_bytes())
        assert now is not None and now.pid == os.getpid()
    assert len(heard) == 2 and all(
        re.search(rf": took over the lock of pid {holder.pid} on .* \(bnconvention hub audit lab\), {SINCE}, which "
                  "ended without releasing it", line) for line in heard), heard
    assert heard[0].startswith(f"the output folder {out}: ") and heard[1].startswith(f"the journal {journal}: ")


def test_a_repo_lock_waits_for_the_holder_then_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf-home"))
    with repo_lock("http://hub", "lab/a"):
        with pytest.raises(OutputInUseError, match=rf"the pull requests of lab/a is being written by another run: "
                                                   rf"pid {os.getpid()} .*; rerun to retry"), \
                repo_lock("http://hub/", "lab/a", wait_s=0.2):
            pass
        with repo_lock("http://hub", "lab/b", wait_s=0):  # another repo: its own lock
            pass


# --- the journal: a census lists for itself ----------------------------------------------------------------------


def test_a_census_reads_back_every_repo_it_listed_whoever_shares_the_journal(tmp_path: Path) -> None:
    # Regression: each census cleared the journal's one shared listing when it started, so a run that
    # started while another was listing made the other report 29 of 30 repos
    path = tmp_path / "j.sqlite"
    with Journal(path, org="lab", endpoint="http://hub") as first, \
            Journal(path, org="lab", endpoint="http://hub") as second:
        for name in "abcd":
            first.record("census", f"lab/{name}", revision="r", status="no_weights", payload={})
        first.start_listing()
        assert [first.add_listed(f"lab/{name}") for name in "ab"] == [True, True]
        second.start_listing()
        assert [second.add_listed(f"lab/{name}") for name in "cba"] == [True, True, True]
        assert [first.add_listed(f"lab/{name}") for name in "cd"] == [True, True]  # not taken by the other run
        assert [e.repo_id for e in first.listed_entries("census", page=3)] == ["lab/a", "lab/b", "lab/c", "lab/d"]
        assert [e.repo_id for e in second.listed_entries("census")] == ["lab/a", "lab/b", "lab/c"]
        first.finish_listing()
        second.finish_listing()
    with Journal(path, org="lab", endpoint="http://hub") as later:  # no listing of its own: the last one finished
        assert [e.repo_id for e in later.listed_entries("census")] == ["lab/a", "lab/b", "lab/c"]


# --- two real runs at once ---------------------------------------------------------------------------------------


def test_a_second_census_on_one_out_is_refused_naming_the_first(hub: LocalHub, tmp_path: Path,
                                                                slow_census: FaultRule) -> None:
    out = tmp_path / "out"
    first = _start(hub, tmp_path, "census", CENSUS_ORG, "--out", str(out))
    holder = _wait_until_holding(first, out / LOCK_NAME)
    code, stdout, stderr = _finish(_start(hub, tmp_path, "census", CENSUS_ORG, "--out", str(out)))
    assert first.poll() is None, "the first census ended before the second was refused"
    slow_census.gate.set()
    assert (code, stdout) == (1, "")
    assert len(stderr.splitlines()) == 1 and _refusal(
        f"the output folder {out}", holder.pid, f"bnconvention hub census {CENSUS_ORG}",
        "wait for it to end, or pass another --out").fullmatch(stderr.strip()), stderr
    code, stdout, stderr = _finish(first)
    assert code == 0, stderr
    assert f"{len(CENSUS_REPOS)} repos read" in stdout and _census_repos(out) == CENSUS_REPOS


def test_a_census_sharing_the_journal_is_refused_and_the_first_reports_every_repo(hub: LocalHub, tmp_path: Path,
                                                                                  slow_census: FaultRule) -> None:
    # Regression: two censuses sharing a journal; the first exited 0 reporting 29 of 30 repos
    journal = tmp_path / "shared" / "journal.sqlite"
    first = _start(hub, tmp_path, "census", CENSUS_ORG, "--out", str(tmp_path / "a"), "--journal", str(journal))
    holder = _wait_until_holding(first, journal.with_name("journal.sqlite.lock"))
    code, _, stderr = _finish(_start(hub, tmp_path, "census", CENSUS_ORG, "--out", str(tmp_path / "b"),
                                     "--journal", str(journal)))
    assert first.poll() is None, "the first census ended before the second was refused"
    slow_census.gate.set()
    assert code == 1 and _refusal(f"the journal {journal}", holder.pid, f"bnconvention hub census {CENSUS_ORG}",
                                  "wait for it to end, or pass another --journal").fullmatch(stderr.strip()), stderr
    code, stdout, stderr = _finish(first)
    assert code == 0, stderr
    assert f"census of {CENSUS_ORG}: {len(CENSUS_REPOS)} model repos" in stdout
    assert _census_repos(tmp_path / "a") == CENSUS_REPOS and not (tmp_path / "b" / "org-census.json").exists()


def test_a_killed_census_lock_is_taken_over_by_the_next_run(hub: LocalHub, tmp_path: Path,
                                                            slow_census: FaultRule) -> None:
    out = tmp_path / "out"
    first = _start(hub, tmp_path, "census", CENSUS_ORG, "--out", str(out))
    holder = _wait_until_holding(first, out / LOCK_NAME)
    _wait_until_holding(first, out / "journal.sqlite.lock")  # taken second (the locks go in path order)
    first.send_signal(signal.SIGKILL)
    _finish(first)
    slow_census.gate.set()
    code, stdout, stderr = _finish(_start(hub, tmp_path, "census", CENSUS_ORG, "--out", str(out)))
    assert code == 0, stderr
    notes = [line for line in stderr.splitlines() if line.startswith("bnconvention: note: ")]
    assert [line.split(": took over")[0] for line in notes] == [
        f"bnconvention: note: the output folder {out}", f"bnconvention: note: the journal {out / 'journal.sqlite'}"]
    assert all(f"the lock of pid {holder.pid} on " in line and "ended without releasing it" in line
               for line in notes), notes
    assert _census_repos(out) == CENSUS_REPOS
    assert not (out / (LOCK_NAME + HOLDER_SUFFIX)).exists()  # released cleanly this time


@pytest.mark.slow
def test_a_second_audit_on_one_out_is_refused_naming_the_first(hub: LocalHub, tmp_path: Path) -> None:
    # Regression: two audits on one --out both ran, every audit done twice
    out, spec = tmp_path / "out", tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    rule = hub.faults.add(FaultRule(kind="gate", path=f"^/{PUSH_ORG}/.*/resolve/"))
    try:
        first = _start(hub, tmp_path, "audit", PUSH_ORG, "--out", str(out), "--spec", str(spec), "--no-plots")
        holder = _wait_until_holding(first, out / LOCK_NAME)
        code, _, stderr = _finish(_start(hub, tmp_path, "audit", PUSH_ORG, "--out", str(out), "--spec", str(spec),
                                         "--no-plots"))
        assert first.poll() is None, "the first audit ended before the second was refused"
        rule.gate.set()
        assert code == 1 and _refusal(f"the output folder {out}", holder.pid, f"bnconvention hub audit {PUSH_ORG}",
                                      "wait for it to end, or pass another --out").fullmatch(stderr.strip()), stderr
        code, stdout, stderr = _finish(first)
    finally:
        rule.gate.set()
        hub.faults.remove(rule)
    assert code == 0, stderr
    assert stdout.strip().splitlines()[-1].startswith(f"{len(PUSH_REPOS)} BatchNorm repos: {len(PUSH_REPOS)} audited")


def _pull_requests(hub: LocalHub, repo_id: str) -> list[dict]:
    return [d for d in hub.store.list_discussions(repo_id) if d.get("isPullRequest")]


@pytest.mark.slow
def test_two_pushes_at_once_open_one_pull_request_per_annotation(hub: LocalHub, audited: Path,
                                                                 tmp_path: Path) -> None:
    # Regression: two pushes at once, both looked for a pull request before either opened one: 3 of 6
    # repos got two pull requests with the same annotation. Each run has its own --out (a copy of one audited
    # journal), so only the repo's own lock keeps them apart; the commit waits a second on the server, so both
    # searches happen while the first creation is in flight.
    already = {repo_id: len(_pull_requests(hub, repo_id)) for repo_id in PUSH_REPOS}
    assert set(already.values()) == {0}, "another test pushed to PUSH_ORG first: this one runs before it"
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        shutil.copytree(audited, out)
    rule = hub.faults.add(FaultRule(kind="latency", latency_s=1.0, method="POST", path=f"^/api/models/{PUSH_ORG}/"
                                                                                       ".*/commit/"))
    try:
        runs = [_start(hub, tmp_path, "push", PUSH_ORG, "--out", str(out), "--format", "json") for out in outs]
        results = [_finish(run) for run in runs]
    finally:
        rule.gate.set()
        hub.faults.remove(rule)
    assert [code for code, _, _ in results] == [0, 0], [err for _, _, err in results]
    for repo_id in PUSH_REPOS:
        assert len(_pull_requests(hub, repo_id)) == 1, repo_id
        statuses = sorted(o["status"] for _, out, _ in results for o in json.loads(out) if o["repo_id"] == repo_id)
        assert statuses == ["exists", "opened"], (repo_id, statuses)


@pytest.mark.slow
def test_a_second_push_on_one_out_is_refused_naming_the_first(hub: LocalHub, audited: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(audited, out)
    rule = hub.faults.add(FaultRule(kind="gate", method="GET", path=f"^/api/models/{PUSH_ORG}/"))
    try:
        first = _start(hub, tmp_path, "push", PUSH_ORG, "--out", str(out))
        holder = _wait_until_holding(first, out / LOCK_NAME)
        code, _, stderr = _finish(_start(hub, tmp_path, "push", PUSH_ORG, "--out", str(out)))
        assert first.poll() is None, "the first push ended before the second was refused"
        rule.gate.set()
        assert code == 1 and _refusal(f"the output folder {out}", holder.pid, f"bnconvention hub push {PUSH_ORG}",
                                      "wait for it to end, or pass another --out").fullmatch(stderr.strip()), stderr
        code, _, stderr = _finish(first)
        assert code == 0, stderr
    finally:
        rule.gate.set()
        hub.faults.remove(rule)
    assert all(len(_pull_requests(hub, repo_id)) == 1 for repo_id in PUSH_REPOS)  # opened by this test or the other
