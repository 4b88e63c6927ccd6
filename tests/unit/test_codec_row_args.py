"""decode_*_args give exactly format_sql_arg of what decode_* give, errors included."""

from __future__ import annotations

import datetime
import math
import zoneinfo
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.codec import (
    Datum,
    decode_insert_row,
    decode_old_and_new_row,
    decode_row,
    encode_old_row,
    encode_row_v2,
    encode_value,
    format_sql_arg,
    pack_time,
)
from tidb_binlog.codec import mysql as m
from tidb_binlog.codec.row_args import (
    ArgPlan,
    decode_insert_args,
    decode_int_handle_args,
    decode_old_and_new_args,
    decode_row_args,
)
from tidb_binlog.errors import CodecError

# every test twice: with the compiled decoder of old-format rows and the Python reference
pytestmark = pytest.mark.usefixtures("row_args_impl")

SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")

# column id -> (field type, strategy of datums valid for it)
text = st.text(max_size=40)
COLUMNS = {
    1: (m.FieldType(m.TYPE_LONG), st.integers(-(2**31), 2**31 - 1).map(Datum.int64)),
    2: (m.FieldType(m.TYPE_LONGLONG), st.integers(-(2**63), 2**63 - 1).map(Datum.int64)),
    3: (m.FieldType(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG),
        st.integers(0, 2**64 - 1).map(Datum.uint64)),
    4: (m.FieldType(m.TYPE_VARCHAR, charset="utf8mb4"),
        st.one_of(text.map(Datum.string), st.binary(max_size=20).map(Datum.bytes))),
    5: (m.FieldType(m.TYPE_STRING, charset=m.BINARY_CHARSET), st.binary(max_size=300).map(
        Datum.bytes)),
    6: (m.FieldType(m.TYPE_DOUBLE), st.floats(allow_nan=False).map(Datum.float64)),
    7: (m.FieldType(m.TYPE_NEWDECIMAL, flen=10, decimal=2),
        st.decimals(-10**7, 10**7, places=2).map(lambda d: Datum.decimal(d, 10, 2))),
    8: (m.FieldType(m.TYPE_TIMESTAMP, decimal=3),
        st.datetimes(datetime.datetime(1971, 1, 1), datetime.datetime(2037, 1, 1)).map(
            lambda t: Datum.time(pack_time(t.year, t.month, t.day, t.hour, t.minute, t.second,
                                           t.microsecond)))),
    9: (m.FieldType(m.TYPE_ENUM, elems=("a", "b")), st.integers(1, 2).map(Datum.enum)),
    10: (m.FieldType(m.TYPE_YEAR), st.integers(1901, 2155).map(Datum.int64)),
    11: (m.FieldType(m.TYPE_TINY), st.integers(-128, 127).map(Datum.int64)),
}
TYPES = {cid: ft for cid, (ft, _) in COLUMNS.items()}


@st.composite
def rows(draw):
    ids = draw(st.lists(st.sampled_from(sorted(COLUMNS) + [99]), unique=True, max_size=8))
    datums = [Datum.int64(5) if cid == 99 else draw(st.one_of(
        st.just(Datum.null()), COLUMNS[cid][1])) for cid in ids]
    return ids, datums


def outcome(fn):
    try:
        return ("ok", fn())
    except CodecError as exc:
        return ("error", type(exc))


def nan_safe(result):
    """An outcome with NaN floats replaced by a marker: a damaged double can decode to NaN,
    and NaN != NaN would fail an equal outcome."""
    kind, value = result
    if kind == "ok" and isinstance(value, dict):
        value = {k: "NaN" if isinstance(v, float) and math.isnan(v) else v
                 for k, v in value.items()}
    return kind, value


def formatted(typed: dict, formatted_ids=None, tz=datetime.UTC) -> dict:
    return {cid: format_sql_arg(d, TYPES[cid], tz)
            if formatted_ids is None or cid in formatted_ids else d
            for cid, d in typed.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(), st.booleans(), st.sampled_from([datetime.UTC, SHANGHAI]), st.data())
def test_row_args_are_the_formatted_typed_row(row, v2, tz, data):
    ids, datums = row
    buf = encode_row_v2(ids, datums) if v2 and ids else encode_old_row(ids, datums)
    plan = ArgPlan(TYPES, tz)
    expected = outcome(lambda: formatted(decode_row(buf, TYPES, tz), tz=tz))
    assert outcome(lambda: decode_row_args(buf, plan, tz)) == expected
    # malformed bytes: the same outcome (a CodecError, never an IndexError)
    cut = data.draw(st.integers(0, max(len(buf) - 1, 0)))
    for bad in (buf[:cut], buf[:cut] + b"\xff" + buf[cut + 1:]):
        want = outcome(lambda b=bad: formatted(decode_row(b, TYPES, tz), tz=tz))
        got = outcome(lambda b=bad: decode_row_args(b, plan, tz))
        assert got[0] == want[0], (bad, got, want)
        if want[0] == "ok":
            assert nan_safe(got) == nan_safe(want)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(), st.integers(-(2**63), 2**63 - 1))
def test_insert_args_keep_the_handle_and_format_only_the_wanted_columns(row, handle):
    ids, datums = row
    buf = encode_value([Datum.int64(handle)]) + encode_old_row(ids, datums)
    wanted = {1, 4, 7}
    handles, args = decode_insert_args(buf, ArgPlan(TYPES, formatted=wanted))
    exp_handles, typed = decode_insert_row(buf, TYPES)
    assert handles == exp_handles
    assert args == formatted(typed, wanted)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(), st.integers(-(2**63), 2**63 - 1))
def test_int_handle_args_read_the_handle_as_the_general_path_does(row, handle):
    ids, datums = row
    buf = encode_value([Datum.int64(handle)]) + encode_old_row(ids, datums)
    plan = ArgPlan(TYPES)
    got_handle, args = decode_int_handle_args(buf, plan)
    handles, exp_args = decode_insert_args(buf, plan)
    assert got_handle == handles[0][1] == handle and args == exp_args


def test_int_handle_args_leave_other_handles_to_the_general_path():
    row = encode_old_row([1], [Datum.int64(5)])
    assert decode_int_handle_args(encode_value([Datum.string("k")]) + row, ArgPlan(TYPES)) \
        == (None, {})
    assert decode_int_handle_args(b"\x08\xff\xff", ArgPlan(TYPES)) == (None, {})  # cut varint
    assert decode_int_handle_args(b"", ArgPlan(TYPES)) == (None, {})
    assert ArgPlan(TYPES).signed_int(1) and not ArgPlan(TYPES).signed_int(3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(), st.data())
def test_update_args_pair_old_and_new(row, data):
    ids, old = row
    new = [Datum.int64(5) if cid == 99 else data.draw(COLUMNS[cid][1]) for cid in ids]
    buf = encode_old_row(ids, old) + encode_old_row(ids, new)
    plan = ArgPlan(TYPES)
    exp_old, exp_new = decode_old_and_new_row(buf, TYPES)
    assert decode_old_and_new_args(buf, plan) == (formatted(exp_old), formatted(exp_new))


def test_update_with_different_column_sets_is_corrupted():
    buf = encode_old_row([1, 4], [Datum.int64(1), Datum.string("a")]) + encode_old_row(
        [1], [Datum.int64(2)])
    with pytest.raises(CodecError, match="corrupted"):
        decode_old_and_new_args(buf, ArgPlan(TYPES))


def test_fast_paths_give_the_formatter_types():
    buf = encode_old_row([1, 4, 5, 3, 7], [Datum.int64(-7), Datum.bytes(b"\xff"),
                                           Datum.bytes(b"raw"), Datum.uint64(2**64 - 1),
                                           Datum.decimal(Decimal("1.50"), 10, 2)])
    args = decode_row_args(buf, ArgPlan(TYPES))
    assert args == {1: -7, 4: b"\xff", 5: b"raw", 3: 2**64 - 1, 7: "1.50"}
    assert decode_row_args(encode_old_row([4], [Datum.string("é")]), ArgPlan(TYPES)) == {4: "é"}
