"""Which optional dependencies a command needs, and the one-line error when one is missing.

The core install (``pip install bnconvention``) is what the submission-pipeline commands need: ``validate``,
``inspect``, ``stamp``, ``card``, ``schema``, ``publish``, the header-only ``hub census`` and ``hub validate``, and
``hubserver``. It is light enough for a pre-commit hook's environment. Everything that runs a model lives behind
an extra:

* ``bnconvention[refit]``: torch, torchvision, numpy, scikit-learn (``declare``, ``refit``, ``zoo build``);
* ``bnconvention[audit]``: the refit extra plus scipy and matplotlib (``audit``, ``census``, ``demo``,
  ``hub audit``, ``hub push``);
* ``bnconvention[timm]``, ``bnconvention[transformers]``: the libraries that build timm and transformers
  architectures named by a repo's ``config.json`` (:mod:`bnconvention.architectures`).

Those modules are imported inside the commands that use them, never at the top of a module that the core
commands import (``tests/test_extras.py`` imports the validation path with them blocked).

>>> missing_dependency(ModuleNotFoundError("No module named 'torch'", name="torch")).extra
'refit'
>>> missing_dependency(ModuleNotFoundError("No module named 'torch'", name="torch"), extra="audit").extra
'audit'
>>> missing_dependency(ModuleNotFoundError("No module named 'timm'", name="timm"), extra="audit").extra
'timm'
>>> missing_dependency(ModuleNotFoundError("No module named 'mypkg'", name="mypkg")) is None
True
"""

from __future__ import annotations

import argparse

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
}
# Extras in the order they contain each other: ``audit`` includes ``refit``.
_NESTED = ("refit", "audit")
# The pip distribution name where it differs from the module's.
_DISTRIBUTIONS = {"sklearn": "scikit-learn"}


def needs_extra(parser: argparse.ArgumentParser, extra: str) -> None:
    """Mark a command as needing ``bnconvention[extra]``: a missing dependency then names that extra (and the
    command, by its ``prog``) in its one-line error, so one install makes the command work."""
    parser.set_defaults(extra=extra, extra_command=parser.prog)


def missing_dependency(exc: ModuleNotFoundError, *, extra: str | None = None,
                       command: str | None = None) -> MissingDependencyError | None:
    """The one-line error for a missing optional dependency, or None when ``exc`` is about another module.

    The extra named is the larger of the missing module's and the command's ``extra``; ``command`` (e.g.
    ``"bnconvention audit"``) names who needs it.
    """
    module = (exc.name or "").split(".")[0]
    needed = MODULE_EXTRAS.get(module)
    if needed is None:
        return None
    if extra in _NESTED and needed in _NESTED:
        needed = max(needed, extra, key=_NESTED.index)
    package = _DISTRIBUTIONS.get(module, module)
    return MissingDependencyError(
        f"{command or 'this command'} needs {package}, which is not installed; install the extra: "
        f"pip install 'bnconvention[{needed}]'", module=module, extra=needed)


__all__ = ["MODULE_EXTRAS", "missing_dependency", "needs_extra"]
