"""Number formats the console uses everywhere."""

from decimal import Decimal
from typing import Any

from django import template

register = template.Library()


@register.filter
def intcomma_plain(value: Any) -> str:
    """1234567 -> 1,234,567 (without django.contrib.humanize's locale rules)."""
    if value is None or value == "":
        return "—"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def percent(value: Any) -> str:
    """A share 0..1 as a percentage; None (nothing to divide) as a dash."""
    if value is None:
        return "—"
    share = float(value) * 100
    return f"{share:.0f} %" if share >= 10 or share == 0 else f"{share:.1f} %"


@register.filter
def usd(value: Any) -> str:
    if value is None:
        return "—"
    amount = Decimal(str(value))
    return f"${amount:,.2f}" if amount >= 1 or amount == 0 else f"${amount:,.4f}"


@register.filter
def meter(value: Any) -> int:
    """A share 0..1 as a whole percentage for a bar's width."""
    try:
        return max(0, min(100, round(float(value) * 100)))
    except (TypeError, ValueError):
        return 0


@register.filter
def get(mapping: dict, key: str) -> Any:
    return mapping.get(key) if mapping else None


@register.filter
def bar_height(value: Any, peak: Any) -> int:
    try:
        return round(100 * float(value) / float(peak)) if peak else 0
    except (TypeError, ValueError, ZeroDivisionError):
        return 0
