"""sql_arg_formatter(ft, tz) gives exactly format_sql_arg(datum, ft, tz) for every datum."""

from __future__ import annotations

import datetime
import zoneinfo
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidb_binlog.codec import Datum, format_sql_arg, sql_arg_formatter
from tidb_binlog.codec import mysql as m
from tidb_binlog.errors import CodecError

SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")

TYPES = [
    m.FieldType(m.TYPE_LONG),
    m.FieldType(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG),
    m.FieldType(m.TYPE_TINY, flag=m.UNSIGNED_FLAG),
    m.FieldType(m.TYPE_VARCHAR, charset="utf8mb4"),
    m.FieldType(m.TYPE_STRING, charset=m.BINARY_CHARSET),
    m.FieldType(m.TYPE_BLOB, charset=m.BINARY_CHARSET),
    m.FieldType(m.TYPE_BLOB, charset="utf8mb4"),
    m.FieldType(m.TYPE_DOUBLE),
    m.FieldType(m.TYPE_NEWDECIMAL, flen=10, decimal=2),
    m.FieldType(m.TYPE_DATETIME, decimal=6),
    m.FieldType(m.TYPE_TIMESTAMP),
    m.FieldType(m.TYPE_ENUM, elems=("a", "b")),
]

DATUMS = [
    Datum.null(),
    Datum.int64(-5), Datum.int64(0), Datum.int64(2**63 - 1), Datum.int64(-(2**63)),
    Datum.uint64(7), Datum.uint64(2**64 - 1),
    Datum.string("héllo 世界"), Datum.bytes(b"\xff\x00raw"), Datum.bytes(b"ok"),
    Datum.float64(1.5),
    Datum.decimal(Decimal("12.50"), 10, 2),
]


def outcome(fn):
    try:
        return ("ok", fn())
    except CodecError as exc:
        return ("error", type(exc))


@pytest.mark.parametrize("tz", [datetime.UTC, SHANGHAI])
@pytest.mark.parametrize("ft", TYPES, ids=lambda ft: f"tp{ft.tp}-flag{ft.flag}-{ft.charset}")
def test_same_result_as_format_sql_arg(ft, tz):
    fmt = sql_arg_formatter(ft, tz)
    for d in DATUMS:
        expected = outcome(lambda d=d: format_sql_arg(d, ft, tz))
        got = outcome(lambda d=d: fmt(d))
        assert got == expected, (d, ft)
        if expected[0] == "ok":
            assert type(got[1]) is type(expected[1])


@given(st.integers(-(2**63), 2**63 - 1), st.booleans())
def test_integers_in_either_signedness(v, unsigned):
    ft = m.FieldType(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG if unsigned else 0)
    d = Datum.int64(v)
    assert sql_arg_formatter(ft)(d) == format_sql_arg(d, ft)


@given(st.binary(max_size=40), st.sampled_from(["utf8mb4", m.BINARY_CHARSET]))
def test_any_bytes_in_text_and_binary_columns(raw, charset):
    ft = m.FieldType(m.TYPE_VARCHAR, charset=charset)
    for d in (Datum.bytes(raw), Datum.string(raw)):
        got, expected = sql_arg_formatter(ft)(d), format_sql_arg(d, ft)
        assert got == expected and type(got) is type(expected)
