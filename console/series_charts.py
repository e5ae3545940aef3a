"""The per-deployment time-series charts (calls, tokens, cost, capacity-error share) shared
by the usage report and the overview: one SVG and its table alternative per chart."""

from typing import Any

from console.charts import line_chart
from reports.usage import Series


def series_charts(
    series: Series, *, with_capacity: bool = True, testid_prefix: str = "chart"
) -> list[dict[str, Any]]:
    """Charts for `series`, none when no deployment has rollups in it."""
    if not series.deployments:
        return []
    specs: list[tuple[str, str, str, dict[str, list[Any]]]] = [
        ("calls", "Calls per deployment", "calls", series.calls),
        ("tokens", "Tokens per deployment", "tokens", series.tokens),
        (
            "cost",
            "Cost per deployment",
            "USD",
            {d: [float(c) for c in v] for d, v in series.cost.items()},
        ),
    ]
    if with_capacity:
        specs.append(
            ("capacity", "Capacity-error share per deployment", "%", series.capacity_share)
        )
    return [
        {
            "key": key,
            "title": title,
            "unit": unit,
            "svg": line_chart(
                title=title,
                unit=unit,
                x=series.buckets,
                series=data,
                hourly=series.unit == "hour",
                x_unit=f"{series.unit} starting",
                testid=f"{testid_prefix}-{key}",
            ),
            "rows": [
                (b, [data[d][i] for d in series.deployments]) for i, b in enumerate(series.buckets)
            ],
        }
        for key, title, unit, data in specs
    ]
