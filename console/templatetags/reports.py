"""Template helpers of the report and call explorer pages."""

from typing import Any
from urllib.parse import urlencode

from django import template

register = template.Library()


@register.filter
def urlencode_dict(params: dict[str, Any]) -> str:
    """A query string from a dict, leaving out empty values."""
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})


@register.filter
def ms(value: Any) -> str:
    """Milliseconds, readable: 840 ms, 14.2 s."""
    if value is None or value == "":
        return "—"
    v = float(value)
    return f"{v / 1000:.1f} s" if v >= 10_000 else f"{v:,.0f} ms"
