"""The change-log jobs over a real drainer's Parquet sink (db-type = parquet), the main
input: ``snapshot-at`` T equals the upstream as it was at T (read while nothing was
writing), table by table, including a key-moving table and a keyless one; ``stats``
counts every row change the manifest lists; a ts beyond the manifest is refused."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from spark_helpers import db_config, image_rows, table_rows

from cluster.drainer import Drainer
from spark_on_ray import lake
from spark_on_ray.errors import SparkJobError
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.spark import LakeConfig, SparkJobConfig
from tidb_binlog.drainer.sinks.parquet.manifest import committed_files, read_manifest
from tidb_binlog.upstream import workload

pytestmark = pytest.mark.timeout(600)


def test_snapshot_at_and_stats_read_the_parquet_lake(spark_handle, stack, tmp_path):
    up_db, _down_db, cluster, upstream = stack
    lake_dir = tmp_path / "lake-in"
    drainer = Drainer.start(load_drainer_config(None, {
        "syncer.db-type": "parquet", "data-dir": str(lake_dir),
        "initial-commit-ts": stack.start_ts, "addr": "127.0.0.1:0"}), registry=cluster.registry)
    try:
        upstream.ddl("CREATE DATABASE shop")
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=100, seed=1)
        workload.run(upstream, "random_dml", database="shop", sessions=2, ops=100, seed=2)
        workload.run(upstream, "no_pk", database="shop", sessions=2, ops=40, seed=3)
        upstream.flush()
        at = cluster.get_ts()
        # Nothing writes now: the upstream's rows are its image as of `at`.
        conn = up_db.connect()
        try:
            want = {t: table_rows(conn, "shop", t) for t in ("sbtest", "rnd", "nopk")}
        finally:
            conn.close()
        drainer.wait_for_checkpoint(at, timeout_s=180)
        workload.run(upstream, "random_dml", database="shop", sessions=2, ops=60, seed=4)
        workload.run(upstream, "mixed", database="shop", sessions=2, ops=60, seed=5)
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
    finally:
        drainer.stop()

    # The keys are read from [downstream]'s information_schema: the upstream server holds
    # the same tables, so it serves here.
    cfg = SparkJobConfig(downstream=db_config(up_db),
                         lake=LakeConfig(data_dir=str(lake_dir), tables=("shop",),
                                         out_dir=str(tmp_path / "lake"), top_keys=3))
    manifest = read_manifest(lake_dir)
    assert manifest is not None and manifest.commit_ts >= at
    snap = lake.snapshot_at(cfg, at_ts=at, handle=spark_handle)
    assert snap.source == "parquet" and snap.at_ts == at
    assert set(snap.rows) == {"shop.sbtest", "shop.rnd", "shop.nopk"}
    for name, path in snap.paths.items():
        cols, rows = want[name.split(".")[1]]
        image = pq.read_table(path).to_pylist()
        got = image_rows(image, cols)
        assert got == rows, (name, got - rows, rows - got)
        assert snap.rows[name] == sum(rows.values()) > 0

    st = lake.stats(cfg, handle=spark_handle)
    assert st.source == "parquet"
    for t in st.tables:
        db, table = t.name.split(".")
        listed = sum(f["rows"] for f in manifest.files
                     if (f["database"], f["table"]) == (db, table))
        ops = {"insert": 0, "update": 0, "delete": 0}
        for path in committed_files(lake_dir, db, table):
            for op in pq.ParquetFile(path).read(columns=["op"]).column("op").to_pylist():
                ops[op] += 1
        assert (t.inserts, t.updates, t.deletes) == (ops["insert"], ops["update"],
                                                     ops["delete"]), t
        assert t.inserts + t.updates + t.deletes == listed > 0
        assert 0 < len(t.hot_keys) <= 3
    assert st.records == sum(f["rows"] for f in manifest.files if f["database"] == "shop")

    with pytest.raises(SparkJobError, match=r"holds the changes up to commit_ts .* choose an "
                       r"earlier ts"):
        lake.snapshot_at(cfg, at_ts=manifest.commit_ts + 1, handle=spark_handle)
