"""``load``: the initial snapshot load (dumpling + loader's job) as a Spark job.

    from spark_on_ray import load
    result = load.run(cfg)          # cfg: tidb_binlog.config.spark.SparkJobConfig
    result.ts                       # start the drainer with initial-commit-ts = result.ts

Copies the chosen databases/tables from the upstream (our TiDB emulator over MariaDB) to
the downstream in parallel, all copy tasks reading the upstream at ONE point whose
commit_ts the job returns: every upstream transaction with commit_ts <= ts is in the copy
and none above it (``spark_on_ray/load_task.py`` proves it; a real TiDB would use
``tidb_snapshot = ts`` instead, which is not implemented here).

1. Check both servers, that the upstream is the emulator (its catalog schema exists),
   take the upstream's DDL owner lock (no DDL until the copy ends), read each table's
   definition and key, and refuse a downstream table that already holds rows: all
   before anything is written.
2. Create the downstream databases and tables from the upstream's definitions (without
   the hidden ``_tidb_rowid``; with ``[load] defer-indexes``, without secondary indexes),
   plan key-range units and schedule them onto the tasks.
3. Freeze commits, then one Spark barrier stage: the tasks open their read views and
   copy (``load_task.copy_task``); the driver resumes commits once every view exists.
4. Add the secondary indexes the CREATE TABLEs held back, if any.
5. Release the DDL lock; return the ts, the rows per table and the drainer command line.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from spark_on_ray import diff_plan as dplan
from spark_on_ray import load_plan as plan
from spark_on_ray.diff import introspect, literal, open_checked
from spark_on_ray.errors import SparkJobError
from spark_on_ray.load_task import FREEZE_SQL, copy_task, view_lock_name
from spark_on_ray.session import start_spark
from spark_on_ray.sql_task import run_query
from tidb_binlog.config.spark import SparkJobConfig
from tidb_binlog.upstream.catalog import CATALOG_DB
from tidb_binlog.upstream.ddl import DDL_LOCK

__all__ = ["LoadResult", "run"]

log = logging.getLogger("spark_on_ray.load")

# How often the driver checks the copy tasks' view locks while it freezes commits.
_POLL_S = 0.01
_SYSTEM = {"mysql", "information_schema", "performance_schema", "sys", CATALOG_DB}


@dataclass
class LoadResult:
    ts: int                                  # the snapshot's commit_ts
    rows: dict[str, int] = field(default_factory=dict)  # "db.table" -> rows copied
    units: int = 0
    tasks: int = 0
    seconds: float = 0.0
    copy_s: float = 0.0                      # the slowest task's copy time
    stage_s: float = 0.0                     # the Spark stage: task start-up + copy
    setup_s: float = 0.0                     # the slowest task's connects, freeze, syncs
    index_s: float = 0.0                     # adding the deferred secondary indexes
    spark_start_s: float = 0.0
    method: str = ""                         # how rows were written: load-data or insert
    drainer_command: str = ""

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def _tables(conn, entries, where) -> list[tuple[str, str]]:
    out = []
    for entry in entries:
        db, _, table = entry.partition(".")
        if db in _SYSTEM:
            raise SparkJobError(f"`{db}` is a system or catalog schema of the upstream {where};"
                                " it is never copied: remove it from [load] tables", where=where)
        if table:
            out.append((db, table))
            continue
        rows = run_query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE "
                         f"TABLE_SCHEMA = {literal(db)} AND TABLE_TYPE = 'BASE TABLE' "
                         "ORDER BY TABLE_NAME")  # fmt: skip
        if not rows:
            raise SparkJobError(f"database `{db}` has no tables on the upstream {where} (or does"
                                " not exist); check [load] tables", where=where)
        out.extend((db, r[0]) for r in rows)
    return out


def run(cfg: SparkJobConfig, *, tables: tuple[str, ...] | None = None, handle=None,
        progress=None, ray_address: str | None = None) -> LoadResult:
    """Load ``tables`` (default ``[load] tables``); uses ``handle`` (a running
    :class:`~spark_on_ray.session.SparkHandle`) or starts and stops its own Spark."""
    t0 = time.monotonic()
    lc = cfg.load
    entries = tuple(tables) if tables else lc.tables
    if not entries:
        raise SparkJobError('no tables to load: set [load] tables = ["db", "db.table"] or pass '
                            "--tables")
    report = progress or (lambda stage, done, total: None)
    up_where, down_where = cfg.upstream.where(), cfg.downstream.where()
    up = open_checked(cfg.upstream, "upstream", 10)
    down = open_checked(cfg.downstream, "downstream", 10)
    own = handle is None
    created: list[str] = []
    try:
        if not run_query(up, "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = "
                         f"{literal(CATALOG_DB)}"):  # fmt: skip
            raise SparkJobError(f"the upstream {up_where} has no `{CATALOG_DB}` catalog: it is "
                                "not the TiDB emulator (tidb_binlog.upstream), and reading a "
                                "real TiDB at a snapshot (tidb_snapshot) is not implemented",
                                where=up_where)  # fmt: skip
        (got,), = run_query(up, f"SELECT GET_LOCK({literal(DDL_LOCK)}, {lc.ddl_lock_timeout_s})")
        if got != 1:
            raise SparkJobError(f"a DDL on the upstream {up_where} held the DDL owner lock for "
                                f"{lc.ddl_lock_timeout_s:g} s; rerun when it is done or raise "
                                "[load] ddl-lock-timeout", where=up_where)  # fmt: skip
        method = _method(down, lc.method, down_where)
        report("plan", 0, 1)
        units, ddl = _plan(up, down, _tables(up, entries, up_where), cfg, up_where, down_where)
        if own:
            handle = start_spark(cfg.spark, ray_address=ray_address, warm=True)
        deferred: dict[str, list[str]] = {}
        for name, sql in ddl:
            db = name.split(".", 1)[0]
            if lc.defer_indexes:
                sql, later = plan.defer_indexes(sql)
                if later:
                    deferred[name] = later
            run_query(down, f"CREATE DATABASE IF NOT EXISTS {dplan.quote_ident(db)}")
            run_query(down, f"USE {dplan.quote_ident(db)}")
            run_query(down, sql)
            created.append(name)
        report("plan", 1, 1)
        tasks = min(lc.parallelism or default_tasks(handle), handle.slots, max(len(units), 1))
        shares = plan.schedule(units, tasks)
        report("copy", 0, len(units))
        token = uuid.uuid4().hex[:16]
        locks = [view_lock_name(token, i) for i in range(len(shares))]
        payloads = [(share, cfg.upstream, cfg.downstream, lc.batch_size, lock, method)
                    for share, lock in zip(shares, locks, strict=True)]
        t_stage = time.monotonic()
        try:
            answers = _copy_stage(handle, up, payloads, locks)
        except Exception as exc:
            touched = ", ".join(created) or "none created by this run"
            raise SparkJobError(f"the copy failed: {type(exc).__name__}: {str(exc)[:400]}; "
                                f"downstream tables may be partially filled ({touched}): "
                                f"drop or truncate them on {down_where} before rerunning",
                                where=down_where) from exc  # fmt: skip
        if len({a["ts"] for a in answers}) != 1:
            raise SparkJobError(f"the copy tasks read the upstream {up_where} at different "
                                f"points {sorted({a['ts'] for a in answers})}: the commit "
                                "freeze did not hold (is the upstream the emulator?); the "
                                f"downstream copy is not consistent: drop the tables on "
                                f"{down_where} and rerun", where=up_where)  # fmt: skip
        report("copy", len(units), len(units))
        t_index = time.monotonic()
        log.info("copy stage: %.3f s to the first task's start, %.3f s from the last task's "
                 "end (same-node clocks)", min(a["entered"] for a in answers) - t_stage,
                 t_index - max(a["ended"] for a in answers))
        _add_indexes(down, deferred, down_where, report)
        result = LoadResult(ts=answers[0]["ts"], units=len(units), tasks=tasks,
                            copy_s=max(a["copy_s"] for a in answers),
                            setup_s=max(a["setup_s"] for a in answers),
                            stage_s=t_index - t_stage, method=method,
                            index_s=time.monotonic() - t_index)
        for info in units:
            result.rows.setdefault(f"{info.database}.{info.table}", 0)
        for answer in answers:
            for name, n in answer["rows"].items():
                result.rows[name] += n
        result.drainer_command = (f"tidb-binlog drainer --config {lc.drainer_config} "
                                  f"--initial-commit-ts {result.ts}")
        result.spark_start_s = handle.started_s if own else 0.0
        result.seconds = time.monotonic() - t0
        log.info("loaded %d rows of %d tables at ts %d in %.1f s (%s)", result.total_rows,
                 len(result.rows), result.ts, result.seconds, method)
        return result
    finally:
        try:
            run_query(up, f"DO RELEASE_LOCK({literal(DDL_LOCK)})")
        finally:
            up.close()
            down.close()
            if own and handle is not None:
                handle.stop()


def _add_indexes(down, deferred: dict[str, list[str]], where: str, report) -> None:
    """The secondary indexes ``[load] defer-indexes`` held back, one ALTER per table."""
    if not deferred:
        return
    report("indexes", 0, len(deferred))
    for i, (name, defs) in enumerate(sorted(deferred.items())):
        db, table = name.split(".", 1)
        sql = (f"ALTER TABLE {dplan.quote_ident(db)}.{dplan.quote_ident(table)} "
               + ", ".join(f"ADD {d}" for d in defs))
        try:
            run_query(down, sql)
        except Exception as exc:
            raise SparkJobError(f"every row of `{db}`.`{table}` was copied, but adding its "
                                f"secondary indexes on the downstream {where} failed: "
                                f"{type(exc).__name__}: {exc}; run `{sql}` there once the "
                                "cause is fixed (a UNIQUE KEY that the downstream's collation "
                                "sees duplicates in, for example), or rerun with [load] "
                                "defer-indexes = false on emptied tables",
                                where=where) from exc  # fmt: skip
        report("indexes", i + 1, len(deferred))


def default_tasks(handle) -> int:
    """``[load] parallelism = 0``: one copy task per CPU of the Ray cluster, at most the
    Spark task slots. Each copy keeps both servers and its feeder busy, so more tasks than
    CPUs only contend (2 cores, 200k rows, LOAD DATA: 2 tasks copied 1.9x one INSERT
    client, 4 tasks 1.5x, 1 task 1.2x; BENCHMARKS.md)."""
    cpus = float(getattr(handle, "cluster_cpus", 0.0) or 0.0)
    return max(1, min(handle.slots, int(cpus))) if cpus > 0 else handle.slots


def _copy(index, payload, _sync):
    share, up, down, batch, lock, method = payload
    return copy_task(index, share, up, down, batch, lock, literal, method)


def _method(down, wanted: str, where: str) -> str:
    """``[load] method`` resolved against the downstream: ``auto`` is ``load-data`` when the
    server allows ``LOAD DATA LOCAL INFILE`` (``@@local_infile``; MariaDB's default is ON,
    MySQL 8's OFF), else ``insert``; ``load-data`` on a server that refuses it is an error
    before anything is written."""
    if wanted == "insert":
        return wanted
    allowed = str(run_query(down, "SELECT @@local_infile")[0][0]) in ("1", "ON")
    if allowed:
        return "load-data"
    if wanted == "load-data":
        raise SparkJobError(f"[load] method = \"load-data\" but the downstream {where} refuses "
                            "LOAD DATA LOCAL INFILE (local_infile is OFF): set it ON there "
                            "(SET GLOBAL local_infile = 1) or use method = \"insert\" or "
                            "\"auto\"", where=where)  # fmt: skip
    log.info("the downstream %s has local_infile OFF: copying with INSERTs", where)
    return "insert"


def _copy_stage(handle, up, payloads: list, locks: list[str]) -> list:
    """Freeze commits on ``up`` (the driver's upstream session), run the copy stage, and
    roll the freeze back as soon as every task holds its view lock (its read view exists)
    or the stage has ended; ``spark_on_ray/load_task.py`` says why this gives one point."""
    run_query(up, "BEGIN")
    run_query(up, FREEZE_SQL)
    frozen = True
    pool = ThreadPoolExecutor(1, thread_name_prefix="load-stage")
    try:
        stage = pool.submit(handle.run_barrier, _copy, payloads)
        seen: set[str] = set()
        probe = "SELECT " + ", ".join(f"IS_USED_LOCK({literal(n)}) IS NOT NULL" for n in locks)
        while len(seen) < len(locks) and not stage.done():
            used = run_query(up, probe)[0]
            seen.update(n for n, u in zip(locks, used, strict=True) if u)
            if len(seen) < len(locks):
                time.sleep(_POLL_S)
        run_query(up, "ROLLBACK")
        frozen = False
        return stage.result()
    finally:
        if frozen:
            run_query(up, "ROLLBACK")
        pool.shutdown(wait=True)


def _plan(up, down, tables, cfg, up_where, down_where):
    slots = cfg.spark.num_executors * cfg.spark.executor_cores
    units: list[plan.CopyUnit] = []
    ddl: list[tuple[str, str]] = []
    for db, table in tables:
        info = introspect(up, db, table, "upstream", up_where)
        key = info.key
        if not key and run_query(up, "SELECT 1 FROM information_schema.COLUMNS WHERE "
                                 f"TABLE_SCHEMA = {literal(db)} AND TABLE_NAME = "
                                 f"{literal(table)} AND COLUMN_NAME = '{plan.ROWID}'"):
            key = (plan.ROWID,)
        exists = run_query(down, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
                           f"{literal(db)} AND TABLE_NAME = {literal(table)}")  # fmt: skip
        if exists:
            if run_query(down, f"SELECT 1 FROM {info.qualified} LIMIT 1"):
                raise SparkJobError(f"`{db}`.`{table}` already holds rows on the downstream "
                                    f"{down_where}; the load copies into empty tables only: "
                                    "drop or truncate it, or leave it out of [load] tables",
                                    where=down_where)  # fmt: skip
        else:
            (_, create), = run_query(up, f"SHOW CREATE TABLE {info.qualified}")
            ddl.append((f"{db}.{table}", plan.downstream_ddl(create)))
        units += _units(up, info, key, cfg.load.chunk_size, slots)
    return units, ddl


def _units(up, info, key: tuple[str, ...], chunk_size: int, slots: int) -> list[plan.CopyUnit]:
    """One table's copy units: key ranges (cut from the key's MIN/MAX when it is one dense
    integer column, else by a scan of the keys), whether its lines come in groups."""
    db, table = info.database, info.table
    columns = tuple(c.name for c in info.columns)
    types = tuple(c.data_type for c in info.columns)
    if not key:
        return [plan.CopyUnit(db, table, columns, key, dplan.KeyRange(), chunk_size, types)]
    lengths = {n: (c, o) for n, c, o in run_query(
        up, "SELECT COLUMN_NAME, CHARACTER_MAXIMUM_LENGTH, CHARACTER_OCTET_LENGTH FROM "
        f"information_schema.COLUMNS WHERE TABLE_SCHEMA = {literal(db)} AND TABLE_NAME = "
        f"{literal(table)}")}  # fmt: skip
    key_types = tuple(next((c.data_type for c in info.columns if c.name == k),
                           "bigint" if k == plan.ROWID else "") for k in key)
    bound = plan.line_bound(types, tuple(lengths[c][0] for c in columns),
                            tuple(lengths[c][1] for c in columns))
    grouped = plan.group_rows(key_types, bound)
    (estimate,), = run_query(up, "SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES "
                             f"WHERE TABLE_SCHEMA = {literal(db)} AND TABLE_NAME = "
                             f"{literal(table)}")  # fmt: skip
    chunk = plan.unit_rows(int(estimate), chunk_size, slots)
    bounds = None
    if len(key) == 1 and key_types[0] in plan.INTEGER_TYPES:
        k = dplan.quote_ident(key[0])
        (lo, hi), = run_query(up, f"SELECT MIN({k}), MAX({k}) FROM {info.qualified}")
        bounds = plan.even_int_bounds(lo, hi, int(estimate), chunk)
    if bounds is None:
        keyed = dplan.TableInfo(db, table, info.columns, key)
        bounds = [tuple(b) for b in run_query(up, dplan.boundaries_sql(keyed, chunk))]
    return [plan.CopyUnit(db, table, columns, key, r, chunk, types, grouped)
            for r in dplan.chunk_ranges(bounds)]
