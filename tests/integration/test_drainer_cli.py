"""``tidb-binlog drainer`` as a subprocess joining the Ray cluster of the test process,
where a LocalCluster (registry + pump actor) runs: it registers and replicates; killed
with SIGKILL its record stays ``online`` (as TiDB's in etcd: nothing rewrites it) and
binlogctl's ``-cmd drainers`` shows ``online (not alive)`` once its heartbeats stop;
started again it resumes from its checkpoint; it stops on SIGTERM with a consistent
checkpoint and state paused; and it exits 1 naming the error when the task fails."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.launch import LocalCluster
from cluster.registry import get_or_create_registry
from tidb_binlog.binlogctl import Binlogctl, Options
from tidb_binlog.binlogctl.report import format_ts_time
from tidb_binlog.node import DRAINER, ONLINE, PAUSED
from tidb_binlog.testing.ports import free_port
from tidb_binlog.upstream import Upstream

pytestmark = pytest.mark.timeout(400)

REPO = Path(__file__).resolve().parents[2]


def run_cli(args, tmp_path, name):
    log_path = tmp_path / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    log_file = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "tidb_binlog.cli.main", "drainer", *args],
                            cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    log_file.close()
    return proc, log_path


def free_port_pair() -> int:
    """A port p with p and p + 1 both free now: the drainer's HTTP status listens on the
    Cistern port + 1, which a plain free port says nothing about (shared, busy hosts)."""
    return free_port(consecutive=2)  # below the ephemeral range: nobody else takes them


def wait_until(predicate, proc, log_path, timeout_s=120.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"drainer exited ({proc.returncode}) while waiting for {what}:"
                                 f"\n{log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n"
                                 f"{log_path.read_text()[-3000:]}")
        time.sleep(0.3)


def query(server, sql):
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def write(upstream, first, count):
    with upstream.session("shop") as s:
        for i in range(first, first + count):
            txn = s.begin()
            txn.insert("t", [{"id": i, "v": f"v{i}"}])
            txn.commit()
    upstream.flush()


def test_bad_config_exits_1_with_the_reason(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "drainer", "--config",
                           str(tmp_path / "missing.toml")], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert "cannot read config file" in proc.stderr and "missing.toml" in proc.stderr


def test_cli_registers_replicates_stops_on_sigterm_and_fails_clearly(
        ray_local, mariadb_factory, tmp_path):
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params())
    # a node is "not alive" 3 s after its last heartbeat (default 10 s): the SIGKILL
    # below shows sooner
    cluster.start(registry=get_or_create_registry(tmp_path / "cluster" / "registry",
                                                  namespace=cluster.namespace,
                                                  alive_timeout_s=3.0))
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    port = free_port_pair()
    config = tmp_path / "drainer.toml"
    config.write_text(f"""
addr = "127.0.0.1:{port}"
node-id = "cli-drainer"
data-dir = "{tmp_path / 'drainer'}"
initial-commit-ts = 0
detect-interval = 30
registry = "{cluster.namespace}"
[syncer]
worker-count = 2
[syncer.to]
host = "{down_db.host}"
port = {down_db.port}
user = "{down_db.user}"
password = "{down_db.password}"
""")
    args = ["--config", str(config), "--ray-address",
            ray_local.get_runtime_context().gcs_address]
    try:
        upstream.ddl("CREATE DATABASE shop")
        upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
        write(upstream, 0, 20)

        proc, log_path = run_cli(args, tmp_path, "first")
        record = wait_until(lambda: cluster.registry.node(DRAINER, "cli-drainer"), proc,
                            log_path, what="the drainer's registry record")
        assert record.state == ONLINE and record.host == f"127.0.0.1:{port}"
        target = cluster.get_ts()
        wait_until(lambda: cluster.registry.node(DRAINER, "cli-drainer").max_commit_ts
                   >= target, proc, log_path, what="the checkpoint to pass the writes")
        assert query(down_db, "SELECT * FROM shop.t ORDER BY id") == \
            query(up_db, "SELECT * FROM shop.t ORDER BY id")
        text = log_path.read_text()
        assert f"Cistern gRPC on 127.0.0.1:{port}" in text
        assert f"HTTP status on 127.0.0.1:{port + 1}" in text

        # SIGKILL: nothing writes the record again; it stays online (expected back: it
        # still counts for pump GC and a closing pump) and binlogctl marks it not alive
        proc.kill()
        assert proc.wait(timeout=60) == -signal.SIGKILL
        killed = wait_until(lambda: (lambda r: r if not r.is_alive else None)(
            cluster.registry.node(DRAINER, "cli-drainer")), proc=None, log_path=log_path,
            what="the killed drainer's heartbeats to stop counting")
        assert killed.state == ONLINE and killed.max_commit_ts >= target
        out = io.StringIO()
        assert Binlogctl(lambda: cluster.registry, out=out).run(Options(cmd="drainers")) == 0
        header, line = out.getvalue().splitlines()
        assert line.split("  ")[0] == "cli-drainer"
        assert "online (not alive)" in line and str(killed.max_commit_ts) in line
        assert format_ts_time(killed.update_ts) in line       # its last heartbeat

        # started again: it resumes from its checkpoint
        write(upstream, 20, 10)
        proc, log_path = run_cli(args, tmp_path, "second")
        target = cluster.get_ts()
        wait_until(lambda: (lambda r: r.is_alive and r.max_commit_ts >= target)(
            cluster.registry.node(DRAINER, "cli-drainer")), proc, log_path,
            what="the restarted drainer's checkpoint to pass the new writes")
        assert query(down_db, "SELECT * FROM shop.t ORDER BY id") == \
            query(up_db, "SELECT * FROM shop.t ORDER BY id")

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log_path.read_text()[-3000:]
        record = cluster.registry.node(DRAINER, "cli-drainer")
        assert record.state == PAUSED and record.max_commit_ts >= target
        saved = json.loads(query(down_db, "SELECT checkPoint FROM tidb_binlog.checkpoint")[0][0])
        assert saved["consistent"] is True and saved["commitTS"] == record.max_commit_ts

        # The downstream table loses a column: applying new rows fails for good.
        query(down_db, "ALTER TABLE shop.t DROP COLUMN v")
        write(upstream, 100, 3)
        proc, log_path = run_cli(args, tmp_path, "third")
        assert proc.wait(timeout=180) == 1, log_path.read_text()[-3000:]
        text = log_path.read_text()
        assert "replication task failed" in text and "DownstreamError" in text
        assert "Unknown column" in text
        assert cluster.registry.node(DRAINER, "cli-drainer").state == PAUSED
    finally:
        upstream.close()
        cluster.stop()
