"""``tidb-binlog drainer --config drainer.toml`` with ``db-type = "parquet"`` as a subprocess
joining the test's Ray cluster: the lake fills with the upstream's changes (read back
through the manifest), SIGTERM stops it with the manifest at the last change, and a
second run resumes after it without writing anything twice."""

from __future__ import annotations

import signal

import pyarrow.parquet as pq
import pytest
from test_drainer_cli import free_port_pair, run_cli, wait_until, write

from cluster.launch import LocalCluster
from tidb_binlog.drainer.sinks.parquet.manifest import committed_files, read_manifest
from tidb_binlog.upstream import Upstream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def inserted_ids(lake) -> list[int]:
    ids = []
    for path in committed_files(lake, "shop", "t"):
        ids.extend(r["after"]["id"] for r in pq.read_table(path).to_pylist())
    return ids


def test_cli_parquet_sink_writes_stops_and_resumes(ray_local, mariadb_factory, tmp_path):
    up_db = mariadb_factory("up")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params()).start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    lake = tmp_path / "lake"
    config = tmp_path / "drainer.toml"
    config.write_text(f"""
addr = "127.0.0.1:{free_port_pair()}"
node-id = "cli-parquet"
data-dir = "{tmp_path / 'drainer'}"
initial-commit-ts = 0
registry = "{cluster.namespace}"
[syncer]
db-type = "parquet"
[syncer.to]
dir = "{lake}"
[syncer.to.parquet]
flush-interval = 0.5
""")
    args = ["--config", str(config), "--ray-address",
            ray_local.get_runtime_context().gcs_address]
    try:
        upstream.ddl("CREATE DATABASE shop")
        upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
        write(upstream, 0, 20)
        proc, log_path = run_cli(args, tmp_path, "first")
        wait_until(lambda: len(inserted_ids(lake)) >= 20, proc, log_path,
                   what="the changes in the lake")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log_path.read_text()[-3000:]
        assert inserted_ids(lake) == list(range(20))
        first = read_manifest(lake)
        assert len(first.ddls) == 2

        write(upstream, 100, 5)
        proc, log_path = run_cli(args, tmp_path, "second")
        wait_until(lambda: len(inserted_ids(lake)) >= 25, proc, log_path,
                   what="the second run's changes")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log_path.read_text()[-3000:]
        assert inserted_ids(lake) == [*range(20), *range(100, 105)]
        assert len(read_manifest(lake).ddls) == 2
    finally:
        upstream.close()
        cluster.stop()
