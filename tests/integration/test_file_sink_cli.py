"""``tidb-binlog drainer --config drainer.toml`` with ``db-type = "file"`` as a subprocess
joining the test's Ray cluster: the binlog files fill with the upstream's transactions
(pb records, read back with the binlogfile reader), SIGTERM stops it with a consistent
savepoint, and a second run resumes after it without writing anything twice."""

from __future__ import annotations

import signal

import pytest
from test_drainer_cli import free_port_pair, run_cli, wait_until, write

from cluster.launch import LocalCluster
from tidb_binlog.binlogfile import walk
from tidb_binlog.drainer.checkpoint.store import FileCheckpointStore
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.upstream import Upstream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def commit_tss(directory) -> list[int]:
    return [pb.Binlog.FromString(p).commit_ts for _, p in walk(directory)]


def test_cli_file_sink_writes_stops_and_resumes(ray_local, mariadb_factory, tmp_path):
    up_db = mariadb_factory("up")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params()).start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    data_dir, files = tmp_path / "drainer", tmp_path / "drainer" / "binlog"
    config = tmp_path / "drainer.toml"
    config.write_text(f"""
addr = "127.0.0.1:{free_port_pair()}"
node-id = "cli-file"
data-dir = "{data_dir}"
initial-commit-ts = 0
registry = "{cluster.namespace}"
[syncer]
db-type = "file"
[syncer.to]
dir = "{files}"
retention-time = 7
""")
    args = ["--config", str(config), "--ray-address",
            ray_local.get_runtime_context().gcs_address]
    try:
        upstream.ddl("CREATE DATABASE shop")
        upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
        write(upstream, 0, 20)
        target = cluster.get_ts()
        proc, log_path = run_cli(args, tmp_path, "first")
        # 2 DDLs and 20 inserts, each one record
        wait_until(lambda: files.exists() and len(commit_tss(files)) >= 22, proc, log_path,
                   what="the records in the binlog files")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log_path.read_text()[-3000:]
        first = commit_tss(files)
        assert len(first) == 22 and first == sorted(set(first))
        saved = FileCheckpointStore(data_dir).load()
        assert saved.consistent and saved.commit_ts >= max(first)
        assert saved.commit_ts >= target or saved.commit_ts == max(first)

        write(upstream, 100, 5)
        proc, log_path = run_cli(args, tmp_path, "second")
        wait_until(lambda: len(commit_tss(files)) >= 27, proc, log_path,
                   what="the second run's records")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log_path.read_text()[-3000:]
        both = commit_tss(files)
        assert both[:22] == first and len(both) == 27 and both == sorted(set(both))
    finally:
        upstream.close()
        cluster.stop()
