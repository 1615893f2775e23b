"""The crawl journal: one SQLite file that makes a killed crawl resume without redoing finished repos, without
losing results and without opening a pull request twice.

One row per (stage, repo): ``census``, ``audit`` and ``push`` rows hold the repo's revision, a key (what the result
depends on: the spec digest for an audit, the annotation digest for a push), a status, whether the row is final,
and the result as JSON. Audit rows are kept per key (:data:`KEYED_STAGES`): audits of one repo under different
specs sit side by side and never replace each other, so a second ``hub audit`` with another spec into the same
``--out`` leaves the first spec's rows as they were. Every :meth:`Journal.record` is its own transaction (SQLite in
WAL mode), so a process killed at any instant leaves either the old row or the new one. A row that is not final (a
Hub failure that outlasted the retries) is redone on the next run; a final row is reused as long as the
revision and key still match.

A census notes each repo id as it comes off the listing in a table of its own connection (a SQLite temporary
table: :meth:`Journal.start_listing`, :meth:`Journal.add_listed`), and its outputs are read back from the journal for
exactly those repos (:meth:`Journal.listed_entries`, a page of rows at a time), so neither the crawl nor its report
holds the organisation in memory, and a repo deleted since an earlier run is not reported. The listing is this
run's alone: another run sharing the journal never clears or fills it (a run that cleared a shared table
when it started made the other report 29 of 30 repos). A listing that ends is copied, in one transaction, to the
``listed`` table (:meth:`Journal.finish_listing`): what a journal opened later without a listing of its own reads.

The journal also remembers the organisation and endpoint it was made for, and refuses to mix crawls. A journal of
format 1 (one audit row per repo) is upgraded in place, in one transaction, when it is opened.

>>> import tempfile, os
>>> with Journal(os.path.join(tempfile.mkdtemp(), "j.sqlite"), org="lab", endpoint="http://hub") as journal:
...     journal.record("census", "lab/a", revision="abc", status="undeclared", payload={"x": 1})
...     journal.get("census", "lab/a").payload
{'x': 1}
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from bnconvention.errors import UsageError

Stage: TypeAlias = Literal["census", "audit", "push"]
STAGES: tuple[Stage, ...] = ("census", "audit", "push")
KEYED_STAGES: frozenset[str] = frozenset({"audit"})  # one row per (repo, key): one per spec
JOURNAL_FORMAT = "bnconvention-hub-journal/2"
_FORMAT_V1 = "bnconvention-hub-journal/1"  # one row per (stage, repo): upgraded in place when opened

_ENTRIES = """
CREATE TABLE IF NOT EXISTS {name} (
    stage TEXT NOT NULL,
    repo_id TEXT NOT NULL,
    slot TEXT NOT NULL DEFAULT '',
    revision TEXT,
    key TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    final INTEGER NOT NULL,
    payload TEXT NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (stage, repo_id, slot)
);
"""
_LISTED = "CREATE TABLE IF NOT EXISTS listed (repo_id TEXT PRIMARY KEY);"  # the latest finished census listing
_RUN_LISTED = "CREATE TEMP TABLE IF NOT EXISTS run_listed (repo_id TEXT PRIMARY KEY);"  # this connection's listing
_SCHEMA = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);" + _LISTED + _ENTRIES.format(
    name="entries")
LISTED_PAGE = 500  # rows read back per query by :meth:`Journal.listed_entries`
_DATA_COLUMNS = "revision, key, status, final, payload, updated"
_COLUMNS = f"stage, repo_id, {_DATA_COLUMNS}"


@dataclass(frozen=True)
class Entry:
    stage: str
    repo_id: str
    revision: str | None
    key: str
    status: str
    final: bool
    payload: Any
    updated: float

    def matches(self, *, revision: str | None, key: str = "") -> bool:
        """A final result for this revision and key: reuse it instead of redoing the work."""
        return self.final and self.revision == revision and self.key == key


class Journal:
    """A crawl journal at ``path`` for organisation ``org`` on ``endpoint`` (created when missing). Thread-safe."""

    def __init__(self, path: str | os.PathLike[str], *, org: str, endpoint: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._listing = False  # whether this journal holds a listing of its own (start_listing)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a killed process never loses a committed row (only a power cut can drop the last
            # few), and a row costs no fsync, which matters for crawls of thousands of repos.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._upgrade()
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"{self.path} is not a crawl journal ({exc}); pass --journal a new path or the journal "
                             "of this crawl") from exc
        self._bind(org=org, endpoint=endpoint)

    def _upgrade(self) -> None:
        """A journal of format 1 (one row per stage and repo) gets the slot column in one transaction: every row
        kept, an audit row in the slot of its key."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(entries)").fetchall()}
        if "slot" in columns:
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute(_ENTRIES.format(name="entries_v2"))
            keyed = ", ".join(f"'{stage}'" for stage in sorted(KEYED_STAGES))
            self._db.execute(f"INSERT INTO entries_v2 (stage, repo_id, slot, {_DATA_COLUMNS}) SELECT stage, repo_id, "
                             f"CASE WHEN stage IN ({keyed}) THEN key ELSE '' END, {_DATA_COLUMNS} FROM entries")
            self._db.execute("DROP TABLE entries")
            self._db.execute("ALTER TABLE entries_v2 RENAME TO entries")
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'format' AND value = ?",
                             (JOURNAL_FORMAT, _FORMAT_V1))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _bind(self, *, org: str, endpoint: str) -> None:
        wanted = {"format": JOURNAL_FORMAT, "org": org, "endpoint": endpoint.rstrip("/")}
        with self._lock:
            found = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
            if not found:
                self._db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", sorted(wanted.items()))
                return
        for key, value in wanted.items():
            if found.get(key) != value:
                raise UsageError(f"{self.path} is the journal of a crawl with {key} {found.get(key)!r}, not "
                                 f"{value!r}; use another --journal path for this crawl")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def record(self, stage: Stage, repo_id: str, *, revision: str | None, status: str, payload: Any, key: str = "",
               final: bool = True) -> None:
        """Write the row of ``(stage, repo_id)`` (of ``(stage, repo_id, key)`` for a keyed stage) in one
        transaction, replacing the previous one."""
        if stage not in STAGES:
            raise UsageError(f"journal stage {stage!r} is not one of {', '.join(STAGES)}")
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False, allow_nan=False)
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO entries (slot, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (_slot(stage, key), stage, repo_id, revision, key, status, int(final), text, time.time()))

    def get(self, stage: Stage, repo_id: str, *, key: str | None = None) -> Entry | None:
        """The row of ``(stage, repo_id)``; for a keyed stage the row of ``key``, or the latest row of any key when
        ``key`` is None."""
        query = f"SELECT {_COLUMNS} FROM entries WHERE stage = ? AND repo_id = ?"
        args: tuple[Any, ...] = (stage, repo_id)
        if key is not None and stage in KEYED_STAGES:
            query, args = query + " AND slot = ?", (*args, key)
        with self._lock:
            row = self._db.execute(query + " ORDER BY updated DESC, rowid DESC", args).fetchone()
        return None if row is None else _entry(row)

    def entries(self, stage: Stage) -> list[Entry]:
        """Every row of ``stage``, sorted by repo id (then key, for a keyed stage)."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM entries WHERE stage = ? ORDER BY repo_id, slot",
                                    (stage,)).fetchall()
        return [_entry(row) for row in rows]

    def __iter__(self) -> Iterator[Entry]:
        for stage in STAGES:
            yield from self.entries(stage)

    def start_listing(self) -> None:
        """Begin a listing of this journal's own (a census is about to list the organisation): empty, and private
        to this connection, so a run sharing the journal neither clears nor fills it."""
        with self._lock:
            self._db.execute(_RUN_LISTED)
            self._db.execute("DELETE FROM temp.run_listed")
            self._listing = True

    def add_listed(self, repo_id: str) -> bool:
        """Note that this census's listing reported ``repo_id``; False when it had already (a repeated entry)."""
        if not self._listing:
            self.start_listing()
        with self._lock:
            cursor = self._db.execute("INSERT OR IGNORE INTO temp.run_listed (repo_id) VALUES (?)", (repo_id,))
        return cursor.rowcount == 1

    def finish_listing(self) -> None:
        """The listing ended: make it the journal's latest (the ``listed`` table), in one transaction."""
        if not self._listing:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM main.listed")
                self._db.execute("INSERT INTO main.listed (repo_id) SELECT repo_id FROM temp.run_listed")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def listed_entries(self, stage: Stage, *, page: int = LISTED_PAGE) -> Iterator[Entry]:
        """The rows of ``stage`` of the repos this journal's listing reported (without one: the latest finished
        listing), sorted by repo id (then key), read ``page`` rows per query (keyset pagination): memory stays flat
        in the size of the organisation, and no cursor is held open between pages, so other threads may write
        meanwhile."""
        after = ("", "")
        listed = "temp.run_listed" if self._listing else "main.listed"
        query = (f"SELECT {', '.join('e.' + c.strip() for c in _COLUMNS.split(','))}, e.slot FROM entries e "
                 f"JOIN {listed} l ON l.repo_id = e.repo_id WHERE e.stage = ? AND (e.repo_id, e.slot) > (?, ?) "
                 "ORDER BY e.repo_id, e.slot LIMIT ?")
        while True:
            with self._lock:
                rows = self._db.execute(query, (stage, *after, page)).fetchall()
            for row in rows:
                yield _entry(row[:-1])
            if len(rows) < page:
                return
            after = (rows[-1][1], rows[-1][-1])

    def count(self, stage: Stage, *, final: bool | None = None) -> int:
        query = "SELECT COUNT(*) FROM entries WHERE stage = ?"
        args: tuple[Any, ...] = (stage,)
        if final is not None:
            query += " AND final = ?"
            args += (int(final),)
        with self._lock:
            return int(self._db.execute(query, args).fetchone()[0])


def _slot(stage: str, key: str) -> str:
    return key if stage in KEYED_STAGES else ""


def _entry(row: tuple[Any, ...]) -> Entry:
    return Entry(stage=row[0], repo_id=row[1], revision=row[2], key=row[3], status=row[4], final=bool(row[5]),
                 payload=json.loads(row[6]), updated=row[7])


__all__ = ["JOURNAL_FORMAT", "KEYED_STAGES", "STAGES", "Entry", "Journal", "Stage"]
