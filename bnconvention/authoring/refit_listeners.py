"""Process-wide listeners for buffer writes that do not go through a BN forward (refits).

The recorder registers a listener while it is active; the refit engine calls :func:`notify_refit` after a
successful refit, so a recording of an unlearning run sees "refit on split X" instead of unexplained buffer changes.
Kept dependency-free so both sides can import it without importing each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

RefitListener = Callable[[Any, Any], None]  # (model, RefitReport) -> None
WindowListener = Callable[[Any, bool], None]  # (model, entering) -> None

_listeners: list[RefitListener] = []
_window_listeners: list[WindowListener] = []


def add_refit_listener(listener: RefitListener) -> None:
    _listeners.append(listener)


def remove_refit_listener(listener: RefitListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def notify_refit(model: Any, report: Any) -> None:
    """Tell every active listener that ``model``'s running statistics were just replaced by a refit."""
    for listener in list(_listeners):
        listener(model, report)


def add_window_listener(listener: WindowListener) -> None:
    _window_listeners.append(listener)


def remove_window_listener(listener: WindowListener) -> None:
    if listener in _window_listeners:
        _window_listeners.remove(listener)


@contextlib.contextmanager
def refit_window(model: Any) -> Iterator[None]:
    """Around a refit's writes to ``model``'s buffers (and their restoration on failure): the recorder takes them
    for the refit's, not for writes it could not explain."""
    for listener in list(_window_listeners):
        listener(model, True)
    try:
        yield
    finally:
        for listener in list(_window_listeners):
            listener(model, False)
