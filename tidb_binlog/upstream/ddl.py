"""DDL as TiDB runs it: a job, a schema version, a history entry and DDL binlogs.

``run_ddl(upstream, sql, database)``:

1. :func:`~tidb_binlog.upstream.ddl_parse.parse_ddl` classifies the statement
   (UnsupportedDDL before anything is touched). DDLs are serialised by a MariaDB
   named lock (TiDB's single DDL owner).
2. ``IF [NOT] EXISTS`` that finds nothing to do runs on MariaDB but makes no job
   (TiDB only warns).
3. MariaDB executes the statement. A new table whose handle is TiDB's hidden row
   id gets the INVISIBLE ``_tidb_rowid`` auto-increment column.
4. One *binlog round* per TiDB binlog: inside one catalog transaction the schema
   version is bumped (first: see "Locks" below), the status row inserted,
   dbs/tables updated and (last round) the finished job stored in ``ddl_history``
   with state SYNCED; the Prewrite binlog (``ddl_query``, ``ddl_job_id``,
   ``ddl_schema_state``, no prewrite value) is written; commit_ts taken; COMMIT;
   Commit binlog sent asynchronously.
5. DROP COLUMN first writes the round TiDB writes when the column reaches
   DeleteOnly (``ddl_schema_state = 1``, column state DELETE_ONLY in the catalog),
   then drops the column in MariaDB, then the final round.

**The job queue.** A job that committed a round but is not finished (DROP COLUMN
after its DeleteOnly round) is in the catalog's ``ddl_jobs`` queue, put there by
that round's catalog transaction and taken out by the final round's. Its DeleteOnly
binlog is already with the pumps, so the drainer waits for the job id in the
history: as TiDB's DDL owner resumes a queued job (after a restart, or as the next
owner), whoever next holds the DDL owner lock finishes queued jobs first
(:func:`resume_queued`: every ``run_ddl`` before its own statement, and
``Upstream.resume_ddl_jobs()``), with the same job id.

**Atomicity.** MariaDB runs the statement before the catalog records it (the
TableInfo is read back from information_schema), so a round that cannot be
recorded would leave MariaDB with a schema no binlog announced. A round is
therefore retried as a whole, as TiDB's DDL owner retries a job round: a deadlock
(1213) or lock wait timeout (1205) in the catalog transaction, and a Prewrite no
pump took, roll it back (with a Rollback binlog after a written-off Prewrite) and
run it again after a backoff, up to :data:`DDL_ROUND_ATTEMPTS` times. When every
attempt fails the statement is undone in MariaDB where an inverse exists (CREATE
DATABASE/TABLE → DROP, ADD COLUMN/INDEX → DROP, RENAME → RENAME back) and
:class:`~tidb_binlog.errors.DDLNotRecorded` is raised with ``undone=True``; anything
else raises it with ``undone=False``, naming the table and the statement that
repairs the catalog.

**Locks.** DML transactions take a share lock on the catalog's schema-version row
before any row lock (their prologue; ``Txn.query`` too for locking reads), and a
round takes the exclusive lock on that row as its first statement, holding nothing
else while it waits. Before that order, a transaction that had locked rows through
a plain ``query(... FOR UPDATE)`` queued its share lock behind a waiting round while
another transaction holding the share lock waited for those rows: a three-way
deadlock in which InnoDB chose the round, the lightest transaction, as the victim
after MariaDB had already run the DDL.

The final binlog's ``ddl_schema_state`` is the job's ``schema_state``: PUBLIC for
creates and adds, NONE for drops, as TiDB leaves them.
"""

from __future__ import annotations

import logging
import time

import pymysql

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_key
from tidb_binlog.errors import (
    DDLNotRecorded,
    PumpUnavailable,
    TxnConflict,
    UpstreamError,
    UpstreamSchemaError,
    UpstreamUnsupportedDDL,
)
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
from tidb_binlog.upstream.conn import CONFLICT_CODES, connect, translate
from tidb_binlog.upstream.ddl_parse import DDLStatement, parse_ddl
from tidb_binlog.upstream.introspect import build_table_info, needs_hidden_rowid
from tidb_binlog.upstream.rows import quote_id
from tidb_binlog.upstream.txn import prewrite_error

__all__ = ["run_ddl", "resume_ddl_jobs", "history_job_key", "undo_sql", "DDL_LOCK",
           "DDL_ROUND_ATTEMPTS", "STEP_DROP_COLUMN"]

log = logging.getLogger(__name__)

DDL_LOCK = "tidb_binlog_upstream.ddl_owner"
DDL_LOCK_TIMEOUT_S = 120
# Attempts per binlog round and the backoff between them (doubling, capped): about
# 6 s of retrying in all, longer than a burst of conflicting DML or a pump restart.
DDL_ROUND_ATTEMPTS = 8
DDL_ROUND_BACKOFF_S = 0.05
DDL_ROUND_BACKOFF_MAX_S = 2.0
# ddl_jobs.step of a DROP COLUMN whose DeleteOnly round committed: drop the column in
# MariaDB (if still there), then the final round.
STEP_DROP_COLUMN = "drop_column"
_DROPS = {ActionType.DROP_SCHEMA, ActionType.DROP_TABLE, ActionType.DROP_COLUMN,
          ActionType.DROP_INDEX, ActionType.DROP_TABLE_PARTITION}


def history_job_key(job_id: int) -> bytes:
    """TiDB's meta key of a history job (reference §5.3), used as the DDL prewrite_key."""
    def enc_bytes(b: bytes) -> bytes:
        return encode_key([Datum.bytes(b)])[1:]  # drop the bytesFlag

    return (b"m" + enc_bytes(b"DDLJobHistory") + (0x68).to_bytes(8, "big")
            + enc_bytes(job_id.to_bytes(8, "big")))


class _Runner:
    def __init__(self, upstream, stmt: DDLStatement | None, database: str | None):
        self.up = upstream
        self.stmt = stmt
        self.db = (stmt.schema if stmt else None) or database
        self.conn = connect(upstream.params, autocommit=True)
        self.cur = self.conn.cursor()
        self.start_ts = upstream.get_ts()
        self.executed = False  # MariaDB ran the user's statement (undo it if not recorded)
        self.queued: Job | None = None  # this statement's job, queued by a committed round

    def sql(self, sql: str, args=None) -> None:
        try:
            self.cur.execute(sql, args)
        except pymysql.err.MySQLError as exc:
            raise translate(exc, sql) from exc

    def execute_user_ddl(self) -> None:
        if self.db:
            self.sql(f"USE {quote_id(self.db)}")
        self.sql(self.stmt.query)
        self.executed = True

    def round(self, job: Job, schema_state: int, apply, *, final: bool) -> int:
        """One binlog round; ``apply(cur, version)`` updates the catalog. Returns the version.

        Retried as a whole (see the module docstring); raises :class:`_RoundFailed`
        when every attempt failed, so :func:`run_ddl` can undo the statement."""
        job_id = job.id
        last: Exception | None = None
        for attempt in range(DDL_ROUND_ATTEMPTS):
            if attempt:
                time.sleep(min(DDL_ROUND_BACKOFF_S * 2 ** (attempt - 1), DDL_ROUND_BACKOFF_MAX_S))
            job.id = job_id  # an id allocated by a rolled-back attempt was rolled back too
            start_ts = self.up.get_ts()
            try:
                version = self._catalog_txn(job, start_ts, apply, final)
            except (pymysql.err.MySQLError, TxnConflict) as exc:
                self._rollback()
                code = getattr(exc, "code", None) or (exc.args[0] if exc.args else None)
                if code not in CONFLICT_CODES:
                    raise _RoundFailed(exc) from exc
                last = exc
                log.warning("DDL job round of %r: catalog transaction lost a lock conflict "
                            "(%s), attempt %d of %d", job.query[:100], exc, attempt + 1,
                            DDL_ROUND_ATTEMPTS)
                continue
            except BaseException:
                self._rollback()
                raise
            key = history_job_key(job.id)

            def finish(tp: int, commit_ts: int, start_ts=start_ts, key=key):
                return bl.new_binlog(tp, start_ts, commit_ts, prewrite_key=key,
                                     ddl_query=job.query.encode(), ddl_job_id=job.id,
                                     ddl_schema_state=schema_state)

            pre = bl.new_binlog(bl.BinlogType.PREWRITE, start_ts, 0, prewrite_key=key,
                                ddl_query=job.query.encode(), ddl_job_id=job.id,
                                ddl_schema_state=schema_state)
            try:
                if self.up.faults.take("fail_prewrite"):
                    raise PumpUnavailable(f"fault knob fail_prewrite: DDL job {job.id}")
                self.up.writer.write_binlog(pre)
            except Exception as exc:  # TiDB's owner retries the job round
                last = prewrite_error(exc, f"DDL job {job.id}")
                self._rollback()
                self.up.send_finish(finish(bl.BinlogType.ROLLBACK, 0))
                log.warning("DDL job round of %r: prewrite failed (%s), attempt %d of %d",
                            job.query[:100], exc, attempt + 1, DDL_ROUND_ATTEMPTS)
                continue
            commit_ts = self.up.get_ts()
            try:
                self.cur.execute(f"UPDATE {CATALOG_DB}.txn_status SET commit_ts=%s "
                                 "WHERE start_ts=%s", (commit_ts, start_ts))
                self.conn.commit()
            except pymysql.err.MySQLError as exc:  # the connection broke: did COMMIT land?
                status = self.up.meta().txn_status(start_ts)
                if status.state != status.COMMITTED:
                    if status.state == status.ROLLED_BACK:
                        self.up.send_finish(finish(bl.BinlogType.ROLLBACK, 0))
                    raise _RoundFailed(translate(exc, "COMMIT")) from exc
            if not self.up.faults.take("drop_commit_binlog"):
                self.up.send_finish(finish(bl.BinlogType.COMMIT, commit_ts))
            return version
        raise _RoundFailed(last)

    def _catalog_txn(self, job: Job, start_ts: int, apply, final: bool) -> int:
        """The round's catalog changes, left uncommitted. The schema-version row is
        locked first, so the round holds no other lock while it waits for running
        transactions' share locks on it (see "Locks" in the module docstring)."""
        self.conn.begin()
        cur = self.cur
        version = Catalog.bump_version(cur)
        cur.execute(f"INSERT INTO {CATALOG_DB}.txn_status VALUES (%s, 0)", (start_ts,))
        apply(cur, version)
        if final:
            job.binlog.schema_version = version
            job.binlog.finished_ts = start_ts
            Catalog.dequeue_job(cur, job.id)  # a job is queued or in the history, never both
            Catalog.add_job(cur, job)
        if self.up.faults.take("ddl_round_conflict"):
            raise pymysql.err.OperationalError(
                1213, "fault knob ddl_round_conflict: Deadlock found when trying to get lock")
        return version

    def _rollback(self) -> None:
        try:
            self.conn.rollback()
        except pymysql.err.MySQLError:
            pass  # the connection is gone: MariaDB rolls the transaction back itself

    def undo(self) -> str | None:
        """Revert the user's statement in MariaDB; return the SQL run, None without an
        inverse. Runs on this connection (reopened if it broke), outside any round."""
        sql = undo_sql(self.stmt, self.db)
        if sql is None:
            return None
        try:
            self.conn.ping()
        except pymysql.err.Error:  # broken by the failure: undo on a new connection
            self.close()
            self.conn = connect(self.up.params, autocommit=True)
            self.cur = self.conn.cursor()
        self.sql(sql)
        return sql

    def close(self) -> None:
        try:
            self.conn.close()
        except pymysql.err.Error:
            pass  # already closed or broken: nothing left to release


class _RoundFailed(Exception):
    """Every attempt of a binlog round failed (internal: run_ddl turns it into
    DDLNotRecorded after trying to undo the statement)."""

    def __init__(self, last: BaseException | None):
        super().__init__(str(last))
        self.last = last


def undo_sql(stmt: DDLStatement, database: str | None) -> str | None:
    """The statement that reverts ``stmt`` in MariaDB, or None when there is none (a drop
    or truncate lost data; MODIFY would need the old definition)."""
    db = stmt.schema or database
    kind = stmt.kind
    if kind == "create_schema":
        return f"DROP DATABASE {quote_id(stmt.schema)}"
    if not db or not stmt.table:
        return None
    table = f"{quote_id(db)}.{quote_id(stmt.table)}"
    if kind == "create_table":
        return f"DROP TABLE {table}"
    if kind == "add_column":
        return f"ALTER TABLE {table} DROP COLUMN {quote_id(stmt.column)}"
    if kind == "add_index":
        return f"ALTER TABLE {table} DROP INDEX {quote_id(stmt.index)}"
    if kind == "rename_table":
        new = f"{quote_id(stmt.new_schema or db)}.{quote_id(stmt.new_table)}"
        return f"RENAME TABLE {new} TO {table}"
    return None


def _repair_hint(stmt: DDLStatement, table: str) -> str:
    """How to bring the catalog back in line with MariaDB after a DDL that ran there
    but was not recorded and has no inverse."""
    kind = stmt.kind
    if kind == "drop_schema":
        return (f"run Upstream.ddl('DROP DATABASE IF EXISTS {quote_id(stmt.schema)}'): MariaDB "
                "does nothing and the job is recorded")
    if kind == "drop_table":
        return (f"run Upstream.ddl('DROP TABLE IF EXISTS {table}'): MariaDB does nothing and "
                "the job is recorded")
    if kind == "drop_column":  # its job is queued once MariaDB dropped the column
        return "run Upstream.resume_ddl_jobs(): it finishes the queued job with its own id"
    if kind in ("truncate_table", "truncate_partition") or (
            kind == "modify_column" and not stmt.new_column):
        return "run the same statement again: MariaDB repeats it harmlessly and the job is recorded"
    return (f"drop {table} through Upstream.ddl and create it again (a downstream replicates "
            "both), or start from a fresh upstream database")


def _table_info(r: _Runner, db: str, name: str, table_id: int, previous: TableInfo | None,
                renames=None) -> TableInfo:
    return build_table_info(r.cur, db, name, table_id, alloc_id=lambda: Catalog.alloc_ids(r.cur),
                            previous=previous, renames=renames,
                            clustered_index=r.up.clustered_index)


def _take_owner_lock(r: _Runner) -> None:
    r.sql("SELECT GET_LOCK(%s, %s)", (DDL_LOCK, DDL_LOCK_TIMEOUT_S))
    if r.cur.fetchone()[0] != 1:
        raise UpstreamError(f"timed out after {DDL_LOCK_TIMEOUT_S}s waiting for the DDL owner "
                            "lock held by another upstream DDL")


def _release_owner_lock(r: _Runner) -> None:
    try:
        r.sql("DO RELEASE_LOCK(%s)", (DDL_LOCK,))
    except UpstreamError as exc:  # a broken connection: its named lock went with it
        log.warning("releasing the DDL owner lock failed (%s); closing the connection "
                    "releases it", exc)
    finally:
        r.close()


def run_ddl(upstream, sql: str, database: str | None = None) -> Job | None:
    stmt = parse_ddl(sql)
    r = _Runner(upstream, stmt, database)
    try:
        _take_owner_lock(r)
        resume_queued(r, before=stmt.query)  # the owner finishes queued jobs first
        snap = upstream.reload(r.cur)
        try:
            job = _run(r, stmt, snap)
        except _RoundFailed as failed:
            raise _not_recorded(r, failed.last, rounds_failed=True) from failed.last
        except Exception as exc:  # e.g. a column type the catalog cannot model
            if not r.executed and r.queued is None:
                raise
            raise _not_recorded(r, exc, rounds_failed=False) from exc
        upstream.reload(r.cur)
        return job
    finally:
        _release_owner_lock(r)


def resume_ddl_jobs(upstream) -> list[Job]:
    """Take the DDL owner lock and finish every queued job (see "The job queue" in the
    module docstring); return the jobs finished, oldest first."""
    r = _Runner(upstream, None, None)
    try:
        _take_owner_lock(r)
        return resume_queued(r)
    finally:
        _release_owner_lock(r)


def resume_queued(r: _Runner, before: str | None = None) -> list[Job]:
    """Finish the queued jobs, oldest first, on ``r`` (which holds the DDL owner lock).

    A job that still cannot be finished stays queued and raises
    :class:`~tidb_binlog.errors.DDLNotRecorded` (``undone=False``); the statement
    ``before`` (the caller's own DDL) is then not run, as TiDB runs jobs in queue order."""
    done = []
    try:
        queued = Catalog.queued_jobs(r.cur)
    except pymysql.err.MySQLError as exc:
        raise translate(exc, f"reading {CATALOG_DB}.ddl_jobs") from exc
    for job, step in queued:
        try:
            _finish_queued(r, job, step)
        except (_RoundFailed, UpstreamError, pymysql.err.MySQLError) as exc:
            last = (exc.last if isinstance(exc, _RoundFailed) else
                    translate(exc, job.query) if isinstance(exc, pymysql.err.MySQLError) else exc)
            log.error("queued DDL job %d (%r) could not be finished: %s", job.id,
                      job.query[:200], last)
            not_run = f"; {before[:200]!r} was not run" if before else ""
            raise DDLNotRecorded(
                f"DDL job {job.id} ({job.query[:200]!r}) is queued unfinished and could not be "
                f"finished ({type(last).__name__}: {last}); it stays queued, and the next "
                "Upstream.ddl() or Upstream.resume_ddl_jobs() finishes it with the same job "
                f"id{not_run}", sql=job.query, code=getattr(last, "code", None),
                table=f"{quote_id(job.schema_name)}.{quote_id(job.table_name)}",
                undone=False) from last
        done.append(job)
    return done


def _finish_queued(r: _Runner, job: Job, step: str) -> None:
    """Finish one queued job with its own id: for DROP COLUMN in DeleteOnly, drop the
    column in MariaDB if it is still there, then write the final round."""
    if step != STEP_DROP_COLUMN:
        raise UpstreamError(f"DDL job {job.id} in {CATALOG_DB}.ddl_jobs has the step {step!r}, "
                            "which this version cannot finish; finish it with the version that "
                            "queued it")
    stmt = parse_ddl(job.query)
    db, name = job.schema_name, job.table_name
    old = r.up.reload(r.cur).tables.get((db, name))
    if old is None or old.id != job.table_id:
        raise UpstreamSchemaError(f"queued DDL job {job.id} ({job.query[:200]!r}): table "
                                  f"{db}.{name} (id {job.table_id}) is not in the upstream catalog")
    r.sql(f"ALTER TABLE {quote_id(db)}.{quote_id(name)} DROP COLUMN IF EXISTS "
          f"{quote_id(stmt.column)}")

    def apply(cur, version):
        info = _table_info(r, db, name, old.id, old.clone())
        Catalog.put_table(cur, job.schema_id, info)
        job.binlog.table_info = info

    r.round(job, job.schema_state, apply, final=True)
    r.up.reload(r.cur)
    log.warning("resumed DDL job %d (%r): its DeleteOnly round had committed, not its final "
                "round; the column is dropped in MariaDB and the job is in the history",
                job.id, job.query[:200])


def _not_recorded(r: _Runner, last: BaseException | None, *,
                  rounds_failed: bool) -> DDLNotRecorded:
    """Undo the statement where an inverse exists; the error saying what happened."""
    stmt = r.stmt
    code = getattr(last, "code", None)
    table = (f"{quote_id(r.db)}.{quote_id(stmt.table)}" if r.db and stmt.table
             else quote_id(stmt.schema or r.db or "?"))
    how = (f"after {DDL_ROUND_ATTEMPTS} attempts " if rounds_failed else "")
    if r.queued is not None:  # DROP COLUMN after its DeleteOnly round: the job is queued
        log.error("DDL %r (job %d) not finished; it stays queued", stmt.query[:200], r.queued.id)
        return DDLNotRecorded(
            f"DDL {stmt.query[:200]!r} wrote its DeleteOnly round (job {r.queued.id}, already "
            f"with the pumps) but its final round could not be recorded {how}"
            f"({type(last).__name__}: {last}); the job stays queued in the upstream catalog "
            "and the next Upstream.ddl() or Upstream.resume_ddl_jobs() finishes it with the "
            "same job id (drops the column in MariaDB if it is still there, writes the final "
            "round); do not run the statement again, that would be a new job",
            sql=stmt.query, code=code, table=table, undone=False)
    why = (f"DDL {stmt.query[:200]!r} ran in MariaDB, but its job and binlogs could not be "
           f"recorded {how}({type(last).__name__}: {last})")
    if not r.executed:  # DROP COLUMN's DeleteOnly round: MariaDB is changed after it
        return DDLNotRecorded(
            f"DDL {stmt.query[:200]!r} could not be recorded {how}({type(last).__name__}: "
            f"{last}); MariaDB was not changed yet, so nothing happened: run it again",
            sql=stmt.query, code=code, table=table, undone=True)
    try:
        undone = r.undo()
    except UpstreamError as exc:
        log.error("undoing %r failed: %s", stmt.query[:200], exc)
        return DDLNotRecorded(
            f"{why}; undoing it in MariaDB failed too ({exc}): {table} in MariaDB no longer "
            f"matches the upstream catalog; {_repair_hint(stmt, table)}",
            sql=stmt.query, code=code, table=table, undone=False)
    if undone is not None:
        return DDLNotRecorded(f"{why}; it was undone in MariaDB ({undone}), so nothing happened: "
                              "run it again", sql=stmt.query, code=code, table=table, undone=True)
    log.error("DDL %r not recorded and not undoable; %s", stmt.query[:200], table)
    return DDLNotRecorded(
        f"{why}; it has no inverse, so {table} in MariaDB no longer matches the upstream "
        f"catalog (no binlog announced the change): {_repair_hint(stmt, table)}",
        sql=stmt.query, code=code, table=table, undone=False)


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
            raise UpstreamSchemaError(f"database {stmt.schema!r} is unknown to the upstream "
                                      "catalog")
        r.sql(stmt.query)
        r.executed = True
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
        raise UpstreamSchemaError(f"{stmt.query[:100]!r} names no database and none is selected")
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
                r.executed = False  # undone here
                raise UpstreamUnsupportedDDL(
                    f"table {db}.{name} has an AUTO_INCREMENT column but no clustered primary key: "
                    "the emulator keeps TiDB's hidden _tidb_rowid in an auto-increment column, and "
                    "MariaDB allows only one; make that column the primary key", query=stmt.query)
            r.sql(f"ALTER TABLE {quote_id(db)}.{quote_id(name)} ADD COLUMN `_tidb_rowid` BIGINT "
                  "NOT NULL AUTO_INCREMENT INVISIBLE, ADD UNIQUE KEY `_tidb_rowid` (`_tidb_rowid`)")
    elif old is None:
        if kind == "drop_table" and stmt.if_exists:
            r.execute_user_ddl()
            return None
        raise UpstreamSchemaError(f"table {db}.{name} is unknown to the upstream catalog")
    elif kind != "drop_column":
        r.execute_user_ddl()

    job = _new_job(r, stmt, dbinfo.id, old.id if old else 0, db, name)

    if kind == "drop_column":
        col = old.column_by_name(stmt.column)
        if col is None:
            raise UpstreamSchemaError(f"column {stmt.column!r} does not exist in {db}.{name}")
        delete_only = old.clone()
        delete_only.column_by_name(stmt.column).state = SchemaState.DELETE_ONLY

        def apply_delete_only(cur, version):
            _with_job_id(cur, job)
            Catalog.put_table(cur, dbinfo.id, delete_only)
            Catalog.queue_job(cur, job, STEP_DROP_COLUMN)  # committed with this round

        r.round(job, SchemaState.DELETE_ONLY, apply_delete_only, final=False)
        r.queued = job
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
