"""``restore``: reparo's job (file-sink directory → MySQL) as a Spark job.

    from spark_on_ray import restore
    result = restore.run(cfg)        # cfg.restore: data-dir, start-tso, stop-tso, ...
    result.last_ts                   # the downstream now equals the upstream as of it

Replays the records of a file-sink directory with ``start-tso <= commit_ts <= stop-tso``
into ``[downstream]``, in parallel Spark tasks, always in **safe mode** (REPLACE for
inserts and updates, DELETE + REPLACE when a key changes), so a rerun over rows that are
already there converges to the same state (except in tables without a non-NULL unique
key, where a replayed INSERT adds a row again, as with reparo and the drainer).

1. The driver picks the segments and reads the records in the range
   (``tidb_binlog.reparo.source``), decodes them (``reparo.decode``) and drops what the
   ``replicate-do-db`` / ``replicate-ignore-db`` rules drop (``reparo.filter``).
2. The transactions are cut into stretches at each DDL
   (``spark_on_ray.restore_plan.split_stretches``). Per stretch: the driver reads the
   downstream schemas of its tables (keys: the files name columns, not keys), spreads
   its rows over key-hash partitions (``partition_rows``: rows linked by a key, old or
   new, stay in one partition in commit order) and runs one Spark stage, one task per
   partition, each applying its rows through reparo's applier
   (``reparo.apply.MysqlApplier``, one connection, safe mode). A stretch of fewer than
   ``min-spark-rows`` row changes is applied by the driver itself. Then the DDL that ends
   the stretch runs on the driver.
3. Returns a :class:`RestoreResult`. A failure says up to which commit_ts everything is
   applied and the ``start-tso`` to rerun from.

The driver reads the files, so the directory must be readable where the job's driver
runs (the CLI's host, or the Ray Job's); the tasks only need the downstream.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from spark_on_ray.errors import SparkJobError
from spark_on_ray.restore_plan import Stretch, group_txns, partition_rows, split_stretches
from spark_on_ray.session import start_spark
from tidb_binlog.binlogfile import WalkStats
from tidb_binlog.config.spark import SparkJobConfig
from tidb_binlog.drainer.apply.dml import DML, Txn
from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig
from tidb_binlog.errors import BinlogError
from tidb_binlog.reparo.apply import MysqlApplier, TableShape, read_table_schema
from tidb_binlog.reparo.decode import binlog_to_txn
from tidb_binlog.reparo.filter import TableFilter
from tidb_binlog.reparo.source import read_records, select_segments

__all__ = ["RestoreResult", "run"]

log = logging.getLogger("spark_on_ray.restore")


@dataclass
class RestoreResult:
    files: list[str] = field(default_factory=list)   # segments read, in order
    records: int = 0            # records in the range
    filtered: int = 0           # records the rules dropped whole
    txns: int = 0               # transactions applied (DDLs included)
    rows: int = 0               # row changes applied
    ddls: int = 0
    stretches: int = 0          # stretches between DDLs that held rows
    spark_stages: int = 0       # of those, applied by a Spark stage
    partitions: int = 0         # key-hash partitions per Spark stage
    first_ts: int = 0           # commit_ts of the first / last transaction applied
    last_ts: int = 0
    rows_per_table: dict[str, int] = field(default_factory=dict)
    read_s: float = 0.0         # reading and decoding the files (driver)
    apply_s: float = 0.0        # applying (Spark stages, driver stretches, DDLs)
    spark_start_s: float = 0.0
    seconds: float = 0.0


def _downstream(cfg: SparkJobConfig) -> DownstreamConfig:
    d = cfg.downstream
    tz = cfg.restore.time_zone
    return DownstreamConfig(host=d.host, port=d.port, user=d.user, password=d.password,
                            params={"time_zone": tz} if tz else {})


def run(cfg: SparkJobConfig, *, data_dir: str | None = None, start_ts: int | None = None,
        stop_ts: int | None = None, handle=None, progress=None,
        ray_address: str | None = None) -> RestoreResult:
    """Restore (see the module doc). ``data_dir`` / ``start_ts`` / ``stop_ts`` override
    ``[restore]``; uses ``handle`` (a running :class:`~spark_on_ray.session.SparkHandle`)
    or starts and stops its own Spark when a stretch needs one."""
    t0 = time.monotonic()
    rc = cfg.restore
    data_dir = data_dir or rc.data_dir
    start = rc.start_tso if start_ts is None else start_ts
    stop = rc.stop_tso if stop_ts is None else stop_ts
    if not data_dir:
        raise SparkJobError("no file-sink directory to restore: set [restore] data-dir (the "
                            "drainer's [syncer.to] dir) or pass --data-dir")
    if stop and start > stop:
        raise SparkJobError(f"start-tso {start} is above stop-tso {stop}: nothing to restore")
    report = progress or (lambda stage, done, total: None)
    result = RestoreResult()
    down_cfg = _downstream(cfg)
    down_where = cfg.downstream.where()

    # 1. read (driver): segment selection, decode, filter
    report("read", 0, 1)
    picked = select_segments(data_dir, start, stop)
    result.files = [p.name for _, p in picked]
    filt = TableFilter(rc.replicate_do_db, (), rc.replicate_ignore_db, ())
    txns: list[Txn] = []
    for _, b in read_records(data_dir, start, stop, stats=WalkStats(), picked=picked):
        result.records += 1
        txn = filt.filter_txn(binlog_to_txn(b))
        if txn is None:
            result.filtered += 1
        else:
            txns.append(txn)
    stretches = split_stretches(txns)
    total_rows = sum(len(s.rows) for s in stretches)
    result.read_s = time.monotonic() - t0
    report("read", 1, 1)
    log.info("restore: %d record(s) from %d file(s), %d row change(s) in %d stretch(es)",
             result.records, len(picked), total_rows, len(stretches))

    # 2. apply, stretch by stretch
    local = MysqlApplier(down_cfg, worker_count=1, txn_batch=rc.txn_batch, safe_mode=True)
    schema_conn = Downstream(down_cfg)
    own = handle is None
    done_ts = start - 1 if start else 0
    t_apply = time.monotonic()
    try:
        local.check()
        report("apply", 0, total_rows)
        applied = 0
        for stretch in stretches:
            if stretch.rows:
                result.stretches += 1
                if len(stretch.rows) >= rc.min_spark_rows:
                    if handle is None:
                        handle = start_spark(cfg.spark, ray_address=ray_address)
                        result.spark_start_s = handle.started_s
                    _spark_stretch(handle, stretch, schema_conn, down_cfg, rc, result)
                else:
                    for txn in group_txns(stretch.rows):
                        local.add(txn)
                    local.finish()
                for _, dml in stretch.rows:
                    name = f"{dml.database}.{dml.table}"
                    result.rows_per_table[name] = result.rows_per_table.get(name, 0) + 1
                result.txns += len({ts for ts, _ in stretch.rows})
                result.rows += len(stretch.rows)
                applied += len(stretch.rows)
                report("apply", applied, total_rows)
            if stretch.ddl is not None:
                local.add(Txn(stretch.ddl.commit_ts, ddl=stretch.ddl))
                local.finish()
                result.ddls += 1
                result.txns += 1
            if stretch.rows or stretch.ddl is not None:
                result.first_ts = result.first_ts or stretch.first_ts
                result.last_ts = done_ts = stretch.last_ts
    except Exception as exc:
        rerun = (f"everything up to commit_ts {done_ts} is applied; rerun with start-tso = "
                 f"{done_ts + 1} (safe mode: rows already applied are harmless)"
                 if done_ts else "rerun from the same start-tso (safe mode)")
        if isinstance(exc, BinlogError):
            exc.message = f"{exc.message} [restore stopped: {rerun}]"
            exc.args = (exc.message,)
            raise
        raise SparkJobError(f"restore into {down_where} failed: {type(exc).__name__}: "
                            f"{str(exc)[:500]} [restore stopped: {rerun}]",
                            where=down_where) from exc
    finally:
        local.close()
        schema_conn.close()
        if own and handle is not None:
            handle.stop()
    result.apply_s = time.monotonic() - t_apply
    result.seconds = time.monotonic() - t0
    log.info("restore: %d row change(s), %d DDL(s) into %s in %.1f s (%d Spark stage(s))",
             result.rows, result.ddls, down_where, result.seconds, result.spark_stages)
    return result


def _spark_stretch(handle, stretch: Stretch, schema_conn: Downstream,
                   down_cfg: DownstreamConfig, rc, result: RestoreResult) -> None:
    """One Spark stage: the stretch's rows over key-hash partitions, one task each."""
    shapes: dict[tuple[str, str], TableShape] = {}
    keyed = []
    for ts, dml in stretch.rows:
        key = (dml.database, dml.table)
        shape = shapes.get(key)
        if shape is None:
            shape = read_table_schema(schema_conn, *key)
            if shape is None:
                raise SparkJobError(
                    f"table `{dml.database}`.`{dml.table}` (rows at commit_ts {ts}) does not "
                    f"exist in the downstream {down_cfg.address}; the files hold only the DDLs "
                    "made after the drainer started: create the table downstream first (e.g. "
                    "`tidb-binlog spark load`), or leave its schema out with "
                    "replicate-ignore-db", where=down_cfg.address)
            shapes[key] = shape
        keyed.append((ts, _with_schema(dml, shape, ts)))
    n = rc.partitions or handle.slots
    parts = [p for p in partition_rows(keyed, n) if p]
    # Ship the rows without their schemas (each task reads them once per table).
    payloads = [[(ts, DML.unchecked(d.database, d.table, d.tp, d.values, d.old_values))
                 for ts, d in part] for part in parts]
    sc = handle.spark.sparkContext
    rdd = sc.parallelize([(down_cfg, rc.txn_batch, p) for p in payloads], len(payloads))
    rdd.map(_apply_partition).collect()
    result.spark_stages += 1
    result.partitions = max(result.partitions, n)


def _with_schema(dml: DML, shape: TableShape, ts: int) -> DML:
    values, old = dml.values, dml.old_values
    if shape.generated:
        values = {k: v for k, v in values.items() if k not in shape.generated}
        if old is not None:
            old = {k: v for k, v in old.items() if k not in shape.generated}
    try:
        return DML(dml.database, dml.table, dml.tp, values, old, shape.schema)
    except BinlogError as exc:
        raise SparkJobError(f"{exc} (commit_ts {ts}; the downstream table differs from the "
                            "upstream's: apply the missing DDL downstream)") from exc


def _apply_partition(payload) -> int:
    """A Spark task: apply one partition's rows in order, on one connection, safe mode."""
    down_cfg, txn_batch, rows = payload
    applier = MysqlApplier(down_cfg, worker_count=1, txn_batch=txn_batch, safe_mode=True)
    try:
        applier.check()
        for txn in group_txns(rows):
            applier.add(txn)
        applier.finish()
        return len(rows)
    finally:
        applier.close()
