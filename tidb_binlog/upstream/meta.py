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
build its own; the connection is opened lazily and reopened after an error.
"""

from __future__ import annotations

import threading

import pymysql

from tidb_binlog.model import DBInfo, Job, TableInfo
from tidb_binlog.node import TxnStatus
from tidb_binlog.upstream.catalog import CATALOG_DB, Catalog
from tidb_binlog.upstream.core import connect, translate

__all__ = ["UpstreamMeta"]

_LOCKED = (1205, 3572)  # lock wait timeout (MariaDB's NOWAIT error), MySQL's NOWAIT error


class UpstreamMeta:
    def __init__(self, params: dict):
        self.params = dict(params)
        self._conn = None
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"params": self.params}

    def __setstate__(self, state):
        self.__init__(state["params"])

    def _cursor(self):
        if self._conn is None:
            self._conn = connect(self.params, autocommit=True)
            with self._conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return self._conn.cursor()

    def _call(self, fn):
        with self._lock:
            try:
                with self._cursor() as cur:
                    return fn(cur)
            except pymysql.err.MySQLError as exc:
                self.close()
                raise translate(exc, "upstream meta query") from exc

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

        return self._call(probe)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except pymysql.err.Error:
                pass  # the connection is already gone; nothing left to release
            self._conn = None
