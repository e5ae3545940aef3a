"""A read whose SQL the ORM builds once, for code that runs the same query many times a
second (the batch runner's look at its batches, every tick of every runner).

Building a query with joins (filters, lookups, the compiler) costs about a millisecond of
CPU, twenty times what running it on PostgreSQL does; the SQL and its parameters do not
change between runs. `Prepared` builds them on first use per database vendor and then only
runs them, passing each row through the same converters the ORM would (a datetime read
from SQLite, say), so the rows are what `values_list` gives.
"""

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.db.models import QuerySet


class Prepared:
    def __init__(self, build: Callable[[], QuerySet[Any]]) -> None:
        self._build = build  # a values_list() query with constant parameters
        self._by_vendor: dict[str, tuple[str, Any, Any, dict[int, Any]]] = {}

    def rows(self) -> list[tuple[Any, ...]]:
        sql, params, compiler, converters = self._compiled()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows: Any = cursor.fetchall()
        if converters:
            rows = compiler.apply_converters(rows, converters)
        return [tuple(row) for row in rows]

    def _compiled(self) -> tuple[str, Any, Any, dict[int, Any]]:
        hit = self._by_vendor.get(connection.vendor)
        if hit is None:
            compiler = self._build().query.get_compiler(connection=connection)
            sql, params = compiler.as_sql()
            fields = [column for column, _, _ in compiler.select[: compiler.col_count]]
            hit = (sql, params, compiler, compiler.get_converters(fields))
            self._by_vendor[connection.vendor] = hit
        return hit
