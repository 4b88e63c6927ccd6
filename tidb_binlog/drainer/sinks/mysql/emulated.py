"""A downstream that is an emulated TiDB: the SQL workers write through our TiDB emulator.

For bidirectional replication (``loopback-control``, :mod:`tidb_binlog.drainer.loopback`)
the downstream of direction A→B must be B's TiDB, so that what the drainer writes into B
comes back as B's binlog, mark included. Here B's "TiDB" is our emulator
(:mod:`tidb_binlog.upstream`: MariaDB plus the binlogs TiDB's 2PC writes, sent to B's
pumps with timestamps from B's registry). :class:`EmulatedTidbDownstream` speaks the
calls the :class:`~tidb_binlog.drainer.sinks.mysql.loader.Loader` makes of a
:class:`~tidb_binlog.drainer.sinks.mysql.downstream.Downstream` (``execute``,
``execute_script``, ``query``, ``commit``, ``rollback``, ``reset``, ``close``,
``config``), so the loader does not know which one it has. ``[syncer.to]
emulated-tidb-registry`` picks it (the actor side builds the emulator from that registry:
``actors/emulated_tidb.py``); ``host``/``port``/``user``/``password`` are then B's MariaDB.

How each statement runs:

- ``INSERT``/``REPLACE ... VALUES``, ``UPDATE``, ``DELETE`` of a user table (and of the
  mark table): :meth:`tidb_binlog.upstream.txn.Txn.execute` in one emulated transaction,
  so their row images go into its binlog; ``COMMIT`` commits it (Prewrite, commit_ts,
  Commit binlog), as TiDB would.
- Statements on the drainer's own bookkeeping schema (``private_schemas``: the checkpoint
  schema holding ``worker_progress``) run on the same MariaDB connection inside the same
  transaction, but are not captured: they commit atomically with the rows (what
  exactly-once needs) and never become binlog, as a drainer's progress is not user data.
- ``USE db`` sets the database later DDL runs in; any other DDL is the emulator's
  ``Upstream.ddl`` (a DDL job and its binlogs; the open transaction is committed first,
  as MySQL's implicit commit), or plain MariaDB for the bookkeeping schema.
- ``SELECT``: a read on the transaction's connection (no binlog).

Errors: an emulator error the same call may get past (:attr:`retryable`: a lock
conflict, a pump outage, a schema change, a connection lost) or whose code is in
:data:`~tidb_binlog.drainer.sinks.mysql.downstream.TRANSIENT_CODES` becomes a
:class:`~tidb_binlog.errors.TransientDownstreamError` (the loader rolls back and
retries); anything else a :class:`~tidb_binlog.errors.DownstreamError` with MariaDB's
code, so the loader's ignorable-DDL codes work unchanged.

``[syncer.to.params]`` and ``sql-mode`` are not applied: the emulator's sessions have
their own settings (UTC), so an emulated downstream suits tables without TIMESTAMP
columns in another zone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

import pymysql

from tidb_binlog.drainer.apply.sql import Statement
from tidb_binlog.drainer.checkpoint.checkpoint import CHECKPOINT_SCHEMA
from tidb_binlog.drainer.sinks.mysql.downstream import (
    TRANSIENT_CODES,
    DownstreamConfig,
    shorten_sql,
    translate_error,
)
from tidb_binlog.errors import (
    BinlogError,
    DownstreamError,
    TransientDownstreamError,
    UpstreamError,
)

__all__ = ["EmulatedTidbDownstream"]

log = logging.getLogger(__name__)

_USE = re.compile(r"^\s*USE\s+`?([^`\s;]+)`?\s*;?\s*$", re.I)
_DDL = re.compile(r"^\s*(CREATE|ALTER|DROP|TRUNCATE|RENAME)\b", re.I)
_DML = re.compile(r"^\s*(INSERT|REPLACE|UPDATE|DELETE)\b", re.I)
# The table a DML or DDL names first: INSERT/REPLACE INTO, UPDATE, DELETE FROM, or
# CREATE/ALTER/DROP/TRUNCATE ... TABLE|SCHEMA|DATABASE [IF [NOT] EXISTS].
_TARGET = re.compile(
    r"^\s*(?:(?:INSERT|REPLACE)\s+(?:IGNORE\s+)?INTO|UPDATE|DELETE\s+FROM|"
    r"(?:CREATE|ALTER|DROP|TRUNCATE)\s+(?:TABLE|SCHEMA|DATABASE)"
    r"(?:\s+IF\s+(?:NOT\s+)?EXISTS)?)\s+((?:`[^`]+`|[\w$]+)(?:\s*\.\s*(?:`[^`]+`|[\w$]+))?)",
    re.I)


def _schema_of(sql: str, database: str | None) -> str | None:
    """The database (lowercase) of the first object the statement names; for CREATE/DROP
    DATABASE the database itself; None when it names none."""
    m = _TARGET.match(sql)
    if m is None:
        return None
    parts = [a or b for a, b in re.findall(r"`([^`]+)`|([\w$]+)", m[1])]
    if re.match(r"^\s*\w+\s+(?:SCHEMA|DATABASE)\b", sql, re.I):
        return parts[-1].lower()
    if len(parts) >= 2:
        return parts[0].lower()
    return database.lower() if database else None


class EmulatedTidbDownstream:
    """The :class:`~tidb_binlog.drainer.sinks.mysql.downstream.Downstream` calls over an
    emulated TiDB; see the module docstring.

    ``open_upstream()`` makes the :class:`~tidb_binlog.upstream.Upstream` (called once,
    on first use; its pump client and TSO are the downstream cluster's)."""

    def __init__(self, config: DownstreamConfig, open_upstream: Callable[[], object], *,
                 private_schemas: Sequence[str] = (CHECKPOINT_SCHEMA,)):
        self.config = config
        self._open_upstream = open_upstream
        self._private = frozenset(s.lower() for s in private_schemas)
        self._upstream = None
        self._session = None
        self._txn = None
        self._database: str | None = None
        self.round_trips = 0
        self.commits = 0  # emulated transactions committed with a binlog

    # -- plumbing ---------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._session is not None

    def _sess(self):
        if self._session is None:
            if self._upstream is None:
                self._upstream = self._open_upstream()
            self._session = self._upstream.session()
        return self._session

    def _open_txn(self):
        if self._txn is None or not self._txn.open:
            self._txn = self._sess().begin()
        return self._txn

    def _error(self, exc: BaseException, sql: str) -> DownstreamError:
        where = f"emulated TiDB on {self.config.address}"
        if isinstance(exc, DownstreamError):
            return exc
        if isinstance(exc, pymysql.err.MySQLError | OSError):
            err = translate_error(exc, sql, where)
        else:
            code = getattr(exc, "code", None)
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            text = f"{where}: {type(exc).__name__}: {message} (statement: {shorten_sql(sql)})"
            transient = getattr(exc, "retryable", False) or code in TRANSIENT_CODES
            cls = TransientDownstreamError if transient else DownstreamError
            err = cls(text + ("; will retry" if transient else ""), sql=shorten_sql(sql),
                      code=code)
        if isinstance(err, TransientDownstreamError):
            self.reset()
        return err

    def _raw(self, sql: str, args) -> tuple[int, list]:
        """``sql`` on the session's connection, outside the emulator's capture; inside the
        open transaction when there is one (so it commits with its rows)."""
        if self._txn is not None and self._txn.open:
            return 0, self._txn.query(sql, args)  # (the bookkeeping row count is not used)
        with self._sess().conn.cursor() as cur:
            n = cur.execute(sql, args)
            return n, list(cur.fetchall())

    # -- the Downstream calls -----------------------------------------------------------
    def render(self, stmt: Statement) -> str:
        return stmt.sql if stmt.args is None else f"{stmt.sql} -- {len(stmt.args)} args"

    def execute(self, stmt: Statement) -> int:
        """Run one statement (see the module docstring); the rows it affected."""
        sql = stmt.sql
        self.round_trips += 1
        try:
            if m := _USE.match(sql):
                self._database = m[1]
                return 0
            if _DDL.match(sql):
                return self._ddl(stmt)
            if _DML.match(sql):
                if _schema_of(sql, self._database) in self._private:
                    self._open_txn()
                    return self._raw(sql, stmt.args)[0]
                return self._open_txn().execute(sql, stmt.args)
            return self._raw(sql, stmt.args)[0]
        except (BinlogError, pymysql.err.MySQLError, OSError) as exc:
            raise self._error(exc, sql) from exc

    def _ddl(self, stmt: Statement) -> int:
        sql = stmt.sql
        if self._txn is not None and self._txn.open:
            self._commit()  # MySQL's implicit commit before a DDL
        if _schema_of(sql, self._database) in self._private:
            self._raw(sql, stmt.args)
            self._sess().conn.commit()
            return 0
        self._sess()
        self._upstream.ddl(sql, self._database)
        return 0

    def execute_script(self, statements: list[Statement], *, commit: bool = False) -> int:
        """Each statement in order, then COMMIT when ``commit``; a failure carries
        ``statement_index`` (``len(statements)`` = the COMMIT), as Downstream's."""
        total = 0
        for i, stmt in enumerate(statements):
            try:
                total += self.execute(stmt)
            except DownstreamError as exc:
                exc.statement_index = i
                raise
        if commit:
            try:
                self.commit()
            except DownstreamError as exc:
                exc.statement_index = len(statements)
                raise
        return total

    def query(self, stmt: Statement) -> list[tuple]:
        self.round_trips += 1
        try:
            return self._raw(stmt.sql, stmt.args)[1]
        except (BinlogError, pymysql.err.MySQLError, OSError) as exc:
            raise self._error(exc, stmt.sql) from exc

    def commit(self) -> None:
        self.round_trips += 1
        try:
            self._commit()
        except (BinlogError, pymysql.err.MySQLError, OSError) as exc:
            raise self._error(exc, "COMMIT") from exc

    def _commit(self) -> None:
        txn, self._txn = self._txn, None
        if txn is not None and txn.open:
            if txn.commit():
                self.commits += 1
        elif self._session is not None:
            self._session.conn.commit()  # a read's snapshot, or bookkeeping DDL

    def rollback(self) -> None:
        """Roll back the open transaction; a dead connection is simply dropped."""
        txn, self._txn = self._txn, None
        try:
            if txn is not None and txn.open:
                txn.rollback()
            elif self._session is not None:
                self._session.conn.rollback()
        except (UpstreamError, pymysql.err.MySQLError, OSError) as exc:
            log.warning("rollback on the emulated TiDB %s failed (%s); dropping the session",
                        self.config.address, exc)
            self.reset()

    def reset(self) -> None:
        """Drop the session (the next call opens a new one); the emulator stays."""
        session, self._session, self._txn = self._session, None, None
        if session is not None:
            try:
                session.close()
            except (UpstreamError, pymysql.err.MySQLError, OSError) as exc:
                log.debug("closing a broken emulated-TiDB session: %s", exc)

    def close(self) -> None:
        """The session, then the emulator (it waits for its Commit binlogs in flight)."""
        self.reset()
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            upstream.close()
