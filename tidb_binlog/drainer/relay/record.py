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
"""

from __future__ import annotations

from decimal import Decimal

from google.protobuf.unknown_fields import UnknownFieldSet

from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.apply.dml import DMLType, Txn
from tidb_binlog.drainer.translate.pb import ddl_record
from tidb_binlog.errors import CodecError, ProtocolError
from tidb_binlog.proto import pb_binlog_pb2 as pb

__all__ = ["txn_record", "record_schema_version", "SCHEMA_VERSION_FIELD"]

SCHEMA_VERSION_FIELD = 15
"""The pb field number of the schema version in a relay record (not in pb_binlog.proto)."""

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


def txn_record(commit_ts: int, txn: Txn, schema_version: int) -> bytes:
    """The relay record of one translated transaction (see the module doc).

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
    return body + _TAG + _uvarint(schema_version)


def record_schema_version(b: pb.Binlog) -> int | None:
    """The schema version a parsed relay record carries (None: a plain pb binlog)."""
    for f in UnknownFieldSet(b):
        if f.field_number == SCHEMA_VERSION_FIELD:
            return int(f.data)
    return None
