"""Small text helpers shared by every human-readable output: counted nouns, signed shifts, one-line text.

>>> plural(1, "repo"), plural(3, "repo"), plural(2, "BatchNorm layer")
('1 repo', '3 repos', '2 BatchNorm layers')
>>> plural(2, "repository", "repositories")
'2 repositories'
>>> signed(-0.0001), signed(-0.004), signed(2.466)
('+0.00', '+0.00', '+2.47')
>>> signed(-0.006)
'-0.01'
>>> one_line(ValueError("bad\\n  value\\tat 3"))
'bad value at 3'
>>> elide("x" * 5000, 8)
'xxxxxxxx... (5,000 characters)'
>>> table_cell("a | <b>\\nc")
'a \\\\| &lt;b&gt; c'
"""

from __future__ import annotations

from collections.abc import Sequence


def plural(count: int, word: str, plural_form: str | None = None) -> str:
    """``count`` followed by ``word``, in the plural unless the count is exactly one."""
    return f"{count} {word if count == 1 else (plural_form or word + 's')}"


def signed(value: float, digits: int = 2) -> str:
    """``value`` with an explicit sign and ``digits`` decimals; a value that rounds to zero is ``+0.00``, never
    ``-0.00`` (a shift of -0.001 pp is no shift in the reported precision)."""
    text = f"{value:+.{digits}f}"
    return "+" + text[1:] if text.startswith("-") and float(text) == 0.0 else text


def one_line(value: object) -> str:
    """``str(value)`` with every run of whitespace (line breaks included) made one space: an error message or a
    value from untrusted input fits the one line a report, a census reason or the CLI gives it."""
    return " ".join(str(value).split())


MAX_SHOWN = 200  # characters of an untrusted value echoed in a message (elide)


def elide(value: object, limit: int = MAX_SHOWN) -> str:
    """:func:`one_line` of ``value``, cut to its first ``limit`` characters with how long it was: what a message
    echoes of a value from untrusted input (an architecture string, a layer name, a field of a repo's file), so that
    a 1 MB value makes a one-line error and not a 1 MB one. Short values are returned whole."""
    text = one_line(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def first_validation_error(exc: object) -> str:
    """``at <path>: <message> (<n> problems)`` for a pydantic ``ValidationError``: the first problem of an untrusted
    file, for a one-line error that also says how many there are."""
    errors = exc.errors()  # type: ignore[attr-defined]
    first = errors[0]
    where = "/".join(str(part) for part in first["loc"]) or "(top level)"
    return f"at {where}: {first['msg']} ({plural(len(errors), 'problem')})"


def table_cell(value: object) -> str:
    """:func:`one_line` made safe for a Markdown table cell: no pipes, no HTML (a value from a card or a header
    must not be able to end the table, or a generated section's comment markers)."""
    return one_line(value).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table's lines: the header, the rule, one line per row with pipes in cells escaped (the cells are
    the report's own text; values from untrusted input go through :func:`table_cell` first)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
