"""The top-level public API: every exported name resolves, and importing the package does not import torch."""

from __future__ import annotations

import subprocess
import sys

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


def test_import_and_validator_do_not_import_torch() -> None:
    code = (
        "import sys, bnconvention; bnconvention.validate_record; bnconvention.stamp_file; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
