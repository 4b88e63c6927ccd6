"""TiDB Binlog's ``status`` and ``restart`` scenarios through binlogctl, on a real local
Ray with real MariaDB: two pumps restarted one at a time under continuous inserts
(the upstream never fails a transaction, the data converges), binlogctl's tables
along the way, then ``offline-pump`` leaves the pump offline and the drainer running;
the offline pump started again notifies the drainer before it takes writes; the
``tidb-binlog binlogctl`` command itself joins this Ray and lists the nodes; and
``pause-drainer`` leaves the drainer paused."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading

import pytest
from drainer_helpers import drainer_config, rows, wait_until, write

from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from tidb_binlog.binlogctl import Binlogctl, Options
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, PUMP
from tidb_binlog.upstream import Upstream

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def two_pumps(ray_local, mariadb_factory, tmp_path):
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    cluster = LocalCluster(tmp_path / "cluster", pumps=2, upstream_params=up_db.params()).start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    upstream.ddl("CREATE DATABASE shop")
    upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
    yield up_db, down_db, cluster, upstream
    upstream.close()
    cluster.stop()


class Inserts:
    """One upstream session inserting 1-row transactions until stopped; any failure is
    kept (the scenario's claim is that there is none)."""

    def __init__(self, upstream, first_id: int):
        self.upstream, self.next_id, self.errors = upstream, first_id, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                write(self.upstream, self.next_id, 1)
                self.next_id += 1
            except Exception as exc:  # the assertion below shows it
                self.errors.append(repr(exc))
                return

    def __enter__(self):
        self._thread.start()
        return self

    def wait_for(self, count: int):
        target = self.next_id + count
        wait_until(lambda: self.next_id >= target or self.errors, timeout_s=120,
                   what=f"{count} more inserts")

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=60)


def table(ctl: Binlogctl, out: io.StringIO, cmd: str, **kw) -> dict[str, list[str]]:
    """binlogctl's table for ``cmd`` as {node id: row cells}."""
    out.seek(0)
    out.truncate()
    assert ctl.run(Options(cmd=cmd, **kw)) == 0
    header, *lines = out.getvalue().splitlines()
    assert header.split()[:5] == ["NodeID", "Address", "State", "MaxCommitTS", "UpdateTime"]
    return {line.split()[0]: re.split(r"\s{2,}", line.strip()) for line in lines}


def restart_pump(cluster, node_id: str, ray, ctl, out):
    """Graceful stop (binlogctl shows it paused), then Ray restarts the actor on the
    same data dir and it comes back online."""
    actor = cluster.pumps[node_id]
    ray.get(actor.stop.remote(), timeout=60)
    assert "paused" in table(ctl, out, "pumps")[node_id][2]
    ray.kill(actor, no_restart=False)
    wait_until(lambda: cluster.registry.node(PUMP, node_id).state == ONLINE, timeout_s=120,
               what=f"{node_id} back online")


def test_pumps_restarted_under_inserts_then_offline_pump(two_pumps, new_incarnation):
    ray = pytest.importorskip("ray")
    up_db, down_db, cluster, upstream = two_pumps
    out = io.StringIO()
    ctl = Binlogctl(lambda: cluster.registry, out=out, err=io.StringIO())
    drainer = Drainer.start(drainer_config(down_db, **{"node-id": "drainer-0"}),
                            registry=cluster.registry)
    try:
        with Inserts(upstream, 0) as inserts:
            inserts.wait_for(20)
            pumps = table(ctl, out, "pumps")
            assert sorted(pumps) == ["pump-0", "pump-1"]
            assert all(row[2].strip() == ONLINE for row in pumps.values())
            restart_pump(cluster, "pump-0", ray, ctl, out)
            inserts.wait_for(20)
            restart_pump(cluster, "pump-1", ray, ctl, out)
            inserts.wait_for(20)
        assert inserts.errors == []            # the upstream never failed a transaction
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        assert len(rows(down_db, "shop.t")) == inserts.next_id

        # status: the drainer's checkpoint is at (or past) what each pump had
        target = cluster.get_ts()
        drainer.wait_for_checkpoint(target, timeout_s=120)
        wait_until(lambda: cluster.registry.node(DRAINER, "drainer-0").max_commit_ts >= target,
                   what="the drainer record's checkpoint")
        drainers = table(ctl, out, "drainers")
        assert list(drainers) == ["drainer-0"] and "pump-0" in drainers["drainer-0"][-1]

        # offline-pump: pump-1 waits for the drainer, goes offline, is retired; the
        # drainer keeps running on pump-0
        assert ctl.run(Options(cmd="offline-pump", node_id="pump-1", wait_s=120)) == 0
        assert cluster.registry.node(PUMP, "pump-1").state == OFFLINE
        assert list(table(ctl, out, "pumps")) == ["pump-0"]
        assert "pump-1" in table(ctl, out, "pumps", show_offline_nodes=True)
        wait_until(lambda: drainer.status()["pumps"] == ["pump-0"], what="pump-1 retired")
        write(upstream, 10_000, 10)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        assert drainer.task_state()["state"] == "running"
        assert cluster.registry.node(PUMP, "pump-1").state == OFFLINE

        # the offline pump started again: it notified the running drainer (which now
        # merges it) before its start returned, i.e. before it took any write
        actor = cluster.pumps["pump-1"]
        old_pid = ray.get(actor.pid.remote(), timeout=60)
        ray.get(actor.stop.remote(), timeout=60)
        ray.kill(actor, no_restart=False)
        new_incarnation(actor, old_pid)
        assert cluster.registry.node(PUMP, "pump-1").state == ONLINE
        assert drainer.status()["pumps"] == ["pump-0", "pump-1"]
        write(upstream, 20_000, 10)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")

        # the console command joins this Ray and finds the registry by its namespace
        env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address)
        got = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "binlogctl",
                              "-cmd", "drainers", "--namespace", cluster.namespace],
                             capture_output=True, text=True, timeout=120, env=env)
        assert got.returncode == 0, got.stderr
        assert "drainer-0" in got.stdout and "pump-0" in got.stdout

        # pause-drainer: the task stops with a final checkpoint, the record says paused
        assert ctl.run(Options(cmd="pause-drainer", node_id="drainer-0", wait_s=120)) == 0
        assert cluster.registry.node(DRAINER, "drainer-0").state == PAUSED
        assert "paused" in table(ctl, out, "drainers")["drainer-0"][2]
    finally:
        drainer.stop()
