"""One copy task of the initial load: runs inside a Spark barrier task (no Spark import).

All copy tasks read the upstream at the same point, through the emulator's locks
(``tidb_binlog/upstream``; the README's "Spark jobs" section has the whole argument):

1. The job's driver holds the upstream's DDL owner lock for the whole copy, so no DDL
   runs (and no table definition changes under a read view).
2. Task 0 *freezes commits*: ``SELECT ... FOR UPDATE`` on the catalog's schema-version
   row. Every writing transaction holds a share lock on that row from its first change
   until its COMMIT, so the exclusive lock is granted only once every transaction that
   had begun writing has committed or rolled back, and it holds back every new one
   before its first change (hence before it takes a commit_ts).
3. ``sync`` (Spark's barrier ``allGather``): every task has seen the freeze. Each opens
   ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and reads ``MAX(commit_ts)`` of
   ``txn_status`` in it: with commits frozen, every read view holds exactly the
   transactions committed so far, so all tasks see the same rows and the same ts.
4. ``sync`` again (all read views exist, the ts values are compared), then task 0
   rolls back its lock: commits resume, and each task copies its units from its own
   read view while the upstream keeps writing.

Every transaction in the copy has commit_ts <= ts (it is in the catalog the read views
see, whose maximum is ts); every transaction not in the copy committed after the freeze,
so its commit_ts came from the TSO after every ts in the catalog: > ts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pymysql

from spark_on_ray.load_plan import CopyUnit, insert_sql, select_sql
from spark_on_ray.sql_task import connect
from tidb_binlog.config.spark import DatabaseConfig
from tidb_binlog.upstream.catalog import CATALOG_DB, META_SCHEMA_VERSION

__all__ = ["copy_task", "FREEZE_SQL", "SNAPSHOT_TS_SQL"]

FREEZE_SQL = (f"SELECT value FROM {CATALOG_DB}.meta WHERE name = '{META_SCHEMA_VERSION}' "
              "FOR UPDATE")
SNAPSHOT_TS_SQL = f"SELECT COALESCE(MAX(commit_ts), 0) FROM {CATALOG_DB}.txn_status"


def copy_task(index: int, units: list[CopyUnit], up: DatabaseConfig, down: DatabaseConfig,
              batch_size: int, sync: Callable[[str], list[str]], literal) -> dict:
    """Copy ``units`` from the shared snapshot; returns ``{"ts", "rows": {table: n},
    "copy_s", "setup_s"}`` (``setup_s``: from the task's start to its first row: connects,
    the freeze and both barrier syncs; what the stage costs beyond it is Spark's)."""
    entered = time.monotonic()
    up_conn = connect(up, raw=True)
    lock_conn = connect(up) if index == 0 else None
    down_conn = None
    try:
        if lock_conn is not None:
            with lock_conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute(FREEZE_SQL)
        sync("frozen")
        with up_conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute(SNAPSHOT_TS_SQL)
            ts = int(cur.fetchone()[0])  # raw: the server's text
        seen = sync(str(ts))
        if lock_conn is not None:
            lock_conn.rollback()
            lock_conn.close()
            lock_conn = None
        if len(set(seen)) != 1:
            raise RuntimeError(f"copy tasks saw different snapshot points {sorted(set(seen))}")
        down_conn = connect(down)
        down_conn.autocommit(False)
        rows: dict[str, int] = {}
        started = time.monotonic()
        for unit in units:
            name = f"{unit.database}.{unit.table}"
            sql = insert_sql(unit)
            with up_conn.cursor(pymysql.cursors.SSCursor) as src, down_conn.cursor() as dst:
                src.execute(select_sql(unit, literal))
                while batch := src.fetchmany(batch_size):
                    dst.executemany(sql, batch)
                    rows[name] = rows.get(name, 0) + len(batch)
            down_conn.commit()
        return {"ts": ts, "rows": rows, "copy_s": time.monotonic() - started,
                "setup_s": started - entered}
    finally:
        for conn in (lock_conn, up_conn, down_conn):
            if conn is not None:
                conn.close()
