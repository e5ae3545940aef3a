"""Many rows in one PostgreSQL statement, a column an array: every column type the audit and
the batch lines write goes through, a column mixing Python types is made one, and a value
too long for its column is refused, not cut short."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import DataError, connection, models

from core import pg_arrays

FIELDS = [
    models.CharField(max_length=5),
    models.FloatField(),
    models.BigIntegerField(),
    models.BooleanField(),
    models.DateTimeField(),
    models.DecimalField(max_digits=12, decimal_places=6),
    models.GenericIPAddressField(),
]


def test_a_column_mixing_ints_and_floats_goes_as_floats_and_others_as_they_are():
    rows = [("a", 0, 1, True, None, None, None), ("b", 1.5, 2**40, False, None, None, None)]
    _, floats, ints, flags, *_ = pg_arrays.columns(FIELDS, rows)
    assert [type(v) for v in floats] == [float, float]  # the driver sends one type a list
    assert floats == [0.0, 1.5] and ints == [1, 2**40] and flags == [True, False]
    assert pg_arrays.columns(FIELDS, []) == [[] for _ in FIELDS]


@pytest.mark.django_db
def test_the_cast_is_to_the_type_without_its_length():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's types")
    assert pg_arrays.element_type(FIELDS[0]) == "varchar"
    assert pg_arrays.element_type(FIELDS[5]) == "numeric"


@pytest.mark.django_db
def test_rows_of_every_column_type_come_back_as_written():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's arrays")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE typed (name varchar(5), took double precision, n bigint, "
            "flag boolean, at timestamp with time zone, cost numeric(12, 6), ip inet)"
        )
    when = datetime(2026, 12, 4, 21, 30, 15, 123456, tzinfo=UTC)
    rows = [
        ("abc", 0, 7, True, when, Decimal("0.000123"), "127.0.0.1"),
        ("", 2.5, None, None, None, None, None),
    ]
    sql = f"INSERT INTO typed SELECT * FROM {pg_arrays.unnest(FIELDS)}"
    assert pg_arrays.execute(sql, pg_arrays.columns(FIELDS, rows)) == 2
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, took, n, flag, at, cost, host(ip) FROM typed ORDER BY name")
        back = cursor.fetchall()
    assert back == [
        ("", 2.5, None, None, None, None, None),
        ("abc", 0.0, 7, True, when, Decimal("0.000123"), "127.0.0.1"),
    ]


@pytest.mark.django_db
def test_a_value_too_long_for_its_column_is_refused():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite keeps any length")
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE short_names (name varchar(5))")
    sql = f"INSERT INTO short_names (name) SELECT * FROM {pg_arrays.unnest(FIELDS[:1])}"
    assert pg_arrays.execute(sql, pg_arrays.columns(FIELDS[:1], [("abc",), ("abcde",)])) == 2
    with pytest.raises(DataError):
        pg_arrays.execute(sql, pg_arrays.columns(FIELDS[:1], [("abcdefgh",)]))
