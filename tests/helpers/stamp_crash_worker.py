"""Crash-test worker for ``tests/test_stamp.py``: stamps in forked children that it SIGKILLs on request.

Torch-free on purpose (it reports whether torch got imported). It reads one JSON job per line on stdin:
``{"path": ..., "record": <record dict>, "kill_after": seconds, "pause": seconds, "chunk": bytes}``, forks a child
that stamps ``path`` (pausing ``pause`` seconds at every stage of ``bnconvention.authoring.stamp`` and copying
``chunk`` bytes at a time), SIGKILLs the child if it is still running after ``kill_after`` seconds (or the child
SIGKILLs itself at its ``kill_at_checkpoint``-th stage, counting from 1), and answers one JSON line:
``{"killed": bool, "exit": int | null, "elapsed": seconds}``. One Python start-up serves every trial. A job
``{"probe": path, "record": ...}`` stamps in the worker itself (digests checked) and answers whether torch is loaded.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from bnconvention.authoring import stamp


def run_child(job: dict) -> int:
    seen = 0
    kill_at = job.get("kill_at_checkpoint")

    def pause(stage: str, seconds: float = float(job["pause"])) -> None:
        nonlocal seen
        seen += 1
        if seen == kill_at:  # die exactly at this stage, as if killed from outside right now
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(seconds)

    try:
        stamp._checkpoint = pause
        stamp._COPY_CHUNK = int(job["chunk"])
        stamp.stamp_file(job["path"], job["record"], check_digests=False)
    except BaseException:  # noqa: BLE001 - reported through the exit status
        return 3
    return 0


def main() -> None:
    print(json.dumps({"ready": True, "torch_imported": "torch" in sys.modules}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if "probe" in job:
            result = stamp.stamp_file(job["probe"], job["record"])
            print(json.dumps({"method": result.method, "torch_imported": "torch" in sys.modules}), flush=True)
            continue
        stamp.checked_record(job["record"])  # warm the lazy imports and the schema cache before forking
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child stamps and exits without running any cleanup of the parent
            os._exit(run_child(job))
        deadline = start + float(job["kill_after"])
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            now = time.monotonic()
            if now >= deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(min(0.0005, deadline - now))
        killed = os.WIFSIGNALED(status)
        print(json.dumps({"killed": killed, "exit": None if killed else os.WEXITSTATUS(status),
                          "elapsed": time.monotonic() - start}), flush=True)


if __name__ == "__main__":
    main()
