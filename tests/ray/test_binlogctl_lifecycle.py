"""TiDB Binlog's ``status`` and ``restart`` scenarios through binlogctl, on a real local
Ray with real MariaDB, in one start-up (two pumps, one drainer):

- under continuous inserts (the upstream never fails a transaction, the data
  converges): pump-0 stopped gracefully and restarted; pump-1 killed with SIGKILL and
  restarted by Ray; ``pause-pump`` on pump-0 with a transaction in flight there:
  ``-cmd pumps`` shows ``pausing`` until its Rollback arrives (the pump refuses a
  Prewrite over gRPC meanwhile, the pump client writes to pump-1), then ``paused``;
  pump-0 restarted;
- ``status``: the drainer's checkpoint reaches each pump; ``offline-pump`` leaves
  pump-1 offline and the drainer running; pump-1 started again notifies the drainer
  before it takes writes; the ``tidb-binlog binlogctl`` command joins this Ray;
- ``pause-drainer``: the drainer paused; its lag in ``-cmd drainers`` checked against
  the saved checkpoint, the pumps' records and TSOs taken around the command; it holds
  back pump-0's GC at its checkpoint (``POST /debug/gc/trigger``);
- the drainer started again, then ``offline-drainer`` through the console command: it
  leaves ``-cmd drainers`` (listed with ``-show-offline-nodes``) and pump-0's GC passes
  its checkpoint."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request

import pytest
from drainer_helpers import drainer_config, query, rows, wait_until, write

from cluster.drainer import Drainer
from cluster.launch import LocalCluster, PumpOptions
from tidb_binlog import binlog as bl
from tidb_binlog.binlogctl import Binlogctl, Options
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, PAUSING, PUMP
from tidb_binlog.pump_client.transport import PumpChannel
from tidb_binlog.tso import extract_physical
from tidb_binlog.upstream import Upstream
from tidb_binlog.upstream.catalog import CATALOG_DB

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def two_pumps(ray_local, mariadb_factory, tmp_path):
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    # gc = 1 s: GC may cut up to 1 s ago; only a drainer's checkpoint holds it back (it
    # runs here only when the test triggers it: gc-interval stays 1 h)
    cluster = LocalCluster(tmp_path / "cluster", pumps=2, upstream_params=up_db.params(),
                           pump_options=PumpOptions(extra={"gc": "1s"})).start()
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
    if out.getvalue().startswith("(no nodes"):
        return {}
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


def kill9_pump(cluster, node_id: str, ray, new_incarnation):
    """SIGKILL the pump's process (no stop: its record stays online); Ray restarts it on
    the same data dir, the storage recovers and it registers online again."""
    actor = cluster.pumps[node_id]
    pid = ray.get(actor.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGKILL)
    new_incarnation(actor, pid)
    wait_until(lambda: cluster.registry.node(PUMP, node_id).state == ONLINE, timeout_s=120,
               what=f"{node_id} back online")


class InFlightTxn:
    """A transaction in flight on one pump, as TiDB leaves it between its Prewrite and
    its Commit: the Prewrite stored on that pump (over gRPC), the upstream's status row
    of its start_ts locked, so the pump's missing-commit resolver hears "still running"
    and waits however long the test takes. :meth:`rollback` ends it (the row unlocked
    and gone, the Rollback binlog on the same pump)."""

    def __init__(self, up_db, cluster, node_id: str):
        self.cluster_id = cluster.registry.cluster_id()
        self.start_ts = cluster.get_ts()
        self.conn = up_db.connect()
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {CATALOG_DB}.txn_status VALUES (%s, 0)", (self.start_ts,))
        self.channel = PumpChannel(node_id, cluster.pump_addresses()[node_id])
        assert self.write(bl.prewrite(self.start_ts, b"", prewrite_key=b"k")) == ""

    def write(self, binlog) -> str:
        """The pump's errmsg ("" = stored)."""
        return self.channel.write(self.cluster_id, bl.encode(binlog), timeout_s=30)

    def rollback(self):
        self.conn.rollback()
        self.conn.close()
        assert self.write(bl.rollback(self.start_ts)) == ""
        self.channel.close()


def http(addr: str, method: str, path: str) -> str:
    req = urllib.request.Request(f"http://{addr}{path}", method=method, data=b"" if
                                 method != "GET" else None)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read().decode()


def seconds(ts: int) -> float:
    return extract_physical(ts) / 1000.0


def wait_gc_window_past(cluster, ts: int):
    """Until TSO(now - gc) is above ``ts`` (gc = 1 s): a GC may then cut past ``ts``."""
    wait_until(lambda: seconds(cluster.get_ts()) - 1.0 > seconds(ts) + 0.05,
               what="the GC window to pass the checkpoint")


def around(ctl, out, cluster, cmd: str):
    """The ``cmd`` table with the pumps' recorded maxCommitTS and a TSO taken just
    before and just after it: ``(pumps before, ts before, table, ts after, pumps
    after)``; every lag it shows lies between what these bound."""
    pumps_before = {n.node_id: n.max_commit_ts for n in cluster.registry.nodes(PUMP)}
    ts_before = cluster.get_ts()
    rows_ = table(ctl, out, cmd)
    ts_after = cluster.get_ts()
    pumps_after = {n.node_id: n.max_commit_ts for n in cluster.registry.nodes(PUMP)}
    return pumps_before, ts_before, rows_, ts_after, pumps_after


def lag_cell(text: str) -> float:
    return float(text)


def per_pump(cell: str) -> dict[str, float]:
    """``pump-0 0.3, pump-1 0.0`` -> {node id: seconds}."""
    return {part.split()[0]: float(part.split()[1]) for part in cell.split(", ")}


def binlogctl_cli(ray, cluster, *args: str) -> subprocess.CompletedProcess:
    """``tidb-binlog binlogctl`` as a process joining this Ray (TiDB's flags)."""
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address)
    got = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "binlogctl", *args,
                          "--namespace", cluster.namespace],
                         capture_output=True, text=True, timeout=180, env=env)
    assert got.returncode == 0, got.stderr
    return got


def test_pumps_restarted_under_inserts_then_offline_pump(two_pumps, new_incarnation):
    ray = pytest.importorskip("ray")
    up_db, down_db, cluster, upstream = two_pumps
    out = io.StringIO()
    ctl = Binlogctl(lambda: cluster.registry, out=out, err=io.StringIO())
    config = drainer_config(down_db, **{"node-id": "drainer-0"})
    drainer = Drainer.start(config, registry=cluster.registry)
    try:
        with Inserts(upstream, 0) as inserts:
            inserts.wait_for(20)
            pumps = table(ctl, out, "pumps")
            assert sorted(pumps) == ["pump-0", "pump-1"]
            assert all(row[2].strip() == ONLINE for row in pumps.values())
            restart_pump(cluster, "pump-0", ray, ctl, out)
            inserts.wait_for(20)
            kill9_pump(cluster, "pump-1", ray, new_incarnation)
            inserts.wait_for(20)

            # pause-pump with a transaction in flight on pump-0: pausing until it ends
            txn = InFlightTxn(up_db, cluster, "pump-0")
            assert ctl.run(Options(cmd="pause-pump", node_id="pump-0")) == 0
            assert "apply action pause success!" in out.getvalue()
            assert table(ctl, out, "pumps")["pump-0"][2] == PAUSING
            assert txn.write(bl.prewrite(cluster.get_ts(), b"")) == "no online: pausing"
            inserts.wait_for(10)                # the pump client writes to pump-1
            assert table(ctl, out, "pumps")["pump-0"][2] == PAUSING
            txn.rollback()
            wait_until(lambda: cluster.registry.node(PUMP, "pump-0").state == PAUSED,
                       what="pump-0 paused once its transaction ended")
            assert table(ctl, out, "pumps")["pump-0"][2] == PAUSED
            inserts.wait_for(10)
            actor = cluster.pumps["pump-0"]     # back: Ray restarts it on its data dir
            old_pid = ray.get(actor.pid.remote(), timeout=60)
            ray.kill(actor, no_restart=False)
            new_incarnation(actor, old_pid)
            wait_until(lambda: cluster.registry.node(PUMP, "pump-0").state == ONLINE,
                       timeout_s=120, what="pump-0 back online")
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
        got = binlogctl_cli(ray, cluster, "-cmd", "drainers")
        assert "drainer-0" in got.stdout and "pump-0" in got.stdout

        # pause-drainer: the task stops with a final checkpoint, the record says paused
        assert ctl.run(Options(cmd="pause-drainer", node_id="drainer-0", wait_s=120)) == 0
        paused_at = cluster.registry.node(DRAINER, "drainer-0")
        assert paused_at.state == PAUSED
        saved = json.loads(query(down_db, "SELECT checkPoint FROM tidb_binlog.checkpoint")[0][0])
        assert saved["commitTS"] == paused_at.max_commit_ts
        assert "paused" in table(ctl, out, "drainers")["drainer-0"][2]

        # the lag while it is paused, against real numbers: the checkpoint it saved, the
        # pumps' records and TSOs taken around the command
        write(upstream, 30_000, 5)
        wait_gc_window_past(cluster, paused_at.max_commit_ts)
        cp = seconds(saved["commitTS"])
        wait_until(lambda: all(seconds(n.max_commit_ts) > cp + 0.2        # heartbeats
                               for n in cluster.registry.nodes(PUMP)),
                   what="both pumps' records to show commits past the checkpoint")
        pump_before, ts_before, row, ts_after, pump_after = around(ctl, out, cluster,
                                                                   "drainers")
        row = row["drainer-0"]
        assert row[3] == str(saved["commitTS"])
        behind_tso = lag_cell(row[5])
        assert seconds(ts_before) - cp - 0.05 <= behind_tso <= seconds(ts_after) - cp + 0.05
        assert behind_tso >= 1.0               # it waited out the 1 s GC window
        behind = per_pump(row[6])
        assert sorted(behind) == ["pump-0", "pump-1"]
        for node_id, lag in behind.items():
            low = seconds(pump_before[node_id]) - cp - 0.05
            high = seconds(pump_after[node_id]) - cp + 0.05
            assert low <= lag <= high, (node_id, lag, low, high)
            assert lag >= 0.2                  # the pumps' records are past it (above)
        pump_before, ts_before, pumps, ts_after, pump_after = around(ctl, out, cluster,
                                                                     "pumps")
        for node_id, prow in pumps.items():     # an online pump: its newest commit vs now
            assert pump_before[node_id] <= int(prow[3]) <= pump_after[node_id]
            low = seconds(ts_before) - seconds(pump_after[node_id]) - 0.05
            high = seconds(ts_after) - seconds(pump_before[node_id]) + 0.05
            assert low <= lag_cell(prow[5]) <= high, (node_id, prow, low, high)

        # the paused drainer holds back pump-0's GC at its checkpoint
        pump0_http = ray.get(cluster.pumps["pump-0"].status_address.remote(), timeout=60)
        answer = http(pump0_http, "POST", "/debug/gc/trigger")
        assert "held back by drainer checkpoint(s) drainer-0" in answer, answer
        gc_ts = json.loads(http(pump0_http, "GET", "/status"))["Checkpoint"]["gcTS"]
        assert gc_ts == paused_at.max_commit_ts

        # started again, then offline-drainer (the console command): offline, out of
        # the table, and pump-0's GC passes its final checkpoint
        drainer.stop()
        drainer = Drainer.start(config, registry=cluster.registry)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        got = binlogctl_cli(ray, cluster, "-cmd", "offline-drainer", "-node-id", "drainer-0",
                            "--wait", "120")
        assert "drainer drainer-0 is offline" in got.stdout
        final = cluster.registry.node(DRAINER, "drainer-0")
        assert final.state == OFFLINE
        assert table(ctl, out, "drainers") == {}
        row = table(ctl, out, "drainers", show_offline_nodes=True)["drainer-0"]
        assert row[2] == OFFLINE and row[5] == "-"
        write(upstream, 40_000, 5)
        wait_gc_window_past(cluster, final.max_commit_ts)
        answer = http(pump0_http, "POST", "/debug/gc/trigger")
        assert "held back" not in answer, answer
        gc_ts = json.loads(http(pump0_http, "GET", "/status"))["Checkpoint"]["gcTS"]
        assert gc_ts > final.max_commit_ts
    finally:
        drainer.stop()
