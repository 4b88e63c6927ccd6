"""The Parquet sink's keeper: merged binlogs → row changes with their column types.

:class:`ParquetKeeper` is the schema keeper (:class:`~tidb_binlog.drainer.translate.schema_at.SchemaAt`:
rebuilt at the checkpoint's schema version, history-job waiting, "refuse until
placed") whose ``translate`` returns ``(commit_ts, Changes | None, schema_version)``.
A :class:`Changes` carries the transaction's row changes, each with the
:class:`~.arrow.TableSpec` (the table's writable columns and MySQL types at that
version) the sink needs to choose exact Arrow types, or the DDL.

The MySQL keeper's DMLs carry names only; the types come from the translator's table
views (one per table version), matched to a DML by its ``TableSchema`` object (each
view builds its own). The mapping is cached per schema object. The spec also carries
what the manifest tells readers of the table (:func:`~.arrow.schema_fields`): its
unique keys (the translator's, primary key first), its handle kind, and per column the
value a row lacking it holds (:func:`fill_default`).

**Large transactions** (more than ``[syncer] txn-chunk-rows`` row changes, default
50 000): :meth:`ParquetKeeper.translate_more` hands such a transaction out one chunk per
call (:meth:`Translator.translate_chunks
<tidb_binlog.drainer.translate.txn.Translator.translate_chunks>`), each chunk but the
last as ``Changes(rows, more=True)``, and answers ``more`` so the merger calls again;
items arriving meanwhile wait undecoded in this keeper's queue. So neither this keeper
nor the sink ever holds the transaction decoded whole; the sink appends the chunks to
its open files and lists them in the manifest only with the last chunk
(:mod:`.sink`). A large payload arrives out of band (the merger's ``routed_items``: a
view over Ray's object store, not a copy), or, served by reference (``[syncer]
large-binlog-bytes``), is read from its pump through a window, each chunk's rows by
range (:func:`~tidb_binlog.drainer.translate.payload_read.translate_or_chunk`): this keeper
then never holds the payload.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import Any, NamedTuple

from tidb_binlog.drainer.apply.dml import DMLType, Txn
from tidb_binlog.drainer.sinks.parquet.arrow import DEFAULT_UNKNOWN, ColumnSpec, TableSpec
from tidb_binlog.drainer.translate.schema_at import Chunks, SchemaAt
from tidb_binlog.drainer.translate.txn import default_value
from tidb_binlog.errors import BinlogError, SchemaError
from tidb_binlog.filter.rules import TxnFilter
from tidb_binlog.model import ColumnInfo

__all__ = ["Changes", "ParquetKeeper", "OP_NAMES", "fill_default"]

log = logging.getLogger(__name__)

OP_NAMES = {DMLType.INSERT: "insert", DMLType.UPDATE: "update", DMLType.DELETE: "delete"}


def fill_default(col: ColumnInfo, tz: datetime.tzinfo = datetime.UTC) -> Any:
    """The SQL argument a row image lacking ``col`` holds: TiDB Binlog's rule, as the
    translator fills a row written before the column was added
    (:func:`~tidb_binlog.drainer.translate.txn.default_value`: the origin default, the
    DEFAULT the column had when it was added; else NULL when nullable; else the type's
    zero value). A TableInfo with no origin default but a constant DEFAULT (TiDB sets
    the origin default at ADD COLUMN; an upstream that records only DEFAULT does not)
    takes that DEFAULT. :data:`~.arrow.DEFAULT_UNKNOWN` when it cannot be told."""
    if (col.origin_default is None and col.origin_default_bit is None
            and not col.default_is_expr
            and (col.default is not None or col.default_bit is not None)
            and not (isinstance(col.default, str)
                     and col.default.upper().startswith("CURRENT_TIMESTAMP"))):
        col = dataclasses.replace(col, origin_default=col.default,
                                  origin_default_bit=col.default_bit)
    try:
        return default_value(col, tz)
    except (BinlogError, ValueError, TypeError) as exc:
        log.warning("parquet keeper: the default of column %s (%r) is not a value of its "
                    "type (%s); the manifest leaves it out", col.name.O,
                    col.origin_default, exc)
        return DEFAULT_UNKNOWN


class Changes(NamedTuple):
    """One transaction for the Parquet sink: ``rows`` = ``(spec, op, before, after)``
    (images as column dicts, None where absent), or ``ddl`` = ``(database, table,
    query)``. ``more``: a chunk of a large transaction, more chunks of it follow (the
    sink must not commit it yet)."""

    rows: tuple = ()
    ddl: tuple[str, str, str] | None = None
    more: bool = False


class ParquetKeeper(SchemaAt):
    """Translates merged binlogs into :class:`Changes` (see the module doc)."""

    _specs: dict | None = None
    # the task's filters (SchemaAt.__init__); an empty one for a keeper built without it
    filters: TxnFilter = TxnFilter()
    _log = log  # translate_more's messages under this module's name

    def translate_more(self, items) -> tuple[list, bool]:
        """:meth:`translate` with large transactions in chunks (module doc,
        :meth:`SchemaAt._translate_more`): ``(out, more)``; ``more``: this keeper still
        holds work (a large transaction's next chunks, or items queued behind it), so the
        merger calls again, with no new items if none are ready."""
        return self._translate_more(items, "parquet keeper")

    def _whole(self, txn: Txn | None) -> Changes | None:
        return self._changes(txn)

    def _chunk_item(self, c: Chunks, dmls, last: bool) -> tuple | None:
        """The large transaction's next chunk's item (none for a chunk whose rows were
        all filtered out, unless it is the last: that one commits it)."""
        changes = self._changes(Txn.of_dmls(c.commit_ts, dmls))
        version = self.translator.keeper.schema_version
        if last:
            return c.commit_ts, changes, version
        if changes is not None:
            return c.commit_ts, changes._replace(more=True), version
        return None

    def translate(self, items) -> list[tuple[int, Changes | None, int]]:
        out = []
        translator = self.translator
        for commit_ts, binlog in self._decoded(items, "parquet keeper"):
            if binlog is None:
                out.append((commit_ts, None, 0))
                continue
            txn = translator.translate(binlog)
            out.append((commit_ts, self._changes(txn), translator.keeper.schema_version))
        return out

    def _changes(self, txn: Txn | None) -> Changes | None:
        txn = self.filters.filter(txn, rows_prefiltered=True)  # names routed below
        if txn is None:
            return None
        if txn.ddl is not None:
            if txn.ddl.database.lower() in self._ignored_dbs:
                return None
            ddl = self.filters.router.route_ddl(txn.ddl)
            return Changes(ddl=(ddl.database, ddl.table, ddl.sql))
        rows = []
        for dml in txn.dmls:
            spec = self._spec(dml.schema)
            if dml.tp is DMLType.INSERT:
                rows.append((spec, "insert", None, dml.values))
            elif dml.tp is DMLType.UPDATE:
                rows.append((spec, "update", dml.old_values, dml.values))
            else:
                rows.append((spec, "delete", dml.values, None))
        return Changes(rows=tuple(rows)) if rows else None

    def _spec(self, schema) -> TableSpec:
        if self._specs is None or len(self._specs) > 4096:
            self._specs = {}
        key = id(schema)
        hit = self._specs.get(key)
        if hit is not None and hit[0] is schema:
            return hit[1]
        translator = self.translator
        for view in translator._views.values():  # the translator's view cache
            if view.schema is schema:
                cols = {c.name.O: c for c in view.writable}
                spec = TableSpec(
                    *self.filters.route(schema.database, schema.table),
                    tuple(ColumnSpec.of(name, cols[name].type,
                                        fill_default(cols[name], translator.tz))
                          for name in schema.columns),
                    tuple((k.name, k.columns, k.primary) for k in schema.unique_keys),
                    view.info.handle_kind)
                self._specs[key] = (schema, spec)
                return spec
        raise SchemaError(f"no column types for {schema.database}.{schema.table}: its table "
                          "view left the translator's cache; this is a bug, report it")
