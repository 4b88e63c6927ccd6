"""The change-log jobs over the drainer's change log: ``snapshot-at`` and ``stats``.

    from spark_on_ray import lake
    snap = lake.snapshot_at(cfg, at_ts=ts)   # Parquet image of each table as of ts
    st = lake.stats(cfg)                     # changes per minute, hottest keys

``[lake] data-dir`` is the Parquet sink's lake (``db-type = "parquet"``; told by its
``_manifest.json``), the main input: only the files its manifest lists are read, in commit
order (``tidb_binlog/drainer/sinks/parquet/README.md``), and a ts beyond the manifest's
commit_ts is refused (the lake says nothing about it yet). Without a manifest, it is a file
sink's directory of pb binlog records (``tidb_binlog.reparo.source`` / ``decode``), the
fallback. Either is read on the driver, and each row change is turned into **events**
(``spark_on_ray.lake_plan.row_events``: puts and dels per row key, in commit order),
write them as one Parquet file per table under ``[spark] work-dir`` (the hand-off: data
moves to Spark as Parquet, never through ``ray.data.from_spark``), and let Spark reduce
them:

- ``snapshot-at``: per key, the last event at or below ``at_ts``; a put is the row, a
  del means the row is gone. Tables without a key: each distinct row repeated
  ``SUM(+1/-1)`` times. Written as Parquet to ``<out-dir>/<db>.<table>/`` (the image's
  columns, as the files carry them: integers, floats, text; DATE/DATETIME/DECIMAL as text).
  From the Parquet lake, every image has the table's columns as of the range's end (the
  manifest's schema entry there, ``lake_plan.lake_layout``): a row written before an ADD
  COLUMN holds the column's default, a dropped column is left out (a lake of an older
  sink, whose entries have no defaults: the columns as the files carry them).
- ``stats``: per table and minute (UTC) the inserts, updates and deletes, and the
  ``top-keys`` most changed keys per table, over ``[start-tso, stop-tso]``; written as
  Parquet to ``<out-dir>/stats/per_minute`` and ``<out-dir>/stats/hot_keys``.

Keys (primary key, else the first NOT NULL unique key) and the table list come from the
``[downstream]`` server's information_schema (the files name columns, not keys): it must
hold the tables with their current keys. The files must be readable by the driver and the
work-dir by the executors (one host, or a shared filesystem).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field

import pyarrow.parquet as pq
from pyspark.sql import Window
from pyspark.sql import functions as F

from spark_on_ray.diff import introspect, literal, open_checked
from spark_on_ray.errors import SparkJobError
from spark_on_ray.lake_plan import (
    META,
    EventTypeError,
    change_txns,
    events_table,
    lake_files,
    lake_layout,
    row_events,
)
from spark_on_ray.session import start_spark
from spark_on_ray.sql_task import run_query
from tidb_binlog.binlogfile import WalkStats
from tidb_binlog.config.spark import SparkJobConfig
from tidb_binlog.drainer.sinks.parquet.manifest import read_manifest
from tidb_binlog.errors import StorageError
from tidb_binlog.reparo.decode import binlog_to_txn
from tidb_binlog.reparo.source import read_records, select_segments

__all__ = ["SnapshotResult", "StatsResult", "TableStats", "snapshot_at", "stats"]

log = logging.getLogger("spark_on_ray.lake")


@dataclass
class SnapshotResult:
    at_ts: int                  # the image is as of this commit_ts (the last record read)
    out_dir: str = ""
    source: str = ""            # "parquet" (the Parquet sink's lake) or "pb" (a file sink)
    rows: dict[str, int] = field(default_factory=dict)     # "db.table" -> rows in the image
    paths: dict[str, str] = field(default_factory=dict)    # "db.table" -> its Parquet folder
    records: int = 0            # pb: binlog records read; parquet: row changes read
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    spark_start_s: float = 0.0


@dataclass
class TableStats:
    name: str
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    minutes: int = 0            # minutes with at least one change
    peak_per_minute: int = 0
    hot_keys: list[tuple[str, int]] = field(default_factory=list)   # (key, changes)


@dataclass
class StatsResult:
    start_ts: int
    stop_ts: int
    out_dir: str = ""
    source: str = ""            # "parquet" or "pb", as SnapshotResult
    tables: list[TableStats] = field(default_factory=list)
    per_minute: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    records: int = 0
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    spark_start_s: float = 0.0


def _keys(cfg: SparkJobConfig, tables) -> dict[tuple[str, str], tuple[str, ...]]:
    entries = tuple(tables) if tables else cfg.lake.tables
    if not entries:
        raise SparkJobError('no tables: set [lake] tables = ["db", "db.table"] or pass --tables')
    where = cfg.downstream.where()
    conn = open_checked(cfg.downstream, "downstream", 10)
    try:
        names = []
        for entry in entries:
            db, _, table = entry.partition(".")
            if table:
                names.append((db, table))
                continue
            rows = run_query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE "
                             f"TABLE_SCHEMA = {literal(db)} AND TABLE_TYPE = 'BASE TABLE' "
                             "ORDER BY TABLE_NAME")  # fmt: skip
            if not rows:
                raise SparkJobError(f"database `{db}` has no tables on the downstream {where} "
                                    "(the keys are read there); check [lake] tables",
                                    where=where)  # fmt: skip
            names += [(db, r[0]) for r in rows]
        return {(db, t): tuple(introspect(conn, db, t, "downstream", where).key)
                for db, t in names}
    finally:
        conn.close()


def _events(cfg, data_dir, start, stop, keys, result):
    """``(events per table, commit_ts the input ends at)`` from ``data-dir``: the Parquet
    sink's lake when it holds a manifest, else a file sink's pb binlogs."""
    data_dir = data_dir or cfg.lake.data_dir
    if not data_dir:
        raise SparkJobError("no change-log directory: set [lake] data-dir (the drainer's "
                            "[syncer.to] dir, Parquet or file sink) or pass --data-dir")
    try:
        manifest = read_manifest(data_dir)
    except StorageError as exc:  # names the file and what to do
        raise SparkJobError(str(exc), where=data_dir) from exc
    if manifest is not None:
        return _lake_events(data_dir, manifest, start, stop, keys, result)
    result.source = "pb"
    picked = select_segments(data_dir, start, stop)
    result.files = [p.name for _, p in picked]
    last = [0]

    def txns():
        for _, b in read_records(data_dir, start, stop, stats=WalkStats(), picked=picked):
            result.records += 1
            last[0] = b.commit_ts
            yield binlog_to_txn(b)

    return row_events(txns(), keys), last[0]


def _lake_events(data_dir, manifest, start, stop, keys, result):
    """Events from the Parquet sink's committed files (only those the manifest lists, in
    commit order). The lake holds every change up to the manifest's commit_ts and
    nothing can be said beyond it: a ``stop`` above it is refused."""
    result.source = "parquet"
    if stop and stop > manifest.commit_ts:
        raise SparkJobError(f"the Parquet lake {data_dir} holds the changes up to commit_ts "
                            f"{manifest.commit_ts} (its manifest); {stop} lies beyond: wait "
                            "for the drainer to pass it, or choose an earlier ts",
                            where=data_dir)  # fmt: skip
    files = lake_files(manifest.files, keys, start, stop)
    result.files = [f["path"] for f in files]
    root = os.path.abspath(data_dir)
    # each table's images in its columns as of the range's end: a row written before an
    # ADD COLUMN holds the column's default, a dropped column is left out
    layouts = {name: lake_layout(manifest, *name, stop or manifest.commit_ts) for name in keys}

    def txns():
        for f in files:
            rows = pq.ParquetFile(os.path.join(root, f["path"])).read().to_pylist()
            name = (f["database"], f["table"])
            for txn in change_txns(rows, *name, start, stop, layouts[name]):
                result.records += 1
                yield txn

    return row_events(txns(), keys), stop or manifest.commit_ts


def _write_events(work: str, events) -> dict[tuple[str, str], str]:
    """One Parquet file per table (``lake_plan.events_table``)."""
    paths = {}
    for (db, table), rows in events.items():
        try:
            tbl = events_table(rows)
        except EventTypeError as exc:
            raise SparkJobError(f"`{db}`.`{table}` {exc}: a column's values must share one "
                                "type for Parquet; a DDL that changed its type lies in the "
                                "range: choose a range after it, or leave the table out of "
                                "[lake] tables") from exc
        path = os.path.join(work, f"{db}.{table}.parquet")
        pq.write_table(tbl, path)
        paths[(db, table)] = path
    return paths


def _work_dir(cfg: SparkJobConfig, handle) -> str:
    """A fresh folder for the events under the running Spark's ``work-dir`` (a handle
    passed in was sized by its own config), else ``[spark] work-dir``."""
    base = handle.config.work_dir if handle is not None else cfg.spark.work_dir
    work = os.path.abspath(os.path.join(base, f"lake-{uuid.uuid4().hex[:12]}"))
    os.makedirs(work)
    return work


def snapshot_at(cfg: SparkJobConfig, *, at_ts: int | None = None, tables=None,
                data_dir: str | None = None, out_dir: str | None = None, handle=None,
                progress=None, ray_address: str | None = None) -> SnapshotResult:
    """The tables' image as of ``at_ts`` (default ``[lake] at-tso``; 0: the end of the
    files), as Parquet under ``out_dir`` (default ``[lake] out-dir``)."""
    t0 = time.monotonic()
    report = progress or (lambda stage, done, total: None)
    at = cfg.lake.at_tso if at_ts is None else at_ts
    out = os.path.abspath(out_dir or cfg.lake.out_dir)
    keys = _keys(cfg, tables)
    result = SnapshotResult(at_ts=at, out_dir=out)
    report("read", 0, 1)
    events, last = _events(cfg, data_dir, 0, at, keys, result)
    result.at_ts = at or last
    report("read", 1, 1)
    own = handle is None
    work = _work_dir(cfg, handle)
    try:
        paths = _write_events(work, events)
        if own:
            handle = start_spark(cfg.spark, ray_address=ray_address)
            result.spark_start_s = handle.started_s
        spark = handle.spark
        report("image", 0, len(keys))
        for i, ((db, table), key) in enumerate(sorted(keys.items())):
            name = f"{db}.{table}"
            target = os.path.join(out, name)
            if (db, table) not in paths:
                shutil.rmtree(target, ignore_errors=True)
                result.rows[name] = 0
                continue
            df = spark.read.parquet(paths[(db, table)])
            image_cols = [c for c in df.columns if c not in META]
            if key:
                w = Window.partitionBy("_key").orderBy(F.col("_seq").desc())
                img = df.withColumn("_rn", F.row_number().over(w)) \
                    .filter((F.col("_rn") == 1) & (F.col("_op") == "put"))
            else:
                n = df.groupBy("_key").agg(F.sum("_delta").alias("_n")).filter("_n > 0")
                rows = df.filter(F.col("_op") == "put").dropDuplicates(["_key"])
                img = rows.join(n, "_key").withColumn("_i", F.explode(F.sequence(
                    F.lit(1), F.col("_n").cast("int"))))
            img.select(*image_cols).write.mode("overwrite").parquet(target)
            result.rows[name] = spark.read.parquet(target).count()
            result.paths[name] = target
            report("image", i + 1, len(keys))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if own and handle is not None:
            handle.stop()
    result.seconds = time.monotonic() - t0
    log.info("snapshot-at %d: %d table(s), %d row(s) in %.1f s", result.at_ts,
             len(result.rows), sum(result.rows.values()), result.seconds)
    return result


def stats(cfg: SparkJobConfig, *, start_ts: int | None = None, stop_ts: int | None = None,
          tables=None, data_dir: str | None = None, out_dir: str | None = None, handle=None,
          progress=None, ray_address: str | None = None) -> StatsResult:
    """Change statistics per table over ``[start_ts, stop_ts]`` (default ``[lake]``),
    written as Parquet under ``<out_dir>/stats``."""
    t0 = time.monotonic()
    report = progress or (lambda stage, done, total: None)
    lc = cfg.lake
    start = lc.start_tso if start_ts is None else start_ts
    stop = lc.stop_tso if stop_ts is None else stop_ts
    if stop and start > stop:
        raise SparkJobError(f"start-tso {start} is above stop-tso {stop}: an empty range")
    out = os.path.join(os.path.abspath(out_dir or lc.out_dir), "stats")
    keys = _keys(cfg, tables)
    result = StatsResult(start, stop, out_dir=out)
    report("read", 0, 1)
    events, _ = _events(cfg, data_dir, start, stop, keys, result)
    report("read", 1, 1)
    own = handle is None
    work = _work_dir(cfg, handle)
    try:
        paths = _write_events(work, events)
        for name in keys:
            result.tables.append(TableStats(f"{name[0]}.{name[1]}"))
        if paths:
            if own:
                handle = start_spark(cfg.spark, ray_address=ray_address)
                result.spark_start_s = handle.started_s
            spark = handle.spark
            report("stats", 0, 2)
            df = None
            for (db, table), path in sorted(paths.items()):
                part = spark.read.parquet(path).filter("_count = 1").select(
                    F.lit(f"{db}.{table}").alias("table"), "_minute", "_type", "_key")
                df = part if df is None else df.unionByName(part)
            per_minute = df.groupBy("table", F.col("_minute").alias("minute")).agg(
                *[F.sum(F.when(F.col("_type") == t, 1).otherwise(0)).alias(f"{t}s")
                  for t in ("insert", "update", "delete")]).orderBy("table", "minute")
            per_minute.write.mode("overwrite").parquet(os.path.join(out, "per_minute"))
            report("stats", 1, 2)
            w = Window.partitionBy("table").orderBy(F.col("changes").desc(), F.col("key"))
            hot = df.groupBy("table", F.col("_key").alias("key")).agg(
                F.count("*").alias("changes")).withColumn("rank", F.row_number().over(w)) \
                .filter(F.col("rank") <= lc.top_keys)
            hot.write.mode("overwrite").parquet(os.path.join(out, "hot_keys"))
            report("stats", 2, 2)
            by_name = {t.name: t for t in result.tables}
            for r in spark.read.parquet(os.path.join(out, "per_minute")).orderBy(
                    "table", "minute").collect():
                result.per_minute.append((r["table"], r["minute"], r["inserts"],
                                          r["updates"], r["deletes"]))
                t = by_name[r["table"]]
                t.inserts += r["inserts"]
                t.updates += r["updates"]
                t.deletes += r["deletes"]
                t.minutes += 1
                t.peak_per_minute = max(t.peak_per_minute,
                                        r["inserts"] + r["updates"] + r["deletes"])
            for r in spark.read.parquet(os.path.join(out, "hot_keys")).orderBy(
                    "table", "rank").collect():
                by_name[r["table"]].hot_keys.append((r["key"], r["changes"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if own and handle is not None:
            handle.stop()
    result.seconds = time.monotonic() - t0
    return result
