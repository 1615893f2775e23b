"""Progress bars only on a terminal unless asked (a piped demo log held thousands of bar redraws)."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from bnconvention.cli import main as cli
from bnconvention.cli.progress import show_progress
from bnconvention.zoo.models import convnet_bn

ROOT = Path(__file__).resolve().parent.parent
# Every command that draws a bar (tqdm through the library), by its path under `bnconvention`.
BAR_COMMANDS = [("stamp",), ("refit",), ("audit",), ("census",), ("zoo", "build"), ("demo",), ("hub", "census"),
                ("hub", "audit"), ("hub", "push"), ("hub", "validate")]
REFIT_BAR = "exact refit (layer-major)"


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_show_progress_follows_the_flag_then_the_terminal() -> None:
    assert show_progress(None, stream=Terminal()) is True
    assert show_progress(None, stream=io.StringIO()) is False
    assert show_progress(False, stream=Terminal()) is False
    assert show_progress(True, stream=io.StringIO()) is True
    closed = io.StringIO()
    closed.close()
    assert show_progress(None, stream=closed) is False


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # noqa: SLF001 - argparse exposes subparsers only this way
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return action.choices[name]
    raise KeyError(name)


@pytest.mark.parametrize("path", BAR_COMMANDS, ids=" ".join)
def test_every_command_with_bars_has_both_flags(path: tuple[str, ...]) -> None:
    parser = cli.build_parser()
    for name in path:
        parser = _subparser(parser, name)
    [action] = [a for a in parser._actions if a.dest == "progress"]  # noqa: SLF001
    assert action.option_strings == ["--progress", "--no-progress"]
    assert action.default is None  # not given: decided by whether stderr is a terminal


def test_no_command_decides_on_its_own() -> None:
    """One helper decides: no CLI module looks at the terminal or keeps an old --no-progress flag itself."""
    for path in sorted((ROOT / "bnconvention" / "cli").glob("*_cmd.py")):
        text = path.read_text(encoding="utf-8")
        assert "isatty" not in text and "no_progress" not in text, path.name


@pytest.fixture()
def refit_argv(tmp_path: Path) -> list[str]:
    torch.manual_seed(0)
    weights = tmp_path / "model.safetensors"
    save_file(convnet_bn(width=4).state_dict(), str(weights))
    pool = tmp_path / "pool.npz"
    np.savez(pool, x=np.random.default_rng(0).random((8, 1, 16, 16), dtype=np.float32))
    return ["refit", str(weights), "--arch", "zoo/convnet-bn", "--arch-kwargs", '{"width": 4}', "--pool", str(pool),
            "--out", str(tmp_path / "out.safetensors"), "--report", str(tmp_path / "report.json")]


@pytest.mark.parametrize(("terminal", "flags", "bar"), [
    pytest.param(False, [], False, id="pipe"),
    pytest.param(False, ["--progress"], True, id="pipe-forced"),
    pytest.param(True, [], True, id="terminal"),
    pytest.param(True, ["--no-progress"], False, id="terminal-hidden"),
])
def test_refit_bar_on_a_terminal_only(refit_argv: list[str], monkeypatch: pytest.MonkeyPatch, terminal: bool,
                                      flags: list[str], bar: bool) -> None:
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert cli.main(refit_argv + flags) == 0
    assert (REFIT_BAR in stderr.getvalue()) is bar, stderr.getvalue()


@pytest.mark.parametrize(("flags", "bars", "stage_lines"), [
    pytest.param([], False, True, id="pipe: stage lines, no bars"),
    pytest.param(["--progress"], True, True, id="forced"),
    pytest.param(["--no-progress"], False, False, id="silent"),
])
def test_demo_keeps_its_stage_lines_in_a_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                             bars: bool, stage_lines: bool) -> None:
    import bnconvention.demo

    seen: dict[str, object] = {}

    def fake_run_demo(out: str, **kwargs: object) -> SimpleNamespace:
        seen.update(kwargs)
        return SimpleNamespace(out=Path(out))

    monkeypatch.setattr(bnconvention.demo, "run_demo", fake_run_demo)
    monkeypatch.setattr(bnconvention.demo, "summary_text", lambda result: "summary\n")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # demo_cmd sets it for the process; keep it scoped
    assert cli.main(["demo", "--out", str(tmp_path / "demo"), *flags]) == 0
    assert (seen["progress"], seen["stage_lines"]) == (bars, stage_lines)
