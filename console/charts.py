"""Server-rendered SVG charts: no script, no network, readable in any browser and in
headless Chromium. Each chart has axes with units, a legend, a <title> per point for
hover, and the page shows the same numbers as a table beside it (the alternative)."""

import math
from collections.abc import Sequence
from datetime import datetime
from html import escape

from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, BOTTOM = 64, 16, 44
LEGEND_ROW = 16  # the legend sits above the plot, five entries a row
# Colour-blind-safe (Okabe-Ito), repeated past eight series.
MAX_MARKED_POINTS = 62  # up to two months of days get a dot (with a hover title) per value
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")


def nice_ceiling(value: float) -> float:
    """The axis top: 1, 2, 2.5 or 5 times a power of ten, at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value * (1 - 1e-12):
            return step * power
    return 10 * power


def _format(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:.0%}" if value >= 0.1 or value == 0 else f"{value:.1%}"
    if unit == "USD":
        if value >= 1 or value == 0:
            return f"${value:,.2f}"
        # Below a dollar: as many decimals as needed (up to 4), at least 2 ($0.25, $0.0025).
        digits = f"{value:.4f}".rstrip("0")
        return "$" + digits.ljust(len(digits.split(".")[0]) + 3, "0")
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:,.0f}" if value == int(value) else f"{value:.2f}"


def _x_label(moment: datetime, hourly: bool) -> str:
    return moment.strftime("%H:%M") if hourly else moment.strftime("%m-%d")


def line_chart(
    *,
    title: str,
    unit: str,
    x: Sequence[datetime],
    series: dict[str, Sequence[float | None]],
    hourly: bool,
    x_unit: str = "",
    testid: str = "chart",
) -> SafeString:
    """Lines over time, one per series; None leaves a gap. `unit` is shown on the y axis
    ("calls", "tokens", "USD" or "%": shares 0..1)."""
    top_margin = 8 + LEGEND_ROW * max(1, math.ceil(len(series) / 5))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - top_margin - BOTTOM
    bottom = top_margin + plot_h
    values = [v for line in series.values() for v in line if v is not None]
    top = (
        1.0
        if unit == "%" and values and max(values) > 0.5
        else nice_ceiling(max(values, default=0))
    )
    n = max(len(x), 1)

    def px(i: int) -> float:
        return LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def py(v: float) -> float:
        return top_margin + plot_h - plot_h * (v / top if top else 0)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'class="chart" role="img" aria-label="{escape(title)}" data-testid="{escape(testid)}">',
        f"<title>{escape(title)}</title>",
    ]
    # Y axis: five gridlines with values, the unit as its label.
    for k in range(5):
        v = top * k / 4
        y = py(v)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">'
            f"{escape(_format(v, unit))}</text>"
        )
    parts.append(
        f'<text x="12" y="{top_margin + plot_h / 2:.1f}" class="axis-label" text-anchor="middle" '
        f'transform="rotate(-90 12 {top_margin + plot_h / 2:.1f})">{escape(unit)}</text>'
    )
    # X axis: about eight labels.
    every = max(1, round(n / 8))
    for i in range(0, len(x), every):
        parts.append(
            f'<text x="{px(i):.1f}" y="{HEIGHT - BOTTOM + 16}" class="tick" text-anchor="middle">'
            f"{escape(_x_label(x[i], hourly))}</text>"
        )
    zone = x[0].tzname() if x else ""
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 6}" class="axis-label" '
        f'text-anchor="middle">{escape(x_unit or ("hour" if hourly else "day"))} '
        f"({escape(zone or '')})</text>"
    )
    parts.append(
        f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" class="axis"/>'
    )
    for index, (name, line) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        runs: list[list[str]] = [[]]
        for i, v in enumerate(line):
            if v is None:
                runs.append([])
                continue
            runs[-1].append(f"{px(i):.1f},{py(float(v)):.1f}")
            if n > MAX_MARKED_POINTS:
                continue  # a long series: the line alone (the table has every value)
            parts.append(
                f'<circle cx="{px(i):.1f}" cy="{py(float(v)):.1f}" r="2.2" fill="{colour}">'
                f"<title>{escape(name)} {escape(_x_label(x[i], hourly))}: "
                f"{escape(_format(float(v), unit))}</title></circle>"
            )
        for run in runs:
            if len(run) > 1:
                parts.append(
                    f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" '
                    'stroke-width="2"/>'
                )
        lx = LEFT + 8 + 130 * (index % 5)
        ly = 14 + LEGEND_ROW * (index // 5)
        parts.append(
            f'<rect x="{lx}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{lx + 14}" y="{ly + 1}" class="legend">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every text above is escaped


def heat_colour(share: float | None) -> str:
    """Background of a heatmap cell: white (0 %) to deep red (50 % or more); grey without
    traffic."""
    if share is None:
        return "#f1f2f4"
    strength = min(1.0, share / 0.5)
    red, green, blue = 255, int(255 - 190 * strength), int(255 - 200 * strength)
    return f"rgb({red},{green},{blue})"
