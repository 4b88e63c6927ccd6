"""Typed decoding: the decode-direction table of §4.2, JSON datums, pymysql values -> datums."""

from __future__ import annotations

import datetime
import zoneinfo
from decimal import Decimal as D

import pytest

from tidb_binlog.codec import (
    Datum,
    FieldType,
    cut_one,
    datum_for_column,
    decode_one,
    decode_row,
    encode_old_row,
    encode_value,
    format_sql_arg,
    pack_time,
    unflatten,
)
from tidb_binlog.codec import mysql as m
from tidb_binlog.errors import CodecError, SchemaError

h = bytes.fromhex
UTC8 = datetime.timezone(datetime.timedelta(hours=8))


def ft(tp, **kw):
    return FieldType(tp, **kw)


DECIMAL_10_2 = ft(m.TYPE_NEWDECIMAL, flen=10, decimal=2)
ENUM_YN = ft(m.TYPE_ENUM, elems=("y", "n"))
SET_ABC = ft(m.TYPE_SET, elems=("a", "b", "c"))
JSON = ft(m.TYPE_JSON)

DECODE_DIRECTION = [
    ("060a028000000c22", DECIMAL_10_2, datetime.UTC, "12.34"),
    ("060a028000000000", DECIMAL_10_2, datetime.UTC, "0.00"),
    ("060a027ffffff3dd", DECIMAL_10_2, datetime.UTC, "-12.34"),
    (
        "09bf84bdd8ac96a5c519",
        ft(m.TYPE_DATETIME, decimal=6),
        datetime.UTC,
        "2011-11-10 11:11:11.999999",
    ),
    (
        "09bf84bdd8ac96a5c519",
        ft(m.TYPE_DATETIME, decimal=3),
        datetime.UTC,
        "2011-11-10 11:11:11.999",
    ),
    ("09bf84bdd8ac96a5c519", ft(m.TYPE_DATETIME, decimal=0), datetime.UTC, "2011-11-10 11:11:11"),
    ("09bf84bdd8ac96a5c519", ft(m.TYPE_TIMESTAMP, decimal=6), UTC8, "2011-11-10 19:11:11.999999"),
    ("098080808080c090b219", ft(m.TYPE_DATE), datetime.UTC, "2000-01-01"),
    ("0900", ft(m.TYPE_DATETIME, decimal=0), datetime.UTC, "0000-00-00 00:00:00"),
    ("0900", ft(m.TYPE_TIMESTAMP, decimal=0), UTC8, "0000-00-00 00:00:00"),
    ("0900", ft(m.TYPE_DATE), datetime.UTC, "0000-00-00"),
    ("08808094ae98c606", ft(m.TYPE_DURATION, decimal=0), datetime.UTC, "04:00:00"),
    ("08808094ae98c606", ft(m.TYPE_DURATION, decimal=2), datetime.UTC, "04:00:00.00"),
    ("08ff93b0e8c9d101", ft(m.TYPE_DURATION, decimal=1), datetime.UTC, "-01:00:00.5"),
    ("0880d8cc97aec2dd0a", ft(m.TYPE_DURATION, decimal=0), datetime.UTC, "838:59:59"),
    ("0902", ENUM_YN, datetime.UTC, 2),
    ("0900", ENUM_YN, datetime.UTC, 0),
    ("0903", ENUM_YN, datetime.UTC, 0),
    ("0905", SET_ABC, datetime.UTC, 5),
    ("09b0e0c401", ft(m.TYPE_BIT, flen=24), datetime.UTC, 3223600),
    ("05c0091eb860000000", ft(m.TYPE_FLOAT), datetime.UTC, 3.140000104904175),
    (
        "0801",
        ft(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG | m.PRI_KEY_FLAG),
        datetime.UTC,
        18446744073709551615,
    ),
    ("0801", ft(m.TYPE_LONGLONG), datetime.UTC, -1),
    ("0206616263", ft(m.TYPE_VARCHAR, charset="utf8mb4"), datetime.UTC, "abc"),
    ("0206616263", ft(m.TYPE_BLOB, charset="binary"), datetime.UTC, b"abc"),
    ("0204ff00", ft(m.TYPE_STRING, charset="utf8mb4"), datetime.UTC, b"\xff\x00"),
    ("089e1f", ft(m.TYPE_YEAR), datetime.UTC, 1999),
    ("0800", ft(m.TYPE_LONG), datetime.UTC, 0),
    ("00", DECIMAL_10_2, datetime.UTC, None),
]


@pytest.mark.parametrize(("enc", "col", "tz", "arg"), DECODE_DIRECTION)
def test_decode_direction(enc, col, tz, arg):
    d, end = decode_one(h(enc))
    assert end == len(h(enc))
    got = format_sql_arg(d, col, tz)
    assert got == arg and type(got) is type(arg)
    # unflatten is idempotent and format_sql_arg accepts a typed datum too
    typed = unflatten(d, col, tz)
    assert unflatten(typed, col, tz) == typed
    assert format_sql_arg(typed, col, tz) == arg


def test_float_column_gives_float32():
    d, _ = decode_one(h("05c0091eb860000000"))
    assert unflatten(d, ft(m.TYPE_FLOAT)) == Datum.float32(3.14)


def test_set_bits_past_members_is_an_error():
    with pytest.raises(CodecError, match="invalid number 8"):
        unflatten(Datum.uint64(8), SET_ABC)


def test_bit_truncated_to_column_width():
    assert unflatten(Datum.uint64(0x10001), ft(m.TYPE_BIT, flen=16)) == Datum.bit(1)


def test_timestamp_with_zoneinfo_and_row_decode():
    shanghai = zoneinfo.ZoneInfo("Asia/Shanghai")
    row = encode_old_row([1], [Datum.time(pack_time(2011, 11, 10, 11, 11, 11, 999999))])
    got = decode_row(row, {1: ft(m.TYPE_TIMESTAMP, decimal=6)}, shanghai)
    assert got == {1: Datum.time(pack_time(2011, 11, 10, 19, 11, 11, 999999))}


# ---- JSON datums through flag 0x0a ----------------------------------------------

JSON_VECTORS = [
    ("0a0400", None, "null"),
    ("0a0401", True, "true"),
    ("0a0402", False, "false"),
    ("0a092a00000000000000", 42, "42"),
    ("0a09ffffffffffffffff", -1, "-1"),
    ("0a0affffffffffffffff", 18446744073709551615, "18446744073709551615"),
    ("0a0b0000000000000c40", 3.5, "3.5"),
    ("0a0c03616263", "abc", '"abc"'),
    ("0a01010000001c0000001300000001000914000000610200000000000000", {"a": 2}, '{"a": 2}'),
    ("0a030000000008000000", [], "[]"),
    ("0a010000000008000000", {}, "{}"),
    (
        "0a030400000026000000091c0000000c240000000401000000040000000001000000000000000132",
        [1, "2", True, None],
        '[1, "2", true, null]',
    ),
    (
        "0a01020000002e0000001e00000001001f000000030009220000000c2a00000061666f6f2a0000000000000003626172",
        {"foo": "bar", "a": 42},
        '{"a": 42, "foo": "bar"}',
    ),
]


@pytest.mark.parametrize(("enc", "obj", "text"), JSON_VECTORS)
def test_json_datums(enc, obj, text):
    jb = pytest.importorskip("tidb_binlog.codec.json_binary")
    d, end = decode_one(h(enc))
    assert end == len(h(enc)) and cut_one(h(enc) + b"\x00", 0) == end
    assert d == Datum.json(jb.parse_json_text(text))
    assert d.value == obj
    assert encode_value([d]).hex() == enc
    assert format_sql_arg(d, JSON) == text
    for cut in range(1, len(h(enc))):
        with pytest.raises(CodecError) as info:
            decode_one(h(enc)[:cut])
        assert (info.value.offset, info.value.flag) == (0, 0x0A)


def test_json_in_rows():
    pytest.importorskip("tidb_binlog.codec.json_binary")
    row = encode_old_row([14], [Datum.json({"a": 2})])
    assert decode_row(row, {14: JSON}) == {14: Datum.json({"a": 2})}


# ---- pymysql values -> datums -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "col", "datum"),
    [
        (None, ft(m.TYPE_LONG), Datum.null()),
        (5, ft(m.TYPE_LONG), Datum.int64(5)),
        (2**64 - 1, ft(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG), Datum.uint64(2**64 - 1)),
        (True, ft(m.TYPE_TINY), Datum.int64(1)),
        (2023, ft(m.TYPE_YEAR), Datum.int64(2023)),
        (3.14, ft(m.TYPE_FLOAT), Datum.float32(3.14)),
        (2.5, ft(m.TYPE_DOUBLE), Datum.float64(2.5)),
        (D("12.3"), DECIMAL_10_2, Datum.decimal(D("12.30"), 10, 2)),
        (D("12.345"), DECIMAL_10_2, Datum.decimal(D("12.35"), 10, 2)),
        (datetime.date(2000, 1, 1), ft(m.TYPE_DATE), Datum.time(pack_time(2000, 1, 1))),
        ("0000-00-00", ft(m.TYPE_DATE), Datum.time(0)),
        (
            datetime.datetime(2011, 11, 10, 11, 11, 11, 999999),
            ft(m.TYPE_DATETIME, decimal=6),
            Datum.time(pack_time(2011, 11, 10, 11, 11, 11, 999999)),
        ),
        (
            datetime.datetime(2011, 11, 10, 19, 11, 11),
            ft(m.TYPE_TIMESTAMP),
            Datum.time(pack_time(2011, 11, 10, 11, 11, 11)),
        ),
        ("0000-00-00 00:00:00", ft(m.TYPE_TIMESTAMP), Datum.time(0)),
        (datetime.timedelta(hours=4), ft(m.TYPE_DURATION), Datum.duration(14400000000000)),
        (
            -datetime.timedelta(hours=1, microseconds=500000),
            ft(m.TYPE_DURATION, decimal=1),
            Datum.duration(-3600500000000),
        ),
        ("838:59:59", ft(m.TYPE_DURATION), Datum.duration(3020399000000000)),
        ("n", ENUM_YN, Datum.enum(2)),
        ("", ENUM_YN, Datum.enum(0)),
        ({"a", "c"}, SET_ABC, Datum.set(5)),
        ("a,c", SET_ABC, Datum.set(5)),
        (b"\x31\x30\x30", ft(m.TYPE_BIT, flen=24), Datum.bit(3223600)),
        ("héllo", ft(m.TYPE_STRING, charset="utf8mb4"), Datum.string("héllo".encode())),
        (b"\x00\xff", ft(m.TYPE_BLOB, charset="binary"), Datum.bytes(b"\x00\xff")),
    ],
)
def test_datum_for_column(value, col, datum):
    assert datum_for_column(value, col, UTC8) == datum


def test_datum_for_column_json_text():
    pytest.importorskip("tidb_binlog.codec.json_binary")
    assert datum_for_column('{"b": 1, "a": [true]}', JSON) == Datum.json({"a": [True], "b": 1})


@pytest.mark.parametrize(
    ("value", "col", "match"),
    [
        ("x", ENUM_YN, "not a member"),
        ({"d"}, SET_ABC, "not a member"),
        ("abc", ft(m.TYPE_LONG), "not an integer"),
        (-1, ft(m.TYPE_LONG, flag=m.UNSIGNED_FLAG), "out of range"),
        (D("123456789.1"), DECIMAL_10_2, "integer digits"),
        ("yesterday", ft(m.TYPE_DATE), "cannot parse"),
    ],
)
def test_datum_for_column_errors(value, col, match):
    with pytest.raises(CodecError, match=match):
        datum_for_column(value, col)


def test_round_trip_through_a_row_to_sql_args():
    cols = {
        1: ft(m.TYPE_LONG),
        2: DECIMAL_10_2,
        3: ft(m.TYPE_TIMESTAMP, decimal=3),
        4: ENUM_YN,
        5: ft(m.TYPE_VARCHAR, charset="utf8mb4"),
    }
    values = {
        1: 7,
        2: D("1.50"),
        3: datetime.datetime(2020, 2, 29, 23, 0, 0, 123000),
        4: "y",
        5: "ok",
    }
    row = encode_old_row(list(cols), [datum_for_column(values[i], cols[i], UTC8) for i in cols])
    decoded = decode_row(row, cols, UTC8)
    args = {i: format_sql_arg(decoded[i], cols[i], UTC8) for i in cols}
    assert args == {1: 7, 2: "1.50", 3: "2020-02-29 23:00:00.123", 4: 1, 5: "ok"}


def test_field_type_from_model_json():
    obj = {
        "Tp": 246,
        "Flag": 4099,
        "Flen": 10,
        "Decimal": 2,
        "Charset": "binary",
        "Collate": "binary",
        "Elems": None,
        "ElemsIsBinaryLit": None,
        "Array": False,
    }
    col = FieldType.from_json(obj)
    assert col == FieldType(
        m.TYPE_NEWDECIMAL, flag=4099, flen=10, decimal=2, charset="binary", collate="binary"
    )
    assert col.not_null and not col.unsigned and FieldType.from_json(col.to_json()) == col
    with pytest.raises(SchemaError, match="Tp"):
        FieldType.from_json({"Flag": 1})
