"""The SQL worker's apply path (``Loader.execute_batch``) against its ceiling, one process.

One throwaway MariaDB (:class:`~tidb_binlog.testing.mariadb.MariaDBServer`), a
sysbench-shaped table ``sbtest(id INT PK, k INT, c CHAR(120), pad CHAR(60),
KEY(k))``, and :class:`~tidb_binlog.drainer.apply.dml.DML` objects built as the translator
builds them (full row images, ``int``/``str`` values, the old image of an UPDATE
taken from a mirror of the table).  For each ``txn-batch`` (20, 200, 1000 by
default) a fresh table and, in this order:

- ``insert``: ``--rows`` new rows;
- ``update``: ``--rows`` UPDATEs of ``c`` (non-key) at random ids;
- ``update_index``: ``--rows`` UPDATEs of ``k`` (the indexed column);
- ``mixed``: ``--rows`` changes, in rounds of four: update ``k``, update ``c``,
  delete a random id, insert that id back (sysbench's oltp_write_only shape);
- ``delete``: every row.

Each upstream transaction holds ``--rows-per-txn`` (1) row changes; the worker
gets ``txn-batch`` rows per :meth:`Loader.execute_batch` call, as the coordinator
sends them, with exactly-once on (the progress row in every transaction) and
merge on (``--no-merge`` for the per-row path).  The DMLs are built before the
clock starts: only the loader and the server are timed.

**Ceiling** (measured right before each txn-batch round, so machine load hits both
alike): one pymysql client inserting the same rows into another table with
1000-row multi-row INSERTs, one commit per statement.

**CPU**: user+system seconds of this Python process (``time.process_time``) and of
``mariadbd`` (from ``/proc/<pid>/stat``, 10 ms ticks) per 10k rows, for each phase.

Prints, last, one line per (kind, txn-batch)::

    RESULT loader_<kind>_b<txn-batch> value=<rows/s> unit=rows/s ceiling=<rows/s> ratio=<r> \
py_cpu_s_per_10k=<s> db_cpu_s_per_10k=<s>

    .venv/bin/python bench/loader.py --rows 20000
    .venv/bin/py-spy record -o loader.svg -- .venv/bin/python bench/loader.py --batches 200
"""

from __future__ import annotations

import argparse
import os
import random
import string
import tempfile
import time
from pathlib import Path

__all__ = ["main"]

DB = "bench_loader"
CEILING_ROWS_PER_STATEMENT = 1000
KINDS = ("insert", "update", "update_index", "mixed", "delete")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (fields 14 and 15 of /proc/pid/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


class Meter:
    """Wall time and CPU of this process and the server across one phase."""

    def __init__(self, server_pid: int):
        self.server_pid = server_pid

    def __enter__(self) -> Meter:
        self._py0, self._db0 = time.process_time(), cpu_s(self.server_pid)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.py_cpu_s = time.process_time() - self._py0
        self.db_cpu_s = cpu_s(self.server_pid) - self._db0


def sb_row(rng: random.Random, row_id: int) -> dict:
    return {"id": row_id, "k": rng.randrange(1, 100_000),
            "c": "".join(rng.choices(string.digits, k=119)),
            "pad": "".join(rng.choices(string.digits, k=59))}


class Workload:
    """Builds translator-shaped DMLs and mirrors the table so old images are exact."""

    def __init__(self, schema, rows: int, seed: int):
        self.schema = schema
        self.rows = rows
        self.rng = random.Random(seed)
        self.state: dict[int, dict] = {}
        self.next_id = 1

    def _dml(self, tp, values, old=None):
        from tidb_binlog.drainer.apply.dml import DML

        return DML(self.schema.database, self.schema.table, tp, values, old, self.schema)

    def _insert(self, row_id=None):
        from tidb_binlog.drainer.apply.dml import DMLType

        if row_id is None:
            row_id, self.next_id = self.next_id, self.next_id + 1
        row = sb_row(self.rng, row_id)
        self.state[row_id] = row
        return self._dml(DMLType.INSERT, row)

    def _update(self, column: str, row_id: int):
        from tidb_binlog.drainer.apply.dml import DMLType

        old = self.state[row_id]
        new = dict(old)
        new[column] = sb_row(self.rng, row_id)[column]
        self.state[row_id] = new
        return self._dml(DMLType.UPDATE, new, old)

    def _delete(self, row_id: int):
        from tidb_binlog.drainer.apply.dml import DMLType

        return self._dml(DMLType.DELETE, self.state.pop(row_id))

    def _random_id(self) -> int:
        while True:
            row_id = self.rng.randrange(1, self.next_id)
            if row_id in self.state:
                return row_id

    def dmls(self, kind: str) -> list:
        n = self.rows
        if kind == "insert":
            return [self._insert() for _ in range(n)]
        if kind == "update":
            return [self._update("c", self._random_id()) for _ in range(n)]
        if kind == "update_index":
            return [self._update("k", self._random_id()) for _ in range(n)]
        if kind == "delete":
            return [self._delete(row_id) for row_id in list(self.state)]
        out = []
        while len(out) < n:  # mixed
            out.append(self._update("k", self._random_id()))
            out.append(self._update("c", self._random_id()))
            row_id = self._random_id()
            out.append(self._delete(row_id))
            out.append(self._insert(row_id))
        return out


def batches(dmls: list, start_ts: int, rows_per_txn: int, txn_batch: int) -> list[list]:
    """Worker batches: parts ``(commit_ts, dmls)`` of ``rows_per_txn``, ``txn_batch`` rows each."""
    parts = [(start_ts + i, dmls[i * rows_per_txn:(i + 1) * rows_per_txn])
             for i in range((len(dmls) + rows_per_txn - 1) // rows_per_txn)]
    per_batch = max(1, txn_batch // rows_per_txn)
    return [parts[i:i + per_batch] for i in range(0, len(parts), per_batch)]


def ceiling(server, meter_pid: int, rows: list[dict]) -> tuple[float, Meter]:
    """rows/s of one client: 1000-row multi-row INSERTs, one commit per statement."""
    from tidb_binlog.upstream.workload import SBTEST_DDL

    with server.connect(DB, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS sbtest_ceiling")
        cur.execute(SBTEST_DDL.replace("sbtest", "sbtest_ceiling"))
        conn.commit()
        with Meter(meter_pid) as m:
            for i in range(0, len(rows), CEILING_ROWS_PER_STATEMENT):
                chunk = rows[i:i + CEILING_ROWS_PER_STATEMENT]
                cur.execute("INSERT INTO sbtest_ceiling (id, k, c, pad) VALUES "
                            + ",".join(["(%s,%s,%s,%s)"] * len(chunk)),
                            [r[c] for r in chunk for c in ("id", "k", "c", "pad")])
                conn.commit()
    return len(rows) / m.seconds, m


def main(argv=None) -> int:
    from tidb_binlog.drainer.apply.dml import TableSchema
    from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig
    from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
    from tidb_binlog.testing.mariadb import MariaDBServer
    from tidb_binlog.upstream.workload import SBTEST_DDL

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20000, help="row changes per kind")
    p.add_argument("--batches", type=int, nargs="+", default=[20, 200, 1000],
                   help="txn-batch values (rows per execute_batch call)")
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    p.add_argument("--rows-per-txn", type=int, default=1)
    p.add_argument("--no-merge", action="store_true", help="syncer.to.merge = false")
    p.add_argument("--work-dir", default=None)
    args = p.parse_args(argv)

    base = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-loader-"))
    server = MariaDBServer(base, name="bench-loader").start()
    server_pid = server._proc.pid
    with open(f"/proc/{server_pid}/comm") as f:
        assert f.read().strip() == "mariadbd", "the server's pid is not mariadbd's"
    schema = TableSchema.build(DB, "sbtest", ["id", "k", "c", "pad"], ["id"])
    results = []
    cluster_id = 1
    try:
        with server.connect(autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DB}")
        print(f"load average at start: {os.getloadavg()}", flush=True)
        for txn_batch in args.batches:
            with server.connect(DB, autocommit=True) as conn, conn.cursor() as cur:
                cur.execute("DROP TABLE IF EXISTS sbtest")
                cur.execute(SBTEST_DDL)
            work = Workload(schema, args.rows, seed=txn_batch)
            planned = {kind: work.dmls(kind) for kind in args.kinds}
            inserted = [d.values for d in planned.get("insert", [])] or [
                sb_row(random.Random(1), i + 1) for i in range(args.rows)]
            ceiling_rate, cm = ceiling(server, server_pid, inserted)
            print(f"txn-batch {txn_batch}: ceiling {ceiling_rate:.0f} rows/s "
                  f"(py {cm.py_cpu_s * 1e4 / len(inserted):.2f} s, "
                  f"db {cm.db_cpu_s * 1e4 / len(inserted):.2f} s per 10k rows)", flush=True)
            loader = Loader(Downstream(DownstreamConfig(
                host=server.host, port=server.port, user=server.user, password=server.password)),
                LoaderConfig(worker=0, cluster_id=cluster_id, txn_batch=txn_batch,
                             merge=not args.no_merge, exactly_once=True))
            cluster_id += 1
            loader.load_progress()
            ts = 1000
            for kind in args.kinds:
                dmls = planned[kind]
                work_batches = batches(dmls, ts, args.rows_per_txn, txn_batch)
                ts += len(dmls) + 1
                with Meter(server_pid) as m:
                    for batch in work_batches:
                        loader.execute_batch(batch)
                n = len(dmls)
                rate = n / m.seconds
                py, db = m.py_cpu_s * 1e4 / n, m.db_cpu_s * 1e4 / n
                print(f"  {kind}: {n} rows in {m.seconds:.2f} s ({rate:.0f} rows/s; CPU per "
                      f"10k rows: python {py:.2f} s, mariadbd {db:.2f} s)", flush=True)
                results.append(f"RESULT loader_{kind}_b{txn_batch} value={rate:.0f} "
                               f"unit=rows/s ceiling={ceiling_rate:.0f} "
                               f"ratio={rate / ceiling_rate:.2f} py_cpu_s_per_10k={py:.3f} "
                               f"db_cpu_s_per_10k={db:.3f}")
            loader.close()
        print(f"load average at end: {os.getloadavg()}", flush=True)
    finally:
        server.close()
    for line in results:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
