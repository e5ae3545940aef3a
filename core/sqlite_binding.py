"""SQLite's driver binds None, a bool and a str subclass (a TextChoices or StrEnum member) as
NULL, an integer and text; but before it does, it looks for an adapter, and that search asks
the driver's protocol type for `__adapt__`, which raises an AttributeError, formats its
message and drops it. A call's audit rows held six such values (about 1 % of a call's
instructions). With adapters registered for those types the search ends at its first step,
a dictionary lookup, and binds what it bound before."""

import sqlite3
from typing import Any


def _unchanged(value: Any) -> Any:
    return value


def bind_plainly(*text_kinds: type[str]) -> None:
    """None and bools, and these str subclasses as their text, bound without the search."""
    sqlite3.register_adapter(type(None), _unchanged)
    sqlite3.register_adapter(bool, int)
    for kind in text_kinds:
        sqlite3.register_adapter(kind, str.__str__)
