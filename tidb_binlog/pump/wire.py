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

__all__ = ["EMPTY_WRITE_RESP", "pull_response_bytes", "start_ts_of", "varint"]

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
    entity = b"".join((b"\x0a", _ONE_BYTE[len(pos)], pos,
                       b"\x12" + varint(len(payload)) if payload else b"", payload,
                       b"\x22", _ONE_BYTE[len(meta)], meta))
    return b"\x0a" + varint(len(entity)) + entity
