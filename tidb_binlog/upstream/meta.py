"""``UpstreamMeta``: what pumps and drainers ask TiKV and PD, answered from the catalog.

- ``history_jobs(up_to_schema_version=None)``: finished DDL jobs sorted by schema
  version (TiDB's ``GetAllHistoryDDLJobs``);
- ``job(job_id)``: one history job or ``None`` (``GetHistoryDDLJob``);
- ``txn_status(start_ts, prewrite_key=b"")``: implements
  :class:`tidb_binlog.node.TxnStatusResolver` like TiKV's CheckTxnStatus. The
  status row is written inside the transaction itself: a committed row gives
  ``committed`` with its commit_ts; no row means the transaction rolled back (or
  never prewrote); a row still locked by its running transaction (our probe's
  ``FOR UPDATE NOWAIT`` hits the lock) means ``unknown``;
- ``cluster_id()``; ``snapshot_tables()``: the current DBInfo and TableInfos, for a
  drainer that starts from an initial commit ts.

It holds only connection parameters, so it pickles and a pump or drainer actor can
build its own; the connection is opened lazily and reopened after an error. A lookup
that finds its *kept* connection lost (the server restarted since the last lookup:
MariaDB error 2006/2013) is made once more at once, on a new connection, before it
counts as a failure: every lookup is a read, safe to repeat, and the pump's resolver
would otherwise wait a whole round after every upstream restart.

A lookup that finds the upstream MariaDB unreachable (restarting, connection lost:
:class:`~tidb_binlog.errors.UpstreamUnreachable`) is asked again with backoff for up
to ``retry_s`` (300 s by default; a drainer's schema keeper cannot translate a DDL
without its job, so it waits rather than failing the task), logging a warning every
10 s. ``txn_status`` is not retried here: the pump's resolver asks again on its next
round anyway, and must not block its shutdown.
"""

from __future__ import annotations

import logging
import threading
import time

import pymysql

from tidb_binlog.errors import UpstreamUnreachable
from tidb_binlog.model import DBInfo, Job, TableInfo
from tidb_binlog.node import TxnStatus
from tidb_binlog.upstream.catalog import CATALOG_DB, Catalog
from tidb_binlog.upstream.conn import connect, translate

__all__ = ["UpstreamMeta"]

_LOCKED = (1205, 3572)  # lock wait timeout (MariaDB's NOWAIT error), MySQL's NOWAIT error
DEFAULT_RETRY_S = 300.0
_LOG_EVERY_S = 10.0

log = logging.getLogger(__name__)


class UpstreamMeta:
    def __init__(self, params: dict, *, retry_s: float = DEFAULT_RETRY_S,
                 clock=time.monotonic, sleep=time.sleep):
        self.params = dict(params)
        self.retry_s = retry_s
        self._clock = clock
        self._sleep = sleep
        self._conn = None
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"params": self.params, "retry_s": self.retry_s}

    def __setstate__(self, state):
        self.__init__(state["params"], retry_s=state.get("retry_s", DEFAULT_RETRY_S))

    def _cursor(self):
        if self._conn is None:
            self._conn = connect(self.params, autocommit=True)
            with self._conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return self._conn.cursor()

    def _call_once(self, fn):
        with self._lock:
            kept = self._conn is not None
            try:
                return self._query(fn)
            except UpstreamUnreachable as exc:
                if not kept:  # a new connection failed: the server is down
                    raise
                # the kept connection died with the server's restart: a new one may answer
                log.info("upstream MariaDB at %s: the kept connection was lost (%s); asking "
                         "again on a new one", self._where(), exc)
                return self._query(fn)

    def _query(self, fn):
        try:
            with self._cursor() as cur:
                return fn(cur)
        except pymysql.err.MySQLError as exc:
            self.close()
            raise translate(exc, "upstream meta query") from exc
        except UpstreamUnreachable:  # connect() failed
            self.close()
            raise

    def _call(self, fn, *, retry: bool = True):
        """``fn(cursor)``; an unreachable upstream is asked again for up to ``retry_s``."""
        if not retry:
            return self._call_once(fn)
        deadline = self._clock() + self.retry_s
        delay, last_log, attempts = 0.1, None, 0
        while True:
            try:
                result = self._call_once(fn)
            except UpstreamUnreachable as exc:
                attempts += 1
                now = self._clock()
                if now >= deadline:
                    raise UpstreamUnreachable(
                        f"the upstream MariaDB at {self._where()} stayed unreachable for "
                        f"{self.retry_s:g} s ({attempts} attempts); last error: {exc}. Start it "
                        "again (the lookup is safe to repeat) and restart the task",
                        sql=exc.sql, code=exc.code) from exc
                if last_log is None or now - last_log >= _LOG_EVERY_S:
                    last_log = now
                    log.warning("upstream MariaDB at %s unreachable (%s); asking again for up "
                                "to %.0f s more", self._where(), exc, deadline - now)
                self._sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, 2.0)
                continue
            if attempts:
                log.info("upstream MariaDB at %s answers again after %d failed attempts",
                         self._where(), attempts)
            return result

    def _where(self) -> str:
        p = self.params
        if p.get("unix_socket"):
            return str(p["unix_socket"])
        return f"{p.get('host', '127.0.0.1')}:{p.get('port', 3306)}"

    def history_jobs(self, up_to_schema_version: int | None = None) -> list[Job]:
        return self._call(lambda cur: Catalog.jobs(cur, up_to_schema_version))

    def job(self, job_id: int) -> Job | None:
        return self._call(lambda cur: Catalog.job(cur, job_id))

    def cluster_id(self) -> int:
        return self._call(Catalog.cluster_id)

    def schema_version(self) -> int:
        return self._call(lambda cur: Catalog.meta_value(cur, "schema_version"))

    def snapshot_tables(self) -> list[tuple[DBInfo, list[TableInfo]]]:
        snap = self._call(Catalog.load)
        return [(db, [t for (d, _), t in snap.tables.items() if d == name])
                for name, db in snap.dbs.items()]

    def txn_status(self, start_ts: int, prewrite_key: bytes = b"") -> TxnStatus:
        def probe(cur):
            try:
                cur.execute(f"SELECT commit_ts FROM {CATALOG_DB}.txn_status WHERE start_ts=%s "
                            "FOR UPDATE NOWAIT", (start_ts,))
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in _LOCKED:
                    return TxnStatus(TxnStatus.UNKNOWN, detail="transaction still holds its lock")
                raise
            row = cur.fetchone()
            if row is None:
                return TxnStatus(TxnStatus.ROLLED_BACK, detail="no status row")
            if row[0] > 0:
                return TxnStatus(TxnStatus.COMMITTED, commit_ts=int(row[0]))
            return TxnStatus(TxnStatus.UNKNOWN, detail="status row without commit_ts")

        return self._call(probe, retry=False)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except pymysql.err.Error:
                pass  # the connection is already gone; nothing left to release
            self._conn = None
