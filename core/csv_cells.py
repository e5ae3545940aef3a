"""CSV cells a spreadsheet would run as a formula, made text: one rule for every CSV Sluice
writes (the console's downloads and the management API's usage report)."""

from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: Any) -> Any:
    """A text cell starting like a formula gets a leading apostrophe (OWASP's advice), so
    `=HYPERLINK(...)` in a key name reads as text in Excel or Sheets. Numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
