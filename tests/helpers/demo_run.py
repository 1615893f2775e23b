"""One run of ``bnconvention demo`` per test session, shared by test_demo.py and test_browser.py.

``serve_demo_cli`` starts ``bnconvention demo --serve`` the same way and hands back the running process once it
prints that the Hub is up.

The demo runs as the user runs it (``python -m bnconvention demo``, a subprocess) into a temporary folder. Its zoo
lives in ``<repo>/.cache/zoo-<code version>-seed0-observed`` (built once with the recorder observing training,
reused by later sessions, like the shared ``zoo`` fixture's cache). ``HOME`` points into the temporary folder, so a
write to ``~/.cache/huggingface`` would show there. The result is kept in this module (imported once per session),
so both test modules get the same run.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from helpers.processes import sigint_default

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEMO_TIMEOUT_S = 600


@dataclass(frozen=True)
class DemoRun:
    out: Path
    home: Path
    zoo: Path
    stdout: str
    stderr: str

    @property
    def report(self) -> Path:
        return self.out / "report" / "index.html"


_RUN: DemoRun | None = None


def observed_zoo_dir() -> Path:
    from bnconvention.zoo import default_zoo_dir

    base = default_zoo_dir(REPO_ROOT / ".cache", seed=0)
    return base.with_name(base.name + "-observed")


def _demo_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HOME": str(home), "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"})
    env.pop("HF_HOME", None)  # the demo must choose its own (inside --out)
    env.pop("HF_HUB_OFFLINE", None)
    return env


def tiny_population_dir() -> Path:
    """The tiny population the ``population`` fixture builds (conftest.py): the demo's tests census it."""
    from bnconvention.zoo.population_build import default_population_dir
    from bnconvention.zoo.population_plan import TINY_CONFIG

    return default_population_dir(REPO_ROOT / ".cache", seed=0, config=TINY_CONFIG)


def _demo_command(out: Path, zoo: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bnconvention", "demo", "--out", str(out), "--zoo", str(zoo), "--no-progress",
            "--population", str(tiny_population_dir()), "--population-size", "tiny",
            *extra]


def run_demo_cli(out: Path, home: Path, zoo: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_demo_command(out, zoo, *extra), cwd=REPO_ROOT, env=_demo_env(home), capture_output=True,
                          text=True, timeout=DEMO_TIMEOUT_S, check=False)


@dataclass
class ServingDemo:
    """A running ``demo --serve``: the process and what it printed on stdout until the Hub was up."""

    process: subprocess.Popen[str]
    stdout: str
    lines: queue.Queue[str | None] = field(repr=False)

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 60) -> tuple[int, str]:
        """Send ``sig`` (Ctrl-C by default) and wait: ``(exit code, stderr)``."""
        self.process.send_signal(sig)
        self.process.wait(timeout=timeout_s)  # stdout is read by the pump thread, stderr is small (--no-progress)
        return self.process.returncode, self.process.stderr.read() if self.process.stderr else ""


@contextlib.contextmanager
def serve_demo_cli(out: Path, home: Path, zoo: Path, *extra: str,
                   ready: str = "Serving until Ctrl-C") -> Iterator[ServingDemo]:
    """Start ``bnconvention demo --serve`` and yield it once a stdout line contains ``ready``; the process is killed
    on the way out if the test did not stop it."""
    process = subprocess.Popen(_demo_command(out, zoo, "--serve", *extra), cwd=REPO_ROOT, env=_demo_env(home),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=sigint_default)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=DEMO_TIMEOUT_S)
            if line is None:
                process.wait(timeout=60)
                stderr = process.stderr.read() if process.stderr else ""
                raise AssertionError(f"demo --serve exited {process.returncode} before serving\nstdout:\n"
                                     f"{''.join(seen)}\nstderr:\n{stderr[-6000:]}")
            seen.append(line)
            if ready in line:
                break
        yield ServingDemo(process=process, stdout="".join(seen), lines=lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=60)


def shared_demo_run(base: Path) -> DemoRun:
    """Run the demo once (into ``base``) and return the run; later calls return the same run."""
    global _RUN
    if _RUN is None:
        out, home, zoo = base / "demo-output", base / "home", observed_zoo_dir()
        home.mkdir(parents=True, exist_ok=True)
        done = run_demo_cli(out, home, zoo)
        if done.returncode != 0:
            raise AssertionError(f"bnconvention demo exited {done.returncode}\nstdout:\n{done.stdout}\n"
                                 f"stderr:\n{done.stderr[-6000:]}")
        _RUN = DemoRun(out=out, home=home, zoo=zoo, stdout=done.stdout, stderr=done.stderr)
    return _RUN
