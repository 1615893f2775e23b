"""Child processes that a test stops with Ctrl-C (SIGINT).

A shell starts background jobs with SIGINT ignored, and children inherit the ignore: a suite launched as
``./scripts/test.sh &`` (or by a CI runner that does so) would see the server commands never stop on SIGINT, because
Python keeps an inherited SIG_IGN instead of installing its KeyboardInterrupt handler. Children the tests interrupt
start with SIGINT at its default, as in a terminal.
"""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT back to its default in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
