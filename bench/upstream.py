"""Upstream throughput with binlog on vs off, sysbench oltp_insert shape, same run.

Starts a throwaway MariaDB (tidb_binlog.testing.mariadb) and ``--pumps`` real pump
processes (``tidb-binlog pump``, standalone, ``sync-log = true``: every acknowledged
binlog is fdatasync'ed), then runs ``--rounds`` rounds; each round measures, for
``--duration-s`` each and with ``--sessions`` threads that opened their connection
before the clock starts:

- **off**: plain pymysql: ``INSERT INTO sbtest (k, c, pad) VALUES (...)`` with
  ``--rows-per-txn`` rows, then COMMIT (the ceiling: two round trips per txn);
- **on**: the TiDB-behaving Upstream writing through the pump client (gRPC
  ``WriteBinlog``) to the pumps: start_ts, ``INSERT ... RETURNING`` (carrying the
  txn-status row and the schema version), Prewrite binlog (synchronous, durable in
  the pump), commit_ts, status row + COMMIT, Commit binlog (asynchronous, batched);
- **in-process** (with ``--in-process``): the same Upstream with an in-process writer
  that marshals every binlog but sends nothing (the upstream's own cost).

``--sessions`` is the same for every mode (never a different count for the ceiling).
Its default is 16, sysbench-typical (oltp runs use 16+ threads): with 4 sessions each
session mostly waits for its synchronous prewrite (5-15 ms under load), so the binlog-on
figure measured latency, not what the machine sustains. A comma list (``4,16,32``)
sweeps, and the RESULT line is the *first* count's.

Modes alternate within a round, so a noisy neighbour hits all of them alike. The
result uses the median round of each mode. Each mode also reports the CPU per
transaction of this process (``time.process_time``: the client), of the pump processes
and of MariaDB (``/proc/<pid>/stat``), medians over the rounds, counted from the moment
every session has connected until the last Commit binlog is flushed: on the shared
2-core box CPU per transaction, not latency, decides the ratio. Prints, last,
``RESULT upstream_binlog_on value=<rows/s> unit=rows/s ceiling=<rows/s off>
ratio=<on/off>`` (goal ratio > 0.7).

    .venv/bin/python bench/upstream.py --duration-s 4 --rounds 3 --in-process
    .venv/bin/python bench/upstream.py --sessions 16,4,32 --duration-s 4 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import tempfile
import threading
import time
from pathlib import Path

from proc_cpu import proc_cpu_s as _proc_cpu_s  # bench/: run as a script

from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.testing.mariadb import MariaDBServer
from tidb_binlog.testing.pump_process import PumpProcess
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import TsoBatcher, Upstream
from tidb_binlog.upstream.conn import connect
from tidb_binlog.upstream.workload import SBTEST_DDL

CLUSTER_ID = 6_900_000_000_000_000_011


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of another process so far (0.0 once it is gone)."""
    return _proc_cpu_s(pid, 0.0)


class CpuMeter:
    """CPU seconds spent by this process, the pumps and MariaDB during one mode."""

    def __init__(self, pump_pids: list[int], mariadb_pid: int | None):
        self._pump_pids = pump_pids
        self._mariadb_pid = mariadb_pid

    def snapshot(self) -> tuple[float, float, float]:
        return (time.process_time(), sum(proc_cpu_s(p) for p in self._pump_pids),
                proc_cpu_s(self._mariadb_pid) if self._mariadb_pid else 0.0)

    def since(self, before: tuple[float, float, float]) -> tuple[float, float, float]:
        """(client, pumps, mariadb) CPU seconds since ``before``."""
        return tuple(b - a for a, b in zip(before, self.snapshot(), strict=True))


def _rows(rng: random.Random, n: int) -> list[tuple]:
    return [(rng.randrange(1, 100_000), "".join(rng.choices(string.digits, k=119)),
             "".join(rng.choices(string.digits, k=59))) for _ in range(n)]


def _timed(n: int, duration_s: float, open_, loop, close, meter: CpuMeter,
           after=None) -> tuple[float, int, tuple[float, ...]]:
    """Run ``loop(state, deadline) -> rows`` on n threads after each opened its state;
    return (rows/s, rows, CPU seconds of (client, pumps, mariadb)). The clock and the
    CPU meter start once every thread has connected (connecting is not per-txn work)
    and stop after ``after()`` (the binlog-on mode's flush of its Commit binlogs)."""
    counts = [0] * n
    ready = threading.Barrier(n + 1)
    box: dict = {}

    def work(i: int) -> None:
        state = open_(i)
        try:
            ready.wait()
            counts[i] = loop(state, box["deadline"])
        finally:
            close(state)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    box["deadline"] = time.monotonic() + duration_s
    start = time.monotonic()
    ready.wait()
    cpu_before = meter.snapshot()
    for t in threads:
        t.join()
    if after is not None:
        after()
    elapsed_s = time.monotonic() - start
    cpu = meter.since(cpu_before)
    rows = sum(counts)
    return rows / elapsed_s, rows, cpu


def bench_off(params: dict, sessions: int, duration_s: float, rows_per_txn: int,
              seed: int, meter: CpuMeter):
    def open_(i):
        return connect(params, database="bench_off"), random.Random(seed + i)

    def loop(state, deadline) -> int:
        c, rng = state
        values = ", ".join(["(%s, %s, %s)"] * rows_per_txn)
        sql = f"INSERT INTO sbtest (k, c, pad) VALUES {values}"
        n = 0
        with c.cursor() as cur:
            while time.monotonic() < deadline:
                cur.execute(sql, [v for r in _rows(rng, rows_per_txn) for v in r])
                c.commit()
                n += rows_per_txn
        return n

    return _timed(sessions, duration_s, open_, loop, lambda state: state[0].close(), meter)


def bench_on(up: Upstream, sessions: int, duration_s: float, rows_per_txn: int,
             seed: int, meter: CpuMeter):
    def open_(i):
        return up.session(), random.Random(seed + i)

    def loop(state, deadline) -> int:
        s, rng = state
        n = 0
        while time.monotonic() < deadline:
            with s.begin() as t:
                n += t.insert("sbtest", [{"k": k, "c": c, "pad": pad}
                                         for k, c, pad in _rows(rng, rows_per_txn)])
        return n

    def close(state):
        state[0].close()

    # the asynchronous Commit binlogs are part of the cost: flushed inside the clock
    return _timed(sessions, duration_s, open_, loop, close, meter, after=up.flush)


# -- real pumps: `tidb-binlog pump` processes ---------------------------------------------
def _mariadb_pid(server: MariaDBServer) -> int | None:
    """The server's pid from its pid file (None when it cannot be read)."""
    try:
        return int((server.directory / "mysqld.pid").read_text().strip())
    except (OSError, TypeError, ValueError):
        return None


def start_pump(work: Path, i: int, *, sync_log: bool = True) -> tuple[PumpProcess, str]:
    """A serving ``tidb-binlog pump`` process ``pump-<i>`` and its gRPC address."""
    pump = PumpProcess({"data-dir": str(work / f"pump{i}"), "node-id": f"pump-{i}",
                        "cluster-id": CLUSTER_ID, "storage.sync-log": sync_log,
                        "storage.stop-write-at-available-space": "1 MiB"},
                       work, name=f"pump{i}").start()
    return pump, pump.addr


def stop_pump(pump: PumpProcess) -> None:
    pump.terminate()


TSO_CHOICES = ("oracle", "registry", "registry-batched")


def open_tso(kind: str, work: Path):
    """The upstream's ``get_ts`` and a function that releases it."""
    if kind == "oracle":
        return TimestampOracle().get_ts, lambda: None
    import ray

    from cluster.registry import get_or_create_registry

    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR",
             namespace="bench-upstream")
    registry = get_or_create_registry(work / "registry", namespace="bench-upstream")

    def stop() -> None:
        ray.kill(registry.actor, no_restart=True)
        ray.shutdown()

    if kind == "registry-batched":
        return TsoBatcher(registry.get_ts).get_ts, stop
    return registry.get_ts, stop


def _session_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--sessions wants positive integers separated by "
                                         f"commas, e.g. 16 or 4,16,32; got {text!r}")
    return counts


def _report(sessions: int, figures: dict, cpu_ms: dict, mariadb_known: bool) -> None:
    off = statistics.median(figures["off"])
    on = statistics.median(figures["on"])
    spread = ", ".join(f"{x / y:.2f}" for x, y in zip(figures["on"], figures["off"], strict=True))
    print(f"[sessions={sessions}] binlog off: {off:,.0f} rows/s median (plain pymysql INSERT + "
          "COMMIT)")
    print(f"[sessions={sessions}] binlog on:  {on:,.0f} rows/s median (Upstream -> pump client -> "
          f"pumps) ratio={on / off:.3f}; per-round ratios {spread}")
    if figures["in-process"]:
        ip = statistics.median(figures["in-process"])
        print(f"[sessions={sessions}] in-process: {ip:,.0f} rows/s median (Upstream, binlogs "
              f"marshalled, not sent) ratio={ip / off:.3f}")
    print(f"[sessions={sessions}] CPU per transaction, ms (median over rounds; client = this "
          "process, mariadb " + ("server" if mariadb_known else "unknown") + "):")
    for mode, rows in cpu_ms.items():
        if rows:
            client_ms, pump_ms, db_ms = (statistics.median(c) for c in zip(*rows, strict=True))
            print(f"  {mode:10} client {client_ms:.2f}  pumps {pump_ms:.2f}  mariadb {db_ms:.2f}"
                  f"  total {client_ms + pump_ms + db_ms:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=_session_counts, default=[16],
                    help="concurrent sessions, the same for every mode; a comma list sweeps "
                         "(e.g. 4,16,32) and the RESULT line is the first count's")
    ap.add_argument("--duration-s", type=float, default=5.0, help="per mode and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows-per-txn", type=int, default=1)
    ap.add_argument("--pumps", type=int, default=1)
    ap.add_argument("--in-process", action="store_true",
                    help="also measure the upstream with an in-process writer")
    ap.add_argument("--tso", choices=TSO_CHOICES, default="oracle",
                    help="the upstream's TSO: an in-process TimestampOracle (the cheapest), "
                         "or the registry actor on a local Ray, one call per timestamp or "
                         "through a TsoBatcher (PD client's coalescing)")
    args = ap.parse_args()

    from tidb_binlog.pump_client import PumpClient

    modes = ("off", "on", "in-process")
    figures = {n: {m: [] for m in modes} for n in args.sessions}
    cpu_ms = {n: {m: [] for m in modes} for n in args.sessions}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-upstream-") as tmp, \
            MariaDBServer(name="bench-upstream") as server:
        server.start()
        params = server.params()
        conn = connect(params, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench_off")
            cur.execute("USE bench_off")
            cur.execute(SBTEST_DDL)
        conn.close()
        pumps = [start_pump(Path(tmp), i) for i in range(args.pumps)]
        client = PumpClient(None, cluster_id=CLUSTER_ID, pumps=[a for _, a in pumps])
        get_ts, tso_stop = open_tso(args.tso, Path(tmp))
        up = Upstream(params, client, get_ts, database="bench_on", cluster_id=CLUSTER_ID)
        up.ddl("CREATE DATABASE bench_on")
        up.ddl(SBTEST_DDL)
        collector = BinlogCollector(keep=False)
        inproc = Upstream(params, collector, get_ts, database="bench_inproc")
        inproc.ddl("CREATE DATABASE bench_inproc")
        inproc.ddl(SBTEST_DDL)
        up.reload()  # both share one catalog: start from its version (else the first
        inproc.reload()  # transactions of each session re-read the catalog at commit)
        mariadb_pid = _mariadb_pid(server)
        meter = CpuMeter([p.pid for p, _ in pumps], mariadb_pid)

        def measure(n: int, mode: str, run, *run_args) -> None:
            rate, rows, cpu_s = run(*run_args, meter)
            txns = max(rows // args.rows_per_txn, 1)
            figures[n][mode].append(rate)
            cpu_ms[n][mode].append(tuple(c / txns * 1e3 for c in cpu_s))

        try:
            for r in range(args.rounds):
                for n in args.sessions:
                    seed = 1000 * r
                    shape = (n, args.duration_s, args.rows_per_txn)
                    measure(n, "off", bench_off, params, *shape, seed)
                    measure(n, "on", bench_on, up, *shape, seed + 100)
                    if args.in_process:
                        measure(n, "in-process", bench_on, inproc, *shape, seed + 200)
                    print(f"round {r} sessions={n}: " + "  ".join(
                        f"{k} {v[-1]:,.0f}" for k, v in figures[n].items() if v), flush=True)
            errors = up.finish_binlog_errors
        finally:
            up.close()
            inproc.close()
            client.close()
            for proc, _ in pumps:
                stop_pump(proc)
            tso_stop()
    load_after = os.getloadavg()
    print(f"sessions={','.join(map(str, args.sessions))} rows_per_txn={args.rows_per_txn} "
          f"duration_s={args.duration_s} rounds={args.rounds} pumps={args.pumps} (tidb-binlog "
          f"pump processes, sync-log) tso={args.tso} finish_binlog_errors={errors} load average "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}")
    for n in args.sessions:
        _report(n, figures[n], {m: v for m, v in cpu_ms[n].items() if v}, mariadb_pid is not None)
    first = args.sessions[0]
    off = statistics.median(figures[first]["off"])
    on = statistics.median(figures[first]["on"])
    print(f"RESULT upstream_binlog_on value={on:.0f} unit=rows/s ceiling={off:.0f} "
          f"ratio={on / off:.3f}")


if __name__ == "__main__":
    main()
