"""Old row format, row format v2 (§4.2 vectors), insert handle prefixes, update rows."""

from __future__ import annotations

import datetime
from decimal import Decimal as D

import pytest

from tidb_binlog.codec import (
    Datum,
    FieldType,
    decode_insert_row,
    decode_old_and_new_row,
    decode_old_row,
    decode_row,
    decode_row_v2,
    encode_old_row,
    encode_row_v2,
    encode_value,
    pack_time,
    split_insert_row,
    unflatten,
)
from tidb_binlog.codec import mysql as m
from tidb_binlog.errors import CodecError

h = bytes.fromhex
BIGINT = FieldType(m.TYPE_LONGLONG)
UBIGINT = FieldType(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG)
VARCHAR = FieldType(m.TYPE_VARCHAR, flen=64, charset="utf8mb4", collate="utf8mb4_bin")
DOUBLE = FieldType(m.TYPE_DOUBLE)
TIMESTAMP6 = FieldType(m.TYPE_TIMESTAMP, decimal=6)
DATE = FieldType(m.TYPE_DATE)
TIME0 = FieldType(m.TYPE_DURATION, decimal=0)
JSON = FieldType(m.TYPE_JSON)
DEC64 = FieldType(m.TYPE_NEWDECIMAL, flen=6, decimal=4)
ENUM_YN = FieldType(m.TYPE_ENUM, elems=("y", "n"))
SET_ABC = FieldType(m.TYPE_SET, elems=("a", "b", "c"))
BIT24 = FieldType(m.TYPE_BIT, flen=24)
TS = pack_time(2011, 11, 10, 11, 11, 11, 999999)

# ---- old row format ------------------------------------------------------------


def test_empty_row_is_a_single_nil_flag():
    assert encode_old_row([], []) == b"\x00"
    assert decode_old_row(b"\x00") == {}
    assert decode_row(b"\x00", {1: BIGINT}) == {}
    assert decode_row(b"", {1: BIGINT}) == {}


def test_old_row_bytes_and_flatten():
    row = encode_old_row(
        [1, 2, 3, 4, 5, 6, 7, -1],
        [
            Datum.int64(1),
            Datum.string("abc"),
            Datum.time(pack_time(2000, 1, 1)),
            Datum.duration(14400000000000),
            Datum.enum(2),
            Datum.null(),
            Datum.bit(3223600),
            Datum.int64(7),
        ],
    )
    assert row.hex() == (
        "0802" "0802"
        "0804" "0206616263"
        "0806" "098080808080c090b219"
        "0808" "08808094ae98c606"
        "080a" "0902"
        "080c" "00"
        "080e" "09b0e0c401"
        "0801" "080e"
    )  # fmt: skip
    raw = decode_old_row(row)
    assert raw[3] == Datum.uint64(pack_time(2000, 1, 1))
    assert raw[4] == Datum.int64(14400000000000)
    assert raw[6] == Datum.null()
    assert raw[-1] == Datum.int64(7)


def test_mismatched_lengths():
    with pytest.raises(CodecError, match="count not match 1 vs 2"):
        encode_old_row([1, 2], [Datum.int64(1)])


def test_decode_row_skips_unknown_ids_and_does_not_need_sorted_ids():
    row = encode_old_row([9, -1, 2], [Datum.string("x"), Datum.int64(5), Datum.int64(3)])
    assert decode_row(row, {2: BIGINT, 9: VARCHAR}) == {2: Datum.int64(3), 9: Datum.string("x")}


def test_decode_old_row_rejects_repeated_ids():
    row = encode_old_row([1], [Datum.int64(1)]) * 2
    with pytest.raises(CodecError, match="decode_old_and_new_row"):
        decode_old_row(row)


def test_update_row_old_then_new():
    cols = [1, 2, -1]
    old = encode_old_row(cols, [Datum.int64(1), Datum.string("a"), Datum.int64(77)])
    new = encode_old_row(cols, [Datum.int64(1), Datum.string("b"), Datum.int64(77)])
    o, n = decode_old_and_new_row(old + new, {1: BIGINT, 2: VARCHAR})
    assert o == {1: Datum.int64(1), 2: Datum.string("a")}
    assert n == {1: Datum.int64(1), 2: Datum.string("b")}
    with pytest.raises(CodecError, match="row data is corrupted"):
        decode_old_and_new_row(old + encode_old_row([1], [Datum.int64(1)]), {1: BIGINT, 2: VARCHAR})


def test_int_handle_prefix():
    # insert into a PK-handle table whose only column is the PK: 08 <h> 00
    handles, rest = split_insert_row(h("080200"))
    assert handles == [Datum.int64(1)] and rest == b"\x00"
    assert decode_insert_row(h("080200"), {1: BIGINT}) == ([Datum.int64(1)], {})
    # unsigned handle: written signed, reinterpreted by the column type
    (handle,), _ = split_insert_row(h("080100"))
    assert unflatten(handle, UBIGINT) == Datum.uint64(18446744073709551615)


def test_common_handle_prefix():
    prefix = encode_value(
        [Datum.bytes(b"abc"), Datum.duration(14400000000000), Datum.time(pack_time(2000, 1, 1))]
    )
    row = encode_old_row([4], [Datum.float64(2.0)])
    handles, rest = split_insert_row(prefix + row, pk_len=3)
    assert rest == row
    assert unflatten(handles[0], VARCHAR) == Datum.string("abc")
    assert unflatten(handles[1], TIME0) == Datum.duration(14400000000000)
    assert unflatten(handles[2], DATE) == Datum.time(pack_time(2000, 1, 1))
    assert decode_insert_row(prefix + row, {4: DOUBLE}, pk_len=3)[1] == {4: Datum.float64(2.0)}
    with pytest.raises(CodecError, match="handle datum 3 of 4"):
        split_insert_row(prefix + b"", pk_len=4)


def test_row_truncations_name_the_column_offset():
    row = encode_old_row([1, 2], [Datum.int64(300), Datum.string("hello")])
    boundary = len(encode_old_row([1], [Datum.int64(300)]))  # a shorter row is still a row
    for cut in set(range(1, len(row))) - {boundary}:
        with pytest.raises(CodecError) as info:
            decode_row(row[:cut], {1: BIGINT, 2: VARCHAR})
        assert info.value.offset is not None and 0 <= info.value.offset <= cut
        with pytest.raises(CodecError):
            decode_old_row(row[:cut])
    with pytest.raises(CodecError, match=r"value of column 2 at offset 7") as info:
        decode_row(row[:-1], {1: BIGINT, 2: VARCHAR})
    assert info.value.flag == 0x02


def test_bad_column_id_flag():
    with pytest.raises(CodecError, match="expected a column id"):
        decode_old_row(h("0206616263"))


def test_row_does_not_match_schema():
    row = encode_old_row([1], [Datum.string("x")])
    with pytest.raises(CodecError, match="does not match the table schema"):
        decode_row(row, {1: TIMESTAMP6})


# ---- row format v2 [computed vectors] -------------------------------------------

V2_VECTORS = [
    ([1, 2], [Datum.null(), Datum.int64(2)], {1: BIGINT, 2: BIGINT}, "8000010001000201010002"),
    ([1], [Datum.int64(2)], {1: BIGINT}, "80000100000001010002"),
    ([300], [Datum.string("")], {300: VARCHAR}, "8001010000002c01000000000000"),
    (
        [1, 2],
        [Datum.int64(1), Datum.uint64(1)],
        {1: BIGINT, 2: UBIGINT},
        "8000020000000102010002000101",
    ),
    (
        [1, 2, 3, 4],
        [Datum.int64(-1), Datum.string("abc"), Datum.int64(1000), Datum.null()],
        {1: BIGINT, 2: VARCHAR, 3: BIGINT, 4: BIGINT},
        "80000300010001020304010004000600ff616263e803",
    ),
    ([5], [Datum.decimal(D("11.9900"), 6, 4)], {5: DEC64}, "80000100000005050006048b26ac"),
    ([3], [Datum.float64(2.0)], {3: DOUBLE}, "800001000000030800c000000000000000"),
    ([5], [Datum.time(TS)], {5: TIMESTAMP6}, "8000010000000508003f420fcbb2948a19"),
    ([16], [Datum.duration(14400000000000)], {16: TIME0}, "8000010000001008000080e2c2180d0000"),
]


@pytest.mark.parametrize(("ids", "datums", "types", "enc"), V2_VECTORS)
def test_v2_vectors(ids, datums, types, enc):
    assert encode_row_v2(ids, datums).hex() == enc
    expected = {i: unflatten(d, types[i]) for i, d in zip(ids, datums, strict=True)}
    assert decode_row_v2(h(enc), types) == expected
    assert decode_row(h(enc), types) == expected


@pytest.mark.parametrize(
    ("v", "enc"),
    [
        (1, "01"),
        (127, "7f"),
        (128, "8000"),
        (-129, "7fff"),
        (32768, "00800000"),
        (-2147483649, "ffffff7fffffffff"),
        ((1 << 63) - 1, "ffffffffffffff7f"),
    ],
)
def test_v2_int_widths(v, enc):
    row = encode_row_v2([1], [Datum.int64(v)])
    assert row[9:].hex() == enc
    assert decode_row_v2(row, {1: BIGINT}) == {1: Datum.int64(v)}


@pytest.mark.parametrize(
    ("v", "enc"),
    [(255, "ff"), (256, "0001"), (65536, "00000100"), ((1 << 64) - 1, "ffffffffffffffff")],
)
def test_v2_uint_widths(v, enc):
    row = encode_row_v2([1], [Datum.uint64(v)])
    assert row[9:].hex() == enc
    assert decode_row_v2(row, {1: UBIGINT}) == {1: Datum.uint64(v)}


def test_v2_typed_enum_set_bit_and_timestamp_zone():
    row = encode_row_v2(
        [1, 2, 3, 4], [Datum.enum(2), Datum.set(5), Datum.bit(3223600), Datum.time(TS)]
    )
    tz8 = datetime.timezone(datetime.timedelta(hours=8))
    got = decode_row_v2(row, {1: ENUM_YN, 2: SET_ABC, 3: BIT24, 4: TIMESTAMP6}, tz8)
    assert got[1] == Datum.enum(2) and got[2] == Datum.set(5) and got[3] == Datum.bit(3223600)
    assert got[4] == Datum.time(pack_time(2011, 11, 10, 19, 11, 11, 999999))


def test_v2_checksum_tolerated_and_trailing_bytes_rejected():
    row = bytearray(encode_row_v2([1], [Datum.int64(2)]))
    row[1] |= 0x02
    assert decode_row_v2(bytes(row) + b"\x00" + b"\x01\x02\x03\x04", {1: BIGINT}) == {
        1: Datum.int64(2)
    }
    assert decode_row_v2(bytes(row) + b"\x08" + bytes(8), {1: BIGINT}) == {1: Datum.int64(2)}
    with pytest.raises(CodecError, match="checksum"):
        decode_row_v2(bytes(row), {1: BIGINT})
    with pytest.raises(CodecError, match="after the row data"):
        decode_row_v2(encode_row_v2([1], [Datum.int64(2)]) + b"\x00", {1: BIGINT})


def test_v2_truncations():
    row = encode_row_v2([1, 2, 300], [Datum.int64(-1), Datum.string("abc"), Datum.null()])
    types = {1: BIGINT, 2: VARCHAR, 300: BIGINT}
    assert decode_row_v2(row, types) == {
        1: Datum.int64(-1),
        2: Datum.string("abc"),
        300: Datum.null(),
    }
    for cut in range(len(row)):
        with pytest.raises(CodecError) as info:
            decode_row_v2(row[:cut], types)
        assert info.value.flag == 0x80


def test_v2_bad_int_width_is_an_error():
    row = h("800001000000010300010203")  # one 3-byte int value
    with pytest.raises(CodecError, match="3 bytes"):
        decode_row_v2(row, {1: BIGINT})


def test_v2_rejects_bad_ids():
    with pytest.raises(CodecError, match="must be in"):
        encode_row_v2([-1], [Datum.int64(1)])
    with pytest.raises(CodecError, match="duplicate"):
        encode_row_v2([1, 1], [Datum.int64(1), Datum.int64(2)])
