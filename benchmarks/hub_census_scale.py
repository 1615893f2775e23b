"""Organisations of thousands: the census of ``hub_census.py --thousands N`` (default run: off).

    .venv/bin/python benchmarks/hub_census.py --thousands 5000 --big-mb 1 --repos 50 --repeats 1 --models ''
    .venv/bin/python benchmarks/hub_census.py --thousands 1000,5000,10000 --big-mb 1 --repos 50 --repeats 1 --models ''

Generated organisations on one ``bnconvention.hubserver.LocalHub`` (the same five kinds of repo as the
``--repos`` organisation, 50 repos per listing page), one of ``N // 5`` repos and one of ``N``, or of each size of
``--thousands 1000,5000,10000``. They are written
**directly into the server's store** (``HubStore.commit``, the API the server's own endpoints call), not uploaded
through HTTP: 5,000 uploads would measure the upload path, not the census; the seeding time is printed.

Each census runs in **its own process** (``python benchmarks/hub_census_scale.py --child ...``) against the server in
this one, so the peak memory reported (``ru_maxrss`` of that process) is the census's alone: listing, classifying,
journaling, then writing ``org-census.json`` and ``org-census.md`` from the journal as ``hub census`` does. Per
organisation size: wall time, repos per second, requests and body bytes per repo (the server's own counters), and the
peak resident memory (and what it was before the census, after the imports); the lines under them are the growth of that
peak per repo between sizes (flat since the census streams). The peak is the census's own: on Linux it is reset
(``/proc/self/clear_refs``) once the imports are done, because the imports peak higher than the census and vary from run
to run by more than a streamed census grows (``ru_maxrss`` alone measured the imports).

**Resumable after a kill**: a census of the N-repo organisation with a journal is killed (SIGKILL) once a third of
the repos are journaled, then rerun with the same journal. The rerun must read only the repos the killed run had not
journaled (its ``read`` count and the distinct repos the server saw it address), and reuse the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

KILL_FRACTION = 1 / 3


def _journaled(path: Path) -> set[str]:
    """The repos with a final census row in the journal at ``path`` (none while it does not exist yet), read
    without locking it."""
    if not path.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            rows = db.execute("SELECT repo_id FROM entries WHERE stage = 'census' AND final = 1").fetchall()
    except sqlite3.OperationalError:  # the schema is not written yet
        return set()
    return {row[0] for row in rows}


def _child_command(endpoint: str, org: str, journal: Path, workers: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", endpoint, org, str(journal), str(workers)]


def run_child(endpoint: str, org: str, journal: Path, workers: int) -> dict[str, Any]:
    """One census in its own process; its figures (seconds, read, reused, listed, failed, peak RSS in KiB)."""
    done = subprocess.run(_child_command(endpoint, org, journal, workers), capture_output=True, text=True,
                          check=False, env={**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"census child failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _repos_addressed(hub: Any) -> set[str]:
    return {r.repo_id for r in hub.stats if r.repo_id is not None}


def census_figures(hub: Any, org: str, count: int, tmp: Path, workers: int) -> dict[str, Any]:
    """A fresh census of ``org`` (``count`` repos) in a child process, with the server's request counters."""
    hub.reset_stats()
    figures = run_child(hub.endpoint, org, tmp / f"{org}-fresh.sqlite", workers)
    if figures["listed"] != count or figures["failed"]:
        raise RuntimeError(f"census of {org}: {figures}")
    requests, sent = len(hub.stats), hub.bytes_sent()
    return {**figures, "repos": count, "requests_per_repo": requests / count, "bytes_per_repo": sent / count,
            "repos_per_second": count / figures["seconds"]}


def killed_and_resumed(hub: Any, org: str, count: int, tmp: Path, workers: int) -> dict[str, Any]:
    """Kill a census once a third of ``org`` is journaled, rerun it on the same journal: what the rerun read.

    Exact resumption: the rerun reads as many repos as were unfinished, reuses the others, and the server sees it
    address no repo that the killed run had journaled (repos without weights are classified from the listing alone,
    so fewer repos than were read are addressed)."""
    journal = tmp / f"{org}-killed.sqlite"
    target = max(1, int(count * KILL_FRACTION))
    process = subprocess.Popen(_child_command(hub.endpoint, org, journal, workers), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1"})
    try:
        while len(_journaled(journal)) < target:
            if process.poll() is not None:
                raise RuntimeError(f"the census finished before it could be killed ({len(_journaled(journal))} rows)")
            time.sleep(0.02)
        process.kill()
    finally:
        process.wait()
    finished = _journaled(journal)
    hub.reset_stats()
    rerun = run_child(hub.endpoint, org, journal, workers)
    again = _repos_addressed(hub) & finished  # finished before the kill, yet read again
    return {"killed_after": len(finished), "rerun_read": rerun["read"], "rerun_reused": rerun["reused"],
            "expected_read": count - len(finished), "rerun_repos_addressed": len(_repos_addressed(hub)),
            "finished_read_again": len(again), "rerun_seconds": rerun["seconds"],
            "resumed_exactly": rerun["read"] == count - len(finished) and rerun["reused"] == len(finished)
            and not again}


def parse_sizes(text: str) -> list[int]:
    """``--thousands``: one N (organisations of N/5 and N repos) or the sizes themselves, comma-separated."""
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--thousands {text!r}: a positive repo count or a comma-separated list of them")
    return sorted({max(5, sizes[0] // 5), sizes[0]} if len(sizes) == 1 else set(sizes))


def rss_growth(sizes: list[int], runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The growth of peak RSS per repo between each size and the next, and between the smallest and largest."""
    pairs = list(zip(sizes, sizes[1:], strict=False))
    if len(sizes) > 2:
        pairs.append((sizes[0], sizes[-1]))
    return [{"from": a, "to": b, "kib_per_repo": (runs[str(b)]["maxrss_kib"] - runs[str(a)]["maxrss_kib"]) / (b - a)}
            for a, b in pairs]


def scale_figures(hub: Any, seed_org: Any, sizes: list[int], tmp: Path, workers: int) -> dict[str, Any]:
    """Seed the organisations (directly into the store), census each, and the kill-and-resume run on the largest."""
    seeding: dict[str, float] = {}
    for size in sizes:
        start = time.perf_counter()
        seed_org(hub, f"scale-{size}", size)
        seeding[str(size)] = time.perf_counter() - start
    runs = {str(size): census_figures(hub, f"scale-{size}", size, tmp, workers) for size in sizes}
    growth = rss_growth(sizes, runs)
    return {"sizes": sizes, "seeding_seconds": seeding, "census": runs, "rss_growth": growth,
            "rss_kib_per_repo": growth[-1]["kib_per_repo"] if growth else 0.0,
            "workers": workers, "resume": killed_and_resumed(hub, f"scale-{sizes[-1]}", sizes[-1], tmp, workers)}


def print_scale(figures: dict[str, Any]) -> None:
    print(f"organisations of thousands (census in its own process, {figures['workers']} threads; seeded directly "
          "into the store):")
    for size in figures["sizes"]:
        item = figures["census"][str(size)]
        added = (item["maxrss_kib"] - item["rss_before_kib"]) / 1024
        print(f"  {size:>6} repos: seeded in {figures['seeding_seconds'][str(size)]:6.1f} s; census "
              f"{item['seconds']:6.1f} s ({item['repos_per_second']:5.0f} repos/s), "
              f"{item['requests_per_repo']:.2f} requests and {item['bytes_per_repo']:7.0f} bytes per repo, "
              f"peak RSS during the census {item['maxrss_kib'] / 1024:6.1f} MiB "
              f"(RSS {item['rss_before_kib'] / 1024:6.1f} MiB when it started, {added:5.1f} MiB more; the "
              f"imports peaked at {item['imports_maxrss_kib'] / 1024:6.1f} MiB)")
    print("  peak RSS side by side: " + ", ".join(
        f"{size} repos {figures['census'][str(size)]['maxrss_kib'] / 1024:.1f} MiB" for size in figures["sizes"]))
    for step in figures["rss_growth"]:
        print(f"  peak RSS growth: {step['kib_per_repo']:+.3f} KiB per repo between {step['from']} and {step['to']} "
              "repos")
    resume = figures["resume"]
    print(f"  killed after {resume['killed_after']} journaled repos; the rerun read {resume['rerun_read']} "
          f"(expected {resume['expected_read']}; the server saw {resume['rerun_repos_addressed']} repos addressed, "
          f"{resume['finished_read_again']} of them finished before the kill), reused {resume['rerun_reused']}, "
          f"in {resume['rerun_seconds']:.1f} s: "
          f"{'resumed exactly' if resume['resumed_exactly'] else 'NOT RESUMED EXACTLY'}")


def _proc_status_kib(field: str) -> int | None:
    """``VmRSS`` / ``VmHWM`` of this process from ``/proc/self/status`` (Linux), in KiB; None elsewhere."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


def _reset_peak() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS (Linux >= 4.0: ``clear_refs`` value 5), so the
    peak read after the census is the census's own, not the imports' (which peak higher than a streamed census
    ever grows, and vary by more than it from run to run)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _child(endpoint: str, org: str, journal: str, workers: int) -> int:
    """What ``bnconvention hub census`` does: the census, then ``org-census.json`` and ``org-census.md`` from the
    journal (beside it); the peak RSS covers both."""
    import resource

    from bnconvention.hub.client import make_client
    from bnconvention.hub.crawl import census_entries, census_org
    from bnconvention.hub.journal import Journal
    from bnconvention.hub.summaries import census_head, write_org_census_entries

    client = make_client(endpoint=endpoint)
    imports_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reset = _reset_peak()
    before = _proc_status_kib("VmRSS") if reset else None
    with Journal(journal, org=org, endpoint=endpoint) as opened:
        start = time.perf_counter()
        run = census_org(client, org, journal=opened, workers=workers)
        seconds = time.perf_counter() - start
        head = census_head(org, census_entries(opened), endpoint=endpoint)
        write_org_census_entries(head, lambda: census_entries(opened), Path(journal).with_suffix(".out"))
        report_seconds = time.perf_counter() - start - seconds
    print(json.dumps({"seconds": seconds, "report_seconds": report_seconds, "read": run.read, "reused": run.reused,
                      "listed": run.listed, "failed": run.failed, "imports_maxrss_kib": imports_peak,
                      "rss_before_kib": before if before is not None else imports_peak,
                      "maxrss_kib": (_proc_status_kib("VmHWM") if reset else None)
                      or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the census child of hub_census.py --thousands")
    parser.add_argument("--child", nargs=4, metavar=("ENDPOINT", "ORG", "JOURNAL", "WORKERS"), required=True)
    args = parser.parse_args(argv)
    endpoint, org, journal, workers = args.child
    return _child(endpoint, org, journal, int(workers))


if __name__ == "__main__":
    sys.exit(main())
