"""The crawl journal: rows per stage and repo, reuse rules, one crawl per journal, malformed files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bnconvention.errors import UsageError
from bnconvention.hub.journal import Journal


def test_record_get_and_replace(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite", org="lab", endpoint="http://hub/") as journal:
        journal.record("census", "lab/a", revision="c1", status="undeclared", payload={"n": 1})
        journal.record("census", "lab/b", revision="c2", status="unreadable", payload={"n": 2}, final=False)
        journal.record("census", "lab/a", revision="c3", status="channel_absent", payload={"n": 3})
        journal.record("audit", "lab/a", revision="c3", key="spec1", status="audited", payload=[])
        entry = journal.get("census", "lab/a")
        assert (entry.revision, entry.status, entry.payload, entry.final) == ("c3", "channel_absent", {"n": 3}, True)
        assert [e.repo_id for e in journal.entries("census")] == ["lab/a", "lab/b"]
        assert journal.count("census") == 2 and journal.count("census", final=False) == 1
        assert journal.get("push", "lab/a") is None
        assert [(e.stage, e.repo_id) for e in journal] == [("census", "lab/a"), ("census", "lab/b"),
                                                           ("audit", "lab/a")]


def test_matches_needs_final_same_revision_and_key(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite", org="lab", endpoint="http://hub") as journal:
        journal.record("audit", "lab/a", revision="c1", key="spec1", status="audited", payload={})
        journal.record("audit", "lab/b", revision="c1", key="spec1", status="failed", payload={}, final=False)
        a, b = journal.get("audit", "lab/a"), journal.get("audit", "lab/b")
        assert a.matches(revision="c1", key="spec1")
        assert not a.matches(revision="c2", key="spec1")  # the repo moved on: redo
        assert not a.matches(revision="c1", key="spec2")  # another spec: redo
        assert not b.matches(revision="c1", key="spec1")  # a Hub failure: retry


def test_rows_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path, org="lab", endpoint="http://hub") as journal:
        journal.record("push", "lab/a", revision="c1", key="k", status="opened", payload={"pr_num": 4})
    with Journal(path, org="lab", endpoint="http://hub") as journal:
        assert journal.get("push", "lab/a").payload == {"pr_num": 4}


@pytest.mark.parametrize(("org", "endpoint", "field"), [
    pytest.param("other", "http://hub", "org", id="other-org"),
    pytest.param("lab", "http://elsewhere", "endpoint", id="other-endpoint"),
])
def test_journal_of_another_crawl_is_refused(tmp_path: Path, org: str, endpoint: str, field: str) -> None:
    path = tmp_path / "j.sqlite"
    Journal(path, org="lab", endpoint="http://hub").close()
    with pytest.raises(UsageError) as caught:
        Journal(path, org=org, endpoint=endpoint)
    assert f"is the journal of a crawl with {field}" in str(caught.value)


def test_a_file_that_is_not_a_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are not the rows you are looking for\n" * 200)
    with pytest.raises(UsageError) as caught:
        Journal(path, org="lab", endpoint="http://hub")
    assert "is not a crawl journal" in str(caught.value)
    assert path.read_bytes().startswith(b"these are not")  # left as it was


def test_unknown_stage_and_non_json_payload_are_refused(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite", org="lab", endpoint="http://hub") as journal:
        with pytest.raises(UsageError):
            journal.record("deploy", "lab/a", revision=None, status="x", payload={})  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            journal.record("census", "lab/a", revision=None, status="x", payload={"x": float("nan")})
        assert journal.get("census", "lab/a") is None


def test_audit_rows_of_different_specs_sit_side_by_side(tmp_path: Path) -> None:
    # Regression: a second hub audit with another spec replaced the first spec's rows (one per repo)
    with Journal(tmp_path / "j.sqlite", org="lab", endpoint="http://hub") as journal:
        journal.record("audit", "lab/a", revision="c1", key="spec1", status="audited", payload={"spec": 1})
        journal.record("audit", "lab/a", revision="c1", key="spec2", status="failed", payload={"spec": 2},
                       final=False)
        journal.record("push", "lab/a", revision="c1", key="k1", status="opened", payload={})
        journal.record("push", "lab/a", revision="c1", key="k2", status="opened", payload={"second": True})
        assert journal.get("audit", "lab/a", key="spec1").payload == {"spec": 1}
        assert journal.get("audit", "lab/a", key="spec2").status == "failed"
        assert journal.get("audit", "lab/a", key="spec3") is None
        assert journal.get("audit", "lab/a").key == "spec2"  # without a key: the latest row
        assert [(e.repo_id, e.key) for e in journal.entries("audit")] == [("lab/a", "spec1"), ("lab/a", "spec2")]
        assert journal.count("push") == 1 and journal.get("push", "lab/a").payload == {"second": True}


def test_a_journal_of_format_1_is_upgraded_keeping_every_row(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE entries (stage TEXT NOT NULL, repo_id TEXT NOT NULL, revision TEXT, key TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL, final INTEGER NOT NULL, payload TEXT NOT NULL, updated REAL NOT NULL,
            PRIMARY KEY (stage, repo_id));
        INSERT INTO meta VALUES ('format', 'bnconvention-hub-journal/1'), ('org', 'lab'), ('endpoint', 'http://hub');
        INSERT INTO entries VALUES ('census', 'lab/a', 'c1', '', 'undeclared', 1, '{"n": 1}', 1.0);
        INSERT INTO entries VALUES ('audit', 'lab/a', 'c1', 'spec1', 'audited', 1, '{"n": 2}', 2.0);
    """)
    db.commit()
    db.close()
    with Journal(path, org="lab", endpoint="http://hub") as journal:
        assert journal.get("census", "lab/a").payload == {"n": 1}
        assert journal.get("audit", "lab/a", key="spec1").matches(revision="c1", key="spec1")
        journal.record("audit", "lab/a", revision="c1", key="spec2", status="audited", payload={"n": 3})
        assert journal.count("audit") == 2
    with Journal(path, org="lab", endpoint="http://hub") as journal:  # upgraded once: opens as format 2
        assert [e.key for e in journal.entries("audit")] == ["spec1", "spec2"]


def test_listed_entries_page_through_the_latest_listing_only(tmp_path: Path) -> None:
    """the census reports read the journal back a page of rows at a time, for the listed repos only."""
    with Journal(tmp_path / "j.sqlite", org="lab", endpoint="http://hub") as journal:
        for name in "edcba":
            journal.record("census", f"lab/{name}", revision="r", status="undeclared", payload={"n": name})
        journal.start_listing()
        assert [journal.add_listed(f"lab/{name}") for name in "dbcab"] == [True, True, True, True, False]
        got = [e.repo_id for e in journal.listed_entries("census", page=2)]
        journal.start_listing()
        after_restart = list(journal.listed_entries("census"))
    assert got == ["lab/a", "lab/b", "lab/c", "lab/d"]
    assert after_restart == []
