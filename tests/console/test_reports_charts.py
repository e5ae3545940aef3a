"""The server-rendered SVG charts: axis tops, units, gaps, escaping, heatmap colours."""

from datetime import UTC, datetime, timedelta

from console.charts import heat_colour, line_chart, nice_ceiling

HOURS = [datetime(2026, 11, 30, h, tzinfo=UTC) for h in range(6)]


def test_axis_tops_are_round_numbers_at_or_above_the_data():
    assert [nice_ceiling(v) for v in (0, 0.3, 7, 10, 11, 180, 2600)] == [
        1.0,
        0.5,
        10,
        10,
        20,
        200,
        5000,
    ]


def test_a_chart_has_its_unit_ticks_legend_and_a_gap_for_missing_values():
    svg = str(
        line_chart(
            title="Calls",
            unit="calls",
            x=HOURS,
            series={"big": [1, 2, None, 4, 5, 6], "<small>": [0] * 6},
            hourly=True,
        )
    )
    assert svg.startswith("<svg") and 'aria-label="Calls"' in svg
    assert ">calls</text>" in svg and ">03:00</text>" in svg and "hour (UTC)" in svg
    assert svg.count("<polyline") == 3  # big is cut in two by its gap, small is one line
    assert "&lt;small&gt;" in svg and "<small>" not in svg


def test_shares_are_drawn_as_percentages_and_long_series_without_dots():
    svg = str(line_chart(title="Share", unit="%", x=HOURS, series={"big": [0.1] * 6}, hourly=True))
    assert ">100%</text>" not in svg and ">10%</text>" in svg
    days = [HOURS[0] + timedelta(days=d) for d in range(365)]
    long = str(
        line_chart(title="Year", unit="calls", x=days, series={"big": [1] * 365}, hourly=False)
    )
    assert "<circle" not in long and "<polyline" in long


def test_heat_colours_go_from_white_to_red_and_grey_without_traffic():
    assert heat_colour(None) == "#f1f2f4"
    assert heat_colour(0.0) == "rgb(255,255,255)"
    assert heat_colour(0.5) == heat_colour(0.9) == "rgb(255,65,55)"
