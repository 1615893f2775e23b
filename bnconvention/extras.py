"""Which optional dependencies a command needs, and the one-line error when one is missing.

The core install (``pip install bnconvention``) is what the submission-pipeline commands need: ``validate``,
``inspect``, ``stamp``, ``card``, ``schema``, ``publish``, the header-only ``hub census`` and ``hub validate``, and
``hubserver``. It is light enough for a pre-commit hook's environment. Everything that runs a model lives behind
an extra:

* ``bnconvention[refit]``: torch, torchvision, numpy, scikit-learn (``declare``, ``refit``, ``zoo build``);
* ``bnconvention[audit]``: the refit extra plus scipy and matplotlib (``audit``, ``census``, ``demo``,
  ``hub audit``, ``hub push``);
* ``bnconvention[timm]``, ``[transformers]``: the refit extra plus that library, for releases whose
  ``config.json`` names a timm or transformers architecture;
* ``bnconvention[datasets]``: the refit extra plus Hugging Face ``datasets`` (with pyarrow and pandas), for pools
  held as a dataset repo, a ``save_to_disk`` folder or parquet files;
* ``bnconvention[lightning]``: the refit extra plus Lightning, for the Lightning callback that records the
  convention (the ``transformers`` extra gives the ``Trainer`` one).
* ``bnconvention[provenance]``: model-signing, spdx-python-model, spdx-tools and cyclonedx-python-lib, no torch
  (``sign``, ``verify``, ``export``; ``validate`` checks signatures with it and says the check was not run without
  it).

The library extras sit beside ``audit`` rather than inside it, so the error for a missing one names both when the
command needs both (``pip install 'bnconvention[audit,timm]'``): one install, and the command works.

Those modules are imported inside the commands that use them, never at the top of a module that the core
commands import (``tests/test_extras.py`` imports the validation path with them blocked).

>>> missing_dependency(ModuleNotFoundError("No module named 'torch'", name="torch")).extra
'refit'
>>> missing_dependency(ModuleNotFoundError("No module named 'torch'", name="torch"), extra="audit").extra
'audit'
>>> missing_dependency(ModuleNotFoundError("No module named 'timm'", name="timm"), extra="audit").extra
'audit,timm'
>>> missing_dependency(ModuleNotFoundError("No module named 'mypkg'", name="mypkg")) is None
True
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from bnconvention.errors import MissingDependencyError

# Top-level module -> the smallest extra that installs it.
MODULE_EXTRAS: dict[str, str] = {
    "torch": "refit",
    "torchvision": "refit",
    "numpy": "refit",
    "sklearn": "refit",
    "scipy": "audit",
    "matplotlib": "audit",
    "ray": "ray",
    "timm": "timm",
    "transformers": "transformers",
    "datasets": "datasets",
    "lightning": "lightning",
    "model_signing": "provenance",
    "OpenSSL": "provenance",
    "spdx_tools": "provenance",
    "spdx_python_model": "provenance",
    "cyclonedx": "provenance",
}
# Extra -> the extras it installs too (pyproject.toml's self-references, followed; tests/test_extras.py checks it).
EXTRA_INCLUDES: dict[str, frozenset[str]] = {
    "refit": frozenset(),
    "audit": frozenset({"refit"}),
    "ray": frozenset({"audit", "refit"}),
    "timm": frozenset({"refit"}),
    "transformers": frozenset({"refit"}),
    "datasets": frozenset({"refit"}),
    "lightning": frozenset({"refit"}),
    "provenance": frozenset(),
}
# The pip distribution name where it differs from the module's.
_DISTRIBUTIONS = {"sklearn": "scikit-learn", "model_signing": "model-signing", "OpenSSL": "pyopenssl",
                  "spdx_tools": "spdx-tools", "spdx_python_model": "spdx-python-model",
                  "cyclonedx": "cyclonedx-python-lib"}


def needs_extra(parser: argparse.ArgumentParser, extra: str) -> None:
    """Mark a command as needing ``bnconvention[extra]``: a missing dependency then names that extra (and the
    command, by its ``prog``) in its one-line error, so one install makes the command work."""
    parser.set_defaults(extra=extra, extra_command=parser.prog)


def extras_for(*extras: str | None) -> str:
    """The fewest extras whose install covers all of ``extras``, comma-joined as in ``bnconvention[audit,timm]``
    (an extra another one includes is left out; the rest in ``EXTRA_INCLUDES``' order).

    >>> extras_for("refit", "audit"), extras_for("timm", "refit"), extras_for("transformers", "audit")
    ('audit', 'timm', 'audit,transformers')
    """
    wanted = {e for e in extras if e is not None}
    kept = [e for e in EXTRA_INCLUDES if e in wanted and not any(e in EXTRA_INCLUDES.get(o, ()) for o in wanted)]
    return ",".join(kept + sorted(wanted - set(EXTRA_INCLUDES)))


def missing_dependency(exc: ModuleNotFoundError, *, extra: str | None = None,
                       command: str | None = None) -> MissingDependencyError | None:
    """The one-line error for a missing optional dependency, or None when ``exc`` is about another module.

    The extras named are those that cover both the missing module's and the command's ``extra`` (``audit`` for
    a missing torch under ``audit``; ``audit,timm`` for a missing timm); ``command`` (e.g.
    ``"bnconvention audit"``) names who needs it. The error's ``extra`` is what goes between the brackets.
    """
    module = (exc.name or "").split(".")[0]
    needed = MODULE_EXTRAS.get(module)
    if needed is None:
        return None
    brackets = extras_for(needed, extra)
    package = _DISTRIBUTIONS.get(module, module)
    return MissingDependencyError(
        f"{command or 'this command'} needs {package}, which is not installed; install the extra: "
        f"pip install 'bnconvention[{brackets}]'", module=module, extra=brackets)


def import_extra(module: str, *, command: str) -> Any:
    """Import an optional library, or raise the one-line :func:`missing_dependency` error naming its extra and
    ``command`` (who needs it); a missing module that is not an extra's is re-raised as it is."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise (missing_dependency(exc, command=command) or exc) from exc


__all__ = ["EXTRA_INCLUDES", "MODULE_EXTRAS", "extras_for", "import_extra", "missing_dependency", "needs_extra"]
