"""The change-log jobs on the session's Spark, over a real drainer's file-sink directory:

- ``snapshot-at`` T (T taken between two workload phases) equals, table by table, a
  MariaDB downstream at T (the files restored up to T by the Spark restore); a keyed
  table with primary-key moves and unique-key swaps (rnd), sysbench (sbtest) and a table
  without a usable key (nopk: identical rows counted);
- ``stats`` over the whole files counts every row change of the files, by kind, and
  names the most changed keys; both write Parquet;
- bad input (no tables, a missing data-dir) is refused with what to do."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest
from spark_helpers import db_config, image_rows, table_rows

from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from spark_on_ray import lake, restore
from spark_on_ray.errors import SparkJobError
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.spark import LakeConfig, RestoreConfig, SparkJobConfig
from tidb_binlog.errors import StorageError
from tidb_binlog.reparo.decode import binlog_to_txn
from tidb_binlog.reparo.source import read_records
from tidb_binlog.upstream import Upstream, workload

pytestmark = pytest.mark.timeout(600)


def test_snapshot_at_equals_downstream_at_ts_and_stats_count(spark_handle, mariadb_factory,
                                                             tmp_path):
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params(),
                           namespace="spark-lake").start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    files = tmp_path / "drainer"
    drainer = Drainer.start(load_drainer_config(None, {
        "syncer.db-type": "file", "data-dir": str(files), "initial-commit-ts": 0,
        "addr": "127.0.0.1:0"}), registry=cluster.registry)
    try:
        upstream.ddl("CREATE DATABASE shop")
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=100, seed=1)
        workload.run(upstream, "random_dml", database="shop", sessions=2, ops=100, seed=2)
        workload.run(upstream, "no_pk", database="shop", sessions=2, ops=40, seed=3)
        upstream.flush()
        at = cluster.get_ts()
        drainer.wait_for_checkpoint(at, timeout_s=180)
        workload.run(upstream, "random_dml", database="shop", sessions=2, ops=60, seed=4)
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=60, seed=5)
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
    finally:
        drainer.stop()
        upstream.close()
        cluster.stop()

    cfg = SparkJobConfig(downstream=db_config(down_db),
                         restore=RestoreConfig(data_dir=str(files), min_spark_rows=100_000),
                         lake=LakeConfig(data_dir=str(files), tables=("shop",),
                                         out_dir=str(tmp_path / "lake"), top_keys=3))
    restore.run(cfg, stop_ts=at, handle=spark_handle)   # the downstream as of `at`

    snap = lake.snapshot_at(cfg, at_ts=at, handle=spark_handle)
    assert snap.at_ts == at and set(snap.rows) == {"shop.sbtest", "shop.rnd", "shop.nopk"}
    conn = down_db.connect()
    try:
        for name, path in snap.paths.items():
            db, table = name.split(".")
            cols, want = table_rows(conn, db, table)
            image = pq.read_table(path).to_pylist()
            got = image_rows(image, cols)
            assert got == want, (name, got - want, want - got)
            assert snap.rows[name] == sum(want.values()) > 0
    finally:
        conn.close()

    st = lake.stats(cfg, handle=spark_handle)
    want = Counter()
    for _, b in read_records(files):
        for dml in binlog_to_txn(b).dmls:
            want[(f"{dml.database}.{dml.table}", dml.tp.name.lower())] += 1
    got = Counter()
    for t in st.tables:
        got.update({(t.name, "insert"): t.inserts, (t.name, "update"): t.updates,
                    (t.name, "delete"): t.deletes})
        assert t.minutes >= 1 and 0 < len(t.hot_keys) <= 3, t
        assert t.hot_keys[0][1] >= t.hot_keys[-1][1]
    assert +got == +want
    assert sum(r[2] + r[3] + r[4] for r in st.per_minute) == sum(want.values())
    assert pq.read_table(f"{st.out_dir}/hot_keys").num_rows == sum(len(t.hot_keys)
                                                                   for t in st.tables)

    with pytest.raises(SparkJobError, match=r"database `nope` has no tables on the downstream"):
        lake.snapshot_at(cfg, tables=("nope",), handle=spark_handle)
    with pytest.raises(StorageError, match=r"does not exist; point data-dir"):
        lake.stats(cfg, data_dir=str(tmp_path / "missing"), handle=spark_handle)
