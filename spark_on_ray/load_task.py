"""One copy task of the initial load: runs inside a Spark barrier task (no Spark import).

All copy tasks read the upstream at the same point, through the emulator's locks
(``tidb_binlog/upstream``; the README's "Spark jobs" section has the whole argument):

1. The job's driver holds the upstream's DDL owner lock for the whole copy, so no DDL
   runs (and no table definition changes under a read view).
2. Before the stage starts, the driver *freezes commits*: ``SELECT ... FOR UPDATE`` on the
   catalog's schema-version row. Every writing transaction holds a share lock on that row
   from its first change until its COMMIT, so the exclusive lock is granted only once
   every transaction that had begun writing has committed or rolled back, and it holds
   back every new one before its first change (hence before it takes a commit_ts).
3. Each task opens ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and reads
   ``MAX(commit_ts)`` of ``txn_status`` in it: with commits frozen, every read view holds
   exactly the transactions committed so far, so all tasks see the same rows and ts.
4. Each task then takes its *view lock* (a user lock, ``GET_LOCK``, named by the driver)
   and holds it until its connection closes. The driver polls ``IS_USED_LOCK`` for every
   task's view lock (or the stage's end) and only then rolls the freeze back: commits
   resume while the tasks copy from their read views (a consistent read never waits on
   the freeze, so the tasks never wait for the driver).
5. The driver checks that every task reported the same ts.

Every transaction in the copy has commit_ts <= ts (it is in the catalog the read views
see, whose maximum is ts); every transaction not in the copy committed after the freeze,
so its commit_ts came from the TSO after every ts in the catalog: > ts.

No Spark barrier ``allGather`` is used: in PySpark each round costs a whole second (the
JVM side polls its RPC once a second), which was 2 of the 2.1 s a task spent before its
first row. The stage is still a barrier stage, so all tasks run at once and the freeze
lasts only as long as the slowest task takes to open its view.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import time

import pymysql

from spark_on_ray.errors import SparkJobError
from spark_on_ray.load_plan import (
    GROUP_BYTES,
    CopyUnit,
    insert_sql,
    load_data_sql,
    select_sql,
    tsv_group_select_sql,
    tsv_select_sql,
)
from spark_on_ray.sql_task import connect
from tidb_binlog.config.spark import DatabaseConfig
from tidb_binlog.upstream.catalog import CATALOG_DB, META_SCHEMA_VERSION

__all__ = ["copy_task", "insert_unit", "load_unit", "FREEZE_SQL", "SNAPSHOT_TS_SQL", "view_lock_name"]

FREEZE_SQL = (f"SELECT value FROM {CATALOG_DB}.meta WHERE name = '{META_SCHEMA_VERSION}' "
              "FOR UPDATE")
SNAPSHOT_TS_SQL = f"SELECT COALESCE(MAX(commit_ts), 0) FROM {CATALOG_DB}.txn_status"


def view_lock_name(token: str, index: int) -> str:
    """The user lock copy task ``index`` of the load ``token`` holds once its read view
    exists (MariaDB lock names are at most 64 characters)."""
    return f"tidb-binlog-load-{token}-{index}"


def copy_task(index: int, units: list[CopyUnit], up: DatabaseConfig, down: DatabaseConfig,
              batch_size: int, view_lock: str, literal, method: str = "insert") -> dict:
    """Copy ``units`` from a read view opened while the driver freezes commits; returns
    ``{"ts", "rows": {table: n}, "copy_s", "setup_s"}`` (``setup_s``: from the task's start
    to its first row: both connects, the read view and the view lock). ``view_lock``: the
    user lock that tells the driver this task's read view exists. ``method``:
    ``"load-data"`` (each unit's rows rendered as lines by the upstream and streamed
    through a named pipe into ``LOAD DATA LOCAL INFILE``) or ``"insert"`` (multi-row
    INSERTs of ``batch_size`` rows)."""
    entered = time.monotonic()
    up_conn = connect(up, raw=True)
    down_conn = None
    try:
        # before the view: the freeze lasts until every view exists
        down_conn = connect(down, local_infile=method == "load-data")
        down_conn.autocommit(False)
        with up_conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            # line groups (load_plan.group_rows) stay far below this; a cut one is refused
            cur.execute(f"SET SESSION group_concat_max_len = {4 * GROUP_BYTES}")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute(SNAPSHOT_TS_SQL)
            ts = int(cur.fetchone()[0])  # raw: the server's text
            # A user lock is not part of the transaction: the read view stays as it is.
            cur.execute(f"SELECT GET_LOCK({literal(view_lock)}, 0)")
            if cur.fetchone()[0] not in (1, b"1", "1"):
                raise SparkJobError(f"copy task {index} could not take its view lock "
                                    f"{view_lock!r} (another session holds it)",
                                    where=up.where())
        rows: dict[str, int] = {}
        started = time.monotonic()
        for unit in units:
            name = f"{unit.database}.{unit.table}"
            if method == "load-data":
                n = load_unit(unit, up_conn, down_conn, literal)
            else:
                n = insert_unit(unit, up_conn, down_conn, batch_size, literal)
            rows[name] = rows.get(name, 0) + n
            down_conn.commit()
        ended = time.monotonic()
        # entered/ended: this machine's monotonic clock (the driver compares them with its
        # own when the task runs on its node: how long Spark took to start and end tasks)
        return {"ts": ts, "rows": rows, "copy_s": ended - started,
                "setup_s": started - entered, "entered": entered, "ended": ended}
    finally:
        for conn in (up_conn, down_conn):
            if conn is not None:
                conn.close()


def insert_unit(unit: CopyUnit, up_conn, down_conn, batch_size: int, literal) -> int:
    n = 0
    sql = insert_sql(unit)
    with up_conn.cursor(pymysql.cursors.SSCursor) as src, down_conn.cursor() as dst:
        src.execute(select_sql(unit, literal))
        while batch := src.fetchmany(batch_size):
            dst.executemany(sql, batch)
            n += len(batch)
    return n


# Rows fetched from the upstream per round trip while feeding a unit's lines.
_FEED_ROWS = 2000
# How often the feeder retries opening the pipe while LOAD DATA has not opened it yet.
_OPEN_RETRY_S = 0.005


class _Feeder(threading.Thread):
    """Streams a unit's lines from the upstream into a named pipe that ``LOAD DATA LOCAL
    INFILE`` reads on the downstream, so reading and loading overlap (40 % more rows/s
    than spooling to a file first, measured) and no file holds the unit.

    The pipe is opened without blocking, retried until the loading side has opened it or
    :meth:`release` says to give up (the server may refuse the statement before it asks
    for the file), so this thread never waits on a reader that will not come; a reader
    that goes away makes the next write fail (EPIPE) and the thread end."""

    def __init__(self, up_conn, sql: str, path: str, grouped: bool = False):
        super().__init__(name="load-feeder", daemon=True)
        self.up_conn, self.sql, self.path, self.grouped = up_conn, sql, path, grouped
        self.lines = 0
        self.error: BaseException | None = None
        self._give_up = threading.Event()

    def run(self) -> None:
        try:
            fd = self._open()
            if fd is None:
                return
            os.set_blocking(fd, True)
            with os.fdopen(fd, "wb", buffering=1 << 20) as out, \
                    self.up_conn.cursor(pymysql.cursors.SSCursor) as src:
                src.execute(self.sql)
                if self.grouped:  # (lines, text) rows: tsv_group_select_sql
                    while batch := src.fetchmany(64):
                        for count, text in batch:
                            out.write(text)
                            out.write(b"\n")
                            self.lines += int(count)
                else:
                    while batch := src.fetchmany(_FEED_ROWS):
                        out.write(b"\n".join([r[0] for r in batch]))
                        out.write(b"\n")
                        self.lines += len(batch)
            if self.grouped:
                self._check_groups()
        except BaseException as exc:  # reported by load_unit, after LOAD DATA returns
            self.error = exc

    def _check_groups(self) -> None:
        """A line group cut by ``group_concat_max_len`` (or NULL: over the server's
        ``max_allowed_packet``) leaves a warning on the upstream session: refused."""
        with self.up_conn.cursor() as cur:
            cur.execute("SHOW WARNINGS LIMIT 5")
            warnings = cur.fetchall()
        if warnings:
            shown = "; ".join(" ".join(str(x) for x in w) for w in warnings)
            raise SparkJobError(f"the upstream warned while rendering line groups: {shown}")

    def _open(self) -> int | None:
        while not self._give_up.is_set():
            try:
                return os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: nobody has the pipe open to read yet
                    raise
            self._give_up.wait(_OPEN_RETRY_S)
        return None

    def release(self) -> None:
        self._give_up.set()


def load_unit(unit: CopyUnit, up_conn, down_conn, literal) -> int:
    """Stream the unit's lines (rendered by the upstream) through a named pipe into
    ``LOAD DATA LOCAL INFILE``, in the open downstream transaction. The server must
    report exactly the rows read from the upstream and no warning (a warning means a value
    was changed on the way in: refused rather than loaded differently); an upstream error
    mid-stream fails the unit (the caller does not commit it)."""
    work = tempfile.mkdtemp(prefix="tidb-binlog-load-")
    path = os.path.join(work, "rows.tsv")
    os.mkfifo(path, 0o600)
    grouped = unit.group_rows > 0
    sql = tsv_group_select_sql(unit, literal) if grouped else tsv_select_sql(unit, literal)
    feeder = _Feeder(up_conn, sql, path, grouped)
    feeder.start()
    try:
        with down_conn.cursor() as dst:
            try:
                dst.execute(load_data_sql(unit, literal(path)))
            finally:
                feeder.release()
                feeder.join()
            if feeder.error is not None:
                raise SparkJobError(f"reading {unit.qualified} from the upstream failed after "
                                    f"{feeder.lines} rows: {type(feeder.error).__name__}: "
                                    f"{feeder.error}", where=unit.qualified) from feeder.error
            loaded = dst.rowcount
            dst.execute("SHOW WARNINGS LIMIT 5")
            warnings = dst.fetchall()
        if loaded != feeder.lines or warnings:
            shown = "; ".join(" ".join(str(x) for x in w) for w in warnings)
            raise SparkJobError(f"LOAD DATA into {unit.qualified} loaded {loaded} of "
                                f"{feeder.lines} rows; warnings: {shown or 'none'}",
                                where=unit.qualified)
        return feeder.lines
    finally:
        shutil.rmtree(work, ignore_errors=True)
