"""The compiled decoder of old-format rows (``tidb_binlog.codec._rowfast``) against the
Python reference ``row_args._decode_old_args_py``: the same results for every input, and
for bytes that are not a row the same exception (type, message, offset, flag, cause)."""

from __future__ import annotations

import datetime
import gc
import importlib.util
import os
import subprocess
import sys
import zoneinfo
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.codec import Datum, encode_old_row, pack_time, row_args
from tidb_binlog.codec import mysql as m
from tidb_binlog.codec.primitives import Malformed, encode_int, encode_varint
from tidb_binlog.codec.row_args import _OTHER, ArgPlan, _decode_old_args_py
from tidb_binlog.errors import CodecError

REPO = Path(__file__).resolve().parents[2]
SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])


def compiled():
    """``_rowfast.decode_old_args``; skips when the module is off (then
    test_the_compiled_decoder_is_built_and_chosen fails unless TIDB_BINLOG_PURE_PYTHON
    asked for it)."""
    if not row_args.COMPILED:
        pytest.skip("tidb_binlog.codec._rowfast is off")
    return row_args._rowfast.decode_old_args


def test_the_compiled_decoder_is_built_and_chosen():
    if row_args._pure_python_requested():
        pytest.skip("TIDB_BINLOG_PURE_PYTHON is set: the Python reference decodes")
    assert row_args.COMPILED, (
        "tidb_binlog.codec._rowfast is not built; run `pip install -e .` or "
        "`python -c 'from setuptools import setup; setup()' build_ext --inplace`")
    assert row_args._decode_old_args is row_args._rowfast.decode_old_args
    # built next to the sources, where tests and Ray workers import the package from
    assert Path(row_args._rowfast.__file__).parent == Path(row_args.__file__).parent


@pytest.mark.parametrize("value, wanted", [("1", False), ("yes", False), ("0", True),
                                           ("", True)])
def test_pure_python_env_var_selects_the_reference(value, wanted):
    env = {**os.environ, "TIDB_BINLOG_PURE_PYTHON": value,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", "from tidb_binlog.codec import row_args; print(row_args.COMPILED)"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True)
    built = importlib.util.find_spec("tidb_binlog.codec._rowfast") is not None
    assert done.stdout.strip() == str(wanted and built)
    assert done.stderr == ""  # nothing said on import


# ---- generated rows -------------------------------------------------------------------

int64s = st.one_of(st.integers(-(2**63), 2**63 - 1),
                   st.sampled_from([0, -1, 63, -64, 64, 8191, -8192, 2**31 - 1, -(2**31),
                                    2**62, 2**63 - 1, -(2**63)]))
uint64s = st.integers(0, 2**64 - 1)
# > 8191 bytes: a 3-byte varint length
long_text = st.tuples(st.text(min_size=1, max_size=3), st.integers(1000, 5000)).map(
    lambda t: t[0] * t[1])
not_utf8 = st.one_of(
    st.binary(max_size=30),
    st.sampled_from([b"\xed\xa0\x80", b"a\xed\xbf\xbfb", b"\xc0\x80", b"\xf4\x90\x80\x80",
                     b"\xff", b"ok\xe2\x82", b"\xf0\x9f\x98\x80"]),
    st.tuples(st.sampled_from([b"\xff", b"x\xed\xa0\x80"]), st.integers(3000, 9000)).map(
        lambda t: t[0] * t[1]))
texts = st.one_of(st.text(max_size=30).map(Datum.string), long_text.map(Datum.string),
                  not_utf8.map(Datum.bytes))
times = st.datetimes(datetime.datetime(1971, 1, 1), datetime.datetime(2037, 1, 1)).map(
    lambda t: Datum.time(pack_time(t.year, t.month, t.day, t.hour, t.minute, t.second,
                                   t.microsecond)))
any_datum = st.one_of(
    st.just(Datum.null()), int64s.map(Datum.int64), uint64s.map(Datum.uint64),
    st.floats().map(Datum.float64), st.binary(max_size=20).map(Datum.bytes), texts,
    st.decimals(-10**7, 10**7, places=2).map(lambda d: Datum.decimal(d, 10, 2)),
    st.integers(-(10**12), 10**12).map(Datum.duration),
    st.sampled_from([{"a": [1, 2.5, None]}, "s", 7, [True, {}]]).map(Datum.json))

# column id -> (type, datums of that type); 300 and 2**33 need multi-byte varint ids
COLUMNS = {
    1: (m.FieldType(m.TYPE_LONG), int64s.map(Datum.int64)),
    2: (m.FieldType(m.TYPE_LONGLONG), int64s.map(Datum.int64)),
    3: (m.FieldType(m.TYPE_LONGLONG, flag=m.UNSIGNED_FLAG), uint64s.map(Datum.uint64)),
    4: (m.FieldType(m.TYPE_STRING, flen=120, charset="utf8mb4"), texts),
    5: (m.FieldType(m.TYPE_VARCHAR, charset=m.BINARY_CHARSET), not_utf8.map(Datum.bytes)),
    6: (m.FieldType(m.TYPE_DOUBLE), st.floats(allow_nan=False).map(Datum.float64)),
    7: (m.FieldType(m.TYPE_NEWDECIMAL, flen=10, decimal=2),
        st.decimals(-10**7, 10**7, places=2).map(lambda d: Datum.decimal(d, 10, 2))),
    8: (m.FieldType(m.TYPE_TIMESTAMP, decimal=3), times),
    9: (m.FieldType(m.TYPE_ENUM, elems=("a", "b")), st.integers(1, 2).map(Datum.enum)),
    10: (m.FieldType(m.TYPE_BLOB, charset="utf8mb4"), texts),
    11: (m.FieldType(m.TYPE_TINY), st.integers(-128, 127).map(Datum.int64)),
    12: (m.FieldType(m.TYPE_DATETIME, decimal=6), times),
    13: (m.FieldType(m.TYPE_DURATION, decimal=6),
         st.integers(-(838 * 3600 * 10**9), 838 * 3600 * 10**9).map(Datum.duration)),
    14: (m.FieldType(m.TYPE_JSON), st.sampled_from([{"k": "v"}, [1, None], "x"]).map(
        Datum.json)),
    15: (m.FieldType(m.TYPE_BIT, flen=64), uint64s.map(Datum.bit)),
    16: (m.FieldType(m.TYPE_FLOAT), st.floats(-1e30, 1e30).map(Datum.float32)),
    300: (m.FieldType(m.TYPE_VARCHAR, charset="utf8mb4"), texts),
    2**33: (m.FieldType(m.TYPE_LONG), int64s.map(Datum.int64)),
}
TYPES = {cid: ft for cid, (ft, _) in COLUMNS.items()}
NOT_IN_PLAN = [0, 17, 63, 64, 1000, -3, -(2**40), 2**62]


@st.composite
def old_rows(draw, ids=None):
    """An old-format row of plan and other columns: mostly values of the column's type,
    some NULLs, some datums of any kind (the decoder must agree on those too)."""
    if ids is None:
        ids = draw(st.lists(st.sampled_from(sorted(COLUMNS) + NOT_IN_PLAN), unique=True,
                            max_size=10))
    datums = []
    for cid in ids:
        own = COLUMNS[cid][1] if cid in COLUMNS else any_datum
        datums.append(draw(st.one_of(own, own, own, st.just(Datum.null()), any_datum)))
    return ids, encode_old_row(ids, datums) if ids else b""


@st.composite
def cases(draw):
    """(buf, off, plan, tz, pairs): one row, or an update's ``old ‖ new`` (same ids, or
    ids that differ, repeat or run on), after some bytes that ``off`` skips."""
    ids, buf = draw(old_rows())
    pairs = draw(st.booleans())
    if draw(st.booleans()):
        new_ids = draw(st.one_of(st.just(ids), st.permutations(ids),
                                 st.lists(st.sampled_from(sorted(COLUMNS) + NOT_IN_PLAN),
                                          max_size=6)))
        buf += draw(old_rows(list(new_ids)))[1]
    prefix = draw(st.binary(max_size=3))
    tz = draw(st.sampled_from([datetime.UTC, SHANGHAI]))
    formatted = draw(st.none() | st.sets(st.sampled_from(sorted(COLUMNS))))
    return prefix + buf, len(prefix), ArgPlan(TYPES, tz, formatted=formatted), tz, pairs


def outcome(fn, *args):
    """What a call gives, comparable across implementations: the reprs of the two dicts
    (types, values and order; NaN compares), or the exception with its cause."""
    try:
        old, new = fn(*args)
    except Exception as exc:  # any exception: it must be the same one
        cause = exc.__cause__
        return ("raised", type(exc), str(exc), getattr(exc, "offset", None),
                getattr(exc, "flag", None), type(cause), str(cause))
    return ("ok", repr(old), repr(new))


def mutate(data, buf: bytes) -> bytes:
    """``buf`` cut, with a byte changed, bytes inserted or a slice taken out."""
    i = data.draw(st.integers(0, len(buf)))
    how = data.draw(st.sampled_from(["cut", "set", "insert", "delete"]))
    if how == "cut":
        return buf[:i]
    if how == "set":
        return buf[:i] + data.draw(st.binary(min_size=1, max_size=1)) + buf[i + 1:]
    if how == "insert":
        return buf[:i] + data.draw(st.binary(min_size=1, max_size=4)) + buf[i:]
    return buf[:i] + buf[i + data.draw(st.integers(1, 12)):]


@settings(SETTINGS, max_examples=400)
@given(cases(), st.data())
def test_compiled_decoder_matches_the_reference(case, data):
    fast = compiled()
    buf, off, plan, tz, pairs = case
    want = outcome(_decode_old_args_py, buf, off, plan, tz, pairs)
    assert outcome(fast, buf, off, plan, tz, pairs) == want
    for _ in range(data.draw(st.integers(1, 3))):
        buf = mutate(data, buf)
        assert outcome(fast, buf, off, plan, tz, pairs) == \
            outcome(_decode_old_args_py, buf, off, plan, tz, pairs), buf


@settings(SETTINGS, max_examples=400)
@given(st.binary(max_size=48), st.booleans(), st.sets(st.sampled_from(sorted(COLUMNS))))
def test_compiled_decoder_matches_the_reference_on_garbage(buf, pairs, formatted):
    fast = compiled()
    plan = ArgPlan(TYPES, formatted=formatted or None)
    buf = b"\x08" + buf if buf[:1] != b"\x08" and len(buf) % 2 else buf  # often an id flag
    assert outcome(fast, buf, 0, plan, datetime.UTC, pairs) == \
        outcome(_decode_old_args_py, buf, 0, plan, datetime.UTC, pairs)


# ---- chosen cases ---------------------------------------------------------------------

def col(cid: int) -> bytes:
    return b"\x08" + encode_varint(cid)


VARINT_EDGES = [
    col(1) + b"\x08" + b"\x80" * 10 + b"\x01",  # 11 bytes: more than 10
    col(1) + b"\x08" + b"\xff" * 9 + b"\x02",  # 10th byte > 1
    col(1) + b"\x08" + b"\xff" * 9 + b"\x01",  # the largest: -2**63
    col(1) + b"\x08" + b"\xfe" + b"\xff" * 8 + b"\x01",  # 2**63 - 1
    col(1) + b"\x08\x88\x80\x00",  # not the shortest form, still a varint (4)
    col(1) + b"\x08\xff",  # cut
    b"\x08" + b"\x80" * 10 + b"\x01" + b"\x08\x02",  # overlong column id
    b"\x08\x88\x00" + b"\x02\x04hi",  # column id 4 in two bytes
    b"\x03" + encode_int(4) + b"\x02\x04hi",  # column id as an int datum (flag 0x03)
    b"\x03" + encode_int(4)[:5],
    b"\x09\x04\x02\x04hi",  # a flag that is no column id
    col(4) + b"\x02" + b"\xff" * 9 + b"\x01" + b"abc",  # negative length
    col(4) + b"\x02\x81\x80\x80\x80\x10" + b"a" * 10,  # length far past the end
    col(4) + b"\x02\x06ab",  # length past the end
    col(4) + b"\x02",  # no length
    col(4) + b"\x02\x80",  # cut length
    col(4),  # no value
    col(4)[:1],  # cut column id
    col(17) + b"\x06\x0a\x02" + b"\x00" * 5,  # skipped decimal (Python cuts it)
    col(17) + b"\x06\x41\x02" + b"\x00" * 5,  # skipped decimal, bad header
    col(17) + b"\x05" + b"\x00" * 7,  # skipped float, cut
    col(17) + b"\x02\x03a",  # skipped compact bytes, negative length
    col(17) + b"\x0b\x00",  # skipped, unknown flag
    col(17) + b"\xfa" + col(1) + b"\x08\x02",  # skipped max value
    col(4) + b"\x02\x00" + col(4) + b"\x02\x00",  # twice
    (col(4) + b"\x02\x00") * 3,  # three times
    col(1) + b"\x09\x05" + col(4) + b"\x08\x02",  # a uvarint in a signed column, an int in text
    col(4) + b"\x02\x06\xed\xa0\x80",  # a surrogate is not UTF-8
]


@pytest.mark.parametrize("buf", VARINT_EDGES, ids=range(len(VARINT_EDGES)))
@pytest.mark.parametrize("pairs", [False, True])
def test_chosen_bytes_give_the_same_outcome(buf, pairs):
    fast = compiled()
    plan = ArgPlan(TYPES)
    assert outcome(fast, buf, 0, plan, datetime.UTC, pairs) == \
        outcome(_decode_old_args_py, buf, 0, plan, datetime.UTC, pairs)


def test_fast_columns_give_python_types():
    fast = compiled()
    buf = encode_old_row([1, 4, 5, 300, 2**33, 17, 10, 4],
                         [Datum.int64(-(2**63)), Datum.string("é" * 5000), Datum.bytes(b"\xff"),
                          Datum.bytes(b"\xed\xa0\x80"), Datum.int64(2**63 - 1),
                          Datum.decimal(Decimal("1.5"), 10, 2), Datum.null(), Datum.string("n")])
    old, new = fast(buf, 0, ArgPlan(TYPES), datetime.UTC, True)
    assert old == {1: -(2**63), 4: "é" * 5000, 5: b"\xff", 300: b"\xed\xa0\x80",
                   2**33: 2**63 - 1, 10: None}
    assert new == {4: "n"}


@pytest.mark.parametrize("args, kwargs", [
    ((bytearray(encode_old_row([4], [Datum.string("a")])), 0), {}),  # not bytes
    ((encode_old_row([4], [Datum.string("a")]), -1), {}),  # negative offset
    ((encode_old_row([4], [Datum.string("a")]), 2**70), {}),  # offset out of range
    ((encode_old_row([4], [Datum.string("a")]), 10), {}),  # offset past the end
    ((encode_old_row([4], [Datum.string("a")]), 1.0), {}),  # not an int
    ((encode_old_row([4], [Datum.string("a")]) * 2, 0), {"pairs": 1}),  # not a bool
    ((encode_old_row([4], [Datum.string("a")]) * 2, 0), {"pairs": None}),
])
def test_unexpected_arguments_go_to_the_reference(args, kwargs):
    fast = compiled()
    plan, tz = ArgPlan(TYPES), datetime.UTC
    pairs = kwargs.get("pairs", False)
    assert outcome(fast, *args, plan, tz, pairs) == \
        outcome(_decode_old_args_py, *args, plan, tz, pairs)
    assert outcome(lambda: fast(*args, plan, tz=tz, pairs=pairs)) == \
        outcome(lambda: _decode_old_args_py(*args, plan, tz=tz, pairs=pairs))
    assert outcome(fast, *args) == outcome(_decode_old_args_py, *args)  # too few
    assert outcome(fast, args[0], 0, object(), tz, False) == \
        outcome(_decode_old_args_py, args[0], 0, object(), tz, False)  # no plan


class Boom(Exception):
    pass


@pytest.mark.parametrize("raised, wrapped", [(Boom("formatter failed"), False),
                                             (Malformed("formatter says malformed"), True)])
def test_exceptions_in_python_columns_reach_the_caller(raised, wrapped):
    fast = compiled()

    def fail(datum):
        raise raised

    plan = ArgPlan(TYPES)
    code, ft, unflatten, _ = plan.columns[7]
    plan.columns[7] = (_OTHER, ft, unflatten, fail)
    buf = encode_old_row([4, 7, 1], [Datum.string("a"), Datum.decimal(Decimal("1.5"), 10, 2),
                                     Datum.int64(1)])
    with pytest.raises(CodecError if wrapped else Boom) as info:
        fast(buf, 0, plan, datetime.UTC, False)
    if wrapped:
        assert info.value.__cause__ is raised
        assert "value of column 7 at offset 7 " in str(info.value)  # where its datum starts
    else:
        assert info.value is raised
    assert outcome(fast, buf, 0, plan, datetime.UTC, False) == \
        outcome(_decode_old_args_py, buf, 0, plan, datetime.UTC, False)


def test_no_reference_or_memory_leaks():
    """Every path of the C loop run many times: the objects it touches keep their
    reference counts and the allocated blocks do not grow with the calls."""
    fast = compiled()
    plan = ArgPlan(TYPES)
    # 300 and 2**33: keys that are new int objects, a leaked one shows in the blocks
    sysbench = encode_old_row([1, 2**33, 4, 300], [Datum.int64(7), Datum.int64(-(2**40)),
                                                   Datum.string("x" * 119), Datum.string("y" * 59)])
    mixed = encode_old_row([4, 5, 7, 17, 300, 6], [
        Datum.bytes(b"\xff\xfe"), Datum.bytes(b"raw"), Datum.decimal(Decimal("2.5"), 10, 2),
        Datum.string("skipped"), Datum.null(), Datum.float64(1.5)])
    bufs = [(sysbench, False), (sysbench + sysbench, True), (mixed, False),
            (sysbench + sysbench, False), (sysbench[:-3], False), (mixed + mixed, True),
            (b"\x03" + encode_int(4) + b"\x02\x02a", False)]
    watched = [plan, plan.columns, *plan.columns.values(), datetime.UTC, sysbench, mixed,
               row_args._old_args_loop, row_args._decode_old_args_py]

    def run(times):
        for _ in range(times):
            for buf, pairs in bufs:
                try:
                    fast(buf, 0, plan, datetime.UTC, pairs)
                except CodecError:
                    pass

    run(500)
    gc.collect()
    refs = [sys.getrefcount(o) for o in watched]
    blocks = sys.getallocatedblocks()
    run(30_000)  # 210k calls
    gc.collect()
    assert [sys.getrefcount(o) for o in watched] == refs
    assert sys.getallocatedblocks() - blocks < 1000
