"""Hypothesis: round trips in both forms, key-form ordering, and garbage never escapes as
anything but CodecError."""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.codec import (
    Datum,
    FieldType,
    Kind,
    cut_one,
    decode_old_row,
    decode_one,
    decode_row,
    decode_row_v2,
    decode_value,
    encode_key,
    encode_old_row,
    encode_row_v2,
    encode_value,
    pack_time,
    unflatten,
)
from tidb_binlog.codec import mysql as m
from tidb_binlog.errors import CodecError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int64s = st.integers(-(1 << 63), (1 << 63) - 1)
uint64s = st.integers(0, (1 << 64) - 1)
floats = st.floats(allow_nan=False)
PREC, FRAC = 20, 6
decimals = st.integers(-(10**PREC) + 1, 10**PREC - 1).map(lambda n: Decimal(n).scaleb(-FRAC))
packed_times = st.builds(
    pack_time,
    st.integers(0, 9999),
    st.integers(0, 12),
    st.integers(0, 31),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 999_999),
)
durations = st.integers(-(839 * 3600 * 10**9), 839 * 3600 * 10**9)

# datums that decode back to themselves in both forms
self_decoding = st.one_of(
    st.just(Datum.null()),
    int64s.map(Datum.int64),
    uint64s.map(Datum.uint64),
    floats.map(Datum.float64),
    st.binary(max_size=40).map(Datum.bytes),
    decimals.map(lambda d: Datum.decimal(d, PREC, FRAC)),
    durations.map(Datum.duration),
)

# (datum, column type) pairs that decode back after unflatten
ENUM_FT = FieldType(m.TYPE_ENUM, elems=("a", "b", "c"))
SET_FT = FieldType(m.TYPE_SET, elems=("a", "b", "c"))
typed_pairs = st.one_of(
    packed_times.map(lambda p: (Datum.time(p), FieldType(m.TYPE_DATETIME, decimal=6))),
    st.integers(0, 3).map(lambda n: (Datum.enum(n), ENUM_FT)),
    st.integers(0, 7).map(lambda n: (Datum.set(n), SET_FT)),
    uint64s.map(lambda n: (Datum.bit(n), FieldType(m.TYPE_BIT, flen=64))),
    st.text(max_size=20).map(
        lambda s: (Datum.string(s), FieldType(m.TYPE_VARCHAR, charset="utf8mb4"))
    ),
    floats.filter(lambda f: abs(f) < 3e38).map(
        lambda f: (Datum.float32(f), FieldType(m.TYPE_FLOAT))
    ),
    durations.map(lambda n: (Datum.duration(n), FieldType(m.TYPE_DURATION, decimal=6))),
    int64s.map(lambda n: (Datum.int64(n), FieldType(m.TYPE_LONGLONG))),
    uint64s.map(lambda n: (Datum.uint64(n), FieldType(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG))),
    decimals.map(
        lambda d: (
            Datum.decimal(d, PREC, FRAC),
            FieldType(m.TYPE_NEWDECIMAL, flen=PREC, decimal=FRAC),
        )
    ),
    st.binary(max_size=40).map(
        lambda b: (Datum.string(b), FieldType(m.TYPE_BLOB, charset="binary"))
    ),
    st.just((Datum.null(), FieldType(m.TYPE_LONG))),
)


@SETTINGS
@given(st.lists(self_decoding, max_size=6))
def test_decode_encode_is_identity_both_forms(datums):
    for form in (encode_value, encode_key):
        buf = form(datums)
        if datums:
            assert decode_value(buf) == datums
        off = 0
        for d in datums:
            end = cut_one(buf, off)
            assert decode_one(buf, off) == (d, end)
            off = end
        assert off == len(buf)


@SETTINGS
@given(st.lists(typed_pairs, max_size=6))
def test_typed_round_trip_every_kind_both_forms_and_rows(pairs):
    for form in (encode_value, encode_key):
        buf = form([d for d, _ in pairs])
        off = 0
        for d, ft in pairs:
            got, off = decode_one(buf, off)
            assert unflatten(got, ft) == d
    ids = list(range(1, len(pairs) + 1))
    types = dict(zip(ids, [ft for _, ft in pairs], strict=True))
    expected = dict(zip(ids, [d for d, _ in pairs], strict=True))
    assert decode_row(encode_old_row(ids, [d for d, _ in pairs]), types) == expected
    assert decode_row(encode_row_v2(ids, [d for d, _ in pairs]), types) == expected


def _key(d: Datum) -> bytes:
    return encode_key([d])


def _sorts_like(values, make):
    """Every pair compares the same way by value and by key-form bytes."""
    for a in values:
        for b in values:
            ka, kb = _key(make(a)), _key(make(b))
            assert (a < b) == (ka < kb) and (a == b) == (ka == kb), (a, b, ka.hex(), kb.hex())


@SETTINGS
@given(st.lists(int64s, min_size=2, max_size=8))
def test_ints_sort(values):
    _sorts_like(values, Datum.int64)


@SETTINGS
@given(st.lists(uint64s, min_size=2, max_size=8))
def test_uints_sort(values):
    _sorts_like(values, Datum.uint64)


@SETTINGS
@given(st.lists(floats, min_size=2, max_size=8))
def test_floats_sort(values):
    _sorts_like(values, Datum.float64)


@SETTINGS
@given(st.lists(st.binary(max_size=20), min_size=2, max_size=8))
def test_bytes_sort(values):
    _sorts_like(values, Datum.bytes)


@SETTINGS
@given(st.lists(decimals, min_size=2, max_size=8))
def test_decimals_sort(values):
    _sorts_like(values, lambda v: Datum.decimal(v, PREC, FRAC))


@SETTINGS
@given(st.lists(durations, min_size=2, max_size=8))
def test_durations_sort(values):
    _sorts_like(values, Datum.duration)


@SETTINGS
@given(st.lists(packed_times, min_size=2, max_size=8))
def test_times_sort(values):
    _sorts_like(values, Datum.time)


def _only_codec_errors(fn, *args):
    try:
        fn(*args)
    except CodecError as err:
        assert err.offset is None or isinstance(err.offset, int)
    except (IndexError, struct.error, ValueError, TypeError, KeyError) as err:  # pragma: no cover
        raise AssertionError(f"{fn.__name__} leaked {err!r}") from err


TYPES = {
    1: FieldType(m.TYPE_LONGLONG),
    2: FieldType(m.TYPE_VARCHAR, charset="utf8mb4"),
    3: FieldType(m.TYPE_NEWDECIMAL, flen=10, decimal=2),
    4: FieldType(m.TYPE_TIMESTAMP, decimal=6),
    5: FieldType(m.TYPE_SET, elems=("a",)),
    6: FieldType(m.TYPE_JSON),
    7: FieldType(m.TYPE_DURATION),
    8: FieldType(m.TYPE_DOUBLE),
}
TZ = datetime.timezone(datetime.timedelta(hours=-5))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=48))
def test_garbage_raises_only_codec_errors(buf):
    _only_codec_errors(decode_value, buf)
    _only_codec_errors(decode_one, buf)
    _only_codec_errors(cut_one, buf, 0)
    _only_codec_errors(decode_old_row, buf)
    _only_codec_errors(decode_row, buf, TYPES, TZ)
    _only_codec_errors(decode_row_v2, buf, TYPES, TZ)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 8), st.binary(min_size=1, max_size=24), st.data())
def test_flag_prefixed_garbage_raises_only_codec_errors(flag_index, payload, data):
    flag = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08, 0x09, 0x0A][flag_index]
    buf = bytes([flag]) + payload
    _only_codec_errors(decode_one, buf)
    _only_codec_errors(cut_one, buf, 0)
    cid = data.draw(st.sampled_from(sorted(TYPES)))
    _only_codec_errors(decode_row, b"\x08" + bytes([cid * 2]) + buf, TYPES, TZ)


def test_datum_kinds_cover_every_constructor():
    kinds = {
        Datum.null().kind,
        Datum.int64(1).kind,
        Datum.uint64(1).kind,
        Datum.float32(1).kind,
        Datum.float64(1).kind,
        Datum.string("").kind,
        Datum.bytes(b"").kind,
        Datum.decimal(Decimal(1)).kind,
        Datum.time(0).kind,
        Datum.duration(0).kind,
        Datum.json(None).kind,
        Datum.enum(0).kind,
        Datum.set(0).kind,
        Datum.bit(0).kind,
        Datum.min_not_null().kind,
        Datum.max_value().kind,
    }
    assert kinds == set(Kind) - {Kind.BINARY_LITERAL}
