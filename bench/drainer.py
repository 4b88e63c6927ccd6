"""Drainer throughput against its ceiling, and apply lag, on a real local Ray (one run).

Stands up two throwaway MariaDB servers (upstream behind the TiDB-behaving emulator,
downstream), the registry and two PumpActors (:class:`cluster.launch.LocalCluster`,
``sync-log`` on), then:

(a) **ceiling**: one client copies the ``sbtest`` rows the insert phase produced into
    ``ceiling.sbtest`` on the same downstream with 1000-row multi-row INSERTs, one
    commit per statement; the median of 3 rounds (one lasts well under a second);
(b) **drainer**: for each of the sysbench ``insert``, ``update_index`` and ``mixed``
    workloads (one row change per txn; ``--sessions`` upstream threads): the workload
    runs upstream with no drainer, so its binlogs sit in the 2 pumps; then a drainer
    task starts (``initial-commit-ts = 0`` the first time, the checkpoint after) and
    the clock runs from the task's first "running" status until its checkpoint
    reaches the TSO taken after the workload; rows/s = the workload's row changes /
    that time. The task is stopped (final checkpoint) before the next phase.
    ``insert_txn100`` inserts ``--rows-txn100`` rows (default: ``--rows``, at least 200k)
    100 per upstream txn: the apply path without the per-transaction cost; ``bank`` (not run by default) creates
    ``BANK_ACCOUNTS`` accounts, then ``--rows / 3`` transfers (read both accounts FOR
    UPDATE, update both, log the transfer: 3 row changes per txn, ``--sessions``
    threads), multi-row transactions that share keys;
(c) **lag**: a drainer task runs while the upstream inserts ``--lag-rows-per-s``
    rows/s (``--lag-rows-per-txn`` rows per txn, ``--lag-sessions`` threads, paced)
    for ``--lag-s`` seconds, the pumps writing a fake binlog every
    ``--fake-binlog-interval-s`` (0.1 s) when idle; each
    part a SQL worker commits gives a sample ``committed_at - physical(commit_ts)``
    (:meth:`actors.drainer.CoordinatorActor.apply_samples`); p50/p99 over the
    samples of the paced window. The rate the upstream actually reached is printed
    beside the figures.

With ``--txn-atomic`` every phase of (b) is timed twice on the same stored binlogs:
the default, then ``[syncer] txn-atomic = true`` into a second downstream server (its
own checkpoint, so both tasks start each phase where their previous phase ended), and
each phase prints a second line, ``RESULT drainer_<phase>_txn_atomic``, with the ratio
to the default as ``vs_default`` (and to the ceiling). The lag phase runs in the
default mode only.

With ``--vs-replica`` the upstream MariaDB writes its own binlog (ROW, GTIDs) and a
native MariaDB replica of it (``bench/replica.py``: ``slave_parallel_threads`` =
``--workers``, ``slave_parallel_mode=optimistic``; the emulator's catalog ignored),
stopped while each workload runs, catches up the same backlog after the drainer
(START SLAVE until ``MASTER_GTID_WAIT`` reaches the primary's ``@@gtid_binlog_pos``
taken after the workload); both must then hold the same rows (count and checksum per
table). ``--replica-serial`` adds a second replica with MariaDB's default serial apply.
Each phase prints ``RESULT drainer_<phase>_vs_replica value=<drainer rows/s>
unit=rows/s replica=<rows/s> ratio=<drainer/replica>`` (``replica_serial=``,
``ratio_serial=`` with ``--replica-serial``; ``flush_log_at_trx_commit=``, every server's,
``--flush-log-at-trx-commit``).

Prints, last::

    RESULT drainer_insert value=<rows/s> unit=rows/s ceiling=<rows/s> ratio=<r>
    RESULT drainer_update_index value=<rows/s> unit=rows/s ceiling=<rows/s> ratio=<r>
    RESULT drainer_mixed value=<rows/s> unit=rows/s ceiling=<rows/s> ratio=<r>
    RESULT drainer_insert_txn100 value=<rows/s> unit=rows/s ceiling=<rows/s> ratio=<r>
    RESULT drainer_bank value=<rows/s> unit=rows/s ceiling=<rows/s> ratio=<r>   (when named)
    RESULT drainer_<phase>_txn_atomic value=<rows/s> ... vs_default=<r>   (--txn-atomic)
    RESULT drainer_lag_p50_ms value=<ms> unit=ms upstream_rows_per_s=<r>
    RESULT drainer_lag_p99_ms value=<ms> unit=ms upstream_rows_per_s=<r>

Goals: ratio >= 0.8 for inserts and >= 0.5 for mixed; lag p99 < 1000 ms.

    .venv/bin/python bench/drainer.py --rows 30000 --workers 4 --txn-batch 200
    .venv/bin/python bench/drainer.py --txn-atomic --phases insert,insert_txn100,bank
    .venv/bin/python bench/drainer.py --vs-replica --replica-serial
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from proc_cpu import Profiler, cpu_by_process, cpu_split  # bench/: run as a script

__all__ = ["main"]

DB = "sb"
CEILING_ROWS_PER_STATEMENT = 1000
CEILING_ROUNDS = 3
BANK_ACCOUNTS = 1000
BANK_DDL = ("CREATE TABLE bank_accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
            "CREATE TABLE bank_transfers (id BIGINT PRIMARY KEY, src INT NOT NULL, "
            "dst INT NOT NULL, amount INT NOT NULL)")


def percentile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def drainer_config(down_db, args, txn_atomic: bool = False):
    from tidb_binlog.config import load_drainer_config

    return load_drainer_config(None, {
        "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
        "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
        "syncer.worker-count": args.workers, "syncer.txn-batch": args.txn_batch,
        "syncer.to.merge": not args.no_merge, "syncer.txn-atomic": txn_atomic,
        "initial-commit-ts": 0, "addr": "127.0.0.1:0"})


def bank(upstream, transfers: int, sessions: int):
    """The ``bank`` phase's upstream: accounts, then ``transfers`` 3-row transfers."""
    from tidb_binlog.errors import UpstreamError
    from tidb_binlog.upstream.workload import WorkloadStats

    for ddl in BANK_DDL:
        upstream.ddl(ddl, DB)
    start = time.perf_counter()
    with upstream.session(DB) as s, s.begin() as t:
        t.insert("bank_accounts", [{"id": i, "balance": 1000}
                                   for i in range(1, BANK_ACCOUNTS + 1)])
    stats = WorkloadStats(txns=1, rows=BANK_ACCOUNTS)
    lock = threading.Lock()

    def run(no: int, count: int):
        rng = random.Random(no)
        with upstream.session(DB) as s:
            done = 0
            while done < count:
                a, b = rng.sample(range(1, BANK_ACCOUNTS + 1), 2)
                try:
                    with s.begin() as t:
                        got = dict(t.query("SELECT id, balance FROM bank_accounts WHERE id IN "
                                           "(%s, %s) FOR UPDATE", (a, b)))
                        amount = min(rng.randint(1, 50), got[a])
                        t.update("bank_accounts", {"balance": got[a] - amount}, "id = %s", (a,))
                        t.update("bank_accounts", {"balance": got[b] + amount}, "id = %s", (b,))
                        t.insert("bank_transfers", [{"id": no * 10_000_000 + done, "src": a,
                                                     "dst": b, "amount": amount}])
                except UpstreamError as exc:
                    if exc.code in (1213, 1205):  # lock conflict between sessions: retry
                        with lock:
                            stats.retries += 1
                        continue
                    raise
                done += 1
                with lock:
                    stats.txns += 1
                    stats.rows += 3

    share = [transfers // sessions + (i < transfers % sessions) for i in range(sessions)]
    threads = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(share) if n]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    upstream.flush()
    stats.elapsed_s = time.perf_counter() - start
    return stats


def task_overrides(args) -> dict:
    return {"max_inflight": args.max_inflight, "merge_batch": args.merge_batch}


def ceiling(up_db, down_db, rounds: int = CEILING_ROUNDS) -> tuple[int, float]:
    """(rows, seconds): one client, 1000-row multi-row INSERTs, commit per statement, into a
    fresh table each round; the median round (one round lasts well under a second, so a
    single one swings with whatever else the machine does)."""
    from tidb_binlog.upstream.workload import SBTEST_DDL

    with up_db.connect(DB) as up:
        with up.cursor() as cur:
            cur.execute("SELECT id, k, c, pad FROM sbtest ORDER BY id")
            rows = cur.fetchall()
    times = []
    with down_db.connect(autocommit=False) as conn, conn.cursor() as cur:
        for _ in range(rounds):
            cur.execute("DROP DATABASE IF EXISTS ceiling")
            cur.execute("CREATE DATABASE ceiling")
            cur.execute("USE ceiling")
            cur.execute(SBTEST_DDL)
            conn.commit()
            start = time.perf_counter()
            for i in range(0, len(rows), CEILING_ROWS_PER_STATEMENT):
                chunk = rows[i:i + CEILING_ROWS_PER_STATEMENT]
                cur.execute("INSERT INTO sbtest (id, k, c, pad) VALUES "
                            + ",".join(["(%s,%s,%s,%s)"] * len(chunk)),
                            [v for row in chunk for v in row])
                conn.commit()
            times.append(time.perf_counter() - start)
    return len(rows), statistics.median(times)


def reset_downstream(down_db) -> None:
    """Drop what a drainer wrote downstream (tables and checkpoint), for ``--repeat``."""
    with down_db.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute("DROP DATABASE IF EXISTS tidb_binlog")


def window_phases(samples: list[tuple[int, float]], start_s: float, end_s: float,
                  rows: int) -> str:
    """``first commit after X s, Y rows/s between the first and the last commit, Z s to
    the checkpoint``, from the coordinator's (commit_ts, committed_at) samples."""
    if not samples:
        return "no commits sampled"
    first = min(at for _, at in samples)
    last = max(at for _, at in samples)
    steady = rows / (last - first) if last > first else 0.0
    return (f"first commit after {first - start_s:.2f} s, {steady:.0f} rows/s from the first "
            f"to the last commit, then {max(0.0, end_s - last):.2f} s to the checkpoint")


def time_drainer(cluster, down_db, args, target_ts: int, rows: int,
                 label: str = "drainer", txn_atomic: bool = False) -> tuple[float, dict]:
    """Start a task, time it from "running" to checkpoint >= target_ts, stop it; the
    status gets ``cpu_split``: CPU per row of each process kind over that window, and
    ``phases``: how the window splits into before the first downstream commit, between
    the first and the last (the steady apply rate), and after it (the checkpoint waiting
    for every pump's watermark to pass the target)."""
    import ray

    from cluster.drainer import Drainer

    drainer = Drainer.start(drainer_config(down_db, args, txn_atomic),
                            registry=cluster.registry, **task_overrides(args))
    profiler = None
    try:
        start = None
        while True:
            st = drainer.status()
            if st["state"] == "failed":
                raise RuntimeError(f"drainer failed: {st['error']}")
            now = time.perf_counter()
            if args.timeline and start is not None:
                print(f"  t={now - start:5.2f}s merged={st['merged']} handed_out="
                      f"{st['applied_rows']} outstanding={st['outstanding']} "
                      f"batches={st['routed_batches']} checkpoint={st['checkpoint_commit_ts']}",
                      flush=True)
            if start is None and st["state"] == "running":
                start, start_wall = now, time.time()
                cpu_start = cpu_by_process()  # the actors exist: their start-up is not counted
                if args.profile:
                    profiler = Profiler(Path(args.profile), label)
            if start is not None and st["checkpoint_commit_ts"] >= target_ts:
                end_wall = time.time()
                st["cpu_split"] = cpu_split(cpu_start, cpu_by_process(), rows)
                if profiler is not None:
                    profiler.stop()
                samples = ray.get(drainer.coordinator.apply_samples.options(
                    concurrency_group="status").remote())
                st["phases"] = window_phases(samples, start_wall, end_wall, rows)
                return now - start, st
            time.sleep(0.05)
    finally:
        if profiler is not None:
            profiler.stop()  # no-op once stopped; otherwise py-spy must not outlive the run
        drainer.stop()


def paced_inserts(upstream, rows_per_s: float, rows_per_txn: int, seconds: float,
                  sessions: int) -> tuple[int, float]:
    """Insert ``rows_per_s`` rows/s for ``seconds`` (as far as the upstream can)."""
    from tidb_binlog.upstream.workload import _sb_row

    done = [0]
    lock = threading.Lock()
    per_session_txn_s = rows_per_txn * sessions / rows_per_s
    start = time.monotonic()

    def run(no: int):
        rng = random.Random(no)
        with upstream.session(DB) as s:
            n = 0
            while True:
                due = start + n * per_session_txn_s + no * per_session_txn_s / sessions
                now = time.monotonic()
                if due - start >= seconds:
                    return
                if due > now:
                    time.sleep(due - now)
                with s.begin() as t:
                    t.insert("sbtest", [_sb_row(rng) for _ in range(rows_per_txn)])
                with lock:
                    done[0] += rows_per_txn
                n += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return done[0], time.monotonic() - start


def lag(cluster, upstream, down_db, args) -> tuple[list[float], float]:
    """Lag samples (ms) while the upstream inserts steadily; and the rate reached."""
    import ray

    from cluster.drainer import Drainer
    from tidb_binlog.tso import extract_physical

    drainer = Drainer.start(drainer_config(down_db, args), registry=cluster.registry,
                            **task_overrides(args))
    coord = drainer.coordinator
    try:
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)  # caught up, idle
        ray.get(coord.apply_samples.options(concurrency_group="status").remote())
        first_ts = cluster.get_ts()
        rows, seconds = paced_inserts(upstream, args.lag_rows_per_s, args.lag_rows_per_txn,
                                      args.lag_s, args.lag_sessions)
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        samples = ray.get(coord.apply_samples.options(concurrency_group="status").remote())
    finally:
        drainer.stop()
    lags = [at_s * 1000.0 - extract_physical(ts) for ts, at_s in samples if ts >= first_ts]
    return lags, rows / seconds


def main(argv=None) -> int:
    import ray
    from replica import NativeReplica, primary_gtid_pos, time_replicas, vs_replica_line

    from cluster.launch import LocalCluster, PumpOptions
    from tidb_binlog.testing.mariadb import MariaDBServer
    from tidb_binlog.upstream import Upstream, workload

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=30000, help="txns (= rows) per workload")
    p.add_argument("--rows-txn100", type=int, default=None,
                   help="rows of insert_txn100 (100 per txn; default: --rows, at least "
                        "200000: at 30k rows the replica applies the phase in 0.2 s and "
                        "fixed costs decide the ratio)")
    p.add_argument("--sessions", type=int, default=16,
                   help="upstream threads (only how fast the binlogs are produced)")
    p.add_argument("--workers", type=int, default=4, help="syncer.worker-count")
    p.add_argument("--txn-batch", type=int, default=200, help="syncer.txn-batch")
    p.add_argument("--merge-batch", type=int, default=512, help="merger batch (items)")
    p.add_argument("--max-inflight", type=int, default=4, help="merged batches in flight")
    p.add_argument("--no-merge", action="store_true", help="syncer.to.merge = false")
    p.add_argument("--txn-atomic", action="store_true",
                   help="also time every drainer phase with syncer.txn-atomic = true (into a "
                        "second downstream server) and print RESULT drainer_<phase>_txn_atomic")
    p.add_argument("--vs-replica", action="store_true",
                   help="also time a native MariaDB replica (parallel, optimistic, --workers "
                        "threads) on each phase's backlog: RESULT drainer_<phase>_vs_replica")
    p.add_argument("--flush-log-at-trx-commit", type=int, choices=(0, 1, 2), default=None,
                   help="innodb_flush_log_at_trx_commit on every server (upstream, the "
                        "drainer's downstream, the replicas); default: MariaDB's (1)")
    p.add_argument("--replica-serial", action="store_true",
                   help="with --vs-replica: also a replica with MariaDB's default serial apply")
    p.add_argument("--lag-rows-per-s", type=float, default=5000.0)
    p.add_argument("--lag-rows-per-txn", type=int, default=50)
    p.add_argument("--lag-sessions", type=int, default=8, help="upstream threads for (c)")
    p.add_argument("--lag-s", type=float, default=20.0)
    p.add_argument("--fake-binlog-interval-s", type=float, default=0.1,
                   help="pumps' gen-binlog-interval (bounds how long the merge waits)")
    p.add_argument("--lag-only", action="store_true", help="skip (a) and (b)")
    p.add_argument("--phases", default="insert,update_index,mixed,insert_txn100,lag",
                   help="comma-separated subset of the phases to run (the ceiling runs "
                        "with insert; bank, 3-row transfer txns, runs only when named)")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the drainer on each phase's stored binlogs this many times "
                        "(downstream emptied in between; the median counts); only with a "
                        "single phase")
    p.add_argument("--timeline", action="store_true",
                   help="print the task's status at every poll (50 ms) of the timed window")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="py-spy every actor process during each timed window; raw stacks "
                        "go to DIR, the top functions per actor kind are printed")
    args = p.parse_args(argv)
    if args.repeat > 1 and len([x for x in args.phases.split(",") if x != "lag"]) != 1:
        p.error("--repeat needs exactly one of insert, update_index, mixed, insert_txn100, "
                "bank in --phases")
    if args.replica_serial and not args.vs_replica:
        p.error("--replica-serial needs --vs-replica")
    logging.basicConfig(level=logging.WARNING)

    base = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-drainer-"))
    # address="local": a Ray of our own even when a cluster is recorded on the host
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
             namespace="bench-drainer", object_store_memory=300 << 20)
    # --flush-log-at-trx-commit: the same redo-log durability on every server (default:
    # the servers' own, 1 = a flush per commit)
    durability = ({"innodb-flush-log-at-trx-commit": str(args.flush_log_at_trx_commit)}
                  if args.flush_log_at_trx_commit is not None else {})
    up_db = MariaDBServer(base, name="bench-up", log_bin=args.vs_replica,
                          server_id=1 if args.vs_replica else None, options=durability).start()
    down_db = MariaDBServer(base, name="bench-down", options=durability).start()
    down_atomic = (MariaDBServer(base, name="bench-down-atomic", options=durability).start()
                   if args.txn_atomic else None)
    cluster = LocalCluster(base / "cluster", pumps=2, upstream_params=up_db.params(),
                           namespace="bench-drainer", pump_options=PumpOptions(
                               gen_binlog_interval_s=args.fake_binlog_interval_s)).start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    results = []
    replicas = []
    try:
        if args.vs_replica:  # before the first DDL: the tables reach them by replication
            replicas.append(NativeReplica(base, up_db, name="bench-replica", server_id=2,
                                          threads=args.workers, options=durability).start())
            if args.replica_serial:
                replicas.append(NativeReplica(base, up_db, name="bench-replica-serial",
                                              server_id=3, threads=0,
                                              options=durability).start())
        replica_phases = {}
        upstream.ddl(f"CREATE DATABASE {DB}")
        phases = {}
        upstream.ddl(workload.SBTEST_DDL, DB)
        wanted = set(args.phases.split(","))
        kinds = () if args.lag_only else tuple(
            k for k in ("insert", "update_index", "mixed", "insert_txn100", "bank")
            if k in wanted)
        ceiling_rate = 0.0
        for kind in kinds:
            t0 = time.perf_counter()
            if kind == "insert_txn100":  # the same rows, 100 per upstream txn
                rows100 = args.rows_txn100 or max(args.rows, 200_000)
                stats = workload.run(upstream, "large", ops=rows100 // 100, rows_per_txn=100,
                                     database=DB, seed=4)
            elif kind == "bank":
                stats = bank(upstream, args.rows // 3, args.sessions)
            else:
                stats = workload.run(upstream, kind, sessions=args.sessions, ops=args.rows,
                                     database=DB, seed=3)
            target = cluster.get_ts()
            gtid_target = primary_gtid_pos(up_db) if replicas else ""
            print(f"upstream {kind}: {stats.txns} txns, {stats.rows} rows in "
                  f"{time.perf_counter() - t0:.1f} s ({stats.rows_per_s:.0f} rows/s)",
                  flush=True)
            modes = [(kind, down_db, False)]
            if down_atomic is not None:  # same binlogs, the other downstream and checkpoint
                modes.append((f"{kind}_txn_atomic", down_atomic, True))
            for label, down, atomic in modes:
                runs = []
                for r in range(args.repeat):
                    if r:  # the same stored binlogs again, into an empty downstream
                        reset_downstream(down)
                    seconds, st = time_drainer(cluster, down, args, target, stats.rows, label,
                                               txn_atomic=atomic)
                    runs.append(seconds)
                    print(f"drainer {label}: {stats.rows} rows in {seconds:.2f} s "
                          f"({stats.rows / seconds:.0f} rows/s; flushes {st['flushes']}, "
                          f"{st['merged'] / max(st['routed_batches'], 1):.0f} items per "
                          "batch); " + st["cpu_split"] + "; " + st["phases"], flush=True)
                phases[label] = (stats.rows, statistics.median(runs))
            if replicas:
                replica_phases[kind] = time_replicas(replicas, up_db, gtid_target, stats.rows,
                                                     down_db, DB, kind)
            if kind == "insert":
                c_rows, c_seconds = ceiling(up_db, down_db)
                ceiling_rate = c_rows / c_seconds
                print(f"ceiling: {c_rows} rows in {c_seconds:.2f} s ({ceiling_rate:.0f} rows/s)",
                      flush=True)
        for kind, (rows, seconds) in phases.items():
            value = rows / seconds
            ratio = value / ceiling_rate if ceiling_rate else 0.0
            line = (f"RESULT drainer_{kind} value={value:.0f} unit=rows/s "
                    f"ceiling={ceiling_rate:.0f} ratio={ratio:.2f}")
            base_kind = kind.removesuffix("_txn_atomic")
            if base_kind != kind:
                default_rows, default_s = phases[base_kind]
                line += f" vs_default={value / (default_rows / default_s):.2f}"
            results.append(line)
            if kind in replica_phases:
                results.append(vs_replica_line(kind, value, replica_phases[kind], rows)
                               + f" flush_log_at_trx_commit={args.flush_log_at_trx_commit or 1}")
        if "lag" in wanted or args.lag_only:
            lags, rate = lag(cluster, upstream, down_db, args)
            print(f"lag: {len(lags)} samples at {rate:.0f} upstream rows/s", flush=True)
            for q in (50, 99):
                results.append(f"RESULT drainer_lag_p{q}_ms value={percentile(lags, q):.0f} "
                               f"unit=ms upstream_rows_per_s={rate:.0f}")
    finally:
        upstream.close()
        for replica in replicas:
            replica.close()
        cluster.stop()
        down_db.close()
        if down_atomic is not None:
            down_atomic.close()
        up_db.close()
        ray.shutdown()
    for line in results:
        print(line)
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
          + f" ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
