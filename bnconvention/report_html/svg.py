"""Inline SVG charts for the report: a linear (or log) axis, nice ticks, and a figure that collects elements.

The report opens from disk with no scripts and no external resources, so its figures are SVG written into the page
rather than images of a plotting library. Every text that reaches a figure goes through :func:`~.markup.esc`;
coordinates are rounded to 0.1 px so a figure is the same text on every machine for the same numbers.

>>> axis = Axis(0.0, 10.0, 50.0, 250.0)
>>> axis(5.0)
150.0
>>> nice_ticks(-3.2, 47.0)
[0.0, 10.0, 20.0, 30.0, 40.0]
>>> fig = Figure(300, 120, title="shifts")
>>> fig.circle(150.0, 60.0, 3, kind="displaced", tip="ckpt: +5.0 pp")
>>> fig.render().startswith('<svg xmlns="http://www.w3.org/2000/svg" width="300" height="120"')
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bnconvention.report_html.markup import esc

# Colours of the outcomes, the same hues as the page's badges (markup.CSS), darker for strokes on white.
COLOURS = {"displaced": "#c0392b", "equivalent": "#1e8449", "undetermined": "#b7950b", "control": "#5b7db1",
           "absent": "#7f8c8d", "mean": "#1d2430", "band": "#eef1f5", "grid": "#d7dce3", "text": "#1d2430"}
SERIES = ("#5b7db1", "#c0392b", "#1e8449", "#b7950b", "#8e44ad", "#16a085")


def _n(value: float) -> str:
    text = f"{round(value, 1):.1f}"
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class Axis:
    """Maps data values in ``[lo, hi]`` to pixels in ``[pixel_lo, pixel_hi]`` (a log axis when ``log``; then
    ``lo`` must be positive). Values outside are clamped to the ends, so a stray point stays on the figure."""

    lo: float
    hi: float
    pixel_lo: float
    pixel_hi: float
    log: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.hi <= self.lo:
            raise ValueError(f"an axis needs finite lo < hi, got [{self.lo}, {self.hi}]")
        if self.log and self.lo <= 0:
            raise ValueError(f"a log axis needs lo > 0, got {self.lo}")

    def __call__(self, value: float) -> float:
        lo, hi, v = self.lo, self.hi, min(max(value, self.lo), self.hi)
        if self.log:
            lo, hi, v = math.log(lo), math.log(hi), math.log(v)
        return round(self.pixel_lo + (v - lo) / (hi - lo) * (self.pixel_hi - self.pixel_lo), 1)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values inside ``[lo, hi]``, about ``count`` of them, at a step of 1, 2 or 5 times a power of 10."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1.0, 2.0, 5.0, 10.0)), key=lambda candidate: abs(math.log(candidate / raw)))
    first = math.ceil(lo / step) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 10) + 0.0)  # + 0.0: no -0.0 label
        value += step
    return ticks


def padded_range(values: list[float], *, include: tuple[float, ...] = (), pad: float = 0.05) -> tuple[float, float]:
    """``(lo, hi)`` covering ``values`` and ``include`` with ``pad`` of the span on each side (never empty)."""
    everything = [v for v in (*values, *include) if math.isfinite(v)]
    if not everything:
        return 0.0, 1.0
    lo, hi = min(everything), max(everything)
    span = hi - lo or max(abs(hi), 1.0)
    return lo - pad * span, hi + pad * span


@dataclass
class Figure:
    """An SVG figure: elements are appended in drawing order; :meth:`render` closes it. ``title`` becomes the SVG's
    accessible name (``<title>`` and ``aria-label``)."""

    width: int
    height: int
    title: str
    elements: list[str] = field(default_factory=list)

    def line(self, x1: float, y1: float, x2: float, y2: float, *, colour: str = COLOURS["grid"],
             width: float = 1.0, dash: str | None = None) -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.elements.append(f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{colour}" '
                             f'stroke-width="{_n(width)}"{extra}/>')

    def polyline(self, points: list[tuple[float, float]], *, colour: str, width: float = 2.0) -> None:
        coords = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
        self.elements.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" '
                             f'stroke-width="{_n(width)}"/>')

    def rect(self, x: float, y: float, w: float, h: float, *, fill: str, opacity: float = 1.0) -> None:
        self.elements.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0.0))}" height="{_n(max(h, 0.0))}" '
                             f'fill="{fill}" fill-opacity="{opacity:g}"/>')

    def circle(self, x: float, y: float, r: float, *, kind: str, tip: str | None = None,
               data: str | None = None) -> None:
        colour = COLOURS.get(kind, kind)
        attrs = f' data-point="{esc(data)}"' if data else ""
        body = f"<title>{esc(tip)}</title>" if tip else ""
        self.elements.append(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r)}" fill="{colour}" class="{esc(kind)}"'
                             f"{attrs}>{body}</circle>")

    def diamond(self, x: float, y: float, r: float, *, tip: str, data: str | None = None) -> None:
        points = f"{_n(x)},{_n(y - r)} {_n(x + r)},{_n(y)} {_n(x)},{_n(y + r)} {_n(x - r)},{_n(y)}"
        attrs = f' data-mean="{esc(data)}"' if data else ""
        self.elements.append(f'<polygon points="{points}" fill="{COLOURS["mean"]}"{attrs}>'
                             f"<title>{esc(tip)}</title></polygon>")

    def text(self, x: float, y: float, content: str, *, anchor: str = "start", size: int = 11,
             weight: str = "normal", colour: str = COLOURS["text"]) -> None:
        self.elements.append(f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}" font-size="{size}" '
                             f'font-weight="{weight}" fill="{colour}">{esc(content)}</text>')

    def x_axis(self, axis: Axis, *, y: float, top: float, label: str, ticks: list[float] | None = None) -> None:
        """Grid lines from ``top`` to ``y`` at each tick, tick labels under ``y`` and the axis label below."""
        for tick in ticks if ticks is not None else nice_ticks(axis.lo, axis.hi):
            self.line(axis(tick), top, axis(tick), y)
            self.text(axis(tick), y + 14, f"{tick:g}", anchor="middle", size=10)
        self.text((axis.pixel_lo + axis.pixel_hi) / 2, y + 30, label, anchor="middle")

    def y_axis(self, axis: Axis, *, x: float, right: float, label: str) -> None:
        for tick in nice_ticks(min(axis.lo, axis.hi), max(axis.lo, axis.hi)):
            self.line(x, axis(tick), right, axis(tick))
            self.text(x - 5, axis(tick) + 3.5, f"{tick:g}", anchor="end", size=10)
        middle = (axis.pixel_lo + axis.pixel_hi) / 2
        self.elements.append(f'<text x="12" y="{_n(middle)}" text-anchor="middle" font-size="11" '
                             f'transform="rotate(-90 12 {_n(middle)})">{esc(label)}</text>')

    def render(self) -> str:
        return "\n".join([
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
            f'viewBox="0 0 {self.width} {self.height}" role="img" aria-label="{esc(self.title)}" '
            'font-family="system-ui, sans-serif">',
            f"<title>{esc(self.title)}</title>",
            *self.elements,
            "</svg>",
        ])


__all__ = ["COLOURS", "SERIES", "Axis", "Figure", "nice_ticks", "padded_range"]
