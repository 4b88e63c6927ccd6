"""Every non-JSON vector of tidb-codec.md §4.1 and §4.2, both directions, and truncations.

Vectors marked [computed] in the reference were re-derived here from TiDB's source
where they disagreed (see the notes next to them).
"""

from __future__ import annotations

import pickle
from decimal import Decimal as D

import pytest

from tidb_binlog.codec import (
    Datum,
    cut_one,
    decimal_bin_size,
    decode_decimal_bin,
    decode_one,
    decode_value,
    encode_decimal_bin,
    encode_key,
    encode_value,
    format_decimal,
    pack_time,
    unpack_time,
)
from tidb_binlog.codec import primitives as p
from tidb_binlog.errors import CodecError

h = bytes.fromhex

# ---- §4.1 pkg/util/codec/bytes_test.go (ascending) ---------------------------

BYTES_VECTORS = [
    (b"", "0000000000000000f7"),
    (b"\x00", "0000000000000000f8"),
    (bytes([1, 2, 3]), "0102030000000000fa"),
    (bytes([1, 2, 3, 0]), "0102030000000000fb"),
    (bytes(range(1, 8)), "0102030405060700fe"),
    (bytes(8), "0000000000000000ff0000000000000000f7"),
    (bytes(range(1, 9)), "0102030405060708ff0000000000000000f7"),
    (bytes(range(1, 10)), "0102030405060708ff0900000000000000f8"),
    (b"abcdefghijk", "6162636465666768ff696a6b0000000000fa"),
    (b"fYfSp", "6659665370000000fc"),
]

BYTES_ERRORS = [
    "01020304",
    "00000000000000f7",
    "0000000000000000f6",
    "0000000000000001f7",
    "010203040506070800",
    "0102030405060708ff01",
    "0102030405060708ff0102030405060708",
    "0102030405060708ff0102030405060708ff",
    "0102030405060708ff010203040506070800",
]


@pytest.mark.parametrize(("raw", "enc"), BYTES_VECTORS)
def test_memcomparable_bytes(raw, enc):
    assert p.encode_bytes(raw).hex() == enc
    assert p.read_bytes(h(enc), 0) == (raw, len(h(enc)))
    assert decode_one(b"\x01" + h(enc)) == (Datum.bytes(raw), 1 + len(h(enc)))
    assert encode_key([Datum.bytes(raw)]) == b"\x01" + h(enc)


@pytest.mark.parametrize("bad", BYTES_ERRORS)
def test_memcomparable_bytes_errors(bad):
    with pytest.raises(CodecError) as info:
        decode_one(b"\x01" + h(bad))
    assert info.value.offset == 0 and info.value.flag == 0x01


# ---- §4.1 client-java CodecTest ----------------------------------------------


@pytest.mark.parametrize(
    ("datum", "key", "value"),
    [
        (Datum.int64(9999), "03800000000000270f", "089e9c01"),
        (Datum.int64(-2333), "037ffffffffffff6e3", "08b924"),
        (Datum.uint64(0xFFFFFFFFFFFFFFFF), "04ffffffffffffffff", "09ffffffffffffffffff01"),
        (Datum.uint64(1 << 63), "048000000000000000", "0980808080808080808001"),
    ],
)
def test_int_forms(datum, key, value):
    assert encode_key([datum]).hex() == key
    assert encode_value([datum]).hex() == value
    assert decode_value(h(key)) == [datum]
    assert decode_value(h(value)) == [datum]


@pytest.mark.parametrize(
    ("enc", "why"),
    [
        ("09808080808080808080", "truncated"),
        ("0980808080808080808002", "overflow"),
        ("098080808080808080808001", "overflow"),
    ],
)
def test_uvarint_overflow_and_truncation(enc, why):
    with pytest.raises(CodecError, match=why) as info:
        decode_one(h(enc))
    assert (info.value.offset, info.value.flag) == (0, 0x09)


# ---- §4.1 MyDecimal / go-mysql decimal2bin -----------------------------------

DECIMAL_BIN = [
    ("1234567890.1234", 14, 4, "810dfb38d204d2"),
    ("-1234567890.1234", 14, 4, "7ef204c72dfb2d"),
    ("-10.55", 4, 2, "75c8"),
    ("-11", 5, 0, "7ffff4"),
    ("-10.550", 7, 3, "7ff5fdd9"),
    ("-10.55", 10, 2, "7ffffff5c8"),
    ("-10.550", 10, 3, "7ffffff5fdd9"),
    ("-10.55", 13, 2, "7ffffffff5c8"),
    ("-9.99999999999999", 15, 14, "76c4653600fe7960"),
    ("-10.5500000000", 20, 10, "7ffffffff5df37aa7fff"),
    ("-10.55000", 30, 5, "7ffffffffffffffffffffff5ff2927"),
    ("-10.55000000000000000000", 30, 20, "7ffffffff5df37aa7fffffffffff"),
    ("-10.5500000000000000000000000", 30, 25, "7ffff5df37aa7fffffffffffffffff"),
    ("9999.999", 7, 3, "a70f03e7"),
    ("12345.00", 13, 2, "800000303900"),
    ("12345.0000000000", 20, 10, "80000030390000000000"),
    ("12345.00000000000000000000", 30, 20, "8000003039000000000000000000"),
    ("123", 5, 0, "80007b"),
    ("123.45", 10, 2, "8000007b2d"),
    ("123.45", 13, 2, "800000007b2d"),
    ("123.45000", 30, 5, "80000000000000000000007b00afc8"),
    ("123.4500000000000000000000000", 30, 25, "80007b1ad274800000000000000000"),
    ("-123", 5, 0, "7fff84"),
    ("-123.45", 10, 2, "7fffff84d2"),
    ("-123.45", 13, 2, "7fffffff84d2"),
    ("-123.45000", 30, 5, "7fffffffffffffffffffff84ff5037"),
    ("-123.4500000000000000000000000", 30, 25, "7fff84e52d8b7fffffffffffffffff"),
]


@pytest.mark.parametrize(("text", "prec", "frac", "bin_hex"), DECIMAL_BIN)
def test_decimal_bin_both_directions(text, prec, frac, bin_hex):
    assert encode_decimal_bin(D(text), prec, frac).hex() == bin_hex
    assert decimal_bin_size(prec, frac) == len(h(bin_hex))
    value = decode_decimal_bin(h(bin_hex), prec, frac)
    assert format_decimal(value, frac) == text
    datum_bytes = bytes([0x06, prec, frac]) + h(bin_hex)
    assert decode_one(datum_bytes) == (Datum.decimal(D(text), prec, frac), len(datum_bytes))
    assert encode_value([Datum.decimal(D(text), prec, frac)]) == datum_bytes


def test_decimal_datum_example():
    d, end = decode_one(h("06040275c8"))
    assert (d.value, d.precision, d.frac, end) == (D("-10.55"), 4, 2, 5)


# ---- §4.1 rowcodec_test flattened values --------------------------------------


def test_rowcodec_flattened_values():
    assert pack_time(2011, 11, 10, 11, 11, 11, 999999) == 1840446893366133311
    assert encode_value([Datum.int64(1)]).hex() == "0802"
    assert encode_value([Datum.uint64(1)]).hex() == "0901"


# ---- §4.2 primitives [computed] ----------------------------------------------

VARINTS = [
    (0, "00"),
    (1, "02"),
    (-1, "01"),
    (63, "7e"),
    (64, "8001"),
    (-64, "7f"),
    (-65, "8101"),
    (300, "d804"),
    (-300, "d704"),
    (2147483648, "8080808010"),
    ((1 << 63) - 1, "feffffffffffffffff01"),
    (-(1 << 63), "ffffffffffffffffff01"),
]
UVARINTS = [
    (0, "00"),
    (1, "01"),
    (127, "7f"),
    (128, "8001"),
    (255, "ff01"),
    (300, "ac02"),
    (16384, "808001"),
    ((1 << 64) - 1, "ffffffffffffffffff01"),
]
INTS = [
    (0, "8000000000000000"),
    (1, "8000000000000001"),
    (-1, "7fffffffffffffff"),
    (9999, "800000000000270f"),
    ((1 << 63) - 1, "ffffffffffffffff"),
    (-(1 << 63), "0000000000000000"),
]
FLOATS = [
    (0.0, "8000000000000000"),
    (1.0, "bff0000000000000"),
    (-1.0, "400fffffffffffff"),
    (0.5, "bfe0000000000000"),
    (2.0, "c000000000000000"),
    (6.0, "c018000000000000"),
    (3.15, "c009333333333333"),
    (float("inf"), "fff0000000000000"),
    (float("-inf"), "000fffffffffffff"),
    (3.140000104904175, "c0091eb860000000"),
]
COMPACT = [
    (b"", "00"),
    (b"a", "0261"),
    (b"abc", "06616263"),
    (b"hello world", "1668656c6c6f20776f726c64"),
]


@pytest.mark.parametrize(("v", "enc"), VARINTS)
def test_varint(v, enc):
    assert p.encode_varint(v).hex() == enc
    assert p.read_varint(h(enc), 0) == (v, len(h(enc)))


@pytest.mark.parametrize(("v", "enc"), UVARINTS)
def test_uvarint(v, enc):
    assert p.encode_uvarint(v).hex() == enc
    assert p.read_uvarint(h(enc), 0) == (v, len(h(enc)))


@pytest.mark.parametrize(("v", "enc"), INTS)
def test_comparable_int(v, enc):
    assert p.encode_int(v).hex() == enc
    assert p.read_int(h(enc), 0) == (v, 8)


@pytest.mark.parametrize(("v", "enc"), FLOATS)
def test_float(v, enc):
    assert p.encode_float(v).hex() == enc
    assert p.read_float(h(enc), 0) == (v, 8)


def test_negative_zero_float_encodes_like_zero():
    # TiDB's binlog-era encodeFloatToCmpUint64 tests f >= 0, so -0.0 sets the sign bit.
    assert p.encode_float(-0.0).hex() == "8000000000000000"


@pytest.mark.parametrize(("v", "enc"), COMPACT)
def test_compact_bytes(v, enc):
    assert p.encode_compact_bytes(v).hex() == enc
    assert p.read_compact_bytes(h(enc), 0) == (v, len(h(enc)))


# ---- §4.2 EncodeValue of single datums [computed] -----------------------------

VALUE_VECTORS = [
    (Datum.null(), "00"),
    (Datum.int64(0), "0800"),
    (Datum.int64(1), "0802"),
    (Datum.int64(-1), "0801"),
    (Datum.int64(127), "08fe01"),
    (Datum.int64(-2333), "08b924"),
    (Datum.int64((1 << 63) - 1), "08feffffffffffffffff01"),
    (Datum.int64(-(1 << 63)), "08ffffffffffffffffff01"),
    (Datum.uint64(0), "0900"),
    (Datum.uint64(1), "0901"),
    (Datum.uint64((1 << 64) - 1), "09ffffffffffffffffff01"),
    (Datum.float64(3.15), "05c009333333333333"),
    (Datum.float64(-1.5), "054007ffffffffffff"),
    (Datum.bytes(b""), "0200"),
    (Datum.bytes(b"abc"), "0206616263"),
    (Datum.bytes("中".encode()), "0206e4b8ad"),
    (Datum.decimal(D("12.34"), 10, 2), "060a028000000c22"),
    (Datum.decimal(D("-12.34"), 10, 2), "060a027ffffff3dd"),
    (Datum.decimal(D("0.00"), 10, 2), "060a028000000000"),
    (Datum.decimal(D("11.9900"), 6, 4), "0606048b26ac"),
    (Datum.decimal(D("1234567890.1234"), 14, 4), "060e04810dfb38d204d2"),
    (Datum.decimal(D("123"), 10, 0), "060a00800000007b"),
    (Datum.decimal(D("99999999999999999999.99"), 22, 2), "061602e33b9ac9ff3b9ac9ff63"),
    (Datum.uint64(1840446893366133311), "09bf84bdd8ac96a5c519"),
    (Datum.uint64(1829659916386697216), "098080808080c090b219"),
    (Datum.uint64(1847882667970789376), "09808080d8efefbfd219"),
    (Datum.uint64(1802216106174185472), "098080808880c0b08119"),
    (Datum.int64(14400000000000), "08808094ae98c606"),
    (Datum.int64(-3600500000000), "08ff93b0e8c9d101"),
    (Datum.int64(3020399000000000), "0880d8cc97aec2dd0a"),
    (Datum.duration(14400000000000), "0780000d18c2e28000"),
    (Datum.uint64(2), "0902"),
    (Datum.uint64(5), "0905"),
    (Datum.uint64(3223600), "09b0e0c401"),
    (Datum.uint64(0x1234), "09b424"),
]


@pytest.mark.parametrize(("datum", "enc"), VALUE_VECTORS, ids=[e for _, e in VALUE_VECTORS])
def test_value_vectors(datum, enc):
    assert encode_value([datum]).hex() == enc
    assert decode_one(h(enc)) == (datum, len(h(enc)))
    assert cut_one(h(enc) + b"\x00\x00", 0) == len(h(enc))


@pytest.mark.parametrize(
    ("datum", "enc"),
    [
        (Datum.string("abc"), "0206616263"),
        (Datum.float32(3.14), "05c0091eb860000000"),
        (Datum.time(1829659916386697216), "041964420000000000"),
        (Datum.time(0), "040000000000000000"),
        (Datum.enum(2), "0902"),
        (Datum.set(5), "0905"),
        (Datum.bit(3223600), "09b0e0c401"),
        (Datum.decimal(D("3.14")), "060302830e"),
        (Datum.min_not_null(), "01"),
        (Datum.max_value(), "fa"),
    ],
)
def test_value_form_of_other_kinds(datum, enc):
    assert encode_value([datum]).hex() == enc


@pytest.mark.parametrize(
    ("datum", "key"),
    [
        (Datum.int64(1), "038000000000000001"),
        (Datum.int64(-1), "037fffffffffffffff"),
        (Datum.uint64(1), "040000000000000001"),
        (Datum.bytes(b"abc"), "016162630000000000fa"),
        (Datum.string("abc"), "016162630000000000fa"),
        (Datum.time(1829659916386697216), "041964420000000000"),
        (Datum.duration(14400000000000), "0780000d18c2e28000"),
        (Datum.enum(2), "040000000000000002"),
        (Datum.float32(3.14), "05c0091eb860000000"),
        (Datum.min_not_null(), "01"),
        (Datum.max_value(), "fa"),
    ],
)
def test_key_vectors(datum, key):
    assert encode_key([datum]).hex() == key


def test_record_key_of_table_100_handle_1():
    record_key = b"t" + p.encode_int(100) + b"_r" + p.encode_int(1)
    assert record_key.hex() == "748000000000000064" + "5f72" + "8000000000000001"


def test_max_value_decodes():
    assert decode_one(h("fa")) == (Datum.max_value(), 1)


# ---- §4.2 packed times [computed] ---------------------------------------------

PACKED_TIMES = [
    ((2011, 11, 10, 11, 11, 11, 999999), 1840446893366133311, "198a94b2cb0f423f"),
    ((2000, 1, 1), 1829659916386697216, "1964420000000000"),
    ((2019, 12, 31, 23, 59, 59), 1847882667970789376, "19a4ff7efb000000"),
    ((1970, 1, 1, 0, 0, 1), 1802216106174185472, "1902c20001000000"),
    ((9999, 12, 31, 23, 59, 59, 999999), 9147936188962652735, "7ef3ff7efb0f423f"),
    ((1, 1, 1), 987361441742848, "0003820000000000"),
    ((2023, 1, 2, 3, 4, 5, 678), 1850702580456358566, "19af0431050002a6"),
    ((0, 0, 0), 0, "0000000000000000"),
    ((2020, 0, 0), pack_time(2020, 0, 0), None),
]


@pytest.mark.parametrize(("fields", "packed", "be"), PACKED_TIMES)
def test_packed_times(fields, packed, be):
    assert pack_time(*fields) == packed
    assert tuple(unpack_time(packed))[: len(fields)] == fields
    if be is not None:
        assert p.encode_uint(packed).hex() == be


def test_pack_time_rejects_out_of_range_fields():
    with pytest.raises(CodecError, match="month 13"):
        pack_time(2020, 13, 1)
    with pytest.raises(CodecError, match="minute 60"):
        unpack_time(pack_time(2020, 1, 1, 0, 59) + (1 << 30))


# ---- truncation of every vector ------------------------------------------------

ALL_DATUM_BYTES = (
    [e for _, e in VALUE_VECTORS]
    + ["01" + e for _, e in BYTES_VECTORS]
    + [bytes([6, pr, fr]).hex() + b for _, pr, fr, b in DECIMAL_BIN]
    + ["03800000000000270f", "0780000d18c2e28000", "041964420000000000", "05c0091eb860000000"]
)


@pytest.mark.parametrize("enc", ALL_DATUM_BYTES)
def test_every_truncation_raises_codec_error(enc):
    full = h(enc)
    for cut in range(len(full)):
        if cut == 0:
            with pytest.raises(CodecError):
                decode_one(full[:0])
            continue
        with pytest.raises(CodecError) as info:
            decode_one(full[:cut])
        assert info.value.offset == 0 and info.value.flag == full[0]
        with pytest.raises(CodecError):
            cut_one(full[:cut], 0)


def test_error_names_offset_and_flag_in_a_sequence():
    buf = encode_value([Datum.int64(5), Datum.bytes(b"abc")])[:-1]
    with pytest.raises(CodecError, match=r"offset 2 .*flag 0x02") as info:
        decode_value(buf)
    assert (info.value.offset, info.value.flag) == (2, 0x02)


def test_unknown_flag():
    with pytest.raises(CodecError, match="invalid encoded key flag 11") as info:
        decode_one(b"\x0b\x00")
    assert info.value.flag == 0x0B


def test_corrupt_decimal_digits_are_errors_not_values():
    # 0x80 0x00 0x00 0x3b9aca00 would be a word of 1000000000 > 999999999
    with pytest.raises(CodecError, match="exceeds 999999999"):
        decode_one(bytes([6, 18, 0]) + bytes([0x80, 0, 0, 0, 0x3B, 0x9A, 0xCA, 0x00]))
    with pytest.raises(CodecError, match="DECIMAL"):
        decode_one(bytes([6, 2, 5, 0x80]))  # frac > precision


def test_datum_pickles_and_hashes():
    for d, _ in VALUE_VECTORS:
        assert pickle.loads(pickle.dumps(d)) == d
        assert hash(pickle.loads(pickle.dumps(d))) == hash(d)
    assert len({Datum.int64(1), Datum.int64(1), Datum.uint64(1)}) == 2


@pytest.mark.parametrize(
    ("make", "arg", "match"),
    [
        (Datum.int64, 1 << 63, "out of range"),
        (Datum.int64, "1", "needs an int"),
        (Datum.uint64, -1, "out of range"),
        (Datum.duration, 1 << 63, "out of range"),
        (Datum.enum, 1 << 64, "out of range"),
        (Datum.float32, 1e300, "float32 range"),
        (Datum.bytes, "text", "needs bytes"),
        (Datum.time, 1 << 64, "not a uint64"),
    ],
)
def test_constructor_range_checks(make, arg, match):
    with pytest.raises(CodecError, match=match):
        make(arg)


def test_decimal_constructor_checks():
    with pytest.raises(CodecError, match="fractional digits"):
        Datum.decimal(D("1.234"), 10, 2)
    with pytest.raises(CodecError, match="integer digits"):
        Datum.decimal(D("1234"), 5, 2)
    assert Datum.decimal(D("1.230"), 10, 2).value == D("1.23")


def test_precision_zero_clamps_frac_to_30():
    value = D("0." + "1" * 35)
    enc = encode_value([Datum.decimal(value)])
    assert enc[:3] == bytes([6, 35, 30])
    d, _ = decode_one(enc)
    assert d.value == D("0." + "1" * 30)


def test_zero_decimal_is_never_negative():
    assert encode_decimal_bin(D("-0"), 5, 0) == encode_decimal_bin(D("0"), 5, 0)
