"""The rules for a limit's values, written once: `limit_set` (the console, the API and
`manage.py set_limit` call it) and config import check through here, and the console's form
and the API's serializer declare the same bounds."""

from decimal import Decimal, InvalidOperation
from typing import Any

from accounts.validators import Invalid

LIMIT_FIELDS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrency",
    "tokens_per_day",
    "tokens_per_month",
    "cost_per_month",
)
MAX_LIMIT = 10**15
# The per-minute and in-flight limits are 32-bit columns (PositiveIntegerField): more
# than that is refused here on every database, not left for PostgreSQL to refuse with
# an error.
MAX_INT_LIMIT = 2**31 - 1
LIMIT_MAX: dict[str, int] = {
    "requests_per_minute": MAX_INT_LIMIT,
    "tokens_per_minute": MAX_INT_LIMIT,
    "max_concurrency": MAX_INT_LIMIT,
    "tokens_per_day": MAX_LIMIT,
    "tokens_per_month": MAX_LIMIT,
}
# What Limit.cost_per_month holds (14 digits, 4 of them decimals).
COST_DECIMALS = 4
COST_STEP = Decimal("0.0001")
MAX_COST = Decimal("9999999999.9999")


def limit_value_check(name: str, value: Any) -> Any:
    """One limit's value, cleaned (a Decimal for the cost); None passes (left as it is)."""
    if value is None:
        return None
    if name == "cost_per_month":
        try:
            cost = Decimal(str(value))
        except InvalidOperation:
            raise Invalid("{label} must be a number") from None
        if not cost.is_finite():
            raise Invalid("{label} must be a number")
        if not 0 <= cost <= MAX_COST:
            raise Invalid(f"{{label}} must be between 0 and {MAX_COST}")
        if cost != cost.quantize(COST_STEP):
            raise Invalid(f"{{label}} takes at most {COST_DECIMALS} decimals")
        return cost
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid("{label} must be a whole number")
    high = LIMIT_MAX.get(name, MAX_LIMIT)
    if not 0 <= value <= high:
        raise Invalid(f"{{label}} must be between 0 and {'10^15' if high == MAX_LIMIT else high}")
    return value
