"""The top-level public API: every exported name resolves, and importing the package does not import torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

import bnconvention


def test_every_exported_name_resolves() -> None:
    missing = [name for name in bnconvention.__all__ if getattr(bnconvention, name, None) is None]
    assert missing == []


def test_unknown_attribute_raises_attribute_error() -> None:
    try:
        bnconvention.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def _run_python(code: str) -> str:
    """``code`` run in a fresh interpreter; its stdout. ``-X faulthandler`` makes a child that dies of a signal
    (SIGABRT, SIGSEGV) print every thread's Python stack, and a failure shows the child's stderr: a torch child that
    died of SIGABRT on a loaded machine once left nothing but its exit status to read."""
    out = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, f"the child exited with status {out.returncode}; its stderr:\n{out.stderr}"
    return out.stdout


def test_import_and_validator_do_not_import_torch() -> None:
    code = (
        "import sys, bnconvention; bnconvention.validate_record; bnconvention.stamp_file; "
        "print('torch' in sys.modules)"
    )
    assert _run_python(code).strip() == "False"


@pytest.mark.parametrize("first", ["bnconvention.refitting.exact", "bnconvention.refitting",
                                   "bnconvention.cli.refit_cmd"])
def test_refit_is_the_function_whatever_was_imported_first(first: str) -> None:
    # Regression: the package was named refit too, so once one of its submodules was imported,
    # `from bnconvention import refit` returned the package (Python binds subpackages on their parent), and calling
    # it failed. The package is ``refitting`` now: no submodule import can shadow the function.
    code = (
        f"import {first}, inspect, torch\n"
        "import bnconvention.refitting.engine as engine\n"
        "from bnconvention import refit\n"
        "assert inspect.isfunction(refit) and refit is engine.refit, refit\n"
        "model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2)).eval()\n"
        "print(type(refit(model, [torch.ones(4, 1, 5, 5)])).__name__)\n"
    )
    assert _run_python(code).strip() == "RefitReport"


def test_hub_run_census_is_a_deprecated_alias_of_census_org() -> None:
    import warnings

    import bnconvention.hub as hub

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert hub.run_census is hub.census_org
    assert "use bnconvention.hub.census_org" in str(caught[0].message)
    assert "run_census" not in hub.__all__ and "census_org" in hub.__all__
