"""MariaDB's own replication as the yardstick of ``bench/drainer.py --vs-replica``.

The upstream MariaDB (the one under the TiDB emulator) runs with its own binlog
(``MariaDBServer(log_bin=True)``: ``binlog_format=ROW``, MariaDB's GTIDs). A
:class:`NativeReplica` is a further throwaway MariaDB server replicating from it
(``CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos``) before the first phase, so the
benchmark's databases and tables reach it by replication; the emulator's catalog
(``tidb_binlog_upstream``, its transaction-status rows included) is filtered out
with ``replicate_wild_ignore_table``, so the replica applies only user data, as the
drainer does.

While a phase's workload runs the replica is stopped (``STOP SLAVE``), as the
drainer is not running; :meth:`NativeReplica.catch_up` then starts it and times it
until ``MASTER_GTID_WAIT`` reaches the primary's ``@@gtid_binlog_pos`` taken after
the workload (the IO thread fetching the backlog and the SQL threads applying it
both inside the clock), then stops it again.

``threads`` = ``slave_parallel_threads`` (0: MariaDB's default, serial apply),
``mode`` = ``slave_parallel_mode`` (``optimistic`` is MariaDB's default mode).
"""

from __future__ import annotations

import os
import time

from proc_cpu import proc_cpu_s  # bench/: run as a script, or imported by bench/drainer.py

__all__ = ["NativeReplica", "IGNORED_TABLES", "same_rows", "primary_gtid_pos",
           "time_replicas", "vs_replica_line"]

IGNORED_TABLES = "tidb_binlog_upstream.%"
WAIT_TIMEOUT_S = 3600


def primary_gtid_pos(primary) -> str:
    """The primary's ``@@gtid_binlog_pos`` (every transaction it has written)."""
    with primary.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        return cur.fetchone()[0]


class NativeReplica:
    """One MariaDB server replicating from ``primary`` (a ``log_bin`` MariaDBServer)."""

    def __init__(self, base_dir, primary, *, name: str, server_id: int, threads: int,
                 mode: str = "optimistic", options: dict[str, str] | None = None):
        from tidb_binlog.testing.mariadb import MariaDBServer

        if threads < 0:
            raise ValueError(f"slave_parallel_threads must be >= 0, not {threads}")
        if not primary.log_bin:
            raise ValueError(f"primary {primary.name!r} runs without its binlog: start it "
                             "with MariaDBServer(log_bin=True)")
        self.primary = primary
        self.threads = threads
        self.mode = mode
        self.label = f"{threads} threads {mode}" if threads else "serial"
        self.server = MariaDBServer(base_dir, name=name, server_id=server_id, options={
            "replicate-wild-ignore-table": IGNORED_TABLES,
            "slave-parallel-threads": str(threads), "slave-parallel-mode": mode,
            "skip-slave-start": "ON", **(options or {})})

    def start(self) -> NativeReplica:
        """Start the server, point it at the primary, catch up with what is there, stop."""
        self.server.start()
        try:
            with self.server.connect(autocommit=True) as conn, conn.cursor() as cur:
                cur.execute("CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, "
                            "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos",
                            (self.primary.host, self.primary.port, self.primary.user,
                             self.primary.password))
            self.catch_up(primary_gtid_pos(self.primary))
        except BaseException:
            self.server.close()
            raise
        return self

    def catch_up(self, target: str) -> tuple[float, float]:
        """START SLAVE, wait until ``target`` (a GTID position) is applied, STOP SLAVE;
        (seconds from START SLAVE to applied, CPU seconds of the replica's mariadbd
        over that window)."""
        pid = self.server._proc.pid
        with self.server.connect(autocommit=True) as conn, conn.cursor() as cur:
            cpu0 = proc_cpu_s(pid)
            start = time.perf_counter()
            cur.execute("START SLAVE")
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (target, WAIT_TIMEOUT_S))
            waited = cur.fetchone()[0]
            seconds = time.perf_counter() - start
            cpu = proc_cpu_s(pid) - cpu0
            if waited != 0:
                raise RuntimeError(f"replica {self.server.name!r} did not reach {target} "
                                   f"within {WAIT_TIMEOUT_S} s: {self.status(cur)}")
            cur.execute("STOP SLAVE")
        return seconds, cpu

    @staticmethod
    def status(cur) -> str:
        cur.execute("SHOW SLAVE STATUS")
        row = cur.fetchone()
        if row is None:
            return "no replication configured"
        st = dict(zip([d[0] for d in cur.description], row, strict=True))
        return (f"io={st['Slave_IO_Running']} sql={st['Slave_SQL_Running']} "
                f"last_io_error={st['Last_IO_Error']!r} last_sql_error={st['Last_SQL_Error']!r} "
                f"gtid_io_pos={st.get('Gtid_IO_Pos')!r}")

    def close(self) -> None:
        self.server.close()


def same_rows(replica_server, down_db, database: str) -> str:
    """Every table of ``database`` on the replica against the drainer's downstream: count
    and checksum per table (:func:`tidb_binlog.compare.compare_databases`); a short
    verdict, RuntimeError when they differ."""
    from tidb_binlog.compare import compare_databases

    with replica_server.connect() as a, down_db.connect() as b:
        result = compare_databases(a, b, [database], full_rows=False)
    if not result.equal:
        raise RuntimeError(f"replica {replica_server.name!r} and the drainer's downstream "
                           "differ: " + "; ".join(str(d) for d in result.diffs))
    return f"same rows in {result.tables} tables ({result.rows} rows)"


def time_replicas(replicas, primary, target: str, rows: int, down_db, database: str,
                  label: str) -> dict[str, float]:
    """Each replica catches up the phase's backlog in turn (the others stay stopped);
    prints its rate, the CPU per row of its mariadbd and of the primary's (which sends
    the binlog), the load average, and whether it holds the drainer's rows.
    Returns ``{replica label: seconds}``."""
    out = {}
    for rep in replicas:
        primary_cpu0 = proc_cpu_s(primary._proc.pid)
        seconds, cpu = rep.catch_up(target)
        primary_cpu = proc_cpu_s(primary._proc.pid) - primary_cpu0
        verdict = same_rows(rep.server, down_db, database)
        load = "/".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"replica ({rep.label}) {label}: {rows} rows in {seconds:.2f} s "
              f"({rows / seconds:.0f} rows/s); CPU us/row: replica mariadbd="
              f"{cpu * 1e6 / max(rows, 1):.0f} ({100 * cpu / seconds:.0f}% of a core), "
              f"primary mariadbd={primary_cpu * 1e6 / max(rows, 1):.0f}; {verdict}; "
              f"load {load}", flush=True)
        out[rep.label] = seconds
    return out


def vs_replica_line(kind: str, value: float, replica_s: dict[str, float], rows: int) -> str:
    """``RESULT drainer_<kind>_vs_replica``: the drainer's rate against the parallel
    replica's (first), and the serial one's when timed."""
    (parallel, seconds), *others = replica_s.items()
    line = (f"RESULT drainer_{kind}_vs_replica value={value:.0f} unit=rows/s "
            f"replica={rows / seconds:.0f} ratio={value * seconds / rows:.2f} "
            f"replica_mode={parallel.replace(' ', '_')}")
    for label, s in others:
        line += f" replica_{label}={rows / s:.0f} ratio_{label}={value * s / rows:.2f}"
    return line + " load1=" + f"{os.getloadavg()[0]:.2f}"
