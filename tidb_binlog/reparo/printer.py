"""``dest-type = "print"``: the text TiDB Binlog's reparo prints for each record. Pure.

For a DDL record::

    DDL query: use `shop`; CREATE TABLE t (id INT PRIMARY KEY);

For each event of a DML record, a header and one line per column (``name(mysql type):
value``; for an update ``old => new``)::

    schema: shop; table: t; type: Insert
    id(int): 1
    name(varchar): ann
    schema: shop; table: t; type: Update
    id(int): 1 => 1
    name(varchar): ann => bob

The lines are TiDB's (``reparo/syncer/print.go``). Values: NULL is ``<nil>`` (as TiDB);
numbers in decimal; text (and the times, decimals and JSON the sink stores as text) as
is; binary columns (BINARY, VARBINARY, BLOB, GEOMETRY) as ``0x`` + hex, where TiDB
prints Go's byte-list form. Events of tables the filter drops are not printed; a DDL
the filter drops is not printed either. A large record
(:class:`~tidb_binlog.reparo.decode.LargeRecord`) is printed event by event
(:func:`format_event`), never as one list of lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidb_binlog.drainer.translate.pb import decode_columns
from tidb_binlog.errors import CodecError, ProtocolError
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.decode import column_value, ddl_target, split_ddl_query

__all__ = ["format_binlog", "format_ddl", "format_event", "format_value"]

_EVENT_NAMES = {pb.Insert: "Insert", pb.Update: "Update", pb.Delete: "Delete"}


def format_value(value: Any) -> str:
    """One decoded column value as the print output shows it."""
    if value is None:
        return "<nil>"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def format_binlog(b: pb.Binlog, skip: Callable[[str, str], bool] | None = None) -> list[str]:
    """The printed lines of one record; ``skip(schema, table)`` drops events (a filter's
    :meth:`~tidb_binlog.reparo.filter.TableFilter.skip`)."""
    if b.tp == pb.DDL:
        return format_ddl(b.ddl_query, skip)
    out: list[str] = []
    for i, ev in enumerate(b.dml_data.events):
        out += format_event(ev, i, b.commit_ts, skip)
    return out


def format_ddl(ddl_query: bytes, skip: Callable[[str, str], bool] | None = None) -> list[str]:
    """The printed line of a DDL record (none when the filter drops it)."""
    query = ddl_query.decode("utf-8", errors="replace")
    if skip is not None:
        database, sql = split_ddl_query(query)
        if skip(*ddl_target(sql, database)):
            return []
    return [f"DDL query: {query}"]


def format_event(ev: pb.Event, i: int, commit_ts: int,
                 skip: Callable[[str, str], bool] | None = None) -> list[str]:
    """The printed lines of event number ``i`` of the record at ``commit_ts`` (none when
    the filter drops its table): a large record is printed event by event."""
    if skip is not None and skip(ev.schema_name, ev.table_name):
        return []
    out = [f"schema: {ev.schema_name}; table: {ev.table_name}; type: "
           f"{_EVENT_NAMES.get(ev.tp, ev.tp)}"]
    try:
        cols = decode_columns(ev.row)
        for c in cols:
            value = format_value(column_value(c.value, c.tp, c.mysql_type))
            if ev.tp == pb.Update:
                new = format_value(column_value(c.changed, c.tp, c.mysql_type)
                                   if c.changed is not None else None)
                out.append(f"{c.name}({c.mysql_type}): {value} => {new}")
            else:
                out.append(f"{c.name}({c.mysql_type}): {value}")
    except (ProtocolError, CodecError) as exc:
        raise type(exc)(f"event {i} (`{ev.schema_name}`.`{ev.table_name}`) at commit_ts "
                        f"{commit_ts}: {exc}") from exc
    return out
