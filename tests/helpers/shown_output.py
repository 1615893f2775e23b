"""Compare the output a page shows with what a command printed (test_docs.py, and test_demo.py for the lines
``demo --serve`` prints): every shown line must appear in the output, in order; other lines may come between; runs
of spaces compare as one; ``...`` alone on a line marks omitted lines, and inside a line matches any text."""

from __future__ import annotations

import re


def _terminal_lines(text: str) -> list[str]:
    """The lines a terminal shows: what follows the last carriage return of each (progress bars redraw with
    ``\\r``), runs of whitespace as one space."""
    return [" ".join(line.rsplit("\r", 1)[-1].split()) for line in text.split("\n")]


def _line_pattern(shown: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in shown.split("...")))


def missing_output(shown: str, output: str) -> list[str]:
    """The lines of a ``text output`` block that ``output`` lacks: ``[]`` when every shown line matches an output
    line, in order; else the first one that does not, and every shown line after it."""
    wanted = [line for line in _terminal_lines(shown) if line and line != "..."]
    lines = _terminal_lines(output)
    position = 0
    for index, line in enumerate(wanted):
        pattern = _line_pattern(line)
        found = next((at for at in range(position, len(lines)) if pattern.fullmatch(lines[at])), None)
        if found is None:
            return wanted[index:]
        position = found + 1
    return []
