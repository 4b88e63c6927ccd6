"""Binlog → :class:`~tidb_binlog.drainer.apply.dml.Txn`: decode TiDB rows with the right schema.

TiDB Binlog's ``drainer/translator/mysql.go`` and the DML/DDL branches of
``drainer/syncer.go``, as one plain object the schema-keeper actor owns.

**DML** (a Commit binlog with ``prewrite_value``): the schema keeper first
applies every queued DDL job up to ``PrewriteValue.schema_version``. Then, per
``TableMutation``: mutations of truncated table ids are dropped; the table's
current info gives the names and the writable columns, the info at the
binlog's schema version gives the defaults; ``sequence`` is walked with one
cursor per row list (``Insert`` → ``inserted_rows``, ``Update`` →
``updated_rows``, ``DeleteRow`` → ``deleted_rows``; anything else is an error).

- Insert: ``EncodeValue(handle) ‖ row``. The handle is one datum (int PK or
  ``_tidb_rowid``) or one per clustered PK column. Int-PK tables take the PK
  column's value from the handle (reinterpreted as unsigned for UNSIGNED
  columns); clustered tables take each full-length PK column missing from the
  row from the handle. Writable columns missing from the row get
  :func:`default_value` (origin default, else NULL when nullable, else zero).
- Update: ``old ‖ new`` over the writable columns; a row lacking columns is
  accepted only when :meth:`SchemaKeeper.can_append_default` says so (a DDL is
  in flight), the missing columns then get defaults in both images.
- Delete: the full old row; the writable columns present are kept.

Values are the MySQL sink's SQL arguments (``format_sql_arg``: decimals, times
and JSON as text, ENUM/SET/BIT as integers), in the downstream time zone ``tz``.

**DDL** (``ddl_job_id > 0``): ``select setval`` pseudo-DDLs are skipped; the job
is fetched by id from the upstream meta; DeleteOnly DROP COLUMN binlogs and
failed jobs (schema version 0) only update the keeper; otherwise the job is
applied and the binlog's ``ddl_query`` becomes a :class:`DDL` for its database.

**Fake binlogs** (``start_ts == commit_ts``) translate to ``None``.
"""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple

from tidb_binlog import binlog as bl
from tidb_binlog.codec import mysql as m
from tidb_binlog.codec import sql_arg_formatter, unflatten
from tidb_binlog.codec.mytime import format_time, from_utc, parse_time_text
from tidb_binlog.codec.row_args import (
    ArgPlan,
    decode_insert_args,
    decode_int_handle_args,
    decode_old_and_new_args,
    decode_row_args,
)
from tidb_binlog.drainer.apply.dml import (
    DDL,
    DML,
    DMLType,
    TableSchema,
    Txn,
    UniqueKey,
    _dml_unchecked,
)
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.wire import WireBinlog, WirePrewrite
from tidb_binlog.errors import CodecError, InvalidArgument, SchemaError
from tidb_binlog.model import ActionType, ColumnInfo, Job, SchemaState, TableInfo

__all__ = ["Translator", "TableView", "default_value"]

log = logging.getLogger(__name__)

UTC = datetime.UTC
HIDDEN_HANDLE = "_tidb_rowid"
_INSERT = bl.MutationType.INSERT
_UPDATE = bl.MutationType.UPDATE
_DELETE_ROW = bl.MutationType.DELETE_ROW
_INSERT_DML = DMLType.INSERT


class _ViewCodec(NamedTuple):
    """How rows of one TableView become SQL arguments (built once per view)."""

    columns: tuple  # (column id, name, formatter) over view.writable
    all_plan: ArgPlan  # every column (inserts, deletes); only writable ones formatted
    writable_plan: ArgPlan  # writable columns (updates)
    int_handle: int | None  # the column id an int handle fills, when it is a signed int


@dataclass(frozen=True)
class TableView:
    """What translating rows of one TableInfo needs, computed once per table version."""

    info: TableInfo
    schema: TableSchema
    all_types: dict[int, m.FieldType]  # every column, any state
    writable: tuple[ColumnInfo, ...]
    writable_types: dict[int, m.FieldType]
    pk_len: int
    handle_targets: tuple[tuple[int, ColumnInfo], ...]  # (handle index, column) to fill

    @classmethod
    def build(cls, database: str, info: TableInfo) -> TableView:
        all_types = {c.id: c.type.to_codec() for c in info.cols}
        writable = tuple(c for c in info.writable_columns() if c.name.L != HIDDEN_HANDLE)
        names = {c.name.O for c in writable}
        keys = []
        for uk in info.unique_keys():
            cols = tuple(c.name.O for c in uk.columns)
            if all(c in names for c in cols):
                keys.append(UniqueKey("PRIMARY" if uk.primary else uk.name, cols, uk.primary))
        schema = TableSchema(database, info.name.O, tuple(c.name.O for c in writable), tuple(keys))
        targets: list[tuple[int, ColumnInfo]] = []
        pk_len = 1
        if info.is_common_handle:
            idx = info.primary_index()
            if idx is None:
                raise SchemaError(f"table {database}.{info.name.O} (id {info.id}) is a clustered "
                                  "table without a primary key: unsupported clustered index")
            pk_len = len(idx.idx_cols)
            targets = [(i, info.cols[ic.offset]) for i, ic in enumerate(idx.idx_cols)
                       if ic.length == m.UNSPECIFIED_LENGTH]
        elif info.pk_is_handle:
            pk = info.pk_handle_column()
            if pk is not None:
                targets = [(0, pk)]
        return cls(info, schema, all_types, writable, {c.id: all_types[c.id] for c in writable},
                   pk_len, tuple(targets))


class Translator:
    """Turns pulled Commit binlogs into :class:`Txn` objects; see the module docstring.

    ``job_of(job_id)`` fetches a finished DDL job from the upstream meta
    (TiKV's history in TiDB); ``tz`` is the downstream time zone.
    """

    def __init__(self, keeper: SchemaKeeper, job_of: Callable[[int], Job | None], *,
                 tz: datetime.tzinfo = UTC, ignore_schemas: Iterable[str] = (),
                 filters=None):
        self.keeper = keeper
        self.job_of = job_of
        self.tz = tz
        # ``ignore-schemas``: rows of these databases are dropped before they are decoded
        self.ignored_schemas = frozenset(s.lower() for s in ignore_schemas)
        # tidb_binlog.filter.rules.TxnFilter (or None): rows of the tables it drops too
        self.filters = filters
        self._views: dict[tuple[int, int], TableView] = {}
        # id(view) -> (view, _ViewCodec)
        self._formatters: dict[int, tuple[TableView, tuple]] = {}
        # (table id, row schema version) -> (view, old info, codec), or None for rows
        # dropped: what every row of a mutation needs, looked up once. Valid while the
        # keeper's schema_version stays (every change of its tables moves it forward,
        # whoever applies the job); cleared by every DDL binlog too.
        self._tables: dict[tuple[int, int], tuple | None] = {}
        self._tables_version = keeper.schema_version

    # -- entry point ----------------------------------------------------------------
    def translate(self, binlog: bl.Binlog) -> Txn | None:
        """The Txn of one served Commit binlog, or None when there is nothing to apply."""
        start_ts, commit_ts = binlog.start_ts, binlog.commit_ts
        if start_ts == commit_ts and start_ts > 0:  # bl.is_fake
            return None
        if binlog.ddl_job_id > 0:  # bl.is_ddl
            self._tables.clear()
            return self._ddl(binlog)
        pv = bl.decode_prewrite_value(binlog.prewrite_value)
        version = pv.schema_version
        self._schema_at(version)
        dmls: list[DML] = []
        for mut in pv.mutations:
            try:
                self._mutation(commit_ts, version, mut, dmls)
            except CodecError as exc:
                raise CodecError(
                    f"cannot decode a row of table id {mut.table_id} in the transaction at "
                    f"commit_ts {binlog.commit_ts} (start_ts {binlog.start_ts}): {exc}",
                    offset=exc.offset, flag=exc.flag) from exc
        return Txn.of_dmls(commit_ts, tuple(dmls))

    def _schema_at(self, version: int) -> None:
        """Apply the queued DDL jobs up to ``version``; the table cache follows the keeper."""
        keeper = self.keeper
        keeper.apply_until(version)
        if keeper.schema_version != self._tables_version:
            self._tables.clear()
            self._tables_version = keeper.schema_version

    # -- large transactions, in chunks ------------------------------------------------------
    @staticmethod
    def may_exceed(binlog: bl.Binlog, max_rows: int) -> bool:
        """Whether the DML binlog can hold more than ``max_rows`` row changes, judged from
        its size alone (nothing decoded): every row costs at least 4 bytes of
        ``prewrite_value`` (its bytes field's tag, length and a 2-byte handle, its
        sequence entry), so a smaller one is translated whole by :meth:`translate`."""
        return (max_rows > 0 and binlog.ddl_job_id <= 0 and binlog.start_ts != binlog.commit_ts
                and len(binlog.prewrite_value) > 4 * max_rows)

    def translate_chunks(self, binlog: bl.Binlog, max_rows: int, *,
                         prewrite: WirePrewrite | None = None
                         ) -> Iterator[tuple[tuple[DML, ...], bool]]:
        """The rows of one DML binlog as consecutive chunks ``(dmls, last)`` of at most
        ``max_rows`` row changes, decoded lazily: the caller hands a chunk on and lets it
        go before asking for the next, so the decoded transaction is never held whole
        (a 1 GiB transaction decodes to several GiB of Python objects). The rows and
        their order are exactly :meth:`translate`'s; a chunk boundary may fall inside a
        mutation. Only the last chunk has ``last`` set, and only it may be empty (a
        transaction whose rows were all dropped); a chunk is handed out once a row
        after it was decoded, so the last one is never empty when the transaction
        has rows. The schema must not change between the chunks (the keeper
        translates nothing else meanwhile).

        ``binlog``: a ``Binlog`` message, or the keeper's
        :class:`~tidb_binlog.drainer.translate.wire.WireBinlog` (read from the payload's
        bytes: no ``PrewriteValue`` message is built, each row image is copied out of the
        payload when its chunk is decoded, so this holds the payload and 16 bytes of
        offsets a row, not the transaction two or three times over).

        ``prewrite``: that binlog's ``prewrite_value`` already walked
        (:class:`~tidb_binlog.drainer.translate.wire.WirePrewrite`; loop control's verdict
        read the mark rows from it first), so it is not walked (or read) a second time."""
        if max_rows < 1:
            raise InvalidArgument(f"max_rows must be >= 1, got {max_rows}")
        commit_ts, start_ts = binlog.commit_ts, binlog.start_ts
        if prewrite is not None:
            mutations = prewrite
        elif isinstance(binlog, WireBinlog):  # read in place: rows copied one chunk at a time
            mutations = WirePrewrite(binlog.prewrite_value)
        else:
            mutations = bl.decode_prewrite_value(binlog.prewrite_value)
        del binlog  # its prewrite_value bytes: the caller lets go of the binlog too
        version = mutations.schema_version
        self._schema_at(version)
        pending: list[DML] = []
        for mut in mutations.mutations:
            try:
                for rows in self._mutation_slices(commit_ts, version, mut, max_rows):
                    pending.extend(rows)
                    while len(pending) > max_rows:
                        chunk = tuple(pending[:max_rows])
                        del pending[:max_rows]
                        yield chunk, False
            except CodecError as exc:
                raise CodecError(
                    f"cannot decode a row of table id {mut.table_id} in the transaction at "
                    f"commit_ts {commit_ts} (start_ts {start_ts}): {exc}",
                    offset=exc.offset, flag=exc.flag) from exc
        yield tuple(pending), True

    def _mutation_slices(self, commit_ts: int, version: int, mut, size: int
                         ) -> Iterator[list[DML]]:
        """:meth:`_mutation`'s rows in lists of at most ``size``, in the same order."""
        entry = self._table(mut.table_id, version)
        if entry is None:
            return
        view, old_info, codec = entry
        seq = mut.sequence
        inserted = mut.inserted_rows
        n = len(seq)
        if n == len(inserted) and all(tp == _INSERT for tp in seq):
            insert = self._insert_row
            for lo in range(0, n, size):
                yield [insert(view, old_info, codec, row) for row in inserted[lo:lo + size]]
            return
        updated, deleted = mut.updated_rows, mut.deleted_rows
        ii = ui = di = 0
        out: list[DML] = []
        for tp in seq:
            if tp == _INSERT:
                if ii >= len(inserted):
                    self._overrun(commit_ts, mut.table_id, tp)
                out.append(self._insert_row(view, old_info, codec, inserted[ii]))
                ii += 1
            elif tp == _UPDATE:
                if ui >= len(updated):
                    self._overrun(commit_ts, mut.table_id, tp)
                out.append(self._update(view, old_info, version, updated[ui]))
                ui += 1
            elif tp == _DELETE_ROW:
                if di >= len(deleted):
                    self._overrun(commit_ts, mut.table_id, tp)
                out.append(self._delete(view, deleted[di]))
                di += 1
            else:
                raise SchemaError(f"unknown mutation type {tp} in the transaction at commit_ts "
                                  f"{commit_ts}, table id {mut.table_id}")
            if len(out) >= size:
                yield out
                out = []
        if out:
            yield out

    # -- DDL ------------------------------------------------------------------------------
    def _ddl(self, binlog: bl.Binlog) -> Txn | None:
        query = binlog.ddl_query.decode("utf-8", "replace")
        if query.strip().lower().startswith("select setval"):
            return None
        job = self.job_of(binlog.ddl_job_id)
        if job is None:
            raise SchemaError(f"DDL job {binlog.ddl_job_id} of the binlog at commit_ts "
                              f"{binlog.commit_ts} ({query!r}) is not in the upstream's history")
        if binlog.ddl_schema_state == SchemaState.DELETE_ONLY:
            job.schema_state = SchemaState.DELETE_ONLY
        self.keeper.add_job(job)
        database = self._ddl_database(job)
        self.keeper.apply_until(job.schema_version)
        if job.schema_version == 0:
            log.warning("skipping failed DDL at commit_ts %s: %s", binlog.commit_ts, query)
            return None
        if job.type == ActionType.DROP_COLUMN and job.schema_state == SchemaState.DELETE_ONLY:
            return None
        if job.drainer_skips():
            log.info("skipping unfinished DDL job %s at commit_ts %s", job.id, binlog.commit_ts)
            return None
        log.info("DDL at commit_ts %s (skip it with ignore-txn-commit-ts = [%s]): %s",
                 binlog.commit_ts, binlog.commit_ts, query)
        table = job.table_name or (job.binlog.table_info.name.O if job.binlog.table_info else "")
        return Txn(binlog.commit_ts, ddl=DDL(database, table, query, binlog.commit_ts))

    def _ddl_database(self, job: Job) -> str:
        if job.schema_name:
            return job.schema_name
        if job.binlog.db_info is not None:
            return job.binlog.db_info.db_name.O
        return self.keeper.database_name(job.schema_id) or ""

    # -- DML ----------------------------------------------------------------------------
    def view(self, table_id: int) -> TableView:
        info = self.keeper.table(table_id)
        if info is None:
            raise SchemaError(f"table id {table_id} is unknown at schema version "
                              f"{self.keeper.schema_version}; the DDL history is incomplete")
        key = (table_id, id(info))
        view = self._views.get(key)
        if view is None or view.info is not info:
            database, _ = self.keeper.names(table_id)
            view = TableView.build(database, info)
            self._views[key] = view
        return view

    def _table(self, table_id: int, version: int) -> tuple | None:
        """``(view, old info, codec)`` for rows of ``table_id`` written at ``version``;
        None when its rows are dropped: the table id was truncated, or its database is in
        ``ignore_schemas``."""
        key = (table_id, version)
        try:
            return self._tables[key]
        except KeyError:
            pass
        entry = None
        if not self.keeper.is_truncated(table_id):
            view = self.view(table_id)
            if view.schema.database.lower() not in self.ignored_schemas and not (
                    self.filters and self.filters.skip_table(view.schema.database,
                                                             view.schema.table)):
                old_info = self.keeper.table_at(table_id, version) or view.info
                entry = (view, old_info, self._codec(view))
        if len(self._tables) >= 4096:
            self._tables.clear()
        self._tables[key] = entry
        return entry

    def _mutation(self, commit_ts: int, version: int, mut, out: list[DML]) -> None:
        table_id = mut.table_id
        entry = self._table(table_id, version)
        if entry is None:
            return
        view, old_info, codec = entry
        seq = mut.sequence
        inserted = mut.inserted_rows
        n = len(seq)
        if n == len(inserted) and ((n == 1 and seq[0] == _INSERT)
                                   or all(tp == _INSERT for tp in seq)):
            # the common shape: inserts only (rows of other kinds that the sequence does
            # not name are ignored, as the general walk below ignores them)
            insert = self._insert_row
            out.extend([insert(view, old_info, codec, row) for row in inserted])
            return
        updated, deleted = mut.updated_rows, mut.deleted_rows
        ii = ui = di = 0
        for tp in seq:
            if tp == _INSERT:
                if ii >= len(inserted):
                    self._overrun(commit_ts, table_id, tp)
                out.append(self._insert_row(view, old_info, codec, inserted[ii]))
                ii += 1
            elif tp == _UPDATE:
                if ui >= len(updated):
                    self._overrun(commit_ts, table_id, tp)
                out.append(self._update(view, old_info, version, updated[ui]))
                ui += 1
            elif tp == _DELETE_ROW:
                if di >= len(deleted):
                    self._overrun(commit_ts, table_id, tp)
                out.append(self._delete(view, deleted[di]))
                di += 1
            else:
                raise SchemaError(f"unknown mutation type {tp} in the transaction at commit_ts "
                                  f"{commit_ts}, table id {table_id}")

    @staticmethod
    def _overrun(commit_ts: int, table_id: int, tp: int):
        raise SchemaError(f"mutation sequence of table id {table_id} at commit_ts "
                          f"{commit_ts} names more rows of type {tp} than it carries")

    def _codec(self, view: TableView) -> _ViewCodec:
        """The view's column formatters and row plans, built once per view: the per-value
        type dispatch is paid per column, and common values are read straight from the
        row bytes (:mod:`tidb_binlog.codec.row_args`)."""
        entry = self._formatters.get(id(view))
        if entry is None or entry[0] is not view:
            writable_ids = [c.id for c in view.writable]
            cols = tuple((c.id, c.name.O, sql_arg_formatter(view.all_types[c.id], self.tz))
                         for c in view.writable)
            all_plan = ArgPlan(view.all_types, self.tz, writable_ids)
            targets = view.handle_targets
            int_handle = (targets[0][1].id if view.pk_len == 1 and len(targets) == 1
                          and all_plan.signed_int(targets[0][1].id) else None)
            codec = _ViewCodec(cols, all_plan, ArgPlan(view.writable_types, self.tz), int_handle)
            if len(self._formatters) > 4 * len(self._views) + 64:
                self._formatters.clear()  # views of old versions are gone
            entry = self._formatters[id(view)] = (view, codec)
        return entry[1]

    def _insert(self, view: TableView, old_info: TableInfo, row: bytes) -> DML:
        return self._insert_row(view, old_info, self._codec(view), row)

    def _insert_row(self, view: TableView, old_info: TableInfo, codec: _ViewCodec,
                    row: bytes) -> DML:
        int_handle = codec.int_handle
        if int_handle is not None:  # the common int PK: the handle is the column's value
            handle, args = decode_int_handle_args(row, codec.all_plan, self.tz)
            if handle is not None:
                if int_handle not in args:
                    args[int_handle] = handle
                return self._insert_dml(view, old_info, codec, args)
        handles, args = decode_insert_args(row, codec.all_plan, view.pk_len, self.tz)
        for i, col in view.handle_targets:
            if col.id not in args:
                ft = view.all_types[col.id]
                args[col.id] = codec.all_plan.columns[col.id][3](
                    unflatten(handles[i], ft, self.tz))
        return self._insert_dml(view, old_info, codec, args)

    def _insert_dml(self, view: TableView, old_info: TableInfo, codec: _ViewCodec,
                    args: dict) -> DML:
        try:  # every column present: the common case
            values = {name: args[col_id] for col_id, name, _ in codec.columns}
        except KeyError:
            values = {}
            for col_id, name, _ in codec.columns:
                if col_id in args:
                    values[name] = args[col_id]
                else:
                    values[name] = self._default(old_info, view.info.column_by_id(col_id))
        schema = view.schema
        return _dml_unchecked(schema.database, schema.table, _INSERT_DML, values, None, schema)

    def _update(self, view: TableView, old_info: TableInfo, version: int, row: bytes) -> DML:
        codec = self._codec(view)
        old, new = decode_old_and_new_args(row, codec.writable_plan, self.tz)
        if len(new) < len(view.writable):
            if not self.keeper.can_append_default(view.info.id, version):
                missing = [c.name.O for c in view.writable if c.id not in new]
                raise SchemaError(
                    f"update row of {view.schema.qualified_name} lacks columns {missing} and no "
                    f"DDL is in flight (row schema version {version}, table last changed at "
                    f"{self.keeper.table_version.get(view.info.id)})")
        values, old_values = {}, {}
        for col_id, name, _ in codec.columns:
            if col_id in new:
                values[name] = new[col_id]
                old_values[name] = old[col_id]
            else:
                values[name] = old_values[name] = self._default(
                    old_info, view.info.column_by_id(col_id))
        return DML.unchecked(view.schema.database, view.schema.table, DMLType.UPDATE, values,
                             old_values, schema=view.schema)

    def _delete(self, view: TableView, row: bytes) -> DML:
        codec = self._codec(view)
        args = decode_row_args(row, codec.all_plan, self.tz)
        values = {name: args[col_id] for col_id, name, _ in codec.columns if col_id in args}
        if not values:
            raise SchemaError(f"deleted row of {view.schema.qualified_name} holds none of its "
                              f"columns {list(view.schema.columns)}; the row does not match the "
                              "table schema")
        return DML.unchecked(view.schema.database, view.schema.table, DMLType.DELETE, values,
                             schema=view.schema)

    def _default(self, old_info: TableInfo, col: ColumnInfo):
        source = old_info.column_by_id(col.id) or col
        return default_value(source, self.tz)


def default_value(col: ColumnInfo, tz: datetime.tzinfo = UTC):
    """TiDB's ``getDefaultOrZeroValue`` as a SQL argument for a column missing from a row.

    The origin default when there is one (TIMESTAMP text is UTC, converted to
    ``tz``; ENUM/SET names become their index/bitmask; BIT from its bytes); else
    NULL for a nullable column; else the type's zero value. (TiDB sends ENUM 0
    for a NOT NULL ENUM without default, which strict MySQL rejects; we send the
    first member, which is what MySQL itself would store.)
    """
    ft = col.type
    tp = ft.tp
    if col.origin_default_bit is not None and tp == m.TYPE_BIT:
        return int.from_bytes(base64.b64decode(col.origin_default_bit), "big")
    value = col.origin_default
    if value is not None:
        if tp == m.TYPE_TIMESTAMP and isinstance(value, str) and value != "CURRENT_TIMESTAMP":
            packed = parse_time_text(value)
            if packed and tz is not UTC:
                packed = from_utc(packed, tz)
            return format_time(packed, tp, ft.decimal if ft.decimal > 0 else 0)
        if tp == m.TYPE_ENUM and isinstance(value, str):
            elems = [e.lower() for e in ft.elems or ()]
            return elems.index(value.lower()) + 1 if value.lower() in elems else 0
        if tp == m.TYPE_SET and isinstance(value, str):
            elems = [e.lower() for e in ft.elems or ()]
            mask = 0
            for name in filter(None, value.lower().split(",")):
                if name in elems:
                    mask |= 1 << elems.index(name)
            return mask
        return value
    if not ft.has(m.NOT_NULL_FLAG):
        return None
    return _zero_value(ft)


def _zero_value(ft):
    tp = ft.tp
    if tp in m.INTEGER_TYPES or tp in (m.TYPE_YEAR, m.TYPE_BIT, m.TYPE_SET):
        return 0
    if tp in (m.TYPE_FLOAT, m.TYPE_DOUBLE):
        return 0.0
    if tp == m.TYPE_NEWDECIMAL:
        frac = ft.decimal if ft.decimal > 0 else 0
        return str(Decimal(0).quantize(Decimal(1).scaleb(-frac))) if frac else "0"
    if tp in m.TIME_TYPES:
        return format_time(0, tp, ft.decimal if ft.decimal > 0 else 0)
    if tp == m.TYPE_DURATION:
        return "00:00:00"
    if tp == m.TYPE_ENUM:
        return 1 if ft.elems else 0
    if tp == m.TYPE_JSON:
        return "null"
    if ft.charset == m.BINARY_CHARSET:
        return b""
    return ""
