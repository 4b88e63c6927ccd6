"""A translated transaction → one relay record: a ``pb_binlog.Binlog`` plus its schema version.

TiDB's relay log stores the pb binlog its translator makes from the upstream binlog.
Our MySQL sink only sees the translated :class:`~tidb_binlog.drainer.apply.dml.Txn`
(the rows as SQL arguments: ``None``, ``int``, ``float``, ``str``, ``bytes``), so the
record is built from those values, in the file sink's format, which reparo's
:func:`~tidb_binlog.reparo.decode.decode_binlog` reads back into the same Txn:

- a value's column type is the generic one for its Python type: ``int`` → BIGINT
  (a signed or unsigned 64-bit datum), ``float`` → DOUBLE, ``str`` → VARCHAR (UTF-8
  text), ``bytes`` → BLOB, ``None`` → NULL; a ``Decimal`` is stored as its text (what
  the MySQL sink sends for a DECIMAL anyway). The downstream converts each into the
  column's real type, as it does for the MySQL sink's arguments. The original column
  types are not kept: relay records are for replaying into MySQL, not for
  type-faithful export (that is the file sink);
- Insert: ``value`` = every column of the row; Update: ``value`` = old image,
  ``changed_value`` = new (the column set of the new image); Delete: the row;
- a DDL: ``use `db`; <query>;`` as the file sink writes it;
- **field 15** (a varint, unknown to TiDB's readers and skipped by protobuf parsers):
  the task's schema version after this transaction. Recovery saves it with the
  checkpoint, so a later run's schema keeper rebuilds the schema *including* the DDLs
  the recovery applied.
- **fields 16, 17 and 18** (varints, skipped the same way): a large transaction applied
  in chunks (``txn-chunk-rows``) is one record per chunk, each written and synced
  before that chunk is applied: field 16 is the chunk's number (1, 2, ...), field 17 is
  1 on every chunk but the last ("more of this transaction follows"), field 18 is 1 on
  every chunk of a transaction whose chunks were applied *atomically* (exactly-once or
  ``txn-atomic``: one open downstream transaction that the last chunk commits; absent:
  each chunk committed on its own, the causality mode). A reader that does not know
  them sees several records with the same ``commit_ts``, each holding some of its rows,
  in order. Recovery (:func:`~tidb_binlog.drainer.relay.recover.recover`) applies a
  transaction only if its last record (field 17 absent) is in the log, and only its
  records from its last chunk 1 on: :func:`record_chunk`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

from google.protobuf.unknown_fields import UnknownFieldSet

from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.apply.dml import DMLType, Txn
from tidb_binlog.drainer.translate.pb import ddl_record
from tidb_binlog.errors import CodecError, ProtocolError
from tidb_binlog.proto import pb_binlog_pb2 as pb

__all__ = ["txn_record", "record_schema_version", "record_position", "record_chunk",
           "RecordChunk", "SCHEMA_VERSION_FIELD", "CHUNK_FIELD", "MORE_FIELD", "ATOMIC_FIELD"]

SCHEMA_VERSION_FIELD = 15
"""The pb field number of the schema version in a relay record (not in pb_binlog.proto)."""
CHUNK_FIELD = 16
"""A chunk's number (1, 2, ...) in a large transaction written in chunks (module doc)."""
MORE_FIELD = 17
"""1 on every chunk of such a transaction but its last (module doc)."""
ATOMIC_FIELD = 18
"""1 on every chunk of a transaction applied in one downstream transaction (module doc)."""


class RecordChunk(NamedTuple):
    """Where a relay record sits (:func:`record_chunk`): its commit_ts, its chunk number
    (0: a whole transaction), whether more chunks follow and whether its chunks were
    applied atomically."""

    commit_ts: int
    chunk: int
    more: bool
    atomic: bool

_TAG = bytes(((SCHEMA_VERSION_FIELD << 3) | 0,))  # varint wire type
_EVENT_TYPES = {DMLType.INSERT: pb.Insert, DMLType.UPDATE: pb.Update, DMLType.DELETE: pb.Delete}
_INT64_MAX = (1 << 63) - 1


_SMALL = [bytes((i,)) for i in range(0x80)]  # one-byte varints (most lengths and tags)


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _typed(value, where: str) -> tuple[int, str, Datum]:
    """``(type byte, mysql_type name, datum)`` for one SQL argument."""
    if value is None:
        return m.TYPE_VARCHAR, "varchar", Datum.null()
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        datum = Datum.int64(value) if value <= _INT64_MAX else Datum.uint64(value)
        return m.TYPE_LONGLONG, "bigint", datum
    if isinstance(value, float):
        return m.TYPE_DOUBLE, "double", Datum.float64(value)
    if isinstance(value, Decimal):
        value = str(value)
    if isinstance(value, str):
        return m.TYPE_VARCHAR, "varchar", Datum.string(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return m.TYPE_BLOB, "blob", Datum.bytes(value)
    raise CodecError(f"{where}: a {type(value).__name__} value cannot be written to the relay "
                     f"log ({value!r:.80}); expected None, int, float, Decimal, str or bytes")


def _ld(field: int, data: bytes) -> bytes:
    """One length-delimited protobuf field (string, bytes, message)."""
    return _SMALL[(field << 3) | 2] + _uvarint(len(data)) + data


_HEADS: dict[tuple[str, int], bytes] = {}  # (column name, type byte) -> fields 1-3


def _head(name: str, tp: int, mysql_type: str) -> bytes:
    key = (name, tp)
    head = _HEADS.get(key)
    if head is None:
        head = _ld(1, name.encode("utf-8")) + _ld(2, bytes((tp,))) + \
            _ld(3, mysql_type.encode("utf-8"))
        if len(_HEADS) < 65536:
            _HEADS[key] = head
    return head


def _columns(values: dict, old: dict | None, where: str) -> list[bytes]:
    """The marshalled ``column`` messages of one row (see the module doc)."""
    out = []
    for name, value in (old if old is not None else values).items():
        tp, mysql_type, datum = _typed(value, f"{where}, column {name!r}")
        col = _head(name, tp, mysql_type) + _ld(4, encode_value([datum]))
        if old is not None:
            if name not in values:
                raise ProtocolError(f"{where}: update without a new value for column {name!r}")
            _, _, new = _typed(values[name], f"{where}, column {name!r}")
            col += _ld(5, encode_value([new]))
        out.append(col)
    return out


def txn_record(commit_ts: int, txn: Txn, schema_version: int, *, chunk: int = 0,
               more: bool = False, atomic: bool = False) -> bytes:
    """The relay record of one translated transaction (see the module doc); ``chunk``
    (> 0) and ``more``: it is that chunk of a large transaction, not its last if
    ``more``; ``atomic`` (with ``chunk``): its chunks are one downstream transaction.

    The bytes are written field by field (what protobuf itself writes for these
    messages, checked in the tests): building ``pb`` objects per column cost
    about three times as much, in the coordinator's own process."""
    if txn.ddl is not None:
        body = ddl_record(commit_ts, txn.ddl.database, txn.ddl.sql)
    else:
        events = []
        for i, dml in enumerate(txn.dmls):
            where = f"row {i} (`{dml.database}`.`{dml.table}`) at commit_ts {commit_ts}"
            row = b"".join([_ld(4, c) for c in _columns(dml.values, dml.old_values, where)])
            events.append(_ld(1, _ld(1, dml.database.encode("utf-8")) +
                              _ld(2, dml.table.encode("utf-8")) +
                              b"\x18" + _uvarint(_EVENT_TYPES[dml.tp]) + row))
        body = b"\x08" + _uvarint(pb.DML) + b"\x10" + _uvarint(commit_ts) + \
            _ld(3, b"".join(events))
    tail = _TAG + _uvarint(schema_version)
    if chunk:
        tail += _uvarint(CHUNK_FIELD << 3) + _uvarint(chunk)
    if more:
        tail += _uvarint(MORE_FIELD << 3) + _SMALL[1]
    if chunk and atomic:
        tail += _uvarint(ATOMIC_FIELD << 3) + _SMALL[1]
    return body + tail


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ProtocolError("relay record: truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def record_position(payload: bytes) -> tuple[int, bool]:
    """``(commit_ts, more)`` of a relay record: its commit_ts, and whether it is a chunk
    of a large transaction with more chunks after it (field 17). Reads the top-level
    fields only (a chunk's rows are skipped by their length: no protobuf parse of the
    record). ProtocolError when it is not a relay record."""
    commit_ts, _, more, _ = record_chunk(payload)
    return commit_ts, more


def record_chunk(payload: bytes) -> RecordChunk:
    """:func:`record_position` with the chunk number (field 16) and the atomic mark
    (field 18) too."""
    buf = payload if isinstance(payload, bytes) else bytes(payload)
    pos, end = 0, len(buf)
    commit_ts, more, chunk, atomic = None, False, 0, False
    while pos < end:
        key, pos = _read_uvarint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_uvarint(buf, pos)
            if field == 2:
                commit_ts = value - (1 << 64) if value >= 1 << 63 else value
            elif field == MORE_FIELD:
                more = value != 0
            elif field == CHUNK_FIELD:
                chunk = value
            elif field == ATOMIC_FIELD:
                atomic = value != 0
        elif wire == 2:
            length, pos = _read_uvarint(buf, pos)
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ProtocolError(f"relay record: unexpected wire type {wire} of field {field}")
    if pos != end or commit_ts is None:
        raise ProtocolError("relay record: truncated, or no commit_ts")
    return RecordChunk(commit_ts, chunk, more, atomic)


def record_schema_version(b: pb.Binlog) -> int | None:
    """The schema version a parsed relay record carries (None: a plain pb binlog)."""
    for f in UnknownFieldSet(b):
        if f.field_number == SCHEMA_VERSION_FIELD:
            return int(f.data)
    return None
