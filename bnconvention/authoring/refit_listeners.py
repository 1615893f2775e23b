"""Process-wide listeners for buffer writes that do not go through a BN forward (refits).

The recorder registers a listener while it is active; the refit engine calls :func:`notify_refit` after a
successful refit, so a recording of an unlearning run sees "refit on split X" instead of unexplained buffer changes.
Kept dependency-free so both sides can import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RefitListener = Callable[[Any, Any], None]  # (model, RefitReport) -> None

_listeners: list[RefitListener] = []


def add_refit_listener(listener: RefitListener) -> None:
    _listeners.append(listener)


def remove_refit_listener(listener: RefitListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def notify_refit(model: Any, report: Any) -> None:
    """Tell every active listener that ``model``'s running statistics were just replaced by a refit."""
    for listener in list(_listeners):
        listener(model, report)
