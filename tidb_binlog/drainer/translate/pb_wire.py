"""A file-sink record (``pb_binlog.Binlog``) read in place through a bounded window.

The file sink writes one ``pb_binlog.Binlog`` per upstream transaction
(:mod:`tidb_binlog.drainer.translate.pb`); a large transaction's record is hundreds of MB.
Parsing it with protobuf holds the payload and the parsed message (with every event)
at once. The readers here take the payload as a
:class:`~tidb_binlog.binlog_ref.ByteSource` (a record in its file:
:class:`~tidb_binlog.binlogfile.reader.RecordSource`; bytes:
:class:`~tidb_binlog.binlog_ref.BytesSource`) and walk it with the window cursor of
:mod:`tidb_binlog.drainer.translate.wire_fields` (reads of at most ``window`` bytes, forward;
a field the walk skips is never read):

- :func:`read_record_head`: ``tp``, ``commit_ts`` and where ``ddl_query`` and the
  ``dml_data`` fields lie, without reading the events (a few reads for any size);
- :func:`iter_events`: the ``Event`` messages of every ``dml_data`` field, in order,
  each parsed by protobuf from its own bytes (an event is one row change, so what is held
  is one window plus one event).

The reading is protobuf's (proto2, ``tidb_binlog/proto/pb_binlog.proto``): fields in any
order, the last ``tp`` / ``commit_ts`` / ``ddl_query`` wins, a ``tp`` the enum does not
name is dropped, several ``dml_data`` fields are merged (their events in order), unknown
fields and a known field with another wire type are skipped, groups too (nested at most
100 deep), and protobuf's limits hold (a key of at most 5 bytes, field numbers 1 to
2^29 - 1, a length of at most 5 bytes). Malformed bytes raise
:class:`~tidb_binlog.errors.ProtocolError`: the top level in :func:`read_record_head`, an
``Event`` or the ``DMLData`` around it in :func:`iter_events` (protobuf checks them when
it parses the whole message; a caller that must fail before using any event walks the
events once first). One difference from protobuf, for bytes no writer makes: an event
is parsed on its own, so groups nested 98 to 100 deep inside an event pass here where
protobuf's depth limit (100, counted from the record) refuses them.
``tests/unit/test_pb_wire.py`` checks the reading against protobuf's, with windows down
to one byte and damaged records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tidb_binlog.drainer.translate.wire_fields import (
    HEADER_BYTES,
    Cursor,
    Malformed,
    signed,
    varint,
)
from tidb_binlog.errors import ProtocolError
from tidb_binlog.proto import pb_binlog_pb2 as pb

__all__ = ["PbRecordHead", "read_record_head", "read_ddl_query", "iter_events",
           "PB_WINDOW"]

PB_WINDOW = 1 << 20  # the window a record is walked through by default
_BINLOG_TYPES = frozenset(pb.BinlogType.values())
_U32 = (1 << 32) - 1
_MAX_FIELD = (1 << 29) - 1
_MAX_DEPTH = 100  # protobuf's nesting limit (groups here)


def _key(cur: Cursor, pos: int, end: int) -> tuple[int, int, int]:
    """``(field, wire, position after the key)`` of the key at ``pos``; the window then
    holds the 20 bytes from ``pos`` (or up to ``end``), so a varint value or a length
    after the key is in it too."""
    if pos + HEADER_BYTES > cur.top and cur.top < end:
        cur.ensure(pos, HEADER_BYTES, end)
    base = cur.base
    i = pos - base
    key, j = varint(cur.buf, i, (cur.top if cur.top < end else end) - base, base)
    num = key >> 3
    if j - i > 5 or num > _MAX_FIELD or num == 0:
        raise Malformed(f"invalid field key at offset {pos}")
    return num, key & 7, base + j


def _value(cur: Cursor, num: int, wire: int, pos: int, end: int, depth: int):
    """The value after a key at ``pos``: ``(value, position after it)``; a varint's
    integer, a length-delimited field's ``(start, stop)``, None for the others (a group
    skipped whole)."""
    base = cur.base
    lim = (cur.top if cur.top < end else end) - base
    if wire == 0:
        value, i = varint(cur.buf, pos - base, lim, base)
        return value, base + i
    if wire == 2:
        i = pos - base
        n, j = varint(cur.buf, i, lim, base)
        if j - i > 5:
            raise Malformed(f"invalid length at offset {pos}")
        start = base + j
        if start + n > end:
            raise Malformed(f"field {num} of {n} bytes at offset {start} runs past the end "
                             f"of its message ({end})")
        return (start, start + n), start + n
    if wire == 1 or wire == 5:
        stop = pos + (8 if wire == 1 else 4)
        if stop > end:
            raise Malformed(f"field {num} runs past the end of its message ({end})")
        return None, stop
    if wire == 3:
        if depth >= _MAX_DEPTH:
            raise Malformed(f"groups nested more than {_MAX_DEPTH} deep at offset {pos}")
        while True:
            if pos >= end:
                raise Malformed(f"group {num} is not closed before the end of its message")
            inner, inner_wire, pos = _key(cur, pos, end)
            if inner_wire == 4:
                if inner != num:
                    raise Malformed(f"group {num} closed as group {inner}")
                return None, pos
            _, pos = _value(cur, inner, inner_wire, pos, end, depth + 1)
    raise Malformed(f"field {num} has wire type {wire} at offset {pos}")


def _fields(cur: Cursor, pos: int, end: int, depth: int):
    """``(field, wire, value)`` of every field of the message at ``[pos, end)``, read
    through ``cur`` with protobuf's rules (see :func:`_value`)."""
    while pos < end:
        num, wire, pos = _key(cur, pos, end)
        value, pos = _value(cur, num, wire, pos, end, depth)
        yield num, wire, value


@dataclass
class PbRecordHead:
    """A record's top-level fields: ``tp`` (DML when absent, as protobuf's default),
    ``commit_ts`` (None when absent), the ``ddl_query`` bytes' span and the spans of its
    ``dml_data`` fields (payload offsets, ``[start, stop)``)."""

    tp: int = pb.DML
    commit_ts: int | None = None
    ddl_query: tuple[int, int] | None = None
    dml_spans: list[tuple[int, int]] = field(default_factory=list)
    size: int = 0


def _malformed(source, exc: Malformed | ProtocolError) -> ProtocolError:
    return ProtocolError(f"binlog file record is not a pb_binlog.Binlog ({source.size} bytes, "
                         f"read in place): {exc}")


def read_record_head(source, window: int = PB_WINDOW) -> PbRecordHead:
    """The top-level fields of the record ``source`` reads (see the module doc); the
    events are skipped, not read. ProtocolError when the top level is malformed."""
    head = PbRecordHead(size=source.size)
    cur = Cursor(source, window, source.size)
    try:
        for num, wire, value in _fields(cur, 0, source.size, 0):
            if num == 1 and wire == 0:
                if value & _U32 in _BINLOG_TYPES:  # an int32 enum: the low 32 bits
                    head.tp = value & _U32
            elif num == 2 and wire == 0:
                head.commit_ts = signed(value)
            elif num == 3 and wire == 2:
                head.dml_spans.append(value)
            elif num == 4 and wire == 2:
                head.ddl_query = value
    except Malformed as exc:
        raise _malformed(source, exc) from None
    return head


def read_ddl_query(source, head: PbRecordHead) -> bytes:
    """The ``ddl_query`` bytes (b"" when the record has none)."""
    if head.ddl_query is None:
        return b""
    a, b = head.ddl_query
    return bytes(source.read(a, b - a))


def iter_events(source, head: PbRecordHead, window: int = PB_WINDOW) -> Iterator[pb.Event]:
    """Every ``Event`` of the record's ``dml_data`` fields, in order, each parsed from its
    own bytes (see the module doc); ProtocolError at the first malformed one."""
    cur = Cursor(source, window, source.size)
    for a, b in head.dml_spans:
        try:
            for num, wire, value in _fields(cur, a, b, 1):
                if num != 1 or wire != 2:
                    continue
                start, stop = value
                if not (cur.base <= start and stop <= cur.top):
                    cur.ensure(start, stop - start, stop)
                raw = cur.buf[start - cur.base:stop - cur.base]
                ev = pb.Event()
                try:
                    ev.ParseFromString(raw)
                except Exception as exc:  # protobuf's DecodeError
                    raise ProtocolError(f"the event at offset {start} is not a "
                                        f"pb_binlog.Event: {exc}") from None
                yield ev
        except (Malformed, ProtocolError) as exc:
            raise _malformed(source, exc) from None
