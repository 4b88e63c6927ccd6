"""The Spark jobs against their single-client ceilings, measured in the same run.

Two throwaway MariaDB servers (upstream with the TiDB emulator's catalog, downstream), a
local Ray, and sysbench-shaped ``sbtest`` tables filled by the servers themselves
(MariaDB's sequence engine, identical on both sides).

- ``spark_load``: rows/s of ``spark_on_ray.load`` copying ``--load-rows`` rows (Spark
  already started: the copy, from the DDL lock to the last commit), against one pymysql
  connection copying the same rows (streamed SELECT, ``executemany`` INSERTs of 1000
  rows) into another database of the same downstream. ratio = ours / single client.
- ``spark_diff_1m``: seconds to diff two identical ``--diff-rows`` tables with
  ``spark_on_ray.diff``, Spark start included (its own Spark, as the CLI runs it),
  against one sequential client running the same chunk checksum queries one after the
  other. ratio = its seconds / ours.

    RESULT spark_load value=<rows/s> unit=rows/s ceiling=<rows/s> ratio=<r>
    RESULT spark_diff_1m value=<s> unit=s ceiling=<s> ratio=<r> spark_start_s=<s>

Usage: ``python bench/spark.py [--load-rows 1000000] [--diff-rows 1000000]`` (the load's
figure at 1M rows: an initial load is a bulk copy, and at 200k Spark's fixed ~0.3 s per
stage is a fifth of the job; both sizes are in BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import pymysql

from spark_on_ray import diff, load
from spark_on_ray.diff_plan import TableInfo, boundaries_sql, chunk_ranges
from tidb_binlog.config.spark import DatabaseConfig, DiffConfig, LoadConfig, SparkJobConfig
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.testing.mariadb import MariaDBServer
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import Upstream

SBTEST = ("CREATE TABLE sbtest (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
          "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))")
FILL = ("INSERT INTO {t} SELECT seq, (seq * 7919) % 1000003, "
        "CONCAT(MD5(seq), MD5(seq + 1), MD5(seq + 2), LEFT(MD5(seq + 3), 23)), "
        "CONCAT(MD5(-seq), LEFT(MD5(seq * 3), 27)) FROM seq_1_to_{n}")


def _db(server) -> DatabaseConfig:
    p = server.params()
    return DatabaseConfig(host=p["host"], port=p["port"], user=p["user"],
                          password=p["password"] or "")


def _exec(server, *stmts, database=None):
    conn = server.connect(database, autocommit=True)
    try:
        with conn.cursor() as cur:
            for s in stmts:
                cur.execute(s)
    finally:
        conn.close()


def _load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def single_client_copy(up, down, rows: int) -> float:
    """rows/s of one connection copying ``bench.sbtest`` into ``single.sbtest``."""
    _exec(down, "DROP DATABASE IF EXISTS single", "CREATE DATABASE single")
    _exec(down, SBTEST, database="single")
    src = up.connect("bench", cursorclass=pymysql.cursors.SSCursor)
    dst = down.connect("single")
    t0 = time.monotonic()
    with src.cursor() as cur, dst.cursor() as out:
        cur.execute("SELECT id, k, c, pad FROM sbtest")
        while batch := cur.fetchmany(1000):
            out.executemany("INSERT INTO sbtest (id, k, c, pad) VALUES (%s, %s, %s, %s)", batch)
            dst.commit()
    took = time.monotonic() - t0
    src.close()
    dst.close()
    return rows / took


def sequential_checksums(cfg: SparkJobConfig, up_server) -> float:
    """Seconds for one client to run the diff's chunk checksums one after the other."""
    conn = up_server.connect(autocommit=True)
    t0 = time.monotonic()
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE "
                    "TABLE_SCHEMA='big' AND TABLE_NAME='sbtest' ORDER BY ORDINAL_POSITION")
        from spark_on_ray.diff_plan import Chunk, Column

        info = TableInfo("big", "sbtest", tuple(Column(n, t) for n, t in cur.fetchall()),
                         ("id",))
        cur.execute(boundaries_sql(info, cfg.diff.chunk_size))
        chunks = [Chunk(info, r) for r in chunk_ranges([tuple(b) for b in cur.fetchall()])]
    conn.close()
    sums = diff.checksum_all(diff.sequential_runner, cfg, chunks)
    assert all(a == b for a, b in sums)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load-rows", type=int, default=1_000_000)
    ap.add_argument("--diff-rows", type=int, default=1_000_000)
    ap.add_argument("--load-method", default="auto", help="[load] method (auto, load-data, insert)")
    ap.add_argument("--load-parallelism", type=int, default=0,
                    help="[load] parallelism (0: every Spark task slot)")
    ap.add_argument("--load-chunk-size", type=int, default=50_000, help="[load] chunk-size")
    ap.add_argument("--defer-indexes", action="store_true",
                    help="[load] defer-indexes = true (secondary indexes after the rows)")
    ap.add_argument("--skip-diff", action="store_true", help="measure the load only")
    args = ap.parse_args()
    import ray

    base = tempfile.mkdtemp(prefix="bench-spark-")
    up = MariaDBServer(name="up", base_dir=base).start()
    down = MariaDBServer(name="down", base_dir=base).start()
    results = []
    try:
        with Upstream(up.params(), BinlogCollector(), TimestampOracle().get_ts) as upstream:
            upstream.ddl("CREATE DATABASE bench")
            upstream.ddl(SBTEST, "bench")
        _exec(up, FILL.format(t="sbtest", n=args.load_rows), database="bench")
        for server in (up, down):
            _exec(server, "CREATE DATABASE big")
            if not args.skip_diff:
                _exec(server, SBTEST, FILL.format(t="sbtest", n=args.diff_rows), database="big")
        print(f"filled: load {args.load_rows} rows, diff 2 x {args.diff_rows} rows "
              f"(load avg {_load_avg()})", flush=True)

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 << 20)
        cfg = SparkJobConfig(upstream=_db(up), downstream=_db(down),
                             load=LoadConfig(tables=("bench.sbtest",), method=args.load_method,
                                             parallelism=args.load_parallelism,
                                             chunk_size=args.load_chunk_size,
                                             defer_indexes=args.defer_indexes),
                             diff=DiffConfig(tables=("big.sbtest",),
                                             fix_sql_file=os.path.join(base, "fix.sql")))

        # ---- load
        single = single_client_copy(up, down, args.load_rows)
        print(f"single client copy: {single:,.0f} rows/s (load avg {_load_avg()})", flush=True)
        from spark_on_ray.session import start_spark

        handle = start_spark(cfg.spark, warm=True)
        try:
            res = load.run(cfg, handle=handle)
        finally:
            handle.stop()
        assert res.total_rows == args.load_rows, res.rows
        ours = res.total_rows / res.seconds
        print(f"spark load: {ours:,.0f} rows/s ({res.seconds:.1f} s, of which the Spark stage "
              f"{res.stage_s:.1f} s, its slowest task's set-up {res.setup_s:.1f} s and copy "
              f"{res.copy_s:.1f} s, the deferred indexes {res.index_s:.1f} s; {res.tasks} tasks, "
              f"{res.units} units, {res.method}; Spark start {handle.started_s:.1f} s not counted; "
              f"load avg {_load_avg()})", flush=True)
        results.append(f"RESULT spark_load value={ours:.0f} unit=rows/s ceiling={single:.0f} "
                       f"ratio={ours / single:.2f} method={res.method} tasks={res.tasks} "
                       f"units={res.units}")

        # ---- diff
        if not args.skip_diff:
            seq = sequential_checksums(cfg, up)
            print(f"sequential chunk checksums: {seq:.1f} s (load avg {_load_avg()})", flush=True)
            dres = diff.run(cfg)
            assert dres.equal
            print(f"spark diff: {dres.seconds:.1f} s with Spark start {dres.spark_start_s:.1f} s; "
                  f"{dres.seconds - dres.spark_start_s:.1f} s without (load avg {_load_avg()})",
                  flush=True)
            results.append(f"RESULT spark_diff_1m value={dres.seconds:.1f} unit=s ceiling={seq:.1f} "
                           f"ratio={seq / dres.seconds:.2f} spark_start_s={dres.spark_start_s:.1f} "
                           f"ratio_without_start={seq / (dres.seconds - dres.spark_start_s):.2f}")
    finally:
        if ray.is_initialized():
            ray.shutdown()
        down.close()
        up.close()
        shutil.rmtree(base, ignore_errors=True)
    for line in results:
        print(line)


if __name__ == "__main__":
    main()
