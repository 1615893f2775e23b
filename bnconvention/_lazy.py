"""One lazy-export mechanism for the package's public surfaces (``bnconvention`` and ``bnconvention.hub``).

``import bnconvention`` must not import torch, and ``bnconvention hub census`` must not import the audit machinery:
public names are resolved on first access, from a table ``name -> defining module``.

>>> getattr_, dir_ = lazy_exports("demo", {"dumps": "json"}, deprecated={"old_dumps": "dumps"})
>>> getattr_("dumps").__name__
'dumps'
>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     getattr_("old_dumps").__name__, str(caught[0].message)
('dumps', 'demo.old_dumps is deprecated: use demo.dumps')
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], *, deprecated: Mapping[str, str] | None = None,
                 namespace: dict[str, Any] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``.

    ``exports`` maps each public name to the module defining it; ``deprecated`` maps old names to their
    replacement (a DeprecationWarning names it). A resolved value is cached in ``namespace`` (the package's
    ``globals()``) so later lookups are plain attribute reads.
    """
    renamed = dict(deprecated or {})

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module-level hook's name is fixed by PEP 562
        if name in renamed:
            warnings.warn(f"{package}.{name} is deprecated: use {package}.{renamed[name]}", DeprecationWarning,
                          stacklevel=2)
            return __getattr__(renamed[name])
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        if namespace is not None:
            namespace[name] = value
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(namespace or ()) | set(exports))

    return __getattr__, __dir__
