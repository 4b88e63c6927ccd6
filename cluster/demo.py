"""The end-to-end demo: upstream workload → 2 pumps → drainer → downstream, then compare.

``tidb-binlog demo`` runs, with no configuration, on the local machine:

1. a local Ray instance, the registry/TSO actor and two PumpActors;
2. two throwaway MariaDB servers: the upstream (behind the TiDB-behaving
   emulator) and the downstream;
3. the replication task (merger, schema keeper, coordinator, SQL workers);
4. the upstream workloads for ``--duration`` seconds: mixed sysbench DML, random
   DML with primary-key changes and unique-key swaps, the all-types table, a
   table without primary key, and DDL interleaved with DML;
5. a live progress line (rows/s applied, lag, checkpoint);
6. a full comparison of every upstream table with the downstream: in Python
   (:func:`tidb_binlog.compare.compare_databases`), or with ``spark_diff`` the Spark
   consistency diff (:mod:`spark_on_ray.diff`) on the same Ray.

It prints a summary (rows, rows/s, p50/p99 lag, ``diff: 0`` or the differing
tables with which side is wrong and sample rows) and returns 1 when the databases
differ.

**A failure is never hidden.** A workload that fails (any error its retry rules do
not cover) stops the demo at once: its error is printed first and the demo exits 1
*without* comparing, because a half-run workload leaves the upstream in a state a
diff would wrongly blame on replication. The upstream server is killed first so the
other workloads end quickly. A replication task that fails stops the demo the same
way. ``upstream_faults`` arms :class:`tidb_binlog.upstream.faults.Faults` knobs
(``--upstream-fault`` on the command line) to show that path.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from rich.live import Live

from actors.ray_calls import RayCalls
from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from tidb_binlog.cli.console import make_console
from tidb_binlog.compare import compare_databases
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.spark import DatabaseConfig, DiffConfig, SparkConfig, SparkJobConfig
from tidb_binlog.errors import BinlogError, ConfigError, UnavailableError
from tidb_binlog.testing.mariadb import MariaDBServer
from tidb_binlog.tso import extract_physical
from tidb_binlog.upstream import Upstream, workload

__all__ = ["run_demo", "WorkloadFailed", "WORKLOADS", "DATABASE"]

log = logging.getLogger(__name__)

DATABASE = "demo"
WORKLOADS = ("mixed", "random_dml", "all_types", "no_pk", "ddl")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


class WorkloadFailed(BinlogError):
    """A workload thread died; ``errors`` are the errors collected so far."""

    _fields = ("errors",)


def _workload_failed(errors: list[str]) -> WorkloadFailed:
    return WorkloadFailed("; ".join(errors), errors=list(errors))


def run_demo(duration_s: float = 60.0, *, workers: int = 4, work_dir: str | None = None,
             keep: bool = False, console=None, upstream_faults: dict | None = None,
             spark_diff: bool = False, spark_handle=None) -> int:
    """Run the demo; return the process exit code (0 when up- and downstream match).

    ``spark_diff``: end with the Spark diff instead of the Python compare; Java and the
    JDBC jar are checked first, so a machine without them fails in a second, not after
    the workload. ``spark_handle``: a running :class:`spark_on_ray.session.SparkHandle`
    to use (tests share one); else the diff starts and stops its own Spark.

    A Ray already initialised in this process is used and left running (a caller's, e.g.
    a test session's); one the demo starts is shut down at the end."""
    if not duration_s > 0:  # the CLI refuses these first; this guards API callers
        raise ConfigError(f"duration must be more than 0 seconds, got {duration_s}",
                          key="duration")
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}", key="workers")
    if spark_diff:
        _check_spark()
    console = console or make_console()
    base = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="tidb-binlog-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    console.print(f"[bold]tidb-binlog demo[/bold]: working in {base}")
    own_ray = not RayCalls.is_initialized()
    if own_ray:
        RayCalls.init(namespace="tidb-binlog-demo", include_dashboard=False,
                      log_to_driver=False)
    up_db = MariaDBServer(base, name="upstream")
    down_db = MariaDBServer(base, name="downstream")
    cluster = upstream = drainer = None
    try:
        up_db.start()
        down_db.start()
        console.print(f"upstream MariaDB on {up_db.host}:{up_db.port}, downstream on "
                      f"{down_db.host}:{down_db.port}")
        cluster = LocalCluster(base / "cluster", pumps=2, upstream_params=up_db.params(),
                               namespace="tidb-binlog-demo").start()
        console.print(f"registry and 2 pumps up: {cluster.pump_addresses()}")
        upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
        upstream.ddl(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        if upstream_faults:
            upstream.faults.arm(**upstream_faults)
            console.print(f"[yellow]upstream fault knobs armed[/yellow]: {upstream.faults}")
        cfg = load_drainer_config(None, {
            "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
            "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
            "syncer.worker-count": workers, "syncer.txn-batch": 100,
            "initial-commit-ts": 0})
        # named (not detached): the actors find each other by name instead of being
        # handed handles, so a restarted one needs nothing this driver holds (and Ray does
        # not warn about constructor arguments in the object store)
        drainer = Drainer.start(cfg, registry=cluster.registry, namespace="tidb-binlog-demo",
                                name="demo")
        stats, errors, threads = _run_workloads(upstream, duration_s, DATABASE)
        try:
            lags_ms, peak = _follow(drainer, console, threads, stats, errors, extract_physical)
        except WorkloadFailed as exc:
            console.line()  # end the live line
            for err in exc.errors:
                console.print(f"[bold red]workload failed[/bold red]: {err}")
            console.print("[bold red]demo stopped before comparing[/bold red]: a failed "
                          "workload leaves the upstream half-written, so a diff would not "
                          "tell a replication fault from it; see the log above")
            up_db.kill()  # the other workloads fail fast instead of running out their time
            _join(threads, 30.0)
            return 1
        except BinlogError as exc:
            console.line()
            console.print(f"[bold red]{exc}[/bold red]")
            up_db.kill()
            _join(threads, 30.0)
            return 1
        upstream.flush()
        target = cluster.get_ts()
        console.print("workload done; waiting for the drainer to catch up ...")
        drainer.wait_for_checkpoint(target, timeout_s=300)
        status = drainer.status()
        result = drainer.stop()
        drainer = None
        if not spark_diff:
            with up_db.connect() as up_conn, down_db.connect() as down_conn:
                cmp = compare_databases(up_conn, down_conn, [DATABASE])
        txns = sum(s.txns for s in stats.values())
        rows = sum(s.rows for s in stats.values())
        console.print(f"\n[bold]summary[/bold]: {txns} upstream txns, {rows} rows written by "
                      f"{len(stats)} workloads; drainer applied {status['applied_rows']} row "
                      f"changes (peak {peak:.0f} rows/s), {status['flushes']} conflict flushes, "
                      f"{status['resets']} pipeline resets")
        console.print(f"lag (apply time - commit time): p50 {_percentile(lags_ms, 50):.0f} ms, "
                      f"p99 {_percentile(lags_ms, 99):.0f} ms; final checkpoint "
                      f"{result.get('commit_ts')} consistent={result.get('consistent')}")
        if spark_diff:
            return _spark_compare(up_db, down_db, base, console, spark_handle)
        console.print(f"compared {cmp.tables} tables, {cmp.rows} rows")
        if cmp.equal:
            console.print("[bold green]diff: 0[/bold green]")
            return 0
        for d in cmp.diffs:
            lines = d.details()
            console.print(f"[bold red]differs[/bold red] {lines[0]}", markup=True)
            for line in lines[1:]:
                console.print(line, markup=False, highlight=False)
        console.print(f"[bold red]diff: {len(cmp.diffs)}[/bold red] ({cmp.rows_missing} rows "
                      f"missing downstream, {cmp.rows_extra} extra downstream, "
                      f"{cmp.rows_changed} with different values)")
        return 1
    finally:
        if drainer is not None:
            drainer.stop()
        if upstream is not None:
            upstream.close()
        if cluster is not None:
            cluster.stop()
        down_db.close()
        up_db.close()
        if own_ray:
            RayCalls.shutdown()
        if not keep and not work_dir:
            shutil.rmtree(base, ignore_errors=True)


def _check_spark() -> None:
    """Java and the JDBC jar of the Spark diff, before anything starts: their absence is a
    :class:`~spark_on_ray.errors.SparkSetupError` saying what to install."""
    # optional dependency: the Spark jobs' modules load only for --spark-diff
    from spark_on_ray.session import check_java, check_jdbc_jar

    check_java()
    check_jdbc_jar(SparkConfig())


def spark_diff_config(up_db, down_db, base: Path):
    """The Spark diff's job config for the demo's two servers and its ``demo`` database.

    Sized to leave Ray CPUs free (spark_on_ray.session refuses a Spark that takes them
    all): one executor reserving half a CPU, with 2 task slots; the demo's tables hold a
    few thousand rows, so small chunks give the checksum stage a few tasks to spread."""
    def side(server) -> DatabaseConfig:
        p = server.params()
        return DatabaseConfig(host=p["host"], port=p["port"], user=p["user"],
                              password=p["password"] or "")

    return SparkJobConfig(
        spark=SparkConfig(app_name="tidb-binlog-demo-diff", executor_cores=2,
                          executor_ray_cpus=0.5, executor_memory_bytes=768 << 20,
                          work_dir=str(base / "spark")),
        upstream=side(up_db), downstream=side(down_db),
        diff=DiffConfig(tables=(DATABASE,), chunk_size=2_000,
                        fix_sql_file=str(base / "fix.sql")))


def _spark_compare(up_db, down_db, base: Path, console, handle=None) -> int:
    """Run the Spark diff on the demo's databases, print its summary; exit code 0/1."""
    # optional dependency: raydp / pyspark load only for --spark-diff
    from spark_on_ray import diff
    from tidb_binlog.cli.spark import print_diff_summary  # the CLI's summary; rich, lazily

    cfg = spark_diff_config(up_db, down_db, base)
    console.print("comparing with the Spark diff (spark_on_ray.diff) on this Ray ...")
    t0 = time.monotonic()
    res = diff.run(cfg, handle=handle)
    print_diff_summary(console, cfg, res, time.monotonic() - t0)
    if res.equal:
        console.print("[bold green]diff: 0[/bold green]")
        return 0
    differing = sum(not t.equal for t in res.tables)
    console.print(f"[bold red]diff: {differing}[/bold red] ({sum(t.missing for t in res.tables)}"
                  f" rows missing downstream, {sum(t.extra for t in res.tables)} extra "
                  f"downstream, {sum(t.changed for t in res.tables)} with different values; "
                  f"fix SQL: {res.fix_sql_file})")
    return 1


def _run_workloads(upstream, duration_s: float, database: str):
    """Start every workload on its own thread; return (stats by kind, errors, threads)."""
    stats, errors = {}, []

    def one(kind: str):
        try:
            stats[kind] = workload.run(upstream, kind, sessions=2, ops=None,
                                       duration_s=duration_s, database=database,
                                       seed=len(kind))
        except Exception as exc:  # reported in the summary and the exit code
            log.exception("workload %s failed", kind)
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")

    # daemon: a failed demo returns without waiting for workloads it has given up on
    threads = [threading.Thread(target=one, args=(k,), name=f"demo-{k}", daemon=True)
               for k in WORKLOADS]
    for th in threads:
        th.start()
    return stats, errors, threads


def _join(threads, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))


def _follow(drainer, console, threads, stats, errors, extract_physical):
    """Show a live progress line while the workloads run; return lag samples (ms), peak.

    Raises :class:`WorkloadFailed` as soon as a workload thread records an error (and
    after the last one ends, for an error recorded at the very end)."""
    lags_ms: list[float] = []
    peak = 0.0
    last_rows, last_t = 0, time.monotonic()
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while any(th.is_alive() for th in threads):
            if errors:
                raise _workload_failed(errors)
            time.sleep(0.5)
            st = drainer.status()
            if st["state"] == "failed":
                raise UnavailableError(f"replication task failed: {st['error']}")
            if st["state"] == "restarting":  # its counters read 0 until the actor is back
                live.update(f"Ray is restarting the drainer's {st['restarting'].actor} "
                            "actor; it replays from its checkpoint once back")
                continue
            now = time.monotonic()
            rate = (st["applied_rows"] - last_rows) / max(now - last_t, 1e-6)
            last_rows, last_t = st["applied_rows"], now
            peak = max(peak, rate)
            cp = st["checkpoint_commit_ts"]
            lag_ms = time.time() * 1000 - extract_physical(cp) if cp else 0.0
            if cp:
                lags_ms.append(lag_ms)
            up_rows = sum(s.rows for s in stats.values())
            live.update(f"applied {st['applied_rows']:>8} rows  {rate:>7.0f} rows/s  "
                        f"lag {lag_ms:>7.0f} ms  checkpoint {cp}  "
                        f"pumps {len(st['pump_positions'])}  upstream rows {up_rows}")
    for th in threads:
        th.join()
    if errors:
        raise _workload_failed(errors)
    return lags_ms, peak
