"""A file-sink record read in place (``pb_wire``, reparo's ``LargeRecord``) against protobuf's
whole parse and ``binlog_to_txn``: generated records through windows down to one byte,
the encodings protobuf accepts that no writer makes (fields out of order, repeated,
unknown, groups, enum values out of range, other wire types), and damaged records
(every truncation, random byte changes): the same rows, or an error of the same kind,
before any row is handed out."""

from __future__ import annotations

import random

import pytest

from tidb_binlog.binlog_ref import BytesSource
from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.translate.pb import ddl_record, record_commit_ts
from tidb_binlog.drainer.translate.pb_wire import iter_events, read_record_head
from tidb_binlog.errors import CodecError, ProtocolError
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.decode import binlog_to_txn, open_large_record, parse_binlog

WINDOWS = (1, 2, 3, 7, 64, 1 << 20)


def column(name: str, tp: int, mysql_type: str, value, changed=None) -> bytes:
    c = pb.column(name=name, tp=bytes((tp,)), mysql_type=mysql_type,
                  value=encode_value([value]))
    if changed is not None:
        c.changed_value = encode_value([changed])
    return c.SerializeToString()


def record(ts: int = 42, rows: int = 30, seed: int = 1) -> bytes:
    """A DML record of inserts, updates and deletes over two tables, some values large."""
    rng = random.Random(seed)
    b = pb.Binlog(tp=pb.DML, commit_ts=ts)
    for i in range(rows):
        tp = (pb.Insert, pb.Update, pb.Delete)[i % 3]
        ev = b.dml_data.events.add(schema_name="s", table_name=f"t{i % 2}", tp=tp)
        text = ("x" * rng.randrange(0, 300)).encode()
        if tp == pb.Update:
            ev.row.extend([column("id", 3, "int", Datum.int64(i), Datum.int64(i + 1000)),
                           column("v", 15, "varchar", Datum.bytes(text), Datum.null())])
        else:
            ev.row.extend([column("id", 3, "int", Datum.int64(i)),
                           column("v", 15, "varchar", Datum.bytes(text)),
                           column("b", 252, "blob", Datum.bytes(bytes(range(i % 256))))])
    return b.SerializeToString()


def whole(payload: bytes):
    """What the whole path gives: ("ok", txn) or ("err", exception type)."""
    try:
        return "ok", binlog_to_txn(parse_binlog(payload))
    except (ProtocolError, CodecError) as exc:
        return "err", type(exc)


def in_place(payload: bytes, window: int, chunk_rows: int = 4):
    """The same through a window; a structural error must come before any row."""
    try:
        rec = open_large_record(BytesSource(payload), window)
    except ProtocolError:
        return "err", ProtocolError
    try:
        if rec.tp == pb.DDL:
            return "ok", rec.txn()
        dmls = [d for chunk in rec.chunks(chunk_rows) for d in chunk]
    except (ProtocolError, CodecError) as exc:
        return "err", type(exc)
    return "ok", Txn(rec.commit_ts, tuple(dmls))


@pytest.mark.parametrize("window", WINDOWS)
def test_generated_records_read_in_place_equal_the_whole_parse(window):
    payload = record(rows=40)
    b = pb.Binlog.FromString(payload)
    head = read_record_head(BytesSource(payload), window)
    assert (head.tp, head.commit_ts, head.ddl_query) == (pb.DML, 42, None)
    events = list(iter_events(BytesSource(payload), head, window))
    assert events == list(b.dml_data.events)
    assert in_place(payload, window) == whole(payload)
    assert record_commit_ts(BytesSource(payload)) == record_commit_ts(payload) == 42
    ddl = ddl_record(7, "s", "CREATE TABLE t (id INT)")
    assert in_place(ddl, window) == whole(ddl)


def test_reads_are_bounded_by_the_window():
    payload = record(rows=200)

    class Counting(BytesSource):
        largest = 0

        def read(self, offset, n):
            Counting.largest = max(Counting.largest, n)
            return super().read(offset, n)

    rec = open_large_record(Counting(payload), 4096)
    assert sum(len(c) for c in rec.chunks(50)) == 200
    # one window (plus a field header's tail): never the record
    assert Counting.largest <= 4096 < len(payload)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])


def _field(num: int, wire: int, body: bytes) -> bytes:
    key = _varint(num << 3 | wire)
    return key + (_varint(len(body)) + body if wire == 2 else body)


EVENT = pb.Event(schema_name="s", table_name="t", tp=pb.Insert,
                 row=[column("id", 3, "int", Datum.int64(1))]).SerializeToString()
EVENT2 = pb.Event(schema_name="s", table_name="u", tp=pb.Delete,
                  row=[column("id", 3, "int", Datum.int64(2))]).SerializeToString()

ODD = {  # encodings protobuf reads that no writer makes
    "fields reversed": _field(3, 2, _field(1, 2, EVENT)) + _field(2, 0, _varint(9))
    + _field(1, 0, b"\x00"),
    "two dml_data, merged": _field(2, 0, b"\x05") + _field(3, 2, _field(1, 2, EVENT))
    + _field(3, 2, _field(1, 2, EVENT2) + _field(1, 2, EVENT)),
    "last commit_ts wins": _field(2, 0, b"\x05") + _field(2, 0, b"\x06")
    + _field(3, 2, _field(1, 2, EVENT)),
    "negative commit_ts": _field(2, 0, _varint(-3)) + _field(3, 2, _field(1, 2, EVENT)),
    "unknown fields": _field(9, 2, b"zz") + _field(2, 0, b"\x05") + _field(10, 0, b"\x01")
    + _field(11, 1, b"\0" * 8) + _field(12, 5, b"\0" * 4)
    + _field(3, 2, _field(7, 2, b"q") + _field(1, 2, EVENT)),
    "known fields with other wire types": _field(1, 2, b"\x01") + _field(2, 0, b"\x05")
    + _field(3, 0, b"\x01") + _field(4, 0, b"\x01") + _field(3, 2, _field(1, 0, b"\x01")
                                                             + _field(1, 2, EVENT)),
    "a tp the enum does not name": _field(1, 0, b"\x07") + _field(2, 0, b"\x05")
    + _field(3, 2, _field(1, 2, EVENT)),
    "a tp above 32 bits": _field(1, 0, _varint((1 << 32) + 1)) + _field(2, 0, b"\x05")
    + _field(4, 2, b"use `s`; DROP TABLE t"),
    "ddl with ddl_query twice": _field(1, 0, b"\x01") + _field(2, 0, b"\x05")
    + _field(4, 2, b"DROP TABLE a") + _field(4, 2, b"use `s`; DROP TABLE b"),
    "groups": _field(2, 0, b"\x05") + _varint(13 << 3 | 3) + _field(1, 0, b"\x01")
    + _varint(14 << 3 | 3) + _varint(14 << 3 | 4) + _varint(13 << 3 | 4)
    + _field(3, 2, _varint(5 << 3 | 3) + _varint(5 << 3 | 4) + _field(1, 2, EVENT)),
    "a stray end group": _field(2, 0, b"\x05") + _varint(13 << 3 | 4),
    "a group closed as another": _field(2, 0, b"\x05") + _varint(13 << 3 | 3)
    + _varint(12 << 3 | 4),
    "groups 100 deep": _field(2, 0, b"\x05") + _varint(13 << 3 | 3) * 100
    + _varint(13 << 3 | 4) * 100,
    "groups 101 deep": _field(2, 0, b"\x05") + _varint(13 << 3 | 3) * 101
    + _varint(13 << 3 | 4) * 101,
    "groups 99 deep in dml_data": _field(2, 0, b"\x05")
    + _field(3, 2, _varint(13 << 3 | 3) * 99 + _varint(13 << 3 | 4) * 99),
    "groups 100 deep in dml_data": _field(2, 0, b"\x05")
    + _field(3, 2, _varint(13 << 3 | 3) * 100 + _varint(13 << 3 | 4) * 100),
    "a 5-byte key": b"\x90\x80\x80\x80\x00\x05" + _field(3, 2, _field(1, 2, EVENT)),
    "a 6-byte key": b"\x90\x80\x80\x80\x80\x00\x05",
    "field number 2^29-1": _field(2, 0, b"\x05") + _varint((1 << 29) - 1 << 3) + b"\x00",
    "field number 2^29": _field(2, 0, b"\x05") + _varint(1 << 29 << 3) + b"\x00",
    "field number 0": _field(2, 0, b"\x05") + b"\x00\x00",
    "a 6-byte length": _field(2, 0, b"\x05") + b"\x22\x81\x80\x80\x80\x80\x00a",
    "an 11-byte varint": b"\x10" + b"\xff" * 10 + b"\x01",
    "no commit_ts": _field(1, 0, b"\x00") + _field(3, 2, _field(1, 2, EVENT)),
    "a bad event": _field(2, 0, b"\x05") + _field(3, 2, _field(1, 2, b"\x0a\x05ab")),
    "an event without columns": _field(2, 0, b"\x05")
    + _field(3, 2, _field(1, 2, pb.Event(schema_name="s", table_name="t").SerializeToString())),
    "empty": b"",
}


@pytest.mark.parametrize("name", sorted(ODD))
@pytest.mark.parametrize("window", (1, 5, 1 << 20))
def test_encodings_no_writer_makes_read_as_protobuf_reads_them(name, window):
    payload = ODD[name]
    assert in_place(payload, window) == whole(payload), name


def test_damaged_records_fail_as_the_whole_parse_fails():
    payload = record(rows=6, seed=3)
    rng = random.Random(7)
    cases = [payload[:n] for n in range(len(payload))]
    for _ in range(1500):
        data = bytearray(payload)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cases.append(bytes(data))
    for data in cases:
        want = whole(data)
        for window in (1, 13, 1 << 20):
            assert in_place(data, window) == want, (data.hex(), window)


def test_record_commit_ts_of_a_source_needs_a_commit_ts():
    payload = _field(1, 0, b"\x00") + _field(3, 2, _field(1, 2, EVENT))
    with pytest.raises(ProtocolError, match="carries no commit_ts"):
        record_commit_ts(BytesSource(payload))
    with pytest.raises(ProtocolError, match="not a pb_binlog.Binlog"):
        record_commit_ts(BytesSource(b"\x10"))
