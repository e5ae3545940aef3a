"""SQLite binds None, bools and the audit rows' enums with an adapter registered for each
(no AttributeError made and dropped per value), and stores what it stored before."""

import sqlite3

from core.outcomes import Outcome
from routing.request_path.classify import ErrorClass


def test_the_rows_values_find_their_adapter_at_the_first_lookup() -> None:
    for kind in (type(None), bool, Outcome, ErrorClass):
        assert (kind, sqlite3.PrepareProtocol) in sqlite3.adapters, kind


def test_they_are_stored_as_sqlite_stored_them_without_adapters() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a, b, c, d, e)")
    error = next(iter(ErrorClass))
    db.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?)", (None, True, False, Outcome.SUCCESS, error))
    row = db.execute(
        "SELECT typeof(a), b, typeof(b), c, d, typeof(d), e, typeof(e) FROM t"
    ).fetchone()
    assert row == ("null", 1, "integer", 0, "success", "text", error.value, "text")
    assert type(row[4]) is str
