"""pb ``Binlog`` bytes → the drainer's transaction model: the file sink's translation, reversed.

The file sink (:mod:`tidb_binlog.drainer.translate.pb`) writes one ``pb_binlog.Binlog`` per
upstream transaction. :func:`decode_binlog` turns such a record back into a
:class:`~tidb_binlog.drainer.apply.dml.Txn`, the object the drainer's SQL apply path
takes, so a restore (``tidb-binlog reparo``, a Spark "restore at scale" job) reuses
the loader instead of writing SQL of its own. It is **pure**: bytes in, objects out, no
file, network, logging or Ray, so any process can call it on any record.

What comes back (TiDB Binlog's ``reparo/syncer/translate.go`` + ``util.go``, done here
on our codec):

- a DML record → ``Txn(commit_ts, dmls)``: one :class:`DML` per ``Event``, in order,
  ``values`` (and for an update ``old_values``) keyed by column name, exactly the
  columns the record carries. ``schema`` is None: the record does not say which
  columns are keys, so whoever applies the rows attaches the target table's
  :class:`~tidb_binlog.drainer.apply.dml.TableSchema` (reparo reads it from the
  downstream, as TiDB's loader does);
- a DDL record → ``Txn(commit_ts, ddl=DDL(database, table, sql, commit_ts))``: the
  ``use `db`;`` prefix the sink adds is taken off into ``database``, the trailing
  ``;`` removed, ``table`` is the object the statement names ("" for a database DDL
  or a statement we cannot read a name from, see :func:`ddl_target`).

**Values** (:func:`column_value`) are what pymysql sends and MySQL converts into the
column's type, the same values the drainer's MySQL sink sends for that column:
``None`` for NULL; ``int`` for integers, YEAR, and ENUM / SET / BIT (the sink stores
their number: the ENUM index, the SET bitmask, the BIT value; MySQL takes a number for
each); ``float`` for FLOAT / DOUBLE; ``str`` for the text families and for the values the
sink stores as text (DATE, DATETIME, TIMESTAMP, TIME, DECIMAL, JSON); ``bytes`` for the
binary families (BINARY, VARBINARY, BLOBs, GEOMETRY) and for text that is not UTF-8.
TIMESTAMP text is in the zone the drainer wrote it in (``[syncer.to.params] time_zone``,
default UTC): the applying session must use the same zone.

**Large records** (:class:`LargeRecord`): a record of hundreds of MB is read in place from
a :class:`~tidb_binlog.binlog_ref.ByteSource` through a bounded window
(:mod:`tidb_binlog.drainer.translate.pb_wire`), its events checked first, then its DMLs
handed out one at a time or in chunks; the same DMLs and errors as the whole decode.

Malformed bytes raise :class:`~tidb_binlog.errors.ProtocolError` (not a pb Binlog, an
unknown event type, an update column without its new value) or
:class:`~tidb_binlog.errors.CodecError` (a value that is not a datum), naming the
commit_ts, the table and the column where known.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from tidb_binlog.codec import mysql as m
from tidb_binlog.codec.datum import Datum, Kind
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, Txn
from tidb_binlog.drainer.translate.pb import decode_columns
from tidb_binlog.drainer.translate.pb_wire import (
    PB_WINDOW,
    iter_events,
    read_ddl_query,
    read_record_head,
)
from tidb_binlog.errors import CodecError, InvalidArgument, ProtocolError
from tidb_binlog.proto import pb_binlog_pb2 as pb

__all__ = ["decode_binlog", "parse_binlog", "binlog_to_txn", "column_value", "split_ddl_query",
           "ddl_target", "EVENT_TYPES", "event_to_dml", "ddl_txn", "LargeRecord",
           "open_large_record"]

EVENT_TYPES = {pb.Insert: DMLType.INSERT, pb.Update: DMLType.UPDATE, pb.Delete: DMLType.DELETE}
"""pb ``EventType`` → the model's :class:`DMLType`."""

# MySQL type bytes whose stored bytes are text (the sink's formatData output or a
# character column). The binary charset variants share the type byte, so the
# ``mysql_type`` name decides for strings and blobs (``varbinary``, ``blob``).
_TEXT_TYPES = frozenset({
    m.TYPE_DATE, m.TYPE_DATETIME, m.TYPE_TIMESTAMP, m.TYPE_DURATION, m.TYPE_NEWDECIMAL,
    m.TYPE_JSON,
})
_STRING_TYPES = frozenset({
    m.TYPE_VARCHAR, m.TYPE_STRING, m.TYPE_VAR_STRING, m.TYPE_BLOB, m.TYPE_TINY_BLOB,
    m.TYPE_MEDIUM_BLOB, m.TYPE_LONG_BLOB,
})
_BINARY_NAMES = frozenset({"binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob"})


def column_value(datum: Datum, tp: int, mysql_type: str) -> Any:
    """The Python value of one stored column datum (see the module doc for the mapping).

    ``tp`` is the column's MySQL type byte and ``mysql_type`` its ``types.TypeToStr``
    name, both as the record carries them."""
    kind = datum[0]
    if kind is Kind.NULL:
        return None
    if kind in (Kind.INT64, Kind.UINT64, Kind.ENUM, Kind.SET, Kind.BIT):
        return int(datum[1])
    if kind in (Kind.FLOAT64, Kind.FLOAT32):
        return float(datum[1])
    if kind in (Kind.BYTES, Kind.STRING):
        raw = datum[1]
        if isinstance(raw, str):
            return raw
        if tp in _TEXT_TYPES or (tp in _STRING_TYPES and mysql_type not in _BINARY_NAMES):
            try:
                return bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                return bytes(raw)  # a non-UTF-8 charset: the server converts the bytes
        return bytes(raw)
    if kind is Kind.DECIMAL:  # not written by the sink (it stores text), but a valid datum
        value = datum[1]
        return value if isinstance(value, Decimal) else Decimal(str(value))
    raise CodecError(f"a {kind.name} datum cannot be restored as a column value "
                     f"(column type {mysql_type or tp}); the file sink stores numbers, "
                     "text or bytes only")


_USE_PREFIX = re.compile(r"\s*use\s+(`(?:[^`]|``)*`|[^\s;`]+)\s*;\s*", re.IGNORECASE)


def split_ddl_query(query: str) -> tuple[str, str]:
    """``"use `db`; <ddl>;"`` → ``("db", "<ddl>")``; a query without the prefix (CREATE
    DATABASE, or a DDL without a database) → ``("", query)``. Trailing ``;`` dropped."""
    database = ""
    match = _USE_PREFIX.match(query)
    if match:
        name = match.group(1)
        database = name[1:-1].replace("``", "`") if name.startswith("`") else name
        query = query[match.end():]
    return database, query.strip().rstrip(";").rstrip()


_NAME = r"(?:`(?:[^`]|``)+`|[^\s.`;(),]+)"
_QNAME = rf"({_NAME})(?:\s*\.\s*({_NAME}))?"
_TARGETS = [  # (pattern, kind): the object a DDL statement changes
    (re.compile(rf"(?:CREATE|DROP)\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
                rf"({_NAME})", re.I | re.S), "db"),
    (re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+"
                rf"(?:IF\s+NOT\s+EXISTS\s+)?{_QNAME}", re.I | re.S), "table"),
    (re.compile(rf"DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_QNAME}", re.I | re.S),
     "table"),
    (re.compile(rf"(?:ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|TRUNCATE(?:\s+TABLE)?|"
                rf"RENAME\s+TABLE)\s+{_QNAME}", re.I | re.S), "table"),
    (re.compile(rf"(?:CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX|DROP\s+INDEX)\s+"
                rf"{_NAME}\s+ON\s+{_QNAME}", re.I | re.S), "table"),
    (re.compile(rf"(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:\w+\s*=\s*\S+\s+)*VIEW|DROP\s+VIEW\s+"
                rf"(?:IF\s+EXISTS\s+)?)\s*{_QNAME}", re.I | re.S), "table"),
]
_LEADING_COMMENTS = re.compile(r"^\s*(?:(?:/\*(?!!).*?\*/|--[^\n]*(?:\n|$)|#[^\n]*(?:\n|$))\s*)*",
                               re.S)


def _unquote(name: str | None) -> str:
    if not name:
        return ""
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def ddl_target(query: str, database: str = "") -> tuple[str, str]:
    """``(schema, table)`` a DDL statement changes, for filtering (TiDB reparo's
    ``parseDDL``): a qualified name wins over ``database`` (the ``use`` prefix); a
    database DDL gives ``(db, "")``; RENAME TABLE gives the old name, as TiDB does. A
    statement this does not recognise gives ``(database, "")``, so a database-level rule
    still applies to it."""
    text = _LEADING_COMMENTS.sub("", query, count=1)
    for pattern, kind in _TARGETS:
        match = pattern.match(text)
        if not match:
            continue
        if kind == "db":
            return _unquote(match.group(1)), ""
        first, second = match.group(1), match.group(2)
        if second is not None:
            return _unquote(first), _unquote(second)
        return database, _unquote(first)
    return database, ""


def parse_binlog(payload: bytes) -> pb.Binlog:
    """The ``pb_binlog.Binlog`` of one file record (ProtocolError when it is not one)."""
    b = pb.Binlog()
    try:
        b.ParseFromString(payload)
    except Exception as exc:  # protobuf's DecodeError
        raise ProtocolError(f"binlog file record is not a pb_binlog.Binlog: {exc}") from exc
    if not b.HasField("commit_ts"):
        raise ProtocolError("binlog file record carries no commit_ts")
    return b


def decode_binlog(payload: bytes) -> Txn:
    """One file record's bytes → its :class:`Txn` (see the module doc)."""
    return binlog_to_txn(parse_binlog(payload))


def binlog_to_txn(b: pb.Binlog) -> Txn:
    """A parsed ``pb_binlog.Binlog`` → its :class:`Txn` (see the module doc)."""
    ts = b.commit_ts
    if b.tp == pb.DDL:
        return ddl_txn(ts, b.ddl_query)
    if b.tp != pb.DML:
        raise ProtocolError(f"record at commit_ts {ts} has unknown binlog type {b.tp}")
    return Txn(ts, tuple(event_to_dml(ev, i, ts) for i, ev in enumerate(b.dml_data.events)))


def ddl_txn(ts: int, ddl_query: bytes) -> Txn:
    """The DDL record's :class:`Txn` (see the module doc)."""
    try:
        query = ddl_query.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"DDL record at commit_ts {ts} is not UTF-8 text: {exc}") from exc
    database, sql = split_ddl_query(query)
    schema, table = ddl_target(sql, database)
    return Txn(ts, ddl=DDL(database or schema, table, sql, ts))


def event_to_dml(ev: pb.Event, i: int, ts: int) -> DML:
    """Event number ``i`` (from 0, in the record) of the record at ``ts`` → its DML."""
    where = f"event {i} (`{ev.schema_name}`.`{ev.table_name}`) at commit_ts {ts}"
    tp = EVENT_TYPES.get(ev.tp)
    if tp is None:
        raise ProtocolError(f"{where} has unknown event type {ev.tp}")
    try:
        cols = decode_columns(ev.row)
    except (ProtocolError, CodecError) as exc:
        raise type(exc)(f"{where}: {exc}") from exc
    values: dict[str, Any] = {}
    old: dict[str, Any] | None = {} if tp is DMLType.UPDATE else None
    for c in cols:
        try:
            value = column_value(c.value, c.tp, c.mysql_type)
            if old is not None:
                if c.changed is None:
                    raise ProtocolError("an update column without changed_value")
                old[c.name] = value
                value = column_value(c.changed, c.tp, c.mysql_type)
        except (ProtocolError, CodecError) as exc:
            raise type(exc)(f"{where}, column {c.name!r}: {exc}") from exc
        values[c.name] = value
    if not values:
        raise ProtocolError(f"{where} has no columns")
    return DML(ev.schema_name, ev.table_name, tp, values, old)


class LargeRecord:
    """A record too large to parse whole, read in place from a
    :class:`~tidb_binlog.binlog_ref.ByteSource` (a
    :class:`~tidb_binlog.binlogfile.reader.RecordSource`) through a bounded window
    (:mod:`tidb_binlog.drainer.translate.pb_wire`): what it holds is one window and one
    event, whatever the record's size.

    Made by :func:`open_large_record`, which reads the top level and walks every event
    once (:meth:`validate`), so a record protobuf would refuse is refused before any
    row is used, with :func:`parse_binlog`'s errors. :meth:`dmls` / :meth:`chunks` then
    decode the rows in order, the same :class:`DML` objects :func:`binlog_to_txn` gives,
    with its errors (a caller that must not apply a part of a record whose rows do not
    decode walks :meth:`dmls` once first). ``tp``, ``commit_ts``; :meth:`txn` for a DDL
    record (small by nature) or a small test."""

    __slots__ = ("source", "window", "head", "tp", "commit_ts", "events")

    def __init__(self, source, window: int = PB_WINDOW):
        self.source = source
        self.window = window
        self.head = read_record_head(source, window)
        self.tp = self.head.tp
        self.commit_ts = self.head.commit_ts or 0
        self.events = 0

    @property
    def size(self) -> int:
        return self.source.size

    def validate(self) -> None:
        """Walk every event once (parsed, not decoded): ProtocolError as
        :func:`parse_binlog` raises for the whole record; sets :attr:`events`."""
        n = 0
        for _ in iter_events(self.source, self.head, self.window):
            n += 1
        self.events = n
        if self.head.commit_ts is None:
            raise ProtocolError("binlog file record carries no commit_ts")

    def iter_events(self):
        """The ``pb_binlog.Event`` messages, in order, one at a time."""
        return iter_events(self.source, self.head, self.window)

    def ddl_query(self) -> bytes:
        return read_ddl_query(self.source, self.head)

    def dmls(self):
        """The DMLs of a DML record, one at a time (:func:`binlog_to_txn`'s, in order)."""
        if self.tp != pb.DML:
            raise ProtocolError(f"record at commit_ts {self.commit_ts} is a DDL, not rows")
        ts = self.commit_ts
        for i, ev in enumerate(self.iter_events()):
            yield event_to_dml(ev, i, ts)

    def chunks(self, rows: int):
        """:meth:`dmls` in tuples of at most ``rows``."""
        if rows < 1:
            raise InvalidArgument(f"rows must be >= 1, got {rows}")
        chunk: list[DML] = []
        for dml in self.dmls():
            chunk.append(dml)
            if len(chunk) >= rows:
                yield tuple(chunk)
                chunk = []
        if chunk:
            yield tuple(chunk)

    def txn(self) -> Txn:
        """The whole :class:`Txn` (:func:`binlog_to_txn`'s): for a DDL record, or where
        holding every row is fine."""
        if self.tp == pb.DDL:
            return ddl_txn(self.commit_ts, self.ddl_query())
        return Txn(self.commit_ts, tuple(self.dmls()))


def open_large_record(source, window: int = PB_WINDOW) -> LargeRecord:
    """A :class:`LargeRecord` of ``source``, checked (see there); ProtocolError as
    :func:`parse_binlog` raises."""
    rec = LargeRecord(source, window)
    rec.validate()
    return rec
