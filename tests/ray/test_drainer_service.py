"""The drainer as a service on a real local Ray: pumps joining and leaving while the task
runs (Notify handshake, retirement), its registry record holding back pump GC, and the
HTTP status / metrics / action API against a live task."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from drainer_helpers import SHOP_DDL, drainer_config, rows, wait_until, write

from cluster.drainer import Drainer
from cluster.launch import PumpOptions
from tidb_binlog import binlog as bl
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, PUMP
from tidb_binlog.pump.server import open_pump
from tidb_binlog.testing.stack import StackSpec

pytestmark = pytest.mark.timeout(300)




def stored_commits(pump_actor, ray) -> int:
    """Non-fake commit binlogs the pump stores (it received real writes)."""
    batch_ref, _ = pump_actor.pull.options(num_returns=2).remote(0, 64 << 20, 0)
    return sum(1 for _, payload in ray.get(batch_ref) if not bl.is_fake(bl.decode(payload)))


def http(method, url):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# GC right behind now unless held back
STACK = StackSpec(pumps=1, ddl=SHOP_DDL, pump_options=PumpOptions(extra={"gc": "1s"}))


def test_pumps_join_and_leave_while_running_and_the_paused_drainer_holds_back_gc(stack):
    ray = pytest.importorskip("ray")
    up_db, down_db, cluster, upstream = stack
    drainer = Drainer.start(drainer_config(stack), registry=cluster.registry)
    try:
        write(upstream, 0, 10)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert drainer.status()["pumps"] == ["pump-0"]

        # A new pump: Notify returns only once it is a merge source (detect-interval is
        # 30 s, so only the handshake can have added it by now).
        new_pump = cluster.start_pump("pump-1")
        assert drainer.status()["pumps"] == ["pump-0", "pump-1"]
        next_id = 1000
        while stored_commits(new_pump, ray) == 0:  # the client picks pump-1 up from its watch
            assert next_id < 1200, "no write reached the new pump"
            write(upstream, next_id, 5)
            next_id += 5
        write(upstream, 10, 20)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")

        # pump-0 goes offline: it waits for our checkpoint, then we retire it.
        ray.get(cluster.pumps["pump-0"].close.remote())
        wait_until(lambda: cluster.registry.node(PUMP, "pump-0").state == OFFLINE,
                   what="pump-0 offline")
        wait_until(lambda: drainer.status()["pumps"] == ["pump-1"], what="pump-0 retired")
        write(upstream, 30, 20)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        assert len(rows(down_db, "shop.t")) >= 50
    finally:
        result = drainer.stop()
    assert result["consistent"] is True
    record = cluster.registry.node(DRAINER, drainer.node_id)
    assert record.state == PAUSED and record.max_commit_ts == result["commit_ts"]

    # A paused drainer still holds back GC: with gc = 1 s the pump would cut at
    # now - 1 s; it must stop at the drainer's checkpoint instead.
    time.sleep(1.5)
    write(upstream, 50, 3)
    status_addr = ray.get(cluster.pumps["pump-1"].status_address.remote())
    code, body = http("POST", f"http://{status_addr}/debug/gc/trigger")
    assert code == 200, body
    code, body = http("GET", f"http://{status_addr}/status")
    assert json.loads(body)["Checkpoint"]["gcTS"] == record.max_commit_ts


def test_registry_record_http_api_and_a_standalone_pump_over_grpc(stack):
    up_db, down_db, cluster, upstream = stack
    drainer = Drainer.start(drainer_config(stack, **{"node-id": "drainer-a"}),
                            registry=cluster.registry)
    base = f"http://{drainer.status_addr}"
    standalone = None
    try:
        # A pump process outside Ray (no PumpActor of its name): pulled over gRPC.
        standalone = open_pump(cluster.pump_config("solo"), registry=cluster.registry)
        assert drainer.status()["pumps"] == ["pump-0", "solo"]      # Notify handshake
        next_id = 500
        while not any(not bl.is_fake(bl.decode(p))
                      for _, p in standalone.node.pull(0, 64 << 20)[0]):
            assert next_id < 700, "no write reached the standalone pump"
            write(upstream, next_id, 5)
            next_id += 5
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        standalone.node.apply_action("solo", "close")
        wait_until(lambda: cluster.registry.node(PUMP, "solo").state == OFFLINE,
                   what="the standalone pump offline")
        wait_until(lambda: drainer.status()["pumps"] == ["pump-0"], what="solo retired")
        standalone.stop()
        standalone = None

        assert int(drainer.status_addr.rpartition(":")[2]) == \
            int(drainer.addr.rpartition(":")[2]) + 1
        record = cluster.registry.node(DRAINER, "drainer-a")
        assert record.state == ONLINE and record.host == drainer.addr
        inserted = len(rows(down_db, "shop.t"))
        write(upstream, 0, 10)
        target = cluster.get_ts()
        drainer.wait_for_checkpoint(target, timeout_s=120)
        # the heartbeat carries the saved checkpoint (saved every 3 s)
        wait_until(lambda: cluster.registry.node(DRAINER, "drainer-a").max_commit_ts >= target,
                   what="the registry record's maxCommitTS")

        code, body = http("GET", f"{base}/status")
        doc = json.loads(body)
        assert code == 200 and set(doc) == {"PumpPos", "Synced", "LastTS", "TsMap"}
        assert doc["PumpPos"]["pump-0"] >= target and doc["LastTS"] >= target
        assert doc["Synced"] is False          # rows were applied well within 5 minutes
        code, body = http("GET", f"{base}/commit_ts")
        assert code == 200 and json.loads(body)["data"]["ts"] >= target

        code, body = http("GET", f"{base}/metrics")
        text = body.decode()
        assert code == 200
        for name in ("binlog_drainer_checkpoint_tso", "binlog_drainer_checkpoint_delay_seconds",
                     "binlog_drainer_execute_duration_time_count",
                     "binlog_drainer_query_duration_time_count",
                     "binlog_drainer_binlog_reach_duration_time_count",
                     "binlog_drainer_queue_size", "binlog_drainer_error_count",
                     'binlog_drainer_pump_position{nodeID="pump-0"}'):
            assert name in text, name
        # the two workers' counters are summed into one series
        inserts = [line for line in text.splitlines()
                   if line.startswith('binlog_drainer_event_total{type="Insert"}')]
        assert len(inserts) == 1 and float(inserts[0].split()[-1]) == inserted + 10

        code, body = http("PUT", f"{base}/state/someone-else/close")
        assert code == 400 and b"not this drainer" in body
        code, body = http("PUT", f"{base}/state/drainer-a/close")
        assert code == 200 and json.loads(body)["message"] == "apply action close success!"
        wait_until(lambda: drainer.status()["state"] == "stopped", what="the task to stop")
        record = cluster.registry.node(DRAINER, "drainer-a")
        assert record.state == OFFLINE and record.max_commit_ts >= target
    finally:
        result = drainer.stop()
        if standalone is not None:
            standalone.stop()
    assert result["consistent"] is True
