"""``tidb-binlog chaos``: the demo's pipeline under a seeded schedule of faults.

What runs (all on this machine, all cleaned up at the end):

- the demo's stack: a local Ray, the registry/TSO, two PumpActors, throwaway
  upstream and downstream MariaDB servers, a drainer task (exactly-once);
- the demo's workloads (``cluster.demo.WORKLOADS``, including the DDL stream), each
  in a loop of short slices so a failed transaction (the upstream server was just
  killed, a pump is paused) ends one slice and the workload goes on;
- a **bank** workload: ``chaos.accounts`` (fixed number of accounts, fixed total)
  and ``chaos.transfers`` (a ledger); one transfer = read two accounts FOR UPDATE,
  move an amount, append the ledger row, in one transaction. Every write stamps a
  fresh token;
- the fault schedule of :mod:`tidb_binlog.chaos.schedule`, one fault at a time;
  after each fault the runner measures the recovery (from the fault's end until the
  drainer's checkpoint passed a timestamp taken after it and its lag is under
  ``recovered_lag_s``; the outage, from the injection, beside it) and checks the
  bank invariant upstream.

At the end: stop the workloads, wait for the checkpoint to pass the upstream's
last commit, compare every table (:func:`tidb_binlog.compare.compare_databases`),
check the bank sums upstream and downstream and the audit log (row changes applied
twice), print the per-kind table and the ``RESULT chaos ...`` line. Exit 1 on any
diff, lost or duplicated row, unrecovered fault, failed task or broken invariant;
then the run directory is kept with ``schedule.json``, ``events.log``,
``result.json``, ``REPLAY`` (the exact command), ``chaos.log`` and the Ray and
MariaDB logs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import shlex
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from actors.ray_calls import RayCalls, RayError
from cluster.demo import DATABASE as DEMO_DB
from cluster.demo import WORKLOADS
from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from tidb_binlog.chaos import (
    FAULT_KINDS,
    Fault,
    RecoveryRecord,
    Verdict,
    audit_duplicates,
    audit_trigger_sql,
    bank_violation,
    make_schedule,
    recovery_table,
    result_line,
    schedule_to_json,
)
from tidb_binlog.cli.console import make_console
from tidb_binlog.compare import compare_databases
from tidb_binlog.config import load_drainer_config
from tidb_binlog.errors import (
    BinlogError,
    InvalidArgument,
    SchemaChanged,
    UnavailableError,
    UpstreamError,
)
from tidb_binlog.testing.mariadb import MariaDBServer
from tidb_binlog.tso import extract_physical
from tidb_binlog.upstream import Upstream, workload

__all__ = ["run_chaos", "BANK_DB", "ACCOUNTS", "INITIAL_BALANCE"]

log = logging.getLogger(__name__)

NAMESPACE = "tidb-binlog-chaos"
BANK_DB = "chaos"
ACCOUNTS = 40
INITIAL_BALANCE = 1000
SLICE_S = 4.0               # a workload runs in slices this long (failures end a slice)
FAULT_TIMEOUT_S = 120.0     # a fault not recovered from within this is a failure
BANK_DDL = (
    "CREATE TABLE IF NOT EXISTS accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL, "
    "token BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS transfers (id BIGINT PRIMARY KEY, src INT NOT NULL, "
    "dst INT NOT NULL, amount INT NOT NULL, token BIGINT NOT NULL)",
)
AUDITED = {"accounts": "id", "transfers": "id"}


class _Stack:
    """Handles of everything the run started, for the faults and the clean-up."""

    def __init__(self, up_db, down_db, cluster, upstream, drainer, workers: int):
        self.up_db, self.down_db = up_db, down_db
        self.cluster, self.upstream, self.drainer = cluster, upstream, drainer
        self.workers = workers
        self.stopped_pids: set[int] = set()   # SIGSTOPped, to SIGCONT whatever happens

    def actor(self, target: str):
        if target.startswith("pump-"):
            return self.cluster.pumps[target]
        if target.startswith("worker-"):
            return self.drainer.workers[int(target.split("-")[1])]
        if target == "registry":
            return self.cluster.registry.actor
        return {"merger": self.drainer.merger, "keeper": self.drainer.keeper,
                "coordinator": self.drainer.coordinator}[target]


def actor_pid(actor, timeout_s: float = 60.0) -> int:
    """The pid of an actor's current process, from Ray's control store (the actor
    itself is not asked: it may be busy or restarting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state, pid = RayCalls.actor_process(actor)
        if state == "ALIVE" and pid:
            return pid
        if time.monotonic() > deadline:
            raise UnavailableError(f"actor {RayCalls.actor_id(actor)} is not alive after "
                                   f"{timeout_s:g} s: {state}")
        time.sleep(0.2)


def _resume_ddl_jobs(upstream, note) -> None:
    """Finish DDL jobs an upstream crash left queued (as TiDB's next DDL owner does);
    the DDL workload's next statement would too, but not after the last fault."""
    try:
        resumed = upstream.resume_ddl_jobs()
    except Exception as exc:  # the next DDL (or the final call) tries again
        note(f"resuming queued DDL jobs failed for now: {type(exc).__name__}: {exc}")
        return
    if resumed:
        note(f"resumed queued DDL jobs {[job.id for job in resumed]}")


# -- workloads ----------------------------------------------------------------------------
class Workloads:
    """The demo workloads and the bank, each on its own thread, until :meth:`stop`."""

    def __init__(self, upstream, seed: int):
        self.upstream = upstream
        self.seed = seed
        self.stop_event = threading.Event()
        self.failures: dict[str, int] = {}
        self.last_error: dict[str, str] = {}
        self.transfers = 0
        self._tokens = itertools.count(1)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> Workloads:
        for kind in WORKLOADS:
            self._threads.append(threading.Thread(target=self._demo_loop, args=(kind,),
                                                  name=f"chaos-{kind}", daemon=True))
        for no in range(2):
            self._threads.append(threading.Thread(target=self._bank_loop, args=(no,),
                                                  name=f"chaos-bank-{no}", daemon=True))
        for th in self._threads:
            th.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        for th in self._threads:
            th.join(max(0.0, deadline - time.monotonic()))

    def _failed(self, kind: str, exc: BaseException) -> None:
        with self._lock:
            self.failures[kind] = self.failures.get(kind, 0) + 1
            self.last_error[kind] = f"{type(exc).__name__}: {exc}"
        log.info("workload %s: a slice ended with %s: %s", kind, type(exc).__name__, exc)
        self.stop_event.wait(0.5)

    def _demo_loop(self, kind: str) -> None:
        for slice_no in itertools.count():
            if self.stop_event.is_set():
                return
            try:
                workload.run(self.upstream, kind, sessions=1, ops=None, duration_s=SLICE_S,
                             database=DEMO_DB, seed=self.seed * 10_000 + slice_no)
            except Exception as exc:  # counted; the chaos is expected to fail some
                self._failed(kind, exc)

    def _bank_loop(self, no: int) -> None:
        rng = random.Random(self.seed * 100 + no)
        while not self.stop_event.is_set():
            try:
                with self.upstream.session(BANK_DB) as s:
                    while not self.stop_event.is_set():
                        self._transfer(s, rng)
            except Exception as exc:
                self._failed("bank", exc)

    def _transfer(self, session, rng: random.Random) -> None:
        a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
        amount = rng.randint(1, 50)
        try:
            with session.begin() as t:
                got = dict(t.query("SELECT id, balance FROM accounts WHERE id IN (%s, %s) "
                                   "FOR UPDATE", (a, b)))
                if len(got) != 2:
                    raise UpstreamError(f"bank: accounts {a}, {b} not both found: {got}")
                amount = min(amount, got[a])
                t.update("accounts", {"balance": got[a] - amount, "token": next(self._tokens)},
                         "id = %s", (a,))
                t.update("accounts", {"balance": got[b] + amount, "token": next(self._tokens)},
                         "id = %s", (b,))
                t.insert("transfers", [{"id": next(self._ids), "src": a, "dst": b,
                                        "amount": amount, "token": next(self._tokens)}])
        except SchemaChanged:  # a DDL of another workload raced it (TiDB's retry case)
            return
        except UpstreamError as exc:
            if exc.code in (1213, 1205):   # lock conflicts: try another pair
                return
            raise
        with self._lock:
            self.transfers += 1


def setup_bank(upstream) -> None:
    upstream.ddl(f"CREATE DATABASE IF NOT EXISTS {BANK_DB}")
    for ddl in BANK_DDL:
        upstream.ddl(ddl, BANK_DB)
    with upstream.session(BANK_DB) as s, s.begin() as t:
        t.insert("accounts", [{"id": i, "balance": INITIAL_BALANCE, "token": 0}
                              for i in range(1, ACCOUNTS + 1)])


def bank_balances(db) -> list[int]:
    conn = db.connect(BANK_DB, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT balance FROM accounts")
            return [int(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()


def install_audit(down_db) -> None:
    """``chaos_audit.wlog`` and the triggers on the bank tables downstream."""
    stmts = ["CREATE DATABASE IF NOT EXISTS chaos_audit",
             "CREATE TABLE IF NOT EXISTS chaos_audit.wlog (seq BIGINT AUTO_INCREMENT PRIMARY "
             "KEY, tbl VARCHAR(16) NOT NULL, op CHAR(1) NOT NULL, k BIGINT NOT NULL, "
             "token BIGINT NOT NULL, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6))"]
    for table, key in AUDITED.items():
        stmts += audit_trigger_sql(BANK_DB, table, key)
    _sql(down_db, stmts)


def _sql(db, statements, database=None) -> list:
    conn = db.connect(database, autocommit=True)
    try:
        with conn.cursor() as cur:
            out: list = []
            for stmt in statements:
                cur.execute(stmt)
                out = list(cur.fetchall())
            return out
    finally:
        conn.close()


# -- faults -------------------------------------------------------------------------------
def inject(stack: _Stack, fault: Fault, note) -> float:
    """Inject ``fault``, hold it, end it. ``note(text)`` logs an event line. Returns when
    (``time.monotonic()``) the fault ended: the kill or restart of an instantaneous
    kind; for a held kind the moment its end began (SIGCONT sent, threshold restored,
    the database's or the pump's restart begun: that restart counts as recovery)."""
    kind, target = fault.kind, fault.target
    if kind.startswith("kill9-") and not kind.endswith("-db"):
        pid = actor_pid(stack.actor(target))
        note(f"SIGKILL {target} pid {pid}")
        ended = time.monotonic()
        os.kill(pid, signal.SIGKILL)
    elif kind == "restart-actor":
        note(f"ray.kill({target}, no_restart=False)")
        ended = time.monotonic()
        RayCalls.restart(stack.actor(target))
    elif kind.endswith("-db"):
        db = stack.up_db if target == "upstream" else stack.down_db
        note(f"SIGKILL {target} MariaDB")
        db.kill()
        time.sleep(fault.hold_s)
        ended = time.monotonic()
        db.start()
        note(f"{target} MariaDB restarted on the same data dir and port {db.port}")
        if target == "upstream":
            _resume_ddl_jobs(stack.upstream, note)
    elif kind == "sigstop-pump":
        pid = actor_pid(stack.actor(target))
        stack.stopped_pids.add(pid)
        note(f"SIGSTOP {target} pid {pid}")
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(fault.hold_s)
        finally:
            ended = time.monotonic()
            os.kill(pid, signal.SIGCONT)
            stack.stopped_pids.discard(pid)
        note(f"SIGCONT {target}")
    elif kind == "disk-full-pump":
        actor = stack.actor(target)
        old = RayCalls.call_within(actor, "__ray_call__", _set_disk_limit, 1 << 62,
                                   timeout_s=60)
        note(f"{target}: stop-write-at-available-space raised from {old} bytes (disk 'full')")
        try:
            time.sleep(fault.hold_s)
        finally:
            ended = time.monotonic()
            RayCalls.call_within(actor, "__ray_call__", _set_disk_limit, old, timeout_s=60)
        note(f"{target}: space 'freed' (threshold back to {old} bytes)")
    elif kind == "pause-pump":
        actor = stack.actor(target)
        addr = RayCalls.call_within(actor, "status_address", timeout_s=60)
        url = f"http://{addr}/state/{target}/pause"
        req = urllib.request.Request(url, method="PUT")
        with urllib.request.urlopen(req, timeout=30) as resp:
            note(f"PUT {url}: {resp.read().decode(errors='replace').strip()}")
        time.sleep(fault.hold_s)
        # A paused pump comes back the way TiDB Binlog brings one back: started again
        # (the restarted actor registers online from paused).
        ended = time.monotonic()
        RayCalls.restart(actor)
        note(f"{target} restarted to resume it")
    else:  # pragma: no cover - parse_kinds refuses unknown kinds
        raise InvalidArgument(f"unknown fault kind {kind!r}")
    return ended


def _set_disk_limit(pump_actor, limit: int) -> int:
    """Runs inside the PumpActor (``__ray_call__``): set the disk guard's threshold,
    return the old one. The guard reads it on every write."""
    guard = pump_actor._proc.node.storage.disk_guard
    old, guard.limit_bytes = guard.limit_bytes, limit
    return old


def _lag_s(stack: _Stack, after_ts: int) -> tuple[float | None, str]:
    """The drainer's lag (seconds), or None while its actors restart or while the
    checkpoint is still below ``after_ts``; and its state."""
    try:
        st = stack.drainer.status()
    except (RayError, TimeoutError, BinlogError) as exc:
        # A restarting actor answers with a Ray error or, through the merger, with
        # PipelineReset / UnavailableError: recovering, not failed (a failed task
        # says so in its status).
        return None, f"unavailable: {type(exc).__name__}"
    if st["state"] == "failed":
        return None, f"failed: {st['error']}"
    cp = st["checkpoint_commit_ts"]
    if not cp or cp < after_ts:
        return None, st["state"]
    return max(0.0, time.time() - extract_physical(cp) / 1000), st["state"]


POLL_S = 0.25  # how often the recovery wait reads the drainer's status
SLOW_POLL_S = 1.0  # a status read longer than this is logged (it delays the verdict)


def wait_recovered(stack: _Stack, since: float, threshold_s: float, timeout_s: float):
    """Seconds from ``since`` (monotonic: when the fault ended, see :func:`inject`) until
    the lag is under ``threshold_s``; None on timeout. Raises RuntimeError when the task
    failed.

    Recovered means the checkpoint passed a timestamp taken *after* the fault ended
    and the lag is under the threshold: a lag read right after a kill -9 is still the
    one from before it (the task has not noticed yet), which would say "recovered in
    0.01 s" and measure nothing. The time stops when the status read that saw it
    returned; the status is read every :data:`POLL_S`, and a read slower than
    :data:`SLOW_POLL_S` is logged (it would add its own time to the figure)."""
    deadline = since + timeout_s
    after_ts = stack.cluster.get_ts()
    while time.monotonic() < deadline:
        asked = time.monotonic()
        lag, state = _lag_s(stack, after_ts)
        took = time.monotonic() - asked
        if took > SLOW_POLL_S:
            log.info("chaos: a drainer status read took %.2f s (%s)", took, state)
        if state.startswith("failed"):
            raise UnavailableError(f"replication task {state}")
        if lag is not None and lag < threshold_s:
            return time.monotonic() - since
        time.sleep(POLL_S)
    return None


# -- the run --------------------------------------------------------------------------------
def replay_command(seed: int, duration_s: float, workers: int, kinds: tuple[str, ...] | None,
                   recovered_lag_s: float, fault_timeout_s: float) -> str:
    """The command line that runs the same schedule again (written to ``REPLAY``)."""
    cmd = ["tidb-binlog", "chaos", "--seed", str(seed), "--duration", f"{duration_s:g}",
           "--workers", str(workers), "--recovered-lag", f"{recovered_lag_s:g}",
           "--fault-timeout", f"{fault_timeout_s:g}"]
    if kinds:
        cmd += ["--faults", ",".join(kinds)]
    return shlex.join(cmd)


def run_chaos(duration_s: float, seed: int, *, workers: int = 4, kinds: tuple[str, ...] | None
              = None, work_dir: str | None = None, keep: bool = False,
              recovered_lag_s: float = 1.0, fault_timeout_s: float = FAULT_TIMEOUT_S,
              console=None) -> int:
    """Run the soak; return the exit code (0: every check passed)."""
    console = console or make_console()
    run_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="tidb-binlog-chaos-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    replay = replay_command(seed, duration_s, workers, kinds, recovered_lag_s,
                            fault_timeout_s)
    (run_dir / "REPLAY").write_text(replay + "\n")
    schedule = make_schedule(seed, max(1, int(duration_s // 3) + 1), kinds=kinds or FAULT_KINDS,
                             pumps=2, workers=workers)
    (run_dir / "schedule.json").write_text(schedule_to_json(schedule))
    file_log = logging.FileHandler(run_dir / "chaos.log")
    file_log.setFormatter(logging.Formatter("[%(asctime)s] [%(levelname)s] [%(name)s] "
                                            "%(message)s"))
    logging.getLogger().addHandler(file_log)
    events = open(run_dir / "events.log", "a", buffering=1)  # noqa: SIM115 - closed below
    t0 = time.monotonic()

    def note(text: str) -> None:
        line = f"{time.monotonic() - t0:8.2f}s {text}"
        events.write(line + "\n")
        log.info("chaos: %s", text)

    console.print(f"[bold]tidb-binlog chaos[/bold] seed {seed}, {duration_s:g} s; run directory "
                  f"{run_dir}\nreplay: {replay}")
    RayCalls.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                  ignore_reinit_error=True)
    up_db = MariaDBServer(run_dir, name="upstream")
    down_db = MariaDBServer(run_dir, name="downstream")
    cluster = upstream = drainer = stack = loads = None
    verdict = Verdict()
    records: list[RecoveryRecord] = []
    try:
        up_db.start()
        down_db.start()
        cluster = LocalCluster(run_dir / "cluster", pumps=2, upstream_params=up_db.params(),
                               namespace=NAMESPACE).start()
        upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
        upstream.ddl(f"CREATE DATABASE IF NOT EXISTS {DEMO_DB}")
        setup_bank(upstream)
        cfg = load_drainer_config(None, {
            "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
            "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
            "syncer.worker-count": workers, "syncer.txn-batch": 100,
            "initial-commit-ts": 0})
        drainer = Drainer.start(cfg, registry=cluster.registry, namespace=NAMESPACE)
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        install_audit(down_db)
        stack = _Stack(up_db, down_db, cluster, upstream, drainer, workers)
        loads = Workloads(upstream, seed).start()
        note(f"stack up: pumps {cluster.pump_addresses()}, upstream {up_db.port}, downstream "
             f"{down_db.port}; workloads running")
        end = time.monotonic() + duration_s  # the fault window starts with the workloads
        for fault in schedule:
            if time.monotonic() + fault.gap_s >= end:
                break
            time.sleep(fault.gap_s)
            note(f"inject {fault.describe()}")
            started = time.monotonic()
            try:
                ended = inject(stack, fault, note)
                took = wait_recovered(stack, ended, recovered_lag_s, fault_timeout_s)
            except Exception as exc:
                note(f"fault {fault.describe()} broke the run: {type(exc).__name__}: {exc}")
                verdict.problems.append(f"{fault.describe()}: {type(exc).__name__}: {exc}")
                records.append(RecoveryRecord(fault.kind, fault.target, started - t0, None,
                                              str(exc)))
                verdict.faults += 1
                break
            outage = None if took is None else ended + took - started
            records.append(RecoveryRecord(fault.kind, fault.target, started - t0, took,
                                          outage_s=outage))
            verdict.faults += 1
            if took is None:
                verdict.unrecovered += 1
                note(f"NOT recovered within {fault_timeout_s:g} s: {fault.describe()}")
                break
            verdict.recoveries.append(took)
            note(f"recovered {took:.2f} s after the fault ended, {outage:.2f} s after it "
                 f"began (lag < {recovered_lag_s:g} s)")
            _check_bank_upstream(up_db, verdict, note)
            console.print(f"{time.monotonic() - t0:6.1f}s {fault.describe()}: recovered in "
                          f"{took:.2f} s" + (f" after it ended ({outage:.2f} s after it began)"
                                             if fault.hold_s else ""))
        remaining = end - time.monotonic()
        if remaining > 0 and not verdict.problems and not verdict.unrecovered:
            time.sleep(remaining)
        note("stopping the workloads")
        loads.stop()
        _resume_ddl_jobs(upstream, note)  # a job queued by the last fault, with no DDL after it
        upstream.flush()
        target = cluster.get_ts()
        if verdict.problems:  # diff/lost/dup below stay 0: say they were not measured
            verdict.problems.append("final comparison not run (the run broke first): "
                                    "diff, lost and dup were not measured")
        else:
            try:
                drainer.wait_for_checkpoint(target, timeout_s=300)
                _final_checks(stack, verdict, note)
            except Exception as exc:
                verdict.problems.append(f"final checks: {type(exc).__name__}: {exc}")
                note(f"final checks failed: {type(exc).__name__}: {exc}")
    except Exception as exc:
        verdict.problems.append(f"{type(exc).__name__}: {exc}")
        log.exception("chaos run failed")
    finally:
        if loads is not None:
            loads.stop(timeout_s=30)
        if stack is not None:
            for pid in list(stack.stopped_pids):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        _report(console, verdict, records, loads, run_dir, seed, duration_s, replay, note)
        failed = not verdict.ok
        if failed:
            _save_logs(run_dir, up_db, down_db)
        with contextlib.suppress(Exception):
            if drainer is not None:
                drainer.stop()
        if drainer is not None:
            with contextlib.suppress(Exception):
                drainer._kill()
        if upstream is not None:
            with contextlib.suppress(Exception):
                upstream.close()
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.stop()
        for db in (down_db, up_db):
            with contextlib.suppress(Exception):
                db.close()
        RayCalls.shutdown()
        logging.getLogger().removeHandler(file_log)
        file_log.close()
        events.close()
        if failed:
            console.print(f"[bold red]chaos run failed[/bold red]: everything is in {run_dir} "
                          f"(schedule.json, events.log, result.json, chaos.log, logs/); "
                          f"replay: {replay}")
        elif not keep and not work_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if verdict.ok else 1


def _check_bank_upstream(up_db, verdict: Verdict, note) -> None:
    try:
        balances = bank_balances(up_db)
    except Exception as exc:  # a check that cannot run is a problem, not a pass
        verdict.problems.append(f"bank check upstream could not run: {exc}")
        return
    bad = bank_violation("upstream", balances, ACCOUNTS * INITIAL_BALANCE, ACCOUNTS)
    if bad:
        verdict.problems.append(bad)
        note(f"INVARIANT BROKEN {bad}")


def _final_checks(stack: _Stack, verdict: Verdict, note) -> None:
    with stack.up_db.connect() as up, stack.down_db.connect() as down:
        cmp = compare_databases(up, down, [DEMO_DB, BANK_DB])
    verdict.diff = len(cmp.diffs)
    verdict.lost = cmp.rows_missing + cmp.rows_changed
    for d in cmp.diffs:
        for line in d.details():
            note(f"DIFF {line}")
    dups = audit_duplicates(_sql(stack.down_db, [
        "SELECT tbl, op, k, token FROM chaos_audit.wlog"]))
    verdict.dup = len(dups) + cmp.rows_extra
    for d in dups[:20]:
        note(f"APPLIED TWICE {d}")
    for where, db in (("upstream", stack.up_db), ("downstream", stack.down_db)):
        bad = bank_violation(where, bank_balances(db), ACCOUNTS * INITIAL_BALANCE, ACCOUNTS)
        if bad:
            verdict.problems.append(bad)
            note(f"INVARIANT BROKEN {bad}")
    note(f"compared {cmp.tables} tables, {cmp.rows} rows: {len(cmp.diffs)} differ; "
         f"{len(dups)} images applied twice")


def _report(console, verdict: Verdict, records, loads, run_dir: Path, seed: int,
            duration_s: float, replay: str, note) -> None:
    table = Table(title=f"faults (seed {seed})")
    for col in ("kind", "count", "not recovered", "recovery p50 s", "recovery p99 s",
                "outage p99 s"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for kind, count, bad, p50, p99, outage in recovery_table(records):
        table.add_row(kind, str(count), str(bad), f"{p50:.2f}", f"{p99:.2f}", f"{outage:.2f}")
    console.print(table)
    if loads is not None:
        console.print(f"bank transfers {loads.transfers}; workload slices ended by a failure: "
                      f"{loads.failures or 'none'}")
    for p in verdict.problems:
        console.print(f"[bold red]problem[/bold red]: {p}")
    line = result_line(verdict)
    note(line)
    console.print(line, markup=False, highlight=False)
    result = {"seed": seed, "duration_s": duration_s, "replay": replay, "ok": verdict.ok,
              "verdict": {**asdict(verdict), "recovery_p99_s": verdict.recovery_p99_s},
              "faults": [asdict(r) for r in records],
              "workload_failures": loads.failures if loads else {},
              "workload_last_errors": loads.last_error if loads else {}}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))


def _save_logs(run_dir: Path, *servers) -> None:
    """Copy the MariaDB error logs and this Ray session's logs into ``run_dir/logs``
    (the servers' own directories are removed with them)."""
    (run_dir / "logs").mkdir(exist_ok=True)
    for db in servers:
        with contextlib.suppress(Exception):
            shutil.copy(db.error_log, run_dir / "logs" / f"mariadb-{db.name}-error.log")
    try:
        session = Path(RayCalls.session_dir())
        shutil.copytree(session / "logs", run_dir / "logs" / "ray", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.sock"))
    except Exception as exc:  # the run's own files are still there
        log.warning("could not copy the Ray logs: %s", exc)
