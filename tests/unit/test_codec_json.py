"""TiDB binary JSON: reference vectors, String() text, text parsing, bad bytes."""

from __future__ import annotations

import math
import pickle
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.codec.json_binary import (
    MAX_DEPTH,
    TYPE_DATE,
    TYPE_DATETIME,
    TYPE_TIMESTAMP,
    JSONDuration,
    JSONOpaque,
    JSONTime,
    JSONUInt,
    decode_json,
    encode_json,
    json_len,
    json_to_string,
    parse_json_text,
)
from tidb_binlog.errors import CodecError


def same(a, b) -> bool:
    """Equal *and* the same Python types all the way down (1 != 1.0 != True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return a == b


# tidb-codec.md §4.2: datum bytes are 0a + these payloads.
VECTORS = [
    (None, "0400"),
    (True, "0401"),
    (False, "0402"),
    (42, "092a00000000000000"),
    (-1, "09ffffffffffffffff"),
    (JSONUInt(18446744073709551615), "0affffffffffffffff"),
    (3.5, "0b0000000000000c40"),
    ("abc", "0c03616263"),
    ({"a": 2}, "01010000001c0000001300000001000914000000610200000000000000"),
    ([], "030000000008000000"),
    ({}, "010000000008000000"),
    (
        [1, "2", True, None],
        "030400000026000000091c0000000c240000000401000000040000000001000000000000000132",
    ),
    (
        {"a": 42, "foo": "bar"},
        "01020000002e0000001e00000001001f000000030009220000000c2a0000006166"
        "6f6f2a0000000000000003626172",
    ),
]
VECTOR_IDS = [json_to_string(obj) for obj, _ in VECTORS]


@pytest.mark.parametrize(("obj", "payload"), VECTORS, ids=VECTOR_IDS)
def test_reference_vectors(obj, payload):
    data = bytes.fromhex(payload)
    assert encode_json(obj) == data
    assert json_len(data) == len(data)
    decoded, end = decode_json(data)
    assert same(decoded, obj) and end == len(data)


@pytest.mark.parametrize(("obj", "payload"), VECTORS, ids=VECTOR_IDS)
def test_vectors_inside_a_datum_stream(obj, payload):
    """decode_json at an offset, as decode_one calls it after flag 0x0a, with a tail."""
    stream = b"\x0a" + bytes.fromhex(payload) + b"\x08\x02"
    decoded, end = decode_json(stream, 1)
    assert same(decoded, obj)
    assert end == len(stream) - 2 and json_len(stream, 1) == end - 1


def test_plain_int_above_int64_encodes_as_uint64():
    assert encode_json(18446744073709551615) == bytes.fromhex("0affffffffffffffff")
    assert encode_json(1 << 63)[0] == 0x0A and encode_json((1 << 63) - 1)[0] == 0x09


def test_decoded_uint_that_fits_int64_stays_uint64():
    data = bytes.fromhex("0a0500000000000000")
    value, _ = decode_json(data)
    assert type(value) is JSONUInt and value == 5
    assert encode_json(value) == data
    assert encode_json([value]) == bytes.fromhex("0301000000150000000a0d0000000500000000000000")


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        ("01010000001c0000001300000001000914000000610200000000000000", '{"a": 2}'),
        (VECTORS[12][1], '{"a": 42, "foo": "bar"}'),
        (VECTORS[11][1], '[1, "2", true, null]'),
        ("0400", "null"),
        ("0affffffffffffffff", "18446744073709551615"),
        ("0b0000000000000c40", "3.5"),
    ],
)
def test_decode_direction_string(payload, text):
    assert json_to_string(decode_json(bytes.fromhex(payload))[0]) == text


@pytest.mark.parametrize(
    "text",
    [  # verbatim from TiDB types/json binary_test.go TestBinaryJSONMarshalUnmarshal
        '{"a": [1, "2", {"aa": "bb"}, 4, null], "b": true, "c": null}',
        '[{"a": 1, "b": true}, 3, 3.5, "hello, world", null, true]',
        '{"a": "&<>"}',
    ],
)
def test_verbatim_string_round_trips(text):
    model = parse_json_text(text)
    assert json_to_string(model) == text
    assert json_to_string(decode_json(encode_json(model))[0]) == text


@pytest.mark.parametrize(
    ("value", "master", "legacy"),
    [
        (4.0, "4.0", "4"),
        (-0.0, "-0.0", "-0"),
        (3.5, "3.5", "3.5"),
        (0.1, "0.1", "0.1"),
        (-2.25, "-2.25", "-2.25"),
        (1e14, "100000000000000.0", "100000000000000"),
        (1e15, "1e15", "1000000000000000"),
        (1.5e15, "1.5e15", "1500000000000000"),
        (1e21, "1e21", "1e+21"),
        (1.5e300, "1.5e300", "1.5e+300"),
        (1e-7, "0.0000001", "1e-7"),
        (1e-15, "0.000000000000001", "1e-15"),
        (1.25e-16, "1.25e-16", "1.25e-16"),
        (5e-324, "5e-324", "5e-324"),
        (123456789.125, "123456789.125", "123456789.125"),
    ],
)
def test_double_text(value, master, legacy):
    assert json_to_string(value) == master
    assert json_to_string(value, legacy_floats=True) == legacy


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_double_has_no_text(value):
    with pytest.raises(CodecError, match="no JSON text form"):
        json_to_string([value])


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ('a"b\\c', r'"a\"b\\c"'),
        ("\n\r\t\b\f", r'"\n\r\t\b\f"'),
        ("\x00\x01\x1f\x7f", '"\\u0000\\u0001\\u001f\x7f"'),
        ("<&>", '"<&>"'),
        ("\u2028\u2029", r'"\u2028\u2029"'),
        ("中文😀", '"中文😀"'),
        ("/", '"/"'),
    ],
)
def test_string_escaping(value, text):
    assert json_to_string(value) == text


def test_invalid_utf8_round_trips_and_prints_replacement_chars():
    data = b"\x0c\x04ab\xff\xe4"
    value, _ = decode_json(data)
    assert encode_json(value) == data
    assert json_to_string(value) == r'"ab\ufffd\ufffd"'


def test_object_keys_sorted_bytewise():
    obj = {"é": 1, "b": 2, "Z": 3, "a": 4, "aa": 5, "": 6}
    decoded, _ = decode_json(encode_json(obj))
    assert list(decoded) == ["", "Z", "a", "aa", "b", "é"]
    assert json_to_string(obj) == '{"": 6, "Z": 3, "a": 4, "aa": 5, "b": 2, "é": 1}'


def test_time_values():
    core = (2011 << 50) | (11 << 46) | (10 << 41) | (11 << 36) | (11 << 30) | (11 << 24)
    core |= 999999 << 4
    dt = JSONTime.of(TYPE_DATETIME, 2011, 11, 10, 11, 11, 11, 999999)
    assert dt.core_time == core
    assert (dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.microsecond) == (
        2011, 11, 10, 11, 11, 11, 999999,
    )  # fmt: skip
    assert encode_json(dt) == b"\x0f" + struct.pack("<Q", core)
    assert json_to_string(dt) == '"2011-11-10 11:11:11.999999"'
    assert json_to_string(JSONTime.of(TYPE_TIMESTAMP, 1970, 1, 1, 0, 0, 1)) == (
        '"1970-01-01 00:00:01.000000"'
    )
    date = JSONTime.of(TYPE_DATE, 2000, 1, 2)
    assert encode_json(date)[0] == 0x0E and json_to_string(date) == '"2000-01-02"'
    for value in (dt, date, JSONTime(TYPE_TIMESTAMP, core | 0b1101)):
        data = encode_json(value)
        assert len(data) == 9 and decode_json(data) == (value, 9)


def test_duration_and_opaque_values():
    four_hours = JSONDuration(14_400_000_000_000, 0)
    data = encode_json(four_hours)
    assert data == b"\x11" + struct.pack("<qI", 14_400_000_000_000, 0) and json_len(data) == 13
    assert json_to_string(four_hours) == '"04:00:00.000000"'
    assert json_to_string(JSONDuration(-3_600_500_000_000, 1)) == '"-01:00:00.500000"'
    assert json_to_string(JSONDuration(3_020_399_000_000_000, 0)) == '"838:59:59.000000"'
    blob = JSONOpaque(0xFC, b"\x01\x02\xff")
    assert encode_json(blob) == bytes.fromhex("0dfc030102ff")
    assert json_to_string(blob) == '"base64:type252:AQL/"'
    for value in (four_hours, blob, [blob, {"t": four_hours}]):
        assert decode_json(encode_json(value))[0] == value


def test_model_classes_pickle():
    for value in (JSONUInt(7), JSONOpaque(1, b"x"), JSONTime.of(TYPE_DATE, 1, 2, 3)):
        assert pickle.loads(pickle.dumps(value)) == value
    assert type(pickle.loads(pickle.dumps(JSONUInt(7)))) is JSONUInt


# ------------------------------------------------------------------ text parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9223372036854775807", 9223372036854775807),
        ("-9223372036854775808", -9223372036854775808),
        ("9223372036854775808", JSONUInt(9223372036854775808)),
        ("18446744073709551615", JSONUInt(18446744073709551615)),
        ("18446744073709551616", 18446744073709551616.0),
        ("-9223372036854775809", -9223372036854775809.0),
        ("1" + "0" * 30, 1e30),
        ("-0", 0),
        ("1.0", 1.0),
        ("1e2", 100.0),
        ("-0.0", -0.0),
        ("1E-400", 0.0),
        (' "x" ', "x"),
        ('"\\ud800"', "\ufffd"),
        ('"\\ud83d\\ude00"', "😀"),
        ("[true, false, null]", [True, False, None]),
    ],
)
def test_parse_number_and_scalar_rules(text, expected):
    assert same(parse_json_text(text), expected)


def test_parse_objects_keep_last_duplicate_and_sort_keys():
    model = parse_json_text('{"b": 1, "a": {"y": 1, "x": 2}, "b": 3}')
    assert same(model, {"a": {"x": 2, "y": 1}, "b": 3})
    assert json_to_string(model) == '{"a": {"x": 2, "y": 1}, "b": 3}'


def test_parse_bytes_input():
    assert parse_json_text(b'{"k": [1.5]}') == {"k": [1.5]}


@pytest.mark.parametrize(
    ("text", "offset"),
    [("", 0), ("[1, 2", 5), ('{"a" 1}', 5), ("[1] x", 4), ("'a'", 0), ('"a\nb"', 2)],
)
def test_parse_invalid_text_names_the_offset(text, offset):
    with pytest.raises(CodecError) as info:
        parse_json_text(text)
    assert info.value.offset == offset and info.value.flag == 0x0A


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", "-Infinity", "1e400", "[-1e999]"])
def test_parse_rejects_non_finite_numbers(text):
    with pytest.raises(CodecError, match="JSON|double"):
        parse_json_text(text)


def test_depth_limit_matches_tidb():
    ok_scalar = "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH
    ok_empty = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    too_deep = "[" * (MAX_DEPTH + 1) + "1" + "]" * (MAX_DEPTH + 1)
    for text in (ok_scalar, ok_empty):
        model = parse_json_text(text)
        assert decode_json(encode_json(model))[0] == model
    with pytest.raises(CodecError, match="nested deeper"):
        parse_json_text(too_deep)
    with pytest.raises(CodecError, match="nested deeper"):
        parse_json_text("[" * 5000 + "]" * 5000)
    nested: list = []
    for _ in range(MAX_DEPTH + 1):
        nested = [nested]
    with pytest.raises(CodecError, match="nested deeper"):
        encode_json(nested)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "obj",
    [1 << 64, -(1 << 63) - 1, JSONUInt(-1), b"bytes", {1: 2}, {"a": object()}, "\ud800x"],
)
def test_encode_rejects_what_tidb_cannot_hold(obj):
    with pytest.raises(CodecError):
        encode_json(obj)


@pytest.mark.parametrize(("obj", "payload"), VECTORS, ids=VECTOR_IDS)
def test_truncation_at_every_offset(obj, payload):
    stream = b"\x0a" + bytes.fromhex(payload)
    for cut in range(1, len(stream)):
        with pytest.raises(CodecError) as info:
            decode_json(stream[:cut], 1)
        assert info.value.flag == 0x0A and 1 <= info.value.offset <= cut
        assert f"offset {info.value.offset}" in str(info.value)
        with pytest.raises(CodecError):
            json_len(stream[:cut], 1)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("02", "type code 0x02"),  # MySQL small array: TiDB never writes it
        ("05 0100", "type code 0x05"),  # MySQL int16
        ("ff", "type code 0xff"),
        ("0403", "literal 0x03"),
        ("0c 80808080808080808002", "overflows"),
        ("0c 05 6162", "truncated"),
        ("03 01000000 08000000", "too small"),
        ("03 01000000 0d000000 09 ff000000", "outside"),
        ("03 01000000 0d000000 09 00000000", "outside"),
        ("03 01000000 11000000 07 0d000000 00000000", "type code 0x07"),
        ("01 01000000 13000000 ff000000 0100 04000000 00 61", "outside"),
        ("03 01000000 11000000 09 0d000000 2a000000000000", "truncated"),
    ],
)
def test_corrupt_bytes(payload, message):
    with pytest.raises(CodecError, match=message) as info:
        decode_json(bytes.fromhex(payload.replace(" ", "")))
    assert info.value.flag == 0x0A and isinstance(info.value.offset, int)


def test_decode_past_the_end():
    with pytest.raises(CodecError, match="buffer ends"):
        decode_json(b"\x0a", 1)


# ------------------------------------------------------------------ properties

_text_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)  # JSONUInt is left out: its text is a plain number, which parses back as int64
_scalars = (
    _text_scalars
    | st.integers(0, (1 << 64) - 1).map(JSONUInt)
    | st.floats()
    | st.builds(JSONOpaque, st.integers(0, 255), st.binary(max_size=20))
    | st.builds(JSONTime, st.sampled_from([0x0E, 0x0F, 0x10]), st.integers(0, (1 << 64) - 1))
    | st.builds(JSONDuration, st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 6))
)


def _nested(leaves):
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=8), inner, max_size=5),
        max_leaves=25,
    )


_values = _nested(_scalars)


def _canonical(obj):
    """What decoding gives back: ints above int64 as JSONUInt, dict keys sorted."""
    if isinstance(obj, dict):
        return {k: _canonical(obj[k]) for k in sorted(obj, key=lambda k: k.encode())}
    if isinstance(obj, list):
        return [_canonical(v) for v in obj]
    if type(obj) is int and obj > (1 << 63) - 1:
        return JSONUInt(obj)
    return obj


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_round_trip_property(obj):
    data = encode_json(obj)
    assert json_len(data) == len(data)
    decoded, end = decode_json(data)
    assert end == len(data)
    assert same(decoded, _canonical(obj))
    assert encode_json(decoded) == data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_nested(_text_scalars))
def test_text_round_trip_property(obj):
    """String() then parsing gives back the canonical document and the same text."""
    text = json_to_string(obj)
    parsed = parse_json_text(text)
    assert json_to_string(parsed) == text
    assert encode_json(parsed) == encode_json(obj)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64))
def test_random_bytes_never_escape_codec_error(data):
    try:
        value, end = decode_json(data)
    except CodecError as exc:
        assert exc.flag == 0x0A
    else:
        assert end == json_len(data) <= len(data)
        if data[0] not in (0x01, 0x03, 0x0C, 0x0D):  # fixed-size scalars are canonical
            assert encode_json(value) == data[:end]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values, st.data())
def test_mutated_encodings_never_escape_codec_error(obj, data):
    encoded = bytearray(encode_json(obj))
    index = data.draw(st.integers(0, len(encoded) - 1))
    encoded[index] = data.draw(st.integers(0, 255))
    try:
        decode_json(bytes(encoded))
    except CodecError as exc:
        assert exc.flag == 0x0A
