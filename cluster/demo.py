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
6. a full comparison of every upstream table with the downstream.

It prints a summary (rows, rows/s, p50/p99 lag, ``diff: 0`` or the differing
tables) and returns 1 when the databases differ.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["run_demo"]

log = logging.getLogger(__name__)

DATABASE = "demo"
WORKLOADS = ("mixed", "random_dml", "all_types", "no_pk", "ddl")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run_demo(duration_s: float = 60.0, *, workers: int = 4, work_dir: str | None = None,
             keep: bool = False, console=None) -> int:
    """Run the demo; return the process exit code (0 when up- and downstream match)."""
    import ray
    from rich.console import Console

    from cluster.drainer import Drainer
    from cluster.launch import LocalCluster
    from tidb_binlog.compare import compare_databases
    from tidb_binlog.config import load_drainer_config
    from tidb_binlog.errors import BinlogError
    from tidb_binlog.testing.mariadb import MariaDBServer
    from tidb_binlog.tso import extract_physical
    from tidb_binlog.upstream import Upstream

    console = console or Console()
    base = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="tidb-binlog-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    console.print(f"[bold]tidb-binlog demo[/bold]: working in {base}")
    ray.init(namespace="tidb-binlog-demo", include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
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
        cfg = load_drainer_config(None, {
            "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
            "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
            "syncer.worker-count": workers, "syncer.txn-batch": 100,
            "initial-commit-ts": 0})
        drainer = Drainer.start(cfg, registry=cluster.registry, namespace="tidb-binlog-demo")
        stats, errors, threads = _run_workloads(upstream, duration_s, DATABASE)
        try:
            lags_ms, peak = _follow(drainer, console, threads, stats, extract_physical)
        except BinlogError as exc:
            console.print(f"[bold red]{exc}[/bold red]")
            for th in threads:
                th.join()
            return 1
        upstream.flush()
        target = cluster.get_ts()
        console.print("workload done; waiting for the drainer to catch up ...")
        drainer.wait_for_checkpoint(target, timeout_s=300)
        status = drainer.status()
        result = drainer.stop()
        drainer = None
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
        for err in errors:
            console.print(f"[yellow]workload error[/yellow]: {err}")
        console.print(f"compared {cmp.tables} tables, {cmp.rows} rows")
        if cmp.equal and not errors:
            console.print("[bold green]diff: 0[/bold green]")
            return 0
        for d in cmp.diffs:
            console.print(f"[bold red]differs[/bold red] {d}")
        console.print(f"[bold red]diff: {len(cmp.diffs)}[/bold red]")
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
        ray.shutdown()
        if not keep and not work_dir:
            shutil.rmtree(base, ignore_errors=True)


def _run_workloads(upstream, duration_s: float, database: str):
    """Start every workload on its own thread; return (stats by kind, errors, threads)."""
    from tidb_binlog.upstream import workload

    stats, errors = {}, []

    def one(kind: str):
        try:
            stats[kind] = workload.run(upstream, kind, sessions=2, ops=None,
                                       duration_s=duration_s, database=database,
                                       seed=len(kind))
        except Exception as exc:  # reported in the summary and the exit code
            log.exception("workload %s failed", kind)
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(k,), name=f"demo-{k}") for k in WORKLOADS]
    for th in threads:
        th.start()
    return stats, errors, threads


def _follow(drainer, console, threads, stats, extract_physical):
    """Show a live progress line while the workloads run; return lag samples (ms), peak."""
    from rich.live import Live

    from tidb_binlog.errors import UnavailableError

    lags_ms: list[float] = []
    peak = 0.0
    last_rows, last_t = 0, time.monotonic()
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while any(th.is_alive() for th in threads):
            time.sleep(0.5)
            st = drainer.status()
            if st["state"] == "failed":
                raise UnavailableError(f"replication task failed: {st['error']}")
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
    return lags_ms, peak
