"""Upstream throughput with binlog on vs off, sysbench oltp_insert shape, same run.

Starts a throwaway MariaDB (tidb_binlog.testing.mariadb), then for ``--duration-s``
each, with ``--sessions`` threads:

- **off**: plain pymysql: ``INSERT INTO sbtest_off (k, c, pad) VALUES (...)`` + COMMIT
  per transaction (the ceiling);
- **on**: the TiDB-behaving Upstream: start_ts from a TSO, ``INSERT ... RETURNING``,
  txn-status row, schema check, Prewrite binlog (encoded and handed to an
  in-process writer that marshals it exactly as it would be sent to a pump, but
  does not send it: this measures the upstream, not the pump), commit_ts, COMMIT,
  asynchronous Commit binlog.

Prints ``RESULT upstream_binlog_on value=<rows/s> unit=rows/s ceiling=<rows/s off>
ratio=<on/off>`` last (goal ratio > 0.7).

    .venv/bin/python bench/upstream.py --sessions 4 --duration-s 10
"""

from __future__ import annotations

import argparse
import random
import string
import threading
import time

from tidb_binlog.testing.mariadb import MariaDBServer
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import BinlogCollector, Upstream
from tidb_binlog.upstream.core import connect
from tidb_binlog.upstream.workload import SBTEST_DDL


def _row(rng: random.Random) -> tuple:
    return (rng.randrange(1, 100_000), "".join(rng.choices(string.digits, k=119)),
            "".join(rng.choices(string.digits, k=59)))


def _threads(n: int, duration_s: float, body) -> int:
    counts = [0] * n
    deadline = time.monotonic() + duration_s

    def work(i: int):
        counts[i] = body(i, deadline)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def bench_off(params: dict, db: str, sessions: int, duration_s: float) -> float:
    conn = connect(params, autocommit=True, database=db)
    with conn.cursor() as cur:
        cur.execute(SBTEST_DDL.replace("sbtest", "sbtest_off"))
    conn.close()

    def body(i: int, deadline: float) -> int:
        rng, n = random.Random(i), 0
        c = connect(params, database=db)
        with c.cursor() as cur:
            while time.monotonic() < deadline:
                cur.execute("INSERT INTO sbtest_off (k, c, pad) VALUES (%s, %s, %s)", _row(rng))
                c.commit()
                n += 1
        c.close()
        return n

    start = time.monotonic()
    rows = _threads(sessions, duration_s, body)
    return rows / (time.monotonic() - start)


def bench_on(params: dict, db: str, sessions: int, duration_s: float) -> tuple[float, int]:
    writer = BinlogCollector(keep=False)
    up = Upstream(params, writer, TimestampOracle().get_ts, database=db)
    up.ddl(SBTEST_DDL)

    def body(i: int, deadline: float) -> int:
        rng, n = random.Random(100 + i), 0
        with up.session() as s:
            while time.monotonic() < deadline:
                k, c, pad = _row(rng)
                with s.begin() as t:
                    t.insert("sbtest", [{"k": k, "c": c, "pad": pad}])
                n += 1
        return n

    start = time.monotonic()
    rows = _threads(sessions, duration_s, body)
    up.flush()
    elapsed = time.monotonic() - start
    up.close()
    return rows / elapsed, writer.count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--duration-s", type=float, default=10.0)
    args = ap.parse_args()
    with MariaDBServer(name="bench-upstream") as server:
        server.start()
        params = server.params()
        conn = connect(params, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench_off")
        conn.close()
        off = bench_off(params, "bench_off", args.sessions, args.duration_s)
        on, binlogs = 0.0, 0
        writer_up = Upstream(params, BinlogCollector(keep=False), TimestampOracle().get_ts)
        writer_up.ddl("CREATE DATABASE bench_on")
        writer_up.close()
        on, binlogs = bench_on(params, "bench_on", args.sessions, args.duration_s)
    print(f"sessions={args.sessions} duration_s={args.duration_s} rows_per_txn=1 "
          f"writer=in-process (marshalled, not sent) binlogs={binlogs}")
    print(f"binlog off: {off:,.0f} rows/s = txns/s (plain pymysql INSERT + COMMIT)")
    print(f"binlog on:  {on:,.0f} rows/s = txns/s (Upstream, prewrite + commit binlogs)")
    print(f"RESULT upstream_binlog_on value={on:.0f} unit=rows/s ceiling={off:.0f} "
          f"ratio={on / off:.3f}")


if __name__ == "__main__":
    main()
