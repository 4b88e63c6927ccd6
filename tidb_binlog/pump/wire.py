"""Serialized ``binlog.Pump`` responses built as bytes, without protobuf messages.

The pump sends every pulled binlog as its own ``PullBinlogResp`` (TiDB's wire
format: one Entity per message). An Entity is a few bytes of header around the
stored payload, so :func:`pull_response_bytes` writes those bytes directly and
the gRPC server passes them through (``response_serializer`` = identity):
no ``PullBinlogResp``/``Entity``/``Pos``/``Meta`` objects per binlog, no copy of
the payload into a message and out again.

``pull_response_bytes(commit_ts, payload)`` is byte-for-byte what protobuf
serializes for::

    PullBinlogResp(entity=Entity(pos=Pos(offset=commit_ts), payload=payload,
                                 meta=Meta(startTs=<payload's start_ts>, commitTs=commit_ts)))

i.e. ``0a <len> [ 0a <len> (10 <offset>) | 12 <len> payload | 22 <len> (08 <startTs> 10 <commitTs>) ]``
with fields in number order, zero scalars omitted (proto3), int64 as a
10-byte two's-complement varint when negative. A test checks it against protobuf.

:func:`start_ts_of` reads ``start_ts`` (field 2) from a serialized ``binlog.Binlog``
where TiDB and protobuf put it (fields in number order: ``08 <tp>`` unless tp is
omitted, then ``10 <start_ts>``); :func:`pull_response_bytes` copies those varint
bytes into ``Meta.startTs`` as they are (same field type, same encoding). A payload
laid out any other way, or malformed, is decoded by protobuf instead, which raises
``DecodeError`` for bad bytes.

:data:`EMPTY_WRITE_RESP` is the serialized ``WriteBinlogResp()`` (errmsg empty =
durable): zero bytes.
"""

from __future__ import annotations

from tidb_binlog import binlog as bl
from tidb_binlog.errors import ProtocolError
from tidb_binlog.proto import pump_pb2
from tidb_binlog.pump.storage.protowire import BINLOG_WIRE_TYPES, fields
from tidb_binlog.pump.storage.reader import LARGE_PAYLOAD_BYTES as _STORAGE_LARGE_BYTES

__all__ = ["EMPTY_WRITE_RESP", "LARGE_PAYLOAD_BYTES", "WriteRequest", "binlog_header", "fields",
           "BINLOG_WIRE_TYPES",
           "parse_write_request", "pull_response_bytes", "start_ts_of", "varint"]

# From this size on, a WriteBinlog request's payload is a memoryview into the request
# (:func:`parse_write_request`) and a binlog's header fields are read without parsing
# its prewrite value (:func:`binlog_header`): a 200 MB Prewrite is not copied to be
# received or checked.
LARGE_PAYLOAD_BYTES = _STORAGE_LARGE_BYTES

EMPTY_WRITE_RESP = b""

_U64 = (1 << 64) - 1
_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of an int64/uint64 (negative: 64-bit two's complement)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value &= _U64
    out = []
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_end(buf: bytes, pos: int) -> int:
    """Index just past the varint starting at ``pos``, or -1 if it is truncated or > 10 bytes."""
    end = min(len(buf), pos + 10)
    while pos < end:
        if buf[pos] < 0x80:
            return pos + 1
        pos += 1
    return -1


def _start_ts_varint(payload: bytes) -> bytes | None:
    """The raw varint bytes of field 2 when the payload starts ``[08 <tp>] 10 <start_ts>``
    (how TiDB and protobuf write a Binlog); None for any other layout."""
    pos = 0
    if payload[:1] == b"\x08":
        pos = _varint_end(payload, 1)
        if pos < 0:
            return None
    if payload[pos:pos + 1] != b"\x10":
        return None
    end = _varint_end(payload, pos + 1)
    return None if end < 0 else payload[pos + 1:end]


def start_ts_of(payload: bytes) -> int:
    """``start_ts`` of a serialized ``binlog.Binlog`` (0 when absent, as protobuf says)."""
    raw = _start_ts_varint(payload)
    if raw is None:
        return bl.Binlog.FromString(payload).start_ts
    v = 0
    for shift, b in enumerate(raw):
        v |= (b & 0x7F) << (7 * shift)
    return v - (1 << 64) if v >= 1 << 63 else v


def pull_response_bytes(commit_ts: int, payload: bytes, start_ts: int | None = None) -> bytes:
    """The serialized ``PullBinlogResp`` carrying ``payload`` as the binlog at ``commit_ts``.

    ``start_ts`` defaults to the payload's own (its varint bytes are copied as they are).
    """
    if start_ts is None:
        raw = _start_ts_varint(payload)
        if raw is None:
            start_ts = bl.Binlog.FromString(payload).start_ts
        elif raw != b"\x00":
            meta = b"\x08" + raw
        else:
            meta = b""
    if start_ts is not None:
        meta = b"\x08" + varint(start_ts) if start_ts else b""
    if commit_ts:
        cts = varint(commit_ts)
        pos = b"\x10" + cts
        meta += b"\x10" + cts
    else:
        pos = b""
    head = b"".join((b"\x0a", _ONE_BYTE[len(pos)], pos,
                     b"\x12" + varint(len(payload)) if payload else b""))
    tail = b"".join((b"\x22", _ONE_BYTE[len(meta)], meta))
    size = len(head) + len(payload) + len(tail)
    # one join: the payload (a whole transaction for a large Prewrite) is copied once
    return b"".join((b"\x0a", varint(size), head, payload, tail))


class WriteRequest:
    """A parsed ``WriteBinlogReq`` whose payload is a memoryview into the request bytes
    (what :func:`parse_write_request` returns for a large request)."""

    __slots__ = ("clusterID", "payload")

    def __init__(self, cluster_id: int, payload):
        self.clusterID = cluster_id
        self.payload = payload


def parse_write_request(data: bytes):
    """The gRPC request deserializer of ``WriteBinlog``.

    Below :data:`LARGE_PAYLOAD_BYTES`: protobuf's ``WriteBinlogReq``. From there on a
    :class:`WriteRequest` whose ``payload`` is a memoryview of ``data`` (protobuf would
    hand out a new copy of the payload at each access of ``.payload``); anything but
    the two known fields in their wire types falls back to protobuf, which also
    raises for malformed bytes as before.
    """
    if len(data) < LARGE_PAYLOAD_BYTES:
        return pump_pb2.WriteBinlogReq.FromString(data)
    cluster_id, payload = 0, memoryview(b"")
    try:
        for number, wire, value in fields(data):
            if number == 1 and wire == 0:
                cluster_id = value
            elif number == 2 and wire == 2:
                payload = memoryview(data)[value[0]:value[1]]
            else:  # another field: protobuf's parse
                return pump_pb2.WriteBinlogReq.FromString(data)
    except ProtocolError:  # malformed: protobuf's parse says how
        return pump_pb2.WriteBinlogReq.FromString(data)
    return WriteRequest(cluster_id, payload)


_BINLOG_TYPES = frozenset((bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT, bl.BinlogType.ROLLBACK,
                           bl.BinlogType.PRE_DDL, bl.BinlogType.POST_DDL))


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def binlog_header(payload) -> bl.Binlog:
    """A ``Binlog`` holding only ``tp``, ``start_ts`` and ``commit_ts`` of ``payload``
    (any bytes-like), read without copying its prewrite value: what the pump needs to
    check and store a large binlog. The rest of the payload is checked as protobuf
    would (known fields in their wire types, lengths within the payload); anything
    else (an unknown field, a bad tp) is parsed by :func:`tidb_binlog.binlog.decode`,
    which raises ProtocolError for malformed bytes."""
    tp = start_ts = commit_ts = None
    try:
        for number, wire, value in fields(payload):
            if BINLOG_WIRE_TYPES.get(number) != wire:
                tp = None
                break
            if number == 1:
                tp = value
            elif number == 2:
                start_ts = _int64(value)
            elif number == 3:
                commit_ts = _int64(value)
    except ProtocolError:
        tp = None
    if tp is None or tp not in _BINLOG_TYPES:
        full = bl.decode(payload)
        return bl.Binlog(tp=full.tp, start_ts=full.start_ts, commit_ts=full.commit_ts)
    return bl.Binlog(tp=tp, start_ts=start_ts or 0, commit_ts=commit_ts or 0)
