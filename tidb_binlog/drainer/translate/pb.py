"""Binlog → ``pb_binlog.Binlog`` bytes: the file sink's record (TiDB's ``drainer/translator/pb.go``).

A served Commit binlog becomes one ``pb_binlog.Binlog`` (``proto/pb_binlog.proto``),
serialized as TiDB's gogo marshaller writes it (fields in number order; the
non-nullable ``tp``, ``commit_ts``, ``column.name``, ``column.mysql_type`` and
``Event.tp`` always present, zero or not):

- **DML**: ``tp = DML``, ``commit_ts``, ``dml_data.events``: one ``Event{schema_name,
  table_name, tp Insert|Update|Delete, row}`` per row change, in the mutation's
  ``sequence`` order. Each ``row`` element is a marshalled ``column{name, tp =
  the 1-byte MySQL type, mysql_type = types.TypeToStr(tp, charset), value,
  changed_value}``:

  - Insert: every column of the table (any state, the hidden ``_tidb_rowid``
    excepted), the handle filling the int PK / clustered PK columns, a column
    missing from the row taking its default (origin default, else NULL when
    nullable, else the type's zero value, as TiDB's ``getDefaultOrZeroValue``);
  - Update: the writable columns present in the row (missing ones with defaults
    only while a DDL is in flight), ``value`` = old, ``changed_value`` = new;
  - Delete: the table's columns present in the row.

  ``value`` is ``codec.EncodeValue`` of the datum after TiDB's ``formatData``:
  DATE/DATETIME/TIMESTAMP, DECIMAL, JSON and TIME become their text (a string
  datum, flag 0x02), ENUM/SET/BIT their number (uint64, flag 0x09), NULL flag
  0x00; ints (0x08 / 0x09), floats (0x05), strings and bytes (0x02) stay as
  decoded. TIMESTAMPs are shown in ``tz`` (TiDB uses the drainer's local zone;
  we use ``[syncer.to.params] time_zone``, default UTC).

- **DDL**: ``tp = DDL``, ``commit_ts``, ``ddl_query`` = ``use `db`; <query>;``
  (``<query>;`` for CREATE DATABASE; the query alone when it has no database).
  Which DDL binlogs produce a record (job lookup, failed or DeleteOnly jobs
  skipped, the schema keeper updated) is decided by the MySQL
  :class:`~tidb_binlog.drainer.translate.txn.Translator`, which this class wraps.

Fake binlogs, skipped DDLs, and transactions whose every row belongs to an
ignored schema (``ignore_schemas``) or a truncated table produce ``None``.
:func:`decode_columns` reads a ``row`` element back (for readers such as reparo).

**Large transactions in parts.** :meth:`PbTranslator.chunks` hands a DML binlog of
more than ``max_rows`` row changes out as parts: each the serialized ``DMLData`` of at
most ``max_rows`` events (protobuf writes a repeated field as its elements back to
back, so the parts concatenated are the ``DMLData`` of every event, byte for byte).
The record is that concatenation behind :func:`record_head` (``tp``, ``commit_ts``
and the ``dml_data`` field's tag and length): byte-identical to what
:meth:`PbTranslator.translate` builds whole, so a reader (reparo, TiDB's) sees one
ordinary record. The head needs the total length, known after the last part: the file
sink spills the parts and writes the record at the last one
(``drainer/sinks/file/README.md``). The binlog is read in place
(:mod:`~tidb_binlog.drainer.translate.wire`): no ``PrewriteValue`` message, and the
events of one part at a time; a binlog served by reference is read the same way from
its source, through a window.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import NamedTuple

from tidb_binlog import binlog as bl
from tidb_binlog.codec import (
    Datum,
    decode_insert_row,
    decode_old_and_new_row,
    decode_one,
    decode_row,
    encode_value,
    format_sql_arg,
    unflatten,
)
from tidb_binlog.codec import mysql as m
from tidb_binlog.codec.datum import Kind
from tidb_binlog.codec.mytime import format_time
from tidb_binlog.drainer.apply.sql import is_create_database, quote_name
from tidb_binlog.drainer.translate.pb_wire import read_record_head
from tidb_binlog.drainer.translate.txn import HIDDEN_HANDLE, TableView, Translator, default_value
from tidb_binlog.drainer.translate.wire import DEFAULT_WINDOW, WireBinlog, WirePrewrite, read_large
from tidb_binlog.errors import CodecError, ProtocolError, SchemaError
from tidb_binlog.model import ColumnInfo, TableInfo
from tidb_binlog.proto import pb_binlog_pb2 as pb

__all__ = ["PbTranslator", "type_to_str", "pb_datum", "ddl_record", "decode_columns", "PbColumn",
           "record_commit_ts", "is_ddl_record", "RecordPart", "record_head"]

UTC = datetime.UTC

_TYPE_STR = {
    m.TYPE_BIT: "bit", m.TYPE_BLOB: "text", m.TYPE_DATE: "date", m.TYPE_DATETIME: "datetime",
    m.TYPE_UNSPECIFIED: "unspecified", m.TYPE_NEWDECIMAL: "decimal", m.TYPE_DOUBLE: "double",
    m.TYPE_ENUM: "enum", m.TYPE_FLOAT: "float", m.TYPE_GEOMETRY: "geometry",
    m.TYPE_INT24: "mediumint", m.TYPE_JSON: "json", m.TYPE_LONG: "int",
    m.TYPE_LONGLONG: "bigint", m.TYPE_LONG_BLOB: "longtext", m.TYPE_MEDIUM_BLOB: "mediumtext",
    m.TYPE_NULL: "null", m.TYPE_SET: "set", m.TYPE_SHORT: "smallint", m.TYPE_STRING: "char",
    m.TYPE_DURATION: "time", m.TYPE_TIMESTAMP: "timestamp", m.TYPE_TINY: "tinyint",
    m.TYPE_TINY_BLOB: "tinytext", m.TYPE_VARCHAR: "varchar", m.TYPE_VAR_STRING: "var_string",
    m.TYPE_YEAR: "year",
}
_BLOBS = frozenset({m.TYPE_TINY_BLOB, m.TYPE_MEDIUM_BLOB, m.TYPE_LONG_BLOB, m.TYPE_BLOB})
_CHARS = frozenset({m.TYPE_STRING, m.TYPE_VARCHAR})
_AS_TEXT = frozenset({Kind.DECIMAL, Kind.JSON, Kind.DURATION})
_AS_UINT = frozenset({Kind.ENUM, Kind.SET, Kind.BIT})


def type_to_str(tp: int, charset: str) -> str:
    """TiDB's ``types.TypeToStr``: the type's name; text → blob, char → binary for the
    binary charset."""
    name = _TYPE_STR.get(tp, "")
    if charset != m.BINARY_CHARSET:
        return name
    if tp in _BLOBS:
        return name.replace("text", "blob", 1)
    if tp in _CHARS:
        return name.replace("char", "binary", 1)
    if tp == m.TYPE_NULL:
        return "binary"
    return name


def pb_datum(d: Datum, ft: m.FieldType, tz: datetime.tzinfo = UTC) -> Datum:
    """TiDB's ``formatData`` for the pb sink: the datum whose ``EncodeValue`` is stored."""
    d = unflatten(d, ft, tz)
    kind = d[0]
    if kind is Kind.TIME:
        return Datum.string(format_time(d[1], ft.tp, ft.fsp))
    if kind in _AS_TEXT:
        return Datum.string(format_sql_arg(d, ft, tz))
    if kind in _AS_UINT:
        return Datum.uint64(d[1])
    return d


def _default_datum(value, ft: m.FieldType) -> Datum:
    """A :func:`default_value` result as the datum TiDB's ``getDefaultOrZeroValue`` +
    ``formatData`` yield (origin defaults are strings there; zero values typed)."""
    if value is None:
        return Datum.null()
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        if ft.tp in (m.TYPE_ENUM, m.TYPE_SET, m.TYPE_BIT) or ft.flag & m.UNSIGNED_FLAG:
            return Datum.uint64(value)
        return Datum.int64(value)
    if isinstance(value, float):
        return Datum.float32(value) if ft.tp == m.TYPE_FLOAT else Datum.float64(value)
    if isinstance(value, bytes):
        return Datum.bytes(value)
    return Datum.string(str(value))


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _column_head(name: str, tp: int, mysql_type: str) -> bytes:
    """The marshalled ``column`` fields 1-3, the same for every row of a column."""
    head = pb.column(name=name, tp=bytes((tp,)), mysql_type=mysql_type).SerializeToString()
    return head


def _column(head: bytes, value: bytes, changed: bytes | None = None) -> bytes:
    """A marshalled ``column``: ``head`` (fields 1-3) then ``value`` (4) and
    ``changed_value`` (5), byte for byte what protobuf writes (checked in the tests)."""
    n = len(value)
    out = head + (b"\x22" + bytes((n,)) if n < 0x80 else b"\x22" + _uvarint(n)) + value
    if changed is not None:
        out += b"\x2a" + _uvarint(len(changed)) + changed
    return out


def ddl_record(commit_ts: int, database: str, query: str) -> bytes:
    """The pb ``Binlog`` of a DDL (see the module doc for the query's form)."""
    if database:
        query = f"{query};" if is_create_database(query) else \
            f"use {quote_name(database)}; {query};"
    return pb.Binlog(tp=pb.DDL, commit_ts=commit_ts,
                     ddl_query=query.encode("utf-8")).SerializeToString()


def record_head(commit_ts: int, events_size: int) -> bytes:
    """The bytes of a DML record before its events: ``tp``, ``commit_ts`` and the
    ``dml_data`` field's tag (3, length-delimited) and length, as protobuf writes them;
    followed by ``events_size`` bytes of serialized ``DMLData`` it is the record."""
    head = pb.Binlog(tp=pb.DML, commit_ts=commit_ts).SerializeToString()
    return head + b"\x1a" + _uvarint(events_size)


class RecordPart(NamedTuple):
    """One part of a large transaction's record (:meth:`PbTranslator.chunks`), the
    keeper's item for the file sink: ``events`` the serialized ``DMLData`` of a chunk's
    events, ``chunk`` 1, 2, ..., ``last``: the record is complete after it."""

    events: bytes
    chunk: int
    last: bool


class _Col(NamedTuple):
    info: ColumnInfo
    ft: m.FieldType
    head: bytes  # marshalled name, tp, mysql_type


class _Part:
    """The events of the part being built: a fresh ``DMLData`` message per part. Clearing
    one message's events (``del events[:]``) would not do: protobuf's upb runtime
    frees a message's memory (its arena) only with the message, so a reused one grows
    with the whole transaction. The row walk adds through :meth:`add`, so the message
    can change under it between two events."""

    __slots__ = ("_msg", "_events")

    def __init__(self):
        self._msg = pb.DMLData()
        self._events = self._msg.events

    @property
    def count(self) -> int:
        return len(self._events)

    def add(self, **fields):
        return self._events.add(**fields)

    def take(self) -> bytes:
        """The part's serialized ``DMLData``; the next part starts in a new message."""
        data = self._msg.SerializeToString()
        self._msg = pb.DMLData()
        self._events = self._msg.events
        return data


class PbTranslator:
    """Commit binlogs → pb ``Binlog`` bytes, with the schema the wrapped
    :class:`Translator` keeps (its keeper, views and DDL handling)."""

    def __init__(self, translator: Translator, *, ignore_schemas: Iterable[str] = (),
                 tz: datetime.tzinfo = UTC):
        self.translator = translator
        self.keeper = translator.keeper
        self.ignored = frozenset(s.lower() for s in ignore_schemas)
        self.tz = tz
        self._cols: dict[int, tuple[TableView, tuple[_Col, ...], dict[int, _Col]]] = {}

    def translate(self, binlog: bl.Binlog) -> bytes | None:
        """The pb record of one served binlog, or None when there is nothing to write."""
        if bl.is_fake(binlog):
            return None
        if bl.is_ddl(binlog):
            txn = self.translator.translate(binlog)
            if self.translator.filters is not None:  # tables, binlog-filter-rule, routes
                txn = self.translator.filters.apply(txn)
            if txn is None or txn.ddl is None or txn.ddl.database.lower() in self.ignored:
                return None
            return ddl_record(binlog.commit_ts, txn.ddl.database, txn.ddl.sql)
        pv = bl.decode_prewrite_value(binlog.prewrite_value)
        self.keeper.apply_until(pv.schema_version)
        out = pb.Binlog(tp=pb.DML, commit_ts=binlog.commit_ts)
        events = out.dml_data.events
        for mut in pv.mutations:
            try:
                for _ in self._mutation(binlog.commit_ts, pv.schema_version, mut, events):
                    pass
            except CodecError as exc:
                raise _row_error(exc, mut, binlog) from exc
        if not events:
            return None
        return out.SerializeToString()

    # -- large transactions, in parts --------------------------------------------------------
    def chunks(self, payload, max_rows: int, window: int = DEFAULT_WINDOW):
        """The parts of a Commit binlog's record when it may hold more than ``max_rows``
        row changes (see the module doc), else None (translate it whole).

        ``payload``: the binlog's bytes (or a view), read in place, or a
        :class:`~tidb_binlog.binlog_ref.ByteSource` over them (a binlog served by
        reference): walked through reads of at most ``window`` bytes, each row read from
        the source when its event is built (blocks of the following rows read ahead,
        ``translate/wire.py``), so the parts hold the rows' offsets and a window, never
        the payload. An iterator of ``(events, last)``: ``events`` the serialized
        ``DMLData`` of at most ``max_rows`` events (empty only for the last part),
        ``last`` set on the final one; decoded lazily, one part per ``next``."""
        if max_rows < 1:
            return None
        wire = read_large(payload, 4 * max_rows, window)
        if wire is None or not Translator.may_exceed(wire, max_rows):
            return None  # malformed: the whole path's protobuf parse reports it
        return self._parts(wire, max_rows)

    def _parts(self, wire: WireBinlog, max_rows: int):
        commit_ts = wire.commit_ts
        prewrite = WirePrewrite(wire.prewrite_value)  # checks the structure first
        version = prewrite.schema_version
        self.keeper.apply_until(version)
        part = _Part()
        for mut in prewrite.mutations:
            try:
                for _ in self._mutation(commit_ts, version, mut, part):
                    if part.count >= max_rows:
                        yield part.take(), False
            except CodecError as exc:
                raise _row_error(exc, mut, wire) from exc
        yield part.take(), True

    # -- rows ------------------------------------------------------------------------------
    def _columns(self, view: TableView) -> tuple[tuple[_Col, ...], dict[int, _Col]]:
        entry = self._cols.get(id(view))
        if entry is None or entry[0] is not view:
            cols = tuple(_Col(c, view.all_types[c.id],
                              _column_head(c.name.O, c.type.tp,
                                           type_to_str(c.type.tp, c.type.charset)))
                         for c in view.info.cols if c.name.L != HIDDEN_HANDLE)
            if len(self._cols) > 256:
                self._cols.clear()  # views of dropped versions
            entry = self._cols[id(view)] = (view, cols, {c.info.id: c for c in cols})
        return entry[1], entry[2]

    def _mutation(self, commit_ts: int, version: int, mut, events):
        """Add the mutation's events to ``events`` (a repeated ``Event`` field, or a
        :class:`_Part`: anything with ``add``), yielding after each one (the parts path
        cuts there)."""
        if self.keeper.is_truncated(mut.table_id):
            return
        view = self.translator.view(mut.table_id)
        database, table = view.schema.database, view.info.name.O
        if database.lower() in self.ignored:
            return
        filters = self.translator.filters  # tidb_binlog.filter.rules.TxnFilter or None
        if filters is not None and filters.skip_table(database, table):
            return
        names = filters.route(database, table) if filters is not None else (database, table)
        cols, by_id = self._columns(view)
        old_info = self.keeper.table_at(mut.table_id, version) or view.info
        lists = {bl.MutationType.INSERT: mut.inserted_rows,
                 bl.MutationType.UPDATE: mut.updated_rows,
                 bl.MutationType.DELETE_ROW: mut.deleted_rows}
        cursors = dict.fromkeys(lists, 0)
        for tp in mut.sequence:
            rows = lists.get(tp)
            if rows is None:
                raise SchemaError(f"unknown mutation type {tp} in the transaction at commit_ts "
                                  f"{commit_ts}, table id {mut.table_id}")
            i = cursors[tp]
            if i >= len(rows):
                raise SchemaError(f"mutation sequence of table id {mut.table_id} at commit_ts "
                                  f"{commit_ts} names more rows of type {tp} than it carries")
            cursors[tp] = i + 1
            if filters is not None and filters.skip_mutation(database, table, tp):
                continue
            ev = events.add(schema_name=names[0], table_name=names[1])
            if tp == bl.MutationType.INSERT:
                ev.tp = pb.Insert
                ev.row.extend(self._insert(view, cols, old_info, rows[i]))
            elif tp == bl.MutationType.UPDATE:
                ev.tp = pb.Update
                ev.row.extend(self._update(view, by_id, old_info, version, rows[i]))
            else:
                ev.tp = pb.Delete
                ev.row.extend(self._delete(view, cols, rows[i]))
            yield

    def _value(self, c: _Col, d: Datum) -> bytes:
        return encode_value([pb_datum(d, c.ft, self.tz)])

    def _default(self, old_info: TableInfo, c: _Col) -> bytes:
        source = old_info.column_by_id(c.info.id) or c.info
        return encode_value([_default_datum(default_value(source, self.tz), c.ft)])

    def _insert(self, view: TableView, cols, old_info: TableInfo, row: bytes) -> list[bytes]:
        handles, datums = decode_insert_row(row, view.all_types, view.pk_len, self.tz)
        for i, col in view.handle_targets:
            if col.id not in datums:
                datums[col.id] = unflatten(handles[i], view.all_types[col.id], self.tz)
        out = []
        for c in cols:
            d = datums.get(c.info.id)
            value = self._value(c, d) if d is not None else self._default(old_info, c)
            out.append(_column(c.head, value))
        return out

    def _update(self, view: TableView, by_id, old_info: TableInfo, version: int, row: bytes
                ) -> list[bytes]:
        old, new = decode_old_and_new_row(row, view.writable_types, self.tz)
        fill = len(new) < len(view.writable)
        if fill and not self.keeper.can_append_default(view.info.id, version):
            missing = [c.name.O for c in view.writable if c.id not in new]
            raise SchemaError(
                f"update row of {view.schema.qualified_name} lacks columns {missing} and no DDL "
                f"is in flight (row schema version {version}, table last changed at "
                f"{self.keeper.table_version.get(view.info.id)})")
        out = []
        for info in view.writable:
            c = by_id[info.id]
            if info.id in new:
                out.append(_column(c.head, self._value(c, old[info.id]),
                                   self._value(c, new[info.id])))
            else:
                value = self._default(old_info, c)
                out.append(_column(c.head, value, value))
        return out

    def _delete(self, view: TableView, cols, row: bytes) -> list[bytes]:
        datums = decode_row(row, view.all_types, self.tz)
        out = [_column(c.head, self._value(c, datums[c.info.id]))
               for c in cols if c.info.id in datums]
        if not out:
            raise SchemaError(f"deleted row of {view.schema.qualified_name} holds none of its "
                              "columns; the row does not match the table schema")
        return out


def _row_error(exc: CodecError, mut, binlog) -> CodecError:
    return CodecError(f"cannot decode a row of table id {mut.table_id} in the transaction at "
                      f"commit_ts {binlog.commit_ts} (start_ts {binlog.start_ts}): {exc}",
                      offset=exc.offset, flag=exc.flag)


# -- reading records back -------------------------------------------------------------------
class PbColumn(NamedTuple):
    """One decoded ``row`` element: ``changed`` is the new value of an update, else None."""

    name: str
    tp: int
    mysql_type: str
    value: Datum
    changed: Datum | None


def decode_columns(row: Iterable[bytes]) -> list[PbColumn]:
    """The columns of one pb ``Event.row``; ProtocolError/CodecError on malformed bytes."""
    out = []
    for i, raw in enumerate(row):
        col = pb.column()
        try:
            col.ParseFromString(raw)
        except Exception as exc:  # protobuf's DecodeError
            raise ProtocolError(f"row element {i} is not a pb_binlog.column: {exc}") from exc
        if len(col.tp) != 1:
            raise ProtocolError(f"row element {i} ({col.name!r}) has a {len(col.tp)}-byte tp; "
                                "expected the 1-byte MySQL type")
        value, _ = decode_one(col.value)
        changed = decode_one(col.changed_value)[0] if col.HasField("changed_value") else None
        out.append(PbColumn(col.name, col.tp[0], col.mysql_type, value, changed))
    return out


def is_ddl_record(payload: bytes) -> bool:
    """Whether a record this module wrote is a DDL: protobuf writes fields in number
    order and ``tp`` (field 1, always present) comes first, so it starts ``08 01``."""
    return payload[:2] == b"\x08\x01"


def record_commit_ts(payload) -> int:
    """The ``commit_ts`` of a pb ``Binlog`` record (ProtocolError when it is not one).
    ``payload``: the bytes (parsed whole), or a :class:`~tidb_binlog.binlog_ref.ByteSource`
    of a large record (its top-level fields read in place, the events skipped unread:
    :func:`~tidb_binlog.drainer.translate.pb_wire.read_record_head`)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        commit_ts = read_record_head(payload).commit_ts
        if commit_ts is None:
            raise ProtocolError("binlog file record carries no commit_ts")
        return commit_ts
    b = pb.Binlog()
    try:
        b.ParseFromString(payload)
    except Exception as exc:  # protobuf's DecodeError
        raise ProtocolError(f"binlog file record is not a pb_binlog.Binlog: {exc}") from exc
    if not b.HasField("commit_ts"):
        raise ProtocolError("binlog file record carries no commit_ts")
    return b.commit_ts
