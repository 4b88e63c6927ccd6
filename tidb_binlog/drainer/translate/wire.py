"""A large Commit binlog read field by field from its serialized bytes (no protobuf message).

Protobuf parses a whole message: a ``Binlog`` of a 1 GiB transaction is one copy of its
``prewrite_value``, reading that field another, the parsed ``PrewriteValue`` a third,
next to the payload the keeper was handed (the schema keeper held ~5x a large
transaction's size this way). :func:`read_binlog` reads only the ``Binlog``'s scalar
fields and points into the payload for ``prewrite_value``; :class:`WirePrewrite` walks
that value once, noting where each row image of each ``TableMutation`` starts and ends
(16 bytes a row), and hands each row out as its own small ``bytes`` when asked. What it
holds is the payload plus those offsets, whatever the transaction's size.

The reading is protobuf's (proto2, ``tidb_binlog/proto/binlog.proto``): fields in any
order, a repeated scalar packed or not, the last value of a scalar field wins, unknown
fields (wire types 0, 1, 2, 5) skipped, an enum value the enum does not name dropped
(proto2 keeps it as an unknown field: ``sequence`` never shows it), int64 as two's
complement. Malformed bytes raise :class:`~tidb_binlog.errors.ProtocolError` before any
row is handed out, as the protobuf parse did. ``tests/unit/test_drainer_wire_prewrite.py``
checks the reading against protobuf's.
"""

from __future__ import annotations

from array import array

from tidb_binlog.errors import ProtocolError

__all__ = ["WireBinlog", "WirePrewrite", "WireMutation", "read_binlog"]

_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_MUTATION_TYPES = frozenset(range(5))  # binlog.MutationType: Insert .. DeleteRow
_BINLOG_TYPES = frozenset(range(5))  # binlog.BinlogType: Prewrite .. PostDDL


class _Malformed(Exception):
    """A wire-format error at a byte offset (turned into ProtocolError by the caller)."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    result = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _MASK, pos
        shift += 7
        if shift >= 70:
            raise _Malformed(f"varint longer than 10 bytes at offset {pos}")
    raise _Malformed(f"truncated varint at offset {pos}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value & _SIGN else value


def _skip(buf, pos: int, end: int, wire: int, field: int) -> int:
    """The position after an unknown field's value."""
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    elif wire == 2:
        n, pos = _varint(buf, pos, end)
        pos += n
    else:
        raise _Malformed(f"field {field} has wire type {wire} (groups are not used)")
    if pos > end:
        raise _Malformed(f"field {field} runs past the end of its message ({end})")
    return pos


def _fields(buf, pos: int, end: int):
    """``(field, wire type, value, position)`` of each field in ``buf[pos:end]``; the value
    of a length-delimited field is its ``(start, stop)``, of a varint the integer, of the
    others None (skipped)."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _Malformed(f"field number 0 at offset {pos}")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wire, value
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise _Malformed(f"field {field} of {n} bytes at offset {pos} runs past the "
                                 f"end of its message ({end})")
            yield field, wire, (pos, stop)
            pos = stop
        else:
            pos = _skip(buf, pos, end, wire, field)
            yield field, wire, None


class WireBinlog:
    """The ``Binlog`` fields the keeper reads, from its payload; ``prewrite_value`` is a
    ``memoryview`` into the payload (no copy). Duck-types ``binlog_pb2.Binlog`` for
    :meth:`~tidb_binlog.drainer.translate.txn.Translator.may_exceed` and
    :meth:`~tidb_binlog.drainer.translate.txn.Translator.translate_chunks`."""

    __slots__ = ("tp", "start_ts", "commit_ts", "ddl_job_id", "prewrite_value")

    def __init__(self, tp: int, start_ts: int, commit_ts: int, ddl_job_id: int,
                 prewrite_value: memoryview):
        self.tp = tp
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.ddl_job_id = ddl_job_id
        self.prewrite_value = prewrite_value


def read_binlog(payload: bytes) -> WireBinlog | None:
    """The binlog's scalar fields and a view of its ``prewrite_value``; None when the bytes
    are not a well-formed binlog with ``tp`` (the caller then parses them with protobuf,
    which raises the error it always raised)."""
    view = memoryview(payload)
    tp = None
    start_ts = commit_ts = ddl_job_id = 0
    pv = (0, 0)
    try:
        for field, wire, value in _fields(view, 0, len(view)):
            if wire == 0:
                if field == 1:
                    if value in _BINLOG_TYPES:
                        tp = value
                elif field == 2:
                    start_ts = _signed(value)
                elif field == 3:
                    commit_ts = _signed(value)
                elif field == 7:
                    ddl_job_id = _signed(value)
            elif wire == 2 and field == 5:
                pv = value
    except _Malformed:
        return None
    if tp is None:
        return None
    return WireBinlog(tp, start_ts, commit_ts, ddl_job_id, view[pv[0]:pv[1]])


class _Rows:
    """A repeated bytes field read in place: ``len``, ``rows[i]``, ``rows[i:j]`` (new
    ``bytes`` each time, as protobuf's accessors return)."""

    __slots__ = ("_buf", "_starts", "_stops")

    def __init__(self, buf: memoryview):
        self._buf = buf
        self._starts = array("q")
        self._stops = array("q")

    def _add(self, start: int, stop: int) -> None:
        self._starts.append(start)
        self._stops.append(stop)

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):
        if isinstance(index, slice):
            buf = self._buf
            return [bytes(buf[a:b]) for a, b in zip(self._starts[index], self._stops[index],
                                                    strict=True)]
        return bytes(self._buf[self._starts[index]:self._stops[index]])

    def __iter__(self):
        buf = self._buf
        for a, b in zip(self._starts, self._stops, strict=True):
            yield bytes(buf[a:b])


class WireMutation:
    """One ``TableMutation`` as read in place: ``table_id``, ``inserted_rows``,
    ``updated_rows``, ``deleted_rows`` (row lists, see :class:`_Rows`) and ``sequence``
    (the known ``MutationType`` values, in order)."""

    __slots__ = ("table_id", "inserted_rows", "updated_rows", "deleted_rows", "sequence")

    def __init__(self, buf: memoryview, start: int, stop: int):
        self.table_id = 0
        self.inserted_rows = _Rows(buf)
        self.updated_rows = _Rows(buf)
        self.deleted_rows = _Rows(buf)
        self.sequence = array("q")
        lists = {2: self.inserted_rows, 3: self.updated_rows, 6: self.deleted_rows}
        seq = self.sequence
        for field, wire, value in _fields(buf, start, stop):
            if field == 1 and wire == 0:
                self.table_id = _signed(value)
            elif wire == 2 and field in lists:
                lists[field]._add(*value)
            elif field == 7:
                if wire == 0:
                    if value in _MUTATION_TYPES:
                        seq.append(value)
                elif wire == 2:  # packed
                    pos, end = value
                    while pos < end:
                        v, pos = _varint(buf, pos, end)
                        if v in _MUTATION_TYPES:
                            seq.append(v)


class WirePrewrite:
    """A serialized ``PrewriteValue`` read in place: ``schema_version`` and ``mutations``
    (:class:`WireMutation`, each read when first reached). Its whole structure is checked
    here, so a malformed value fails before any row is used."""

    def __init__(self, value: bytes | memoryview):
        buf = value if isinstance(value, memoryview) else memoryview(value)
        self.schema_version = 0
        spans = []
        try:
            for field, wire, val in _fields(buf, 0, len(buf)):
                if field == 1 and wire == 0:
                    self.schema_version = _signed(val)
                elif field == 2 and wire == 2:
                    spans.append(val)
            self.mutations = [WireMutation(buf, a, b) for a, b in spans]
        except _Malformed as exc:
            raise ProtocolError(f"malformed prewrite value ({len(buf)} bytes): {exc}") from None
