"""The drainer's network faces on 127.0.0.1: Cistern Notify with a real pump, and HTTP status."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import grpc
import pytest

from tidb_binlog.config import load_pump_config
from tidb_binlog.drainer.service.cistern import collector_notifier, serve_cistern
from tidb_binlog.drainer.service.http_status import DrainerStatus, DrainerStatusServer
from tidb_binlog.drainer.service.metrics import METRIC_NAMES, build_drainer_metrics
from tidb_binlog.drainer.source.collector import Collector, MergerSources
from tidb_binlog.drainer.source.merge import Merger
from tidb_binlog.drainer.source.pump_source import GrpcPumpSource
from tidb_binlog.errors import ConfigError, StateError, UnavailableError
from tidb_binlog.node import DRAINER, PUMP, NodeStatus
from tidb_binlog.proto import cistern_pb2, cistern_pb2_grpc
from tidb_binlog.pump.server import notify_drainer, open_channel, open_pump
from tidb_binlog.testing.registry import InMemoryRegistry


# -- Cistern -----------------------------------------------------------------------------
class MergeLoop:
    """The shell's loop in miniature: steps the collector until stopped."""

    def __init__(self, collector):
        self.collector = collector
        self.stop = threading.Event()
        self.errors = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                self.collector.step()
            except Exception as exc:
                self.errors.append(exc)
            self.stop.wait(min(0.02, self.collector.due_in_s()))

    def close(self):
        self.stop.set()
        self.thread.join(10)


def test_a_new_pump_is_merged_before_it_goes_online(tmp_path):
    reg = InMemoryRegistry()
    merger = Merger(start_ts=0)
    target = MergerSources(merger, lambda node, host, since: GrpcPumpSource(
        host, reg.cluster_id(), node_id=node))
    collector = Collector(lambda: reg.nodes(PUMP), target, detect_interval_s=3600)
    loop = MergeLoop(collector)
    cistern = serve_cistern("127.0.0.1:0", collector_notifier(collector, timeout_s=10))
    proc = None
    try:
        reg.update_node(DRAINER, NodeStatus(node_id="drainer-1", host=cistern.addr))
        assert collector.started or collector.wait(collector.notify(), 10)
        assert merger.sources() == []
        keys = {"data-dir": str(tmp_path / "pump"), "addr": "127.0.0.1:0", "node-id": "pump-1",
                "gen-binlog-interval": 3600, "storage.stop-write-at-available-space": 1 << 20}
        proc = open_pump(load_pump_config(None, keys), registry=reg,
                         status_addr="127.0.0.1:0")
        # open_pump returned: the pump is online, and the drainer merges it already
        assert merger.sources() == ["pump-1"]
        assert target.views()["pump-1"].host == proc.addr
        assert cistern.servicer.notifications == 1 and loop.errors == []
    finally:
        if proc is not None:
            proc.stop()
        target.close()
        cistern.stop()
        loop.close()


def test_notify_fails_with_the_reason_when_the_refresh_does_not_happen():
    collector = Collector(lambda: [], MergerSources(Merger(), None), detect_interval_s=3600)
    cistern = serve_cistern("127.0.0.1:0", collector_notifier(collector, timeout_s=0.1))
    try:   # nobody steps the collector
        with pytest.raises(UnavailableError, match=r"drainer at .*: UNAVAILABLE: .*refresh did "
                                                   r"not complete within 0\.1 s") as info:
            notify_drainer(cistern.addr, timeout_s=10)
        assert info.value.__cause__.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        cistern.stop()


def test_dump_rpcs_are_unimplemented():
    cistern = serve_cistern("127.0.0.1:0", lambda: None)
    try:
        with open_channel(cistern.addr) as ch:
            stub = cistern_pb2_grpc.CisternStub(ch)
            with pytest.raises(grpc.RpcError) as info:
                list(stub.DumpBinlog(cistern_pb2.DumpBinlogReq(beginCommitTS=1), timeout=10))
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert "DumpBinlog is not implemented" in info.value.details()
            with pytest.raises(grpc.RpcError) as info:
                stub.DumpDDLJobs(cistern_pb2.DumpDDLJobsReq(beginCommitTS=1), timeout=10)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        notify_drainer(cistern.addr, timeout_s=10)
        assert cistern.servicer.notifications == 1
    finally:
        cistern.stop()


def test_cistern_addr_in_use_is_a_config_error():
    cistern = serve_cistern("127.0.0.1:0", lambda: None)
    try:
        with pytest.raises(ConfigError, match="cannot listen on addr"):
            serve_cistern(cistern.addr, lambda: None)
    finally:
        cistern.stop()


def test_cistern_port_0_repicks_when_the_picked_port_plus_1_is_taken(monkeypatch):
    # HTTP defaults to the Cistern port + 1; with port 0 that port was never checked free.
    import errno
    import socket

    from tidb_binlog.drainer.service import node as node_module
    from tidb_binlog.drainer.service.node import DrainerNode, ServiceSettings

    real_serve, blockers, picked = node_module.serve_cistern, [], []

    def serve_and_steal_the_next_port(*args, **kwargs):
        cistern = real_serve(*args, **kwargs)
        picked.append(cistern.port)
        if not blockers:                       # another process holds port + 1
            blocker = socket.socket()
            blockers.append(blocker)
            try:
                blocker.bind(("127.0.0.1", cistern.port + 1))
                blocker.listen()
            except OSError as exc:             # already taken by someone else: as good
                assert exc.errno == errno.EADDRINUSE, exc
        return cistern

    monkeypatch.setattr(node_module, "serve_cistern", serve_and_steal_the_next_port)
    settings = ServiceSettings(node_id="d1", addr="127.0.0.1:0", advertise_addr="127.0.0.1:0",
                               heartbeat_interval_s=3600)
    node = DrainerNode(settings, InMemoryRegistry(), checkpoint_ts=lambda: 0)
    try:
        node.serve(on_notify=lambda: None, status_provider=lambda: DrainerStatus(0, 0.0),
                   metrics_provider=lambda: b"", on_action=lambda action: None)
        try:
            # At least one re-pick; more when another process on the box happens to hold
            # a later pick's port + 1 too (the node keeps re-picking until both are free).
            assert len(picked) >= 2 and node.cistern.port == picked[-1]
            assert node.host == f"127.0.0.1:{picked[-1]}"
            assert node.http.addr == f"127.0.0.1:{picked[-1] + 1}"
        finally:
            node.stop_servers()
    finally:
        for blocker in blockers:
            blocker.close()


# -- HTTP --------------------------------------------------------------------------------
class Drainer:
    """What the shell would plug in: a status, a clock, and an action callback."""

    def __init__(self):
        self.now_s = 10_000.0
        self.status = DrainerStatus(checkpoint_ts=4242, last_sync_s=self.now_s,
                                    pump_positions={"pump-1": 4300, "pump-2": 4250},
                                    latest_commit_ts=4300)
        self.actions = []
        self.refuse = False
        self.metrics = build_drainer_metrics()

    def on_action(self, action):
        if self.refuse:
            raise StateError("drainer is closing", state="closing")
        self.actions.append(action)


@pytest.fixture
def http_drainer():
    d = Drainer()
    server = DrainerStatusServer("127.0.0.1:0", node_id="drainer-1",
                                 status_provider=lambda: d.status,
                                 metrics_provider=d.metrics.exposition, on_action=d.on_action,
                                 synced_check_time_s=300, wall_clock=lambda: d.now_s).start()
    d.addr = server.addr
    yield d
    server.stop()


def call(d, method, path):
    req = urllib.request.Request(f"http://{d.addr}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_status_and_synced(http_drainer):
    d = http_drainer
    code, body = call(d, "GET", "/status")
    assert code == 200
    assert json.loads(body) == {"PumpPos": {"pump-1": 4300, "pump-2": 4250}, "Synced": False,
                                "LastTS": 4242, "TsMap": ""}
    d.now_s += 299
    assert json.loads(call(d, "GET", "/status")[1])["Synced"] is False
    d.now_s += 1                                # nothing synced for synced-check-time
    assert json.loads(call(d, "GET", "/status")[1])["Synced"] is True


def test_commit_ts(http_drainer):
    d = http_drainer
    code, body = call(d, "GET", "/commit_ts")
    assert code == 200 and json.loads(body) == {
        "message": "get drainer's latest ts success!", "code": 200, "data": {"ts": 4300}}
    d.status = DrainerStatus(checkpoint_ts=77, last_sync_s=0)
    assert json.loads(call(d, "GET", "/commit_ts")[1])["data"] == {"ts": 77}


def test_state_actions(http_drainer):
    d = http_drainer
    code, body = call(d, "PUT", "/state/drainer-1/pause")
    assert (code, json.loads(body)) == (200, {"message": "apply action pause success!",
                                              "code": 200})
    assert call(d, "PUT", "/state/drainer-1/close")[0] == 200
    assert d.actions == ["pause", "close"]
    code, body = call(d, "PUT", "/state/drainer-2/close")
    assert code == 400 and "'drainer-2' is not this drainer ('drainer-1')" in body
    code, body = call(d, "PUT", "/state/drainer-1/stop")
    assert code == 400 and "unknown action 'stop'" in body
    d.refuse = True
    code, body = call(d, "PUT", "/state/drainer-1/pause")
    assert (code, json.loads(body)["message"]) == (400, "drainer is closing")
    assert d.actions == ["pause", "close"]


def test_metrics_lists_every_drainer_name(http_drainer):
    d = http_drainer
    d.metrics.observe_binlog("pump-1", 4300 << 18, 512, d.now_s)
    d.metrics.set_checkpoint(4_242_000 << 18, 4244.5)   # physical 4242.0 s
    code, text = call(d, "GET", "/metrics")
    assert code == 200
    for name in METRIC_NAMES:
        assert f"# TYPE {name}" in text, name
    assert 'binlog_drainer_pump_position{nodeID="pump-1"} 4300.0' in text
    assert "binlog_drainer_checkpoint_tso 4.242e+06" in text
    assert "binlog_drainer_checkpoint_delay_seconds 2.5" in text


def test_unknown_route_and_failing_provider(http_drainer):
    d = http_drainer
    code, body = call(d, "GET", "/nope")
    assert code == 404 and "no route for GET /nope" in body
    d.status = None                              # a broken provider: 500 with the reason
    code, body = call(d, "GET", "/status")
    assert code == 500 and "AttributeError" in json.loads(body)["message"]


def test_collector_notifier_serves_a_waiting_caller():
    collector = Collector(lambda: [], MergerSources(Merger(), None), detect_interval_s=3600)
    collector.step()
    done = []
    caller = threading.Thread(target=lambda: done.append(collector_notifier(collector, 10)()))
    caller.start()
    while caller.is_alive():                     # the merge loop, stepping until served
        collector.step()
        caller.join(0.01)
    assert done == [None] and collector.refreshes >= 2
    with pytest.raises(UnavailableError):
        collector_notifier(collector, 0)()
