"""The Spark restore end to end on the session's Ray: upstream → pump → drainer file sink →
``spark_on_ray.restore`` → a fresh MariaDB downstream, compared with the upstream.

- phase 1 (DDL, keyed and keyless tables, every type family), then a ts T with the
  upstream quiescent: a restore with ``stop-tso = T`` equals the upstream (as of T);
- phase 2 (primary-key moves and unique-key swaps, more sysbench DML), then a restore
  of ``start-tso = T + 1`` onto the same downstream equals the final upstream, and a
  rerun of that range (safe mode) leaves it equal;
- a missing data-dir and start > stop are refused before anything is written."""

from __future__ import annotations

import pytest
from spark_helpers import db_config

from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from spark_on_ray import restore
from spark_on_ray.errors import SparkJobError
from tidb_binlog.compare import compare_databases
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.spark import RestoreConfig, SparkJobConfig
from tidb_binlog.errors import StorageError
from tidb_binlog.upstream import Upstream, workload

pytestmark = pytest.mark.timeout(600)

SCHEMAS = ["shop", "wl"]


def assert_equal(up_db, down_db, tables: int) -> None:
    up, down = up_db.connect(), down_db.connect()
    try:
        result = compare_databases(up, down, SCHEMAS)
    finally:
        up.close()
        down.close()
    assert result.tables == tables and not result.diffs, [
        (d.database, d.table, d.reason, d.samples[:2]) for d in result.diffs]


def test_file_sink_restore_to_a_point_then_on_and_rerun(spark_handle, mariadb_factory,
                                                       tmp_path):
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params(),
                           namespace="spark-restore").start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    files = tmp_path / "drainer"
    drainer = Drainer.start(load_drainer_config(None, {
        "syncer.db-type": "file", "data-dir": str(files), "initial-commit-ts": 0,
        "addr": "127.0.0.1:0"}), registry=cluster.registry)
    cfg = SparkJobConfig(downstream=db_config(down_db),
                         restore=RestoreConfig(data_dir=str(files), txn_batch=20,
                                               min_spark_rows=30))
    try:
        upstream.ddl("CREATE DATABASE shop")
        upstream.ddl("CREATE DATABASE wl")
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=150, seed=1)
        workload.run(upstream, "all_types", database="wl", sessions=2, ops=40, seed=2)
        workload.run(upstream, "no_pk", database="shop", sessions=2, ops=40, seed=3)
        upstream.flush()
        mid_ts = cluster.get_ts()
        drainer.wait_for_checkpoint(mid_ts, timeout_s=180)

        first = restore.run(cfg, stop_ts=mid_ts, handle=spark_handle)
        assert first.spark_stages >= 1 and first.ddls >= 5, first
        assert 0 < first.last_ts <= mid_ts and first.filtered == 0
        assert set(first.rows_per_table) == {"shop.sbtest", "shop.nopk", "wl.all_types"}
        assert_equal(up_db, down_db, 3)

        workload.run(upstream, "random_dml", database="shop", sessions=2, ops=150, seed=4)
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=80, seed=6)
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
        drainer.stop()
        drainer = None

        second = restore.run(cfg, start_ts=mid_ts + 1, handle=spark_handle)
        assert second.first_ts > mid_ts and second.spark_stages >= 1, second
        assert_equal(up_db, down_db, 4)  # + rnd
        again = restore.run(cfg, start_ts=mid_ts + 1, handle=spark_handle)
        assert again.rows == second.rows and again.last_ts == second.last_ts
        assert_equal(up_db, down_db, 4)

        with pytest.raises(StorageError, match=r"does not exist; point data-dir"):
            restore.run(cfg, data_dir=str(tmp_path / "nope"), handle=spark_handle)
        with pytest.raises(SparkJobError, match=r"start-tso 10 is above stop-tso 5"):
            restore.run(cfg, start_ts=10, stop_ts=5, handle=spark_handle)
    finally:
        if drainer is not None:
            drainer.stop()
        upstream.close()
        cluster.stop()
