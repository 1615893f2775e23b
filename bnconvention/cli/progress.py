"""When the CLI draws progress bars (on a terminal, or when asked) and writes stage lines (unless told not to).

A bar redrawn several times a second helps someone watching a terminal; in a pipe or a CI log every redraw
becomes one more line (a demo run wrote thousands). So bars are shown only when stderr is a terminal, unless
``--progress`` forces them (a terminal that is not detected as one) or ``--no-progress`` hides them. Every command
that draws bars adds the flag with :func:`add_progress_option` and asks :func:`show_progress`; the library's
functions take a plain ``progress: bool`` and never guess.

A long command redirected to a file must still say what it is doing as it does it (``demo --serve`` and
``hub audit`` were silent for minutes in a log). Stage lines are that: one line on stderr per stage begun or item
finished, flushed at once, written whatever the stream is (:func:`show_stage_lines`: only ``--no-progress`` hides
them), above the bars when bars are drawn (:func:`stage_line`).

>>> import io
>>> show_progress(None, stream=io.StringIO()), show_progress(True, stream=io.StringIO()), show_progress(False)
(False, True, False)
>>> show_stage_lines(None), show_stage_lines(True), show_stage_lines(False)
(True, True, False)
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from tqdm.auto import tqdm

DEFAULT_HELP = "progress bars on stderr (default: only when stderr is a terminal)"


def add_progress_option(parser: argparse.ArgumentParser, *, help: str = DEFAULT_HELP) -> None:  # noqa: A002
    """``--progress`` / ``--no-progress`` into ``args.progress``: True, False, or None (not given)."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help=help)


def show_progress(choice: bool | None, *, stream: TextIO | None = None) -> bool:
    """Whether to draw bars: the flag when given, else whether ``stream`` (default: stderr) is a terminal."""
    if choice is not None:
        return choice
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def show_stage_lines(choice: bool | None) -> bool:
    """Whether to write stage lines: always, on any stream, unless ``--no-progress`` (``choice`` False)."""
    return choice is not False


def stage_line(text: str, *, bars: bool, stream: TextIO | None = None) -> None:
    """Write one stage line to ``stream`` (default: stderr) now, flushed; with ``bars`` drawn, above them
    (``tqdm.write`` clears and redraws the bars, so a line never lands inside one)."""
    stream = sys.stderr if stream is None else stream
    if bars:
        tqdm.write(text, file=stream)
    else:
        stream.write(text + "\n")
    stream.flush()


__all__ = ["DEFAULT_HELP", "add_progress_option", "show_progress", "show_stage_lines", "stage_line"]
