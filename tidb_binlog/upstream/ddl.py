"""DDL as TiDB runs it: a job, a schema version, a history entry and DDL binlogs.

``run_ddl(upstream, sql, database)``:

1. :func:`~tidb_binlog.upstream.ddl_parse.parse_ddl` classifies the statement
   (UnsupportedDDL before anything is touched). DDLs are serialised by a MariaDB
   named lock (TiDB's single DDL owner).
2. ``IF [NOT] EXISTS`` that finds nothing to do runs on MariaDB but makes no job
   (TiDB only warns).
3. MariaDB executes the statement. A new table whose handle is TiDB's hidden row
   id gets the INVISIBLE ``_tidb_rowid`` auto-increment column.
4. One *binlog round* per TiDB binlog: inside one catalog transaction the status
   row is inserted, the schema version bumped, dbs/tables updated and (last round)
   the finished job stored in ``ddl_history`` with state SYNCED; the Prewrite binlog
   (``ddl_query``, ``ddl_job_id``, ``ddl_schema_state``, no prewrite value) is
   written; commit_ts taken; COMMIT; Commit binlog sent asynchronously. A failed
   Prewrite rolls the round back and retries it (TiDB's owner retries the job
   until a Commit), up to three times.
5. DROP COLUMN first writes the round TiDB writes when the column reaches
   DeleteOnly (``ddl_schema_state = 1``, column state DELETE_ONLY in the catalog),
   then drops the column in MariaDB, then the final round.

The final binlog's ``ddl_schema_state`` is the job's ``schema_state``: PUBLIC for
creates and adds, NONE for drops, as TiDB leaves them.
"""

from __future__ import annotations

import time

import pymysql

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_key
from tidb_binlog.errors import SchemaError, UnsupportedDDL, UpstreamError
from tidb_binlog.model import (
    ActionType,
    CIStr,
    DBInfo,
    HistoryInfo,
    Job,
    JobState,
    SchemaState,
    TableInfo,
)
from tidb_binlog.upstream.catalog import CATALOG_DB, Catalog
from tidb_binlog.upstream.core import connect, translate
from tidb_binlog.upstream.ddl_parse import DDLStatement, parse_ddl
from tidb_binlog.upstream.introspect import build_table_info, needs_hidden_rowid
from tidb_binlog.upstream.rows import quote_id

__all__ = ["run_ddl", "history_job_key", "DDL_LOCK", "DDL_ROUND_ATTEMPTS"]

DDL_LOCK = "tidb_binlog_upstream.ddl_owner"
DDL_LOCK_TIMEOUT_S = 120
DDL_ROUND_ATTEMPTS = 3
_DROPS = {ActionType.DROP_SCHEMA, ActionType.DROP_TABLE, ActionType.DROP_COLUMN,
          ActionType.DROP_INDEX, ActionType.DROP_TABLE_PARTITION}


def history_job_key(job_id: int) -> bytes:
    """TiDB's meta key of a history job (reference §5.3), used as the DDL prewrite_key."""
    def enc_bytes(b: bytes) -> bytes:
        return encode_key([Datum.bytes(b)])[1:]  # drop the bytesFlag

    return (b"m" + enc_bytes(b"DDLJobHistory") + (0x68).to_bytes(8, "big")
            + enc_bytes(job_id.to_bytes(8, "big")))


class _Runner:
    def __init__(self, upstream, stmt: DDLStatement, database: str | None):
        self.up = upstream
        self.stmt = stmt
        self.db = stmt.schema or database
        self.conn = connect(upstream.params, autocommit=True)
        self.cur = self.conn.cursor()
        self.start_ts = upstream.get_ts()

    def sql(self, sql: str, args=None) -> None:
        try:
            self.cur.execute(sql, args)
        except pymysql.err.MySQLError as exc:
            raise translate(exc, sql) from exc

    def execute_user_ddl(self) -> None:
        if self.db:
            self.sql(f"USE {quote_id(self.db)}")
        self.sql(self.stmt.query)

    def round(self, job: Job, schema_state: int, apply, *, final: bool) -> int:
        """One binlog round; ``apply(cur, version)`` updates the catalog. Returns the version."""
        last: Exception | None = None
        for attempt in range(DDL_ROUND_ATTEMPTS):
            start_ts = self.up.get_ts()
            try:
                self.conn.begin()
                self.sql(f"INSERT INTO {CATALOG_DB}.txn_status VALUES (%s, 0)", (start_ts,))
                version = Catalog.bump_version(self.cur)
                apply(self.cur, version)
                if final:
                    job.binlog.schema_version = version
                    job.binlog.finished_ts = start_ts
                    Catalog.add_job(self.cur, job)
            except BaseException:
                self.conn.rollback()
                raise
            key = history_job_key(job.id)
            pre = bl.new_binlog(bl.BinlogType.PREWRITE, start_ts, 0, prewrite_key=key,
                                ddl_query=job.query.encode(), ddl_job_id=job.id,
                                ddl_schema_state=schema_state)
            try:
                if self.up.faults.take("fail_prewrite"):
                    raise UpstreamError("fault knob fail_prewrite")
                self.up.writer.write_binlog(pre)
            except Exception as exc:  # TiDB's owner retries the job round
                last = exc
                self.conn.rollback()
                self.up.send_finish(bl.new_binlog(
                    bl.BinlogType.ROLLBACK, start_ts, 0, prewrite_key=key,
                    ddl_query=job.query.encode(), ddl_job_id=job.id, ddl_schema_state=schema_state))
                time.sleep(0.05 * (attempt + 1))
                continue
            commit_ts = self.up.get_ts()
            self.sql(f"UPDATE {CATALOG_DB}.txn_status SET commit_ts=%s WHERE start_ts=%s",
                     (commit_ts, start_ts))
            self.conn.commit()
            if not self.up.faults.take("drop_commit_binlog"):
                self.up.send_finish(bl.new_binlog(
                    bl.BinlogType.COMMIT, start_ts, commit_ts, prewrite_key=key,
                    ddl_query=job.query.encode(), ddl_job_id=job.id, ddl_schema_state=schema_state))
            return version
        raise UpstreamError(f"DDL job {job.id} ({job.query[:100]!r}) executed in MariaDB but its "
                            f"binlog could not be written after {DDL_ROUND_ATTEMPTS} attempts: "
                            f"{last}; the upstream catalog is behind MariaDB for this table")

    def close(self) -> None:
        self.conn.close()


def _table_info(r: _Runner, db: str, name: str, table_id: int, previous: TableInfo | None,
                renames=None) -> TableInfo:
    return build_table_info(r.cur, db, name, table_id, alloc_id=lambda: Catalog.alloc_ids(r.cur),
                            previous=previous, renames=renames,
                            clustered_index=r.up.clustered_index)


def run_ddl(upstream, sql: str, database: str | None = None) -> Job | None:
    stmt = parse_ddl(sql)
    r = _Runner(upstream, stmt, database)
    try:
        r.sql("SELECT GET_LOCK(%s, %s)", (DDL_LOCK, DDL_LOCK_TIMEOUT_S))
        if r.cur.fetchone()[0] != 1:
            raise UpstreamError(f"timed out after {DDL_LOCK_TIMEOUT_S}s waiting for the DDL owner "
                                "lock held by another upstream DDL")
        snap = upstream.reload(r.cur)
        job = _run(r, stmt, snap)
        upstream.reload(r.cur)
        return job
    finally:
        try:
            r.sql("DO RELEASE_LOCK(%s)", (DDL_LOCK,))
        finally:
            r.close()


def _new_job(r: _Runner, stmt: DDLStatement, schema_id: int, table_id: int, db: str,
             table: str) -> Job:
    return Job(id=0, type=stmt.action, schema_id=schema_id, table_id=table_id, schema_name=db,
               table_name=table, state=JobState.SYNCED,
               schema_state=SchemaState.NONE if stmt.action in _DROPS else SchemaState.PUBLIC,
               query=stmt.query, start_ts=r.start_ts, real_start_ts=r.start_ts,
               binlog=HistoryInfo())


def _with_job_id(cur, job: Job) -> None:
    if job.id == 0:
        job.id = Catalog.alloc_ids(cur)


def _run(r: _Runner, stmt: DDLStatement, snap) -> Job | None:
    kind = stmt.kind
    if kind in ("create_schema", "drop_schema"):
        exists = stmt.schema in snap.dbs
        if stmt.if_exists and exists == (kind == "create_schema"):
            r.sql(stmt.query)
            return None
        if kind == "drop_schema" and not exists:
            raise SchemaError(f"database {stmt.schema!r} is unknown to the upstream catalog")
        r.sql(stmt.query)
        old = snap.dbs.get(stmt.schema)
        job = _new_job(r, stmt, old.id if old else 0, 0, stmt.schema, "")

        def apply(cur, version):
            _with_job_id(cur, job)
            if kind == "create_schema":
                cur.execute("SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM "
                            "information_schema.SCHEMATA WHERE SCHEMA_NAME=%s", (stmt.schema,))
                cs, coll = cur.fetchone()
                info = DBInfo(id=Catalog.alloc_ids(cur), db_name=CIStr(stmt.schema), charset=cs,
                              collate=coll)
                Catalog.put_db(cur, info)
                job.schema_id = info.id
            else:
                info = old
                info.state = SchemaState.NONE
                Catalog.drop_db(cur, old.id)
            job.binlog.db_info = info
            job.raw_args = [info.to_obj()] if kind == "create_schema" else None

        r.round(job, job.schema_state, apply, final=True)
        return job

    db = r.db
    if not db:
        raise SchemaError(f"{stmt.query[:100]!r} names no database and none is selected")
    dbinfo = snap.db(db)
    name = stmt.table
    old = snap.tables.get((db, name))
    if kind == "create_table":
        if old is not None and stmt.if_exists:
            r.execute_user_ddl()
            return None
        r.execute_user_ddl()
        probe = _table_info(r, db, name, 0, None)
        if needs_hidden_rowid(probe):
            if any(c.type.flag & 512 for c in probe.cols):  # AUTO_INCREMENT
                r.sql(f"DROP TABLE {quote_id(db)}.{quote_id(name)}")
                raise UnsupportedDDL(
                    f"table {db}.{name} has an AUTO_INCREMENT column but no clustered primary key: "
                    "the emulator keeps TiDB's hidden _tidb_rowid in an auto-increment column, and "
                    "MariaDB allows only one; make that column the primary key", query=stmt.query)
            r.sql(f"ALTER TABLE {quote_id(db)}.{quote_id(name)} ADD COLUMN `_tidb_rowid` BIGINT "
                  "NOT NULL AUTO_INCREMENT INVISIBLE, ADD UNIQUE KEY `_tidb_rowid` (`_tidb_rowid`)")
    elif old is None:
        if kind == "drop_table" and stmt.if_exists:
            r.execute_user_ddl()
            return None
        raise SchemaError(f"table {db}.{name} is unknown to the upstream catalog")
    elif kind != "drop_column":
        r.execute_user_ddl()

    job = _new_job(r, stmt, dbinfo.id, old.id if old else 0, db, name)

    if kind == "drop_column":
        col = old.column_by_name(stmt.column)
        if col is None:
            raise SchemaError(f"column {stmt.column!r} does not exist in {db}.{name}")
        delete_only = old.clone()
        delete_only.column_by_name(stmt.column).state = SchemaState.DELETE_ONLY

        def apply_delete_only(cur, version):
            _with_job_id(cur, job)
            Catalog.put_table(cur, dbinfo.id, delete_only)

        r.round(job, SchemaState.DELETE_ONLY, apply_delete_only, final=False)
        r.up.reload(r.cur)
        r.execute_user_ddl()

    def apply(cur, version):
        _with_job_id(cur, job)
        if kind == "create_table":
            info = _table_info(r, db, name, Catalog.alloc_ids(cur), None)
            job.table_id = info.id
            Catalog.put_table(cur, dbinfo.id, info)
        elif kind == "drop_table":
            info = old.clone()
            info.state = SchemaState.NONE
            Catalog.drop_table(cur, old.id)
        elif kind == "truncate_table":
            fresh = old.clone()
            fresh.partition = None
            info = _table_info(r, db, name, Catalog.alloc_ids(cur), fresh)
            Catalog.drop_table(cur, old.id)
            Catalog.put_table(cur, dbinfo.id, info)
            job.raw_args = [info.id]
        elif kind == "rename_table":
            new_db = snap.db(stmt.new_schema or db)
            info = old.clone()
            info.name = CIStr(stmt.new_table)
            Catalog.put_table(cur, new_db.id, info)
            job.schema_id = new_db.id
            job.raw_args = [dbinfo.id, stmt.new_table]
        else:
            previous = old.clone()
            if kind == "truncate_partition" and previous.partition:
                gone = {p.lower() for p in stmt.partitions}
                previous.partition.definitions = [d for d in previous.partition.definitions
                                                  if d.name.L not in gone]
            renames = {stmt.new_column: stmt.column} if stmt.new_column else None
            info = _table_info(r, db, name, old.id, previous, renames)
            Catalog.put_table(cur, dbinfo.id, info)
        job.binlog.table_info = info

    r.round(job, job.schema_state, apply, final=True)
    return job
