"""One writer per output: the locks ``hub census``, ``hub audit`` and ``hub push`` take, and the lock around finding
and opening a repo's pull request.

Two runs writing one ``--out`` (or one journal) at the same time lose or duplicate work: every audit done twice,
two pull requests with the same annotation (docs/hub.md#one-writer-per-output). So each of the three commands holds, for
its whole run, an exclusive lock on its output folder and one on its journal (:func:`output_lock`; both, because
``--journal`` may point elsewhere and another run may share either one). A second run refuses at once with one line
naming the first: its pid, host, command and since when (:class:`~bnconvention.errors.OutputInUseError`).

The lock is an operating-system lock (``flock`` on Unix, through :mod:`filelock`) on ``<OUT>/.bnconvention.lock``
and ``<JOURNAL>.lock``: the kernel releases it when its process ends, however it ends, so a run killed with
``kill -9`` never leaves a lock that blocks the next one, and nothing has to guess whether a lock is stale. Who
holds it is written beside it (``<lock>.holder.json``: pid, host, command, start time) once it is taken, for the
refusal to name, and removed on a clean release. The next run that finds such a file after taking the lock knows
the previous holder ended without releasing it (killed, or its machine went down) and says so: its finished work
is in the journal and is reused. The lock files themselves stay (deleting one while a run holds it would let a
second run lock a new file: never delete them by hand while a run may be going on). Locks on a network file
system are only as good as that file system's ``flock``.

Pull requests get their own, shorter lock (:func:`repo_lock`), keyed by the endpoint and repo and kept under
``HF_HOME``: the search for a pull request of ours carrying the annotations and the creation of a new one are one
step under it, so two pushes on this machine, even from different ``--out`` folders, open at most one pull request
per annotation; the second waits for the first's creation, then finds it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock, Timeout
from huggingface_hub import constants

from bnconvention.errors import OutputInUseError
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.formats.text import elide

LOCK_NAME = ".bnconvention.lock"  # in the output folder
HOLDER_SUFFIX = ".holder.json"  # beside each lock file: who holds it
HOLDER_MAX_BYTES = 64 * 1024
IDENTITY_WAIT_S = 2.0  # how long a refused run waits for the holder to write its identity
REPO_LOCK_WAIT_S = 600.0  # how long a push waits for another push's pull request on the same repo


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: a process on a host, running a command, since a time (seconds since the epoch)."""

    pid: int
    host: str
    command: str
    since: float

    @classmethod
    def this_process(cls, command: str) -> Holder:
        return cls(pid=os.getpid(), host=socket.gethostname(), command=command, since=time.time())

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        """The holder a holder file names, or None when it is not one (empty, cut short, someone else's)."""
        try:
            value = json.loads(data)
            holder = cls(pid=value["pid"], host=value["host"], command=value["command"], since=value["since"])
        except (ValueError, TypeError, KeyError):
            return None
        if not (isinstance(holder.pid, int) and isinstance(holder.host, str) and isinstance(holder.command, str)
                and isinstance(holder.since, int | float)):
            return None
        return holder

    def describe(self) -> str:
        """``pid 4242 on host (bnconvention hub census lab), since 2025-06-01 12:00:03 UTC``"""
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"pid {self.pid} on {elide(self.host)} ({elide(self.command)}), since {since}"

    def alive(self) -> bool | None:
        """Whether its process still runs: None when this cannot be told (another host, or no way to ask)."""
        if self.host != socket.gethostname() or sys.platform == "win32":  # os.kill(pid, 0) terminates on Windows
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process
            return True
        except OSError:
            return None
        return True


class FileLockWithHolder:
    """An exclusive lock on ``path`` whose holder is written to ``path + HOLDER_SUFFIX``. ``what`` names what it
    guards in a refusal ("the output folder hub-lab"); ``fix`` says what to do about it."""

    def __init__(self, path: Path, *, what: str, fix: str) -> None:
        self.path = path
        self.holder_path = path.with_name(path.name + HOLDER_SUFFIX)
        self.what = what
        self.fix = fix
        self._lock: object | None = None

    def acquire(self, holder: Holder, *, wait_s: float = 0.0) -> Holder | None:
        """Take the lock (waiting up to ``wait_s``) and write ``holder``; return the holder a previous run left
        without releasing (killed), None after a clean release. Raises :class:`OutputInUseError` naming the
        process that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path), timeout=wait_s)
        try:
            lock.acquire()
            taken = True
        except Timeout:  # a TimeoutError: raised outside this block, so it is not read as a network timeout
            taken = False
        if not taken:
            raise self._refusal()
        try:
            left = self._read_holder()
            atomic_write_bytes(self.holder_path, json.dumps(asdict(holder), sort_keys=True).encode())
        except BaseException:
            lock.release()
            raise
        self._lock = lock
        return left

    def release(self) -> None:
        """Remove the holder file, then release the lock (a clean end: the next run recovers nothing)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                self.holder_path.unlink()
        finally:
            lock.release()  # type: ignore[attr-defined]

    def _read_holder(self) -> Holder | None:
        try:
            with self.holder_path.open("rb") as handle:
                return Holder.parse(handle.read(HOLDER_MAX_BYTES + 1))
        except FileNotFoundError:
            return None

    def _refusal(self) -> OutputInUseError:
        """The error naming the holder. The holder writes its file just after taking the lock, so a file missing
        or left by a process that is gone is read again for a moment before the refusal says it cannot tell."""
        deadline = time.monotonic() + IDENTITY_WAIT_S
        holder = self._read_holder()
        while (holder is None or holder.alive() is False) and time.monotonic() < deadline:
            time.sleep(0.05)
            holder = self._read_holder()
        if holder is None or holder.alive() is False:
            who = "another process (it has not written who it is)"
            holder = None
        else:
            who = holder.describe()
        return OutputInUseError(f"{self.what} is being written by another run: {who}; {self.fix}",
                                path=str(self.path), holder=None if holder is None else asdict(holder))


def output_locks(out: Path, journal: Path) -> list[FileLockWithHolder]:
    """The locks of a journaled hub command: its output folder's and its journal's, in a fixed order (by path),
    so two runs never hold one each while waiting for the other."""
    locks = [FileLockWithHolder(out / LOCK_NAME, what=f"the output folder {out}",
                                fix="wait for it to end, or pass another --out"),
             FileLockWithHolder(journal.with_name(journal.name + ".lock"), what=f"the journal {journal}",
                                fix="wait for it to end, or pass another --journal")]
    return sorted(locks, key=lambda lock: str(lock.path.absolute()))


@contextlib.contextmanager
def output_lock(out: Path, journal: Path, *, command: str,
                on_recovered: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the locks of ``out`` and ``journal`` for the ``with`` block, or raise :class:`OutputInUseError` at once
    naming the run that holds one (none is kept then). ``on_recovered`` hears one line per lock a killed run had
    left (what it guarded and who held it)."""
    me = Holder.this_process(command)
    held: list[FileLockWithHolder] = []
    try:
        for lock in output_locks(out, journal):
            left = lock.acquire(me)
            held.append(lock)
            if left is not None and on_recovered is not None:
                on_recovered(f"{lock.what}: took over the lock of {left.describe()}, which ended without releasing "
                             "it (killed?); its finished work is in the journal and is reused")
        yield
    finally:
        for lock in reversed(held):
            lock.release()


def lock_dir() -> Path:
    """Where the pull-request locks of this machine live: ``HF_HOME/bnconvention/locks`` (``HF_HOME`` as
    huggingface_hub reads it: the user's Hub state on this machine)."""
    return Path(constants.HF_HOME) / "bnconvention" / "locks"


@contextlib.contextmanager
def repo_lock(endpoint: str, repo_id: str, *, command: str = "bnconvention hub push",
              wait_s: float = REPO_LOCK_WAIT_S) -> Iterator[None]:
    """Hold the pull-request lock of ``repo_id`` on ``endpoint`` for the ``with`` block, waiting up to ``wait_s`` for
    another process to finish its own search-and-create; past that, :class:`OutputInUseError` names it."""
    key = hashlib.sha256(f"{endpoint.rstrip('/')}\n{repo_id}".encode()).hexdigest()[:32]
    lock = FileLockWithHolder(lock_dir() / f"pr-{key}.lock", what=f"the pull requests of {repo_id}",
                              fix="rerun to retry once it has opened its pull request")
    lock.acquire(Holder.this_process(command), wait_s=wait_s)
    try:
        yield
    finally:
        lock.release()


__all__ = ["HOLDER_SUFFIX", "LOCK_NAME", "FileLockWithHolder", "Holder", "lock_dir", "output_lock", "output_locks",
           "repo_lock"]
