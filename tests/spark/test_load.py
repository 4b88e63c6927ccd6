"""The initial load on Spark: copy the upstream emulator's tables while its workload keeps
writing (DML and DDL), start a drainer from the returned ts, and the downstream converges
to equal; bad input is refused before anything is written."""

from __future__ import annotations

import threading

import pytest
from spark_helpers import db_config

from cluster.drainer import Drainer
from spark_on_ray import load
from spark_on_ray.errors import SparkJobError
from tidb_binlog.compare import compare_databases
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.spark import LoadConfig, SparkJobConfig
from tidb_binlog.upstream import workload

pytestmark = pytest.mark.timeout(600)


def _cfg(up_db, down_db, **kw) -> SparkJobConfig:
    return SparkJobConfig(upstream=db_config(up_db), downstream=db_config(down_db),
                          load=LoadConfig(tables=("shop",), chunk_size=50, **kw))


def test_load_under_writes_then_drainer_from_ts_converges(spark_handle, stack):
    up_db, down_db, cluster, upstream = stack
    upstream.ddl("CREATE DATABASE shop")
    for kind in ("mixed", "no_pk", "all_types", "ddl"):
        workload.run(upstream, kind, sessions=2, ops=200, database="shop")
    upstream.flush()

    errors: list[BaseException] = []

    def keep_writing():
        try:
            for kind in ("mixed", "ddl", "no_pk"):
                workload.run(upstream, kind, sessions=2, ops=150, database="shop", seed=7)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        result = load.run(_cfg(up_db, down_db, defer_indexes=True), handle=spark_handle)
    finally:
        writer.join()
    assert not errors, errors
    upstream.flush()
    assert result.ts > 0 and result.tasks >= 2 and result.units > 4
    assert set(result.rows) == {"shop.sbtest", "shop.nopk", "shop.all_types", "shop.ddlt"}
    assert f"--initial-commit-ts {result.ts}" in result.drainer_command
    assert result.method == "load-data"  # auto: MariaDB allows LOCAL INFILE by default
    # The secondary indexes held back from the CREATE TABLEs were added after the rows
    # (sbtest and nopk were also read in line groups: one integer key, bounded rows).
    conn = down_db.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE FROM information_schema."
                    "STATISTICS WHERE TABLE_SCHEMA = 'shop' AND INDEX_NAME <> 'PRIMARY'")
        indexes = set(cur.fetchall())
    conn.close()
    assert {("sbtest", "k_1", 1), ("nopk", "uu", 0)} <= indexes, indexes
    # The workload wrote on both sides of the snapshot point.
    conn = up_db.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT SUM(commit_ts <= %s), SUM(commit_ts > %s) FROM "
                    "tidb_binlog_upstream.txn_status", (result.ts, result.ts))
        before, after = cur.fetchone()
    conn.close()
    assert before > 0 and after > 0, (before, after)

    cfg = load_drainer_config(None, {
        "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
        "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
        "syncer.worker-count": 2, "initial-commit-ts": result.ts})
    drainer = Drainer.start(cfg, registry=cluster.registry)
    try:
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=240)
    finally:
        drainer.stop()
    up_conn, down_conn = up_db.connect(), down_db.connect()
    try:
        diff = compare_databases(up_conn, down_conn, ["shop"])
    finally:
        up_conn.close()
        down_conn.close()
    assert diff.equal, [str(d) for d in diff.diffs]


def test_refuses_bad_input_before_writing(spark_handle, stack):
    up_db, down_db, _cluster, upstream = stack
    upstream.ddl("CREATE DATABASE shop")
    upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)")
    conn = down_db.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO shop.t VALUES (1, 1)")
    conn.close()
    with pytest.raises(SparkJobError, match=r"shop`.`t` already holds rows on the downstream"):
        load.run(_cfg(up_db, down_db), handle=spark_handle)
    with pytest.raises(SparkJobError, match=r"database `nope` has no tables on the upstream"):
        load.run(_cfg(up_db, down_db), tables=("nope",), handle=spark_handle)
    # method = load-data on a downstream that refuses LOCAL INFILE: refused up front.
    conn = down_db.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM shop.t")
        cur.execute("SET GLOBAL local_infile = 0")
    try:
        with pytest.raises(SparkJobError, match=r"refuses LOAD DATA LOCAL INFILE \(local_infile "
                                                r"is OFF\): set it ON there"):
            load.run(_cfg(up_db, down_db, method="load-data"), handle=spark_handle)
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 1")
        conn.close()
    # Not the emulator: the downstream as an "upstream" has no catalog.
    with pytest.raises(SparkJobError, match=r"no `tidb_binlog_upstream` catalog"):
        load.run(_cfg(down_db, up_db), handle=spark_handle)
