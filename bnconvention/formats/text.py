"""Small text helpers shared by every human-readable output: counted nouns and signed shifts.

>>> plural(1, "repo"), plural(3, "repo"), plural(2, "BatchNorm layer")
('1 repo', '3 repos', '2 BatchNorm layers')
>>> plural(2, "repository", "repositories")
'2 repositories'
>>> signed(-0.0001), signed(-0.004), signed(2.466)
('+0.00', '+0.00', '+2.47')
>>> signed(-0.006)
'-0.01'
"""

from __future__ import annotations


def plural(count: int, word: str, plural_form: str | None = None) -> str:
    """``count`` followed by ``word``, in the plural unless the count is exactly one."""
    return f"{count} {word if count == 1 else (plural_form or word + 's')}"


def signed(value: float, digits: int = 2) -> str:
    """``value`` with an explicit sign and ``digits`` decimals; a value that rounds to zero is ``+0.00``, never
    ``-0.00`` (a shift of -0.001 pp is no shift in the reported precision)."""
    text = f"{value:+.{digits}f}"
    return "+" + text[1:] if text.startswith("-") and float(text) == 0.0 else text
