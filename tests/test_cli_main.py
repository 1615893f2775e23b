"""The CLI entry point (bnconvention.cli.main): exit codes, one-line error messages, no traceback."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bnconvention import errors
from bnconvention.cli import main as cli
from bnconvention.cli import validate_cmd
from bnconvention.standard.schema import schema_text

ROOT = Path(__file__).resolve().parent.parent


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: bnconvention")
    assert "validate" in err and "schema" in err


@pytest.mark.parametrize("argv", [
    pytest.param(["no-such-command"], id="unknown-command"),
    pytest.param(["validate"], id="validate-without-path"),
    pytest.param(["validate", "--format", "xml", "x.json"], id="bad-format"),
])
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error:" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("bnconvention ")


def test_validate_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["validate", "--help"])
    out = capsys.readouterr().out
    assert "bnconvention validate examples/releases" in out
    assert "exit codes: 0 no errors" in out


@pytest.mark.parametrize(("exc", "code", "line"), [
    pytest.param(errors.UsageError("bad\n  flags"), 2, "bnconvention: usage error: bad flags", id="usage"),
    pytest.param(errors.CardError("c.md: bad YAML"), 2, "bnconvention: unreadable input: c.md: bad YAML", id="card"),
    pytest.param(errors.SafetensorsHeaderError("m: truncated"), 2, "bnconvention: unreadable input: m: truncated",
                 id="header"),
    pytest.param(errors.RecordError("r.json: invalid"), 1, "bnconvention: invalid record: r.json: invalid",
                 id="record"),
    pytest.param(errors.DigestMismatchError("differs"), 1, "bnconvention: digest mismatch: differs", id="digest"),
    pytest.param(errors.WeightsChangedError("moved"), 1, "bnconvention: weights changed: moved", id="weights"),
    pytest.param(errors.RefitError("empty pool"), 1, "bnconvention: error: empty pool", id="other-ours"),
    pytest.param(FileNotFoundError(2, "No such file"), 2, "bnconvention: file not found: [Errno 2] No such file",
                 id="not-found"),
    pytest.param(OSError("disk"), 1, "bnconvention: I/O error: disk", id="os-error"),
])
def test_errors_become_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                exc: BaseException, code: int, line: str) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(validate_cmd, "run", fail)
    assert cli.main(["validate", "x.json"]) == code
    err = capsys.readouterr().err
    assert err == line + "\n"


def test_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupt(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(validate_cmd, "run", interrupt)
    assert cli.main(["validate", "x.json"]) == 130
    assert capsys.readouterr().err == "bnconvention: interrupted\n"


def test_traceback_on_request(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise errors.RecordError("bad")

    monkeypatch.setattr(validate_cmd, "run", fail)
    assert cli.main(["--traceback", "validate", "x.json"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.endswith("bnconvention: invalid record: bad\n")


def test_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(ROOT / "examples" / "releases")]) == 0
    assert cli.main(["validate", str(ROOT / "examples" / "broken")]) == 1
    assert cli.main(["validate", str(tmp_path / "missing.safetensors")]) == 2
    out = capsys.readouterr().out
    assert out.count(" checked: ") == 3


def test_unreadable_input_is_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(b"\xff\xfe not json")
    assert cli.main(["validate", "--format", "json", str(path)]) == 2
    [issue] = json.loads(capsys.readouterr().out)
    assert issue["code"] == "json.not_utf8"
    assert path.read_bytes() == b"\xff\xfe not json"


def test_python_dash_m_and_schema_command() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "bnconvention", "validate", "examples/releases"], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("4 files checked: 0 errors, 0 warnings\n")
    schema = subprocess.run([sys.executable, "-m", "bnconvention", "schema"], cwd=ROOT, capture_output=True,
                            text=True, env=env, timeout=120, check=False)
    assert schema.returncode == 0
    assert schema.stdout == schema_text()


# --- commands imported when they run ----------------------------------------------------------------------------

PROBE = """\
import json, sys
from bnconvention.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after ``bnconvention ARGV`` (help and usage exits included)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _command_modules(modules: set[str]) -> set[str]:
    return {name for name in modules if name.startswith("bnconvention.cli.") and name.endswith("_cmd")}


def test_validate_does_not_import_torch() -> None:
    loaded = _modules_after("validate", "examples/releases/convnet-bn/model.safetensors")
    assert "bnconvention.validation" in loaded and "torch" not in loaded
    assert _command_modules(loaded) == {"bnconvention.cli.validate_cmd"}
    # The probe sees torch where a command imports it (refit's module imports the refit engine at its top).
    assert "torch" in _modules_after("refit", "--help")


def test_the_demo_command_imports_huggingface_hub_only_after_it_sets_hf_home() -> None:
    # huggingface_hub reads HF_HOME when it is imported; the demo sets it to a folder of its output when it runs, so
    # loading the demo command (as `demo --help` does) must not import huggingface_hub. Regression: the command
    # module imported the demo at its top, and the demo's Hub cache landed in ~/.cache/huggingface.
    assert "bnconvention.cli.demo_cmd" in (loaded := _modules_after("demo", "--help"))
    assert "huggingface_hub" not in loaded
    # The probe sees huggingface_hub where a command imports it at its top (the Hub commands' module does).
    assert "huggingface_hub" in _modules_after("hub", "--help")


def test_help_imports_no_command_module() -> None:
    assert _command_modules(_modules_after("--help")) == set()
    assert _command_modules(_modules_after()) == set()
    # The probe sees a command module where one is imported: a command's --help imports that module only.
    assert _command_modules(_modules_after("stamp", "--help")) == {"bnconvention.cli.stamp_cmd"}
    assert _command_modules(_modules_after("verify", "--help")) == {"bnconvention.cli.sign_cmd"}


def test_the_table_lists_what_the_modules_register() -> None:
    """``bnconvention --help`` lists the commands from the table; registered by their modules, they read the same."""
    from bnconvention.cli.commands import COMMANDS

    assert cli.build_parser(load=()).format_help() == cli.build_parser().format_help()
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
    assert list(commands.choices) == list(COMMANDS)


def test_a_missing_dependency_of_a_command_module_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    real_import = cli.importlib.import_module

    def without_scipy(name: str) -> object:
        if name == "bnconvention.cli.audit_cmd":
            raise ModuleNotFoundError("No module named 'scipy'", name="scipy")
        return real_import(name)

    monkeypatch.setattr(cli.importlib, "import_module", without_scipy)
    assert cli.main(["audit", "--help"]) == 1
    assert capsys.readouterr().err == ("bnconvention: missing dependency: bnconvention audit needs scipy, which is "
                                       "not installed; install the extra: pip install 'bnconvention[audit]'\n")
