"""Many rows in one PostgreSQL statement: each column goes as one array, bound on the
server, and the statement unnests them (`INSERT … SELECT * FROM unnest(%b::varchar[], …)`,
`UPDATE … FROM unnest(…)`).

A statement a row (executemany) made the server parse and plan every row anew: Django binds
values on the client, so no two rows' texts are alike, and prepares nothing (PgBouncer in
transaction mode would lose prepared statements). One statement for the batch costs the
server a third of the CPU per audited call (docs/benchmarks.md, "What a line costs
PostgreSQL and Redis"),
and works through PgBouncer as it is.
"""

import re
from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import connection
from django.db.models import Field

_SIZE = re.compile(r"\(.*\)")  # varchar(64), numeric(12, 6)


def element_type(field: Field) -> str:
    """The column's type without its length or precision, for the array's cast: the write
    into the column checks the length, as a row's own write does (an explicit cast to
    varchar(n) can cut a value short without a word)."""
    return _SIZE.sub("", field.db_type(connection)).strip()


def unnest(fields: Sequence[Field]) -> str:
    """`unnest(%b::type[], …)`: one array parameter per field, in order, sent in binary
    (a third less of the client's CPU than as text: no quoting)."""
    return "unnest({})".format(", ".join(f"%b::{element_type(f)}[]" for f in fields))


def columns(fields: Sequence[Field], rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The rows' values column by column, in the order of `fields`. The driver sends a list
    of one Python type only: a column that mixes them (an int among floats, say) goes
    through its field's `get_prep_value` (float, int, bool…)."""
    if not rows:
        return [[] for _ in fields]
    values = [list(column) for column in zip(*rows, strict=True)]
    for i, field in enumerate(fields):
        kinds = set(map(type, values[i]))
        kinds.discard(type(None))
        if len(kinds) > 1:
            prep = field.get_prep_value
            values[i] = [None if v is None else prep(v) for v in values[i]]
    return values


def execute(sql: str, params: Sequence[Any]) -> int:
    """`sql` on this thread's connection with its values bound on the server (Django's
    cursors bind on the client: an array would be quoted into the text); the rows it
    wrote."""
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
