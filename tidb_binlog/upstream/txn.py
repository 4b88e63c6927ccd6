"""Sessions and transactions that write binlogs exactly as TiDB's 2PC does.

``txn = session.begin()`` takes ``start_ts`` from the TSO. DML methods change rows
in MariaDB *and* capture exact row images inside the transaction
(``insert``/``update``/``delete``/``replace``/``execute``; see ``capture.py``, whose
:class:`~tidb_binlog.upstream.capture.DmlCapture` is this ``Txn``'s base). Multi-step
operations run under a SAVEPOINT so a failed statement leaves neither rows nor
mutations behind (TiDB's statement atomicity).

The first change of a transaction carries, in the same round trip, the
*prologue*: one ``INSERT ... SELECT`` that writes the txn-status row
``(start_ts, 0)`` (its row lock marks the transaction running) only if the
catalog's schema version is still the session's snapshot version, and takes a
shared lock on that version row, so no DDL catalog round can commit until we do
(a moved version costs one extra round trip that reads it). ``commit()`` then
follows TiDB's order: the schema check (a DDL that changed a touched table
aborts the commit, like TiDB's; identity checks when the version did not move);
the Prewrite binlog (``PrewriteValue{schema_version, mutations}``,
``prewrite_key`` = the record key of the first changed row) written
synchronously; ``commit_ts`` from the TSO *while the row locks are held*;
status-row update + COMMIT in one round trip; the Commit binlog handed to the
upstream's finish path (with the pump client: a gRPC future started here, not
waited for). Any failure after the Prewrite sends a Rollback binlog.
So a one-statement transaction costs two MariaDB round trips, as the same
statement + COMMIT does without binlog.
A transaction without row changes writes no binlog.
"""

from __future__ import annotations

import re

import pymysql

from tidb_binlog import binlog as bl
from tidb_binlog.errors import (
    PumpUnavailable,
    SchemaChanged,
    TxnConflict,
    UnavailableError,
    UpstreamError,
)
from tidb_binlog.upstream.capture import DmlCapture, Raw
from tidb_binlog.upstream.catalog import CATALOG_DB, META_SCHEMA_VERSION
from tidb_binlog.upstream.conn import CONFLICT_CODES, connect, translate
from tidb_binlog.upstream.faults import SimulatedCrash

__all__ = ["Session", "Txn", "Raw"]

# The transaction prologue, sent in the round trip of its first change (see Txn._exec).
_PROLOGUE_SQL = (f"INSERT INTO {CATALOG_DB}.txn_status (start_ts, commit_ts) SELECT %d, 0 FROM "
                 f"{CATALOG_DB}.meta WHERE name='{META_SCHEMA_VERSION}' AND value=%d "
                 "LOCK IN SHARE MODE; ")
_STATUS_ROW_SQL = f"INSERT INTO {CATALOG_DB}.txn_status VALUES (%d, 0); "
_DROP_STATUS_SQL = f"DELETE FROM {CATALOG_DB}.txn_status WHERE start_ts=%d; "
_VERSION_SQL = (f"SELECT value FROM {CATALOG_DB}.meta WHERE name='{META_SCHEMA_VERSION}' "
                "LOCK IN SHARE MODE; ")
# A statement that takes no row locks (a non-locking read, SET): it may run before the
# prologue (see Txn.query).
_PLAIN_READ = re.compile(r"^\s*(\(\s*)*(SELECT|SHOW|DESCRIBE|DESC|EXPLAIN|SET)\b"
                         r"(?!.*\b(FOR\s+UPDATE|LOCK\s+IN\s+SHARE\s+MODE|FOR\s+SHARE)\b)",
                         re.I | re.S)
# Errors after which MariaDB has rolled the transaction back, or the connection is gone.
_TXN_GONE = (1213, 2006, 2013)


def prewrite_error(exc: BaseException, what: str) -> BaseException:
    """The error for a Prewrite binlog the writer did not take (``what`` was rolled back).

    A pump outage (the pump client's :class:`UnavailableError`, a socket error or
    timeout) is :class:`PumpUnavailable`, which callers retry; anything else (e.g. a
    binlog above the pumps' message size) is a plain, permanent UpstreamError."""
    if isinstance(exc, UpstreamError) or not isinstance(exc, Exception):
        return exc
    if isinstance(exc, UnavailableError | OSError | TimeoutError):
        return PumpUnavailable(f"prewrite binlog of {what} was not written, so it was rolled "
                               f"back: {exc}; retry it once a pump is available")
    return UpstreamError(f"prewrite binlog of {what} failed, so it was rolled back: {exc}")


class Session:
    """One MariaDB connection; runs one transaction at a time."""

    def __init__(self, upstream, database: str | None):
        self.upstream = upstream
        self.database = database
        self.conn = connect(upstream.params, database=database, multi_statements=True)
        self.txn: Txn | None = None

    def begin(self) -> Txn:
        if self.txn is not None and self.txn.open:
            raise UpstreamError("this session already has an open transaction; commit or roll "
                                "it back first")
        self.txn = Txn(self, self.upstream.get_ts())
        return self.txn

    def ddl(self, sql: str):
        return self.upstream.ddl(sql, self.database)

    def close(self) -> None:
        if self.txn is not None and self.txn.open:
            self.txn.rollback()
        try:
            self.conn.close()
        except pymysql.err.Error:
            pass  # already closed (a simulated crash)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Txn(DmlCapture):
    """A transaction; use as a context manager (commit on success, rollback on error)."""

    def __init__(self, session: Session, start_ts: int):
        super().__init__()  # the captured mutations, their tables and savepoints
        self.session = session
        self.upstream = session.upstream
        self.start_ts = start_ts
        self.commit_ts = 0
        self.open = True
        self._cur = session.conn.cursor()
        self._registered = False  # status row written, schema version read (the prologue)
        self._version = 0

    # -- plumbing --------------------------------------------------------------------
    def _exec(self, sql: str, args=None, *, plain: bool = False) -> int:
        """Run ``sql``; return the affected row count."""
        return self._run(sql, args, plain)[0]

    def _rows(self, sql: str, args=None, *, plain: bool = False) -> list[tuple]:
        """Run ``sql``; return its rows."""
        return self._run(sql, args, plain)[1]

    def _run(self, sql: str, args, plain: bool) -> tuple[int, list[tuple]]:
        """Run ``sql``. The first non-``plain`` statement of the transaction carries the
        prologue in the same round trip (multi-statements): one ``INSERT ... SELECT``
        writes the txn-status row ``(start_ts, 0)`` (its row lock marks the transaction
        running) only if the schema version is still the snapshot's, and takes a shared
        lock on that version row, so no DDL catalog round commits before we do. A moved
        version (0 rows) costs one more round trip that reads it (see ``_check_schema``)."""
        prologue = not plain and not self._registered
        if prologue:
            up = self.upstream
            self._version = up.snapshot.version
            if up.check_schema_at_commit:
                sql = _PROLOGUE_SQL % (int(self.start_ts), int(self._version)) + sql
            else:
                sql = _STATUS_ROW_SQL % int(self.start_ts) + sql
        cur = self._cur
        try:
            n = cur.execute(sql, args)
        except pymysql.err.MySQLError as exc:
            self._failed(exc, sql, prologue)
        if prologue:
            inserted = n == 1
            self._registered = True
            try:
                cur.nextset()  # the caller's statement
            except pymysql.err.MySQLError as exc:
                self._failed(exc, sql, False)
            n = cur.rowcount
            if not inserted:
                rows = list(cur.fetchall())
                self._registered = False
                self._register_slow()
                return n, rows
        return n, list(cur.fetchall())

    def _register_slow(self) -> None:
        sql = _STATUS_ROW_SQL % int(self.start_ts) + _VERSION_SQL
        try:
            self._cur.execute(sql)
            self._cur.nextset()
            self._version = int(self._cur.fetchone()[0])
        except pymysql.err.MySQLError as exc:
            self._failed(exc, sql, True)
        self._registered = True

    def _failed(self, exc: pymysql.err.MySQLError, sql: str, in_prologue: bool):
        """Translate ``exc``. A deadlock or lock wait timeout (:class:`TxnConflict`) and a
        failed prologue (e.g. a DDL holding the schema version past the lock wait
        timeout; the status row may already be written) abort the whole transaction, so
        the caller's retry starts from nothing (MariaDB itself rolls back only the
        statement after a lock wait timeout)."""
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in _TXN_GONE:  # deadlock (MariaDB rolled back) / connection gone
            self.open = False
        if (in_prologue or code in CONFLICT_CODES) and self.open:
            self.open = False
            try:
                self.session.conn.rollback()
            except pymysql.err.MySQLError:
                pass  # the connection is gone: MariaDB rolls back on its own
        if in_prologue:
            cls = TxnConflict if code in CONFLICT_CODES else UpstreamError
            raise cls(f"transaction start_ts={self.start_ts} aborted: its txn-status row / "
                      f"schema version could not be taken ({exc}); retry it",
                      sql=sql[:2000], code=code) from exc
        raise translate(exc, sql) from exc

    def _check_open(self) -> None:
        if not self.open:
            raise UpstreamError(f"transaction start_ts={self.start_ts} is finished or aborted")

    # -- reads (the capturing DML is DmlCapture's) ------------------------------------
    def query(self, sql: str, args=None) -> list[tuple]:
        """A read inside the transaction (no binlog).

        A locking read (``FOR UPDATE``, ``LOCK IN SHARE MODE``) or any other statement
        that is not a plain read carries the prologue when it is the transaction's first,
        so every transaction takes the schema-version share lock *before* any row lock.
        Otherwise a transaction holding a row lock could queue its share lock behind a
        DDL round's exclusive one while a transaction that already holds the share lock
        waits for that row: a three-way deadlock whose cheapest victim is the DDL's
        catalog transaction (the DDL already ran in MariaDB)."""
        self._check_open()
        return self._rows(sql, args, plain=bool(_PLAIN_READ.match(sql)))

    # -- commit / rollback -----------------------------------------------------------
    def _check_schema(self) -> int:
        """TiDB's schema check at commit: every table this transaction touched must be
        unchanged at the schema version read in the prologue (the shared lock keeps it
        current until COMMIT). Cheap when the catalog did not move: identity checks."""
        up = self.upstream
        snap = up.snapshot
        if snap.version != self._version:
            snap = up.reload()
        by_id = snap.tables_by_id
        for tid, info in self._infos.items():
            now = by_id.get(tid)
            if now is info:
                continue
            if now is None or now.to_obj() != info.to_obj():
                raise SchemaChanged(f"information schema is changed: table id {tid} was "
                                    f"altered during transaction start_ts={self.start_ts}; "
                                    "retry it")
        return self._version

    def commit(self) -> int:
        """Commit; return commit_ts (0 when nothing was written, so no binlog)."""
        self._check_open()
        up = self.upstream
        if not any(m.sequence for m in self._muts.values()):
            if self._registered:  # no binlog: its status row must not outlive it
                self._finish_plain(commit=True, sql=_DROP_STATUS_SQL % int(self.start_ts))
            else:
                self._finish_plain(commit=True)
            return 0
        # A writer that takes a serialized Prewrite (the pump client) gets it written
        # straight from the row images into its request, each dropped once written
        # (prewrite_payload.py: one copy of the rows instead of four, never both whole);
        # any other writer gets a Binlog.
        write_from = getattr(up.writer, "write_prewrite_from", None)
        try:
            version = self._check_schema() if up.check_schema_at_commit else self._version
            if write_from is None:
                prewrite = bl.prewrite(self.start_ts, self._prewrite_value(version),
                                       prewrite_key=self._primary)
            else:
                encoder = self._prewrite_encoder(version)
        except BaseException:
            self._finish_plain(commit=False)
            raise
        try:
            if up.faults.take("fail_prewrite"):
                raise PumpUnavailable("fault knob fail_prewrite: the prewrite binlog was not "
                                      f"written; transaction start_ts={self.start_ts} rolled back")
            if write_from is None:
                up.writer.write_binlog(prewrite)
            else:
                try:  # each row image is dropped once written into the request
                    write_from(self.start_ts, encoder.size,
                               lambda out: encoder.write_to(out, consume=True))
                finally:
                    del encoder
                    self._muts.clear()  # nothing reads the row images after the Prewrite
        except BaseException as exc:
            self._finish_plain(commit=False)
            up.send_finish(self._finish(bl.BinlogType.ROLLBACK, 0))
            err = prewrite_error(exc, f"transaction start_ts={self.start_ts}")
            if err is exc:
                raise
            raise err from exc
        if up.faults.take("crash_after_prewrite"):
            self.open = False
            self.session.conn.close()  # COM_QUIT without COMMIT: MariaDB rolls back
            raise SimulatedCrash(f"fault knob crash_after_prewrite: start_ts={self.start_ts} "
                                 "prewritten, connection dropped without COMMIT")
        commit_ts = up.get_ts()  # row locks are still held
        try:
            self._exec(f"UPDATE {CATALOG_DB}.txn_status SET commit_ts=%s WHERE start_ts=%s; "
                       "COMMIT", (commit_ts, self.start_ts))
            while self._cur.nextset():
                pass
        except (pymysql.err.MySQLError, UpstreamError) as exc:
            self.open = False
            status = up.meta().txn_status(self.start_ts)
            if status.state == status.COMMITTED:
                self.commit_ts = commit_ts
                up.send_finish(self._finish(bl.BinlogType.COMMIT, commit_ts))
                return commit_ts
            if status.state == status.ROLLED_BACK:
                up.send_finish(self._finish(bl.BinlogType.ROLLBACK, 0))
            if isinstance(exc, UpstreamError):
                raise
            raise translate(exc, "COMMIT") from exc
        self.open = False
        self.commit_ts = commit_ts
        if not up.faults.take("drop_commit_binlog"):
            up.send_finish(self._finish(bl.BinlogType.COMMIT, commit_ts))
        return commit_ts

    def _finish(self, tp: int, commit_ts: int):
        # TiDB reuses the prewrite's Binlog: the finish binlog keeps prewrite_key.
        return bl.new_binlog(tp, self.start_ts, commit_ts, prewrite_key=self._primary)

    def _finish_plain(self, commit: bool, sql: str = "") -> None:
        """COMMIT / ROLLBACK without binlog (``sql`` runs first, in the same round trip)."""
        self.open = False
        try:
            if sql:
                self._cur.execute(sql + ("COMMIT" if commit else "ROLLBACK"))
                while self._cur.nextset():
                    pass
            elif commit:
                self.session.conn.commit()
            else:
                self.session.conn.rollback()
        except pymysql.err.MySQLError as exc:
            raise translate(exc, "COMMIT" if commit else "ROLLBACK") from exc

    def rollback(self) -> None:
        """Roll back; nothing was prewritten yet, so no binlog is written."""
        if self.open:
            self._finish_plain(commit=False)

    def __enter__(self) -> Txn:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if self.open:
                self.commit()
        elif self.open:
            self.rollback()
