"""HTML building blocks of the report: escaping, links, badges, tables and the page's inline CSS.

Every string that comes from outside this package (repo ids, card text, census reasons, validator messages, cell and
criterion names) goes through :func:`esc` (``html.escape`` with quotes) before it reaches the page, attributes
included; links point only at files inside the report folder.

>>> esc('<img src=x onerror="alert(1)">')
'&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'
>>> print(table(["a"], [["<b>1</b>"]], numeric=(0,)))
<table>
<thead><tr><th>a</th></tr></thead>
<tbody>
<tr><td class="num"><b>1</b></td></tr>
</tbody></table>
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d2430;
       background: #f6f7f9; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 1.5rem 1.5rem 3rem; }
h1 { font-size: 1.6rem; margin: 0.2rem 0 0.4rem; }
h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 2px solid #d7dce3; padding-bottom: 0.2rem; }
h3 { font-size: 1.05rem; margin: 1.6rem 0 0.4rem; }
section.checkpoint { background: #fff; border: 1px solid #d7dce3; border-radius: 6px; padding: 0.4rem 1rem 1rem;
                     margin: 1rem 0; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.88rem; background: #fff; }
th, td { border: 1px solid #d7dce3; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { font-size: 0.85em; background: #eef1f5; padding: 0 0.2em; border-radius: 3px; overflow-wrap: anywhere; }
blockquote { margin: 0.6rem 0; padding: 0.4rem 0.8rem; border-left: 4px solid #5b7db1; background: #eef3fa; }
img { max-width: 100%; height: auto; border: 1px solid #d7dce3; background: #fff; }
.badge { display: inline-block; padding: 0 0.45em; border-radius: 4px; font-size: 0.8rem; font-weight: 600; }
.displaced, .flag, .error { background: #fde2e1; color: #8a1c16; }
.equivalent, .ok { background: #dff3e4; color: #185c2c; }
.undetermined, .warning { background: #fff1cc; color: #6b4f00; }
.absent { background: #e6e9ef; color: #39414d; }
.muted { color: #5f6b7a; font-size: 0.85rem; }
nav a { margin-right: 1rem; }
figure.chart { margin: 0.8rem 0; overflow-x: auto; }
figure.chart svg { background: #fff; border: 1px solid #d7dce3; max-width: 100%; height: auto; }
"""


def esc(value: Any) -> str:
    """``value`` as HTML text (``html.escape`` with quotes): safe in element content and in quoted attributes."""
    return html.escape(str(value), quote=True)


def esc_code(text: str) -> str:
    """``text`` escaped, with Markdown-style `backtick` spans shown as ``<code>`` (the census readings use them).

    >>> esc_code("verdict `df <= 0.05` flips")
    'verdict <code>df &lt;= 0.05</code> flips'
    """
    parts = esc(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: leave the text as it is
        return esc(text)
    return "".join(f"<code>{part}</code>" if index % 2 else part for index, part in enumerate(parts))


def href(path: str) -> str:
    """A relative link to a file inside the report folder, percent-encoded and then escaped for the attribute."""
    return esc(quote(path, safe="/"))


def badge(text: str, kind: str) -> str:
    return f'<span class="badge {esc(kind)}">{esc(text)}</span>'


def table(header: Sequence[str] | None, rows: Iterable[Sequence[str]], *, table_id: str | None = None,
          row_attrs: Sequence[Mapping[str, str]] | None = None, numeric: Sequence[int] = ()) -> str:
    """An HTML table. ``header`` is plain text (escaped here; ``None``: no header row); ``rows`` hold ready HTML
    (callers escape)."""
    attrs = f' id="{esc(table_id)}"' if table_id else ""
    lines = [f"<table{attrs}>"]
    if header is not None:
        lines.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead>")
    lines.append("<tbody>")
    for index, row in enumerate(rows):
        extra = ""
        if row_attrs is not None:
            extra = "".join(f' {esc(k)}="{esc(v)}"' for k, v in row_attrs[index].items())
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        lines.append(f"<tr{extra}>{cells}</tr>")
    lines.append("</tbody></table>")
    return "\n".join(lines)


def page(title: str, body: Sequence[str]) -> str:
    """A whole HTML document: ``title`` (plain text, escaped here) and ``body`` (ready HTML) with the inline CSS."""
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # no favicon request: a file:// page would log a failed fetch for /favicon.ico otherwise
        '<link rel="icon" href="data:,">',
        f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body><main>",
        *body,
        "</main></body>",
        "</html>",
    ]) + "\n"


__all__ = ["CSS", "badge", "esc", "esc_code", "href", "page", "table"]
