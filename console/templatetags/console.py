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


def _show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_show(v) for v in value) or "none"
    return str(value)


@register.filter
def changes(action: Any) -> list[tuple[str, str, str]]:
    """An admin action's before → after as (field, before, after) for the fields that
    differ (all of them for a creation or a removal)."""
    before, after = action.before or {}, action.after or {}
    rows = []
    for name in dict.fromkeys([*before, *after]):
        old, new = before.get(name), after.get(name)
        if name in before and name in after and old == new:
            continue
        rows.append(
            (
                name,
                _show(old) if name in before else "",
                _show(new) if name in after else "",
            )
        )
    return rows
