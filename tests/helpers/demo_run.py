"""One run of ``bnconvention demo`` per test session, shared by test_demo.py and test_browser.py.

The demo runs as the user runs it (``python -m bnconvention demo``, a subprocess) into a temporary folder. Its zoo
lives in ``<repo>/.cache/zoo-<code version>-seed0-observed`` (built once with the recorder observing training,
reused by later sessions, like the shared ``zoo`` fixture's cache). ``HOME`` points into the temporary folder, so a
write to ``~/.cache/huggingface`` would show there. The result is kept in this module (imported once per session),
so both test modules get the same run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def run_demo_cli(out: Path, home: Path, zoo: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update({"HOME": str(home), "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"})
    env.pop("HF_HOME", None)  # the demo must choose its own (inside --out)
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run(
        [sys.executable, "-m", "bnconvention", "demo", "--out", str(out), "--zoo", str(zoo), "--no-progress", *extra],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, check=False)


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
