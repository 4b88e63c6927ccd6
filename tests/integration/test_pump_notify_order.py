"""Start order against a real Cistern gRPC server: registry online → Notify → Prewrites.

The stub drainer records, inside its Notify handler, what a new drainer would
see (the pump's registry record) and what a TiDB that already saw that record
gets when it sends a Prewrite at that moment: it must be refused, so nothing is
stored before every drainer merges the pump (TiDB's pump/server.go order).
"""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.errors import UnavailableError
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, PUMP, NodeStatus
from tidb_binlog.proto import cistern_pb2, cistern_pb2_grpc, pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel, open_pump
from tidb_binlog.testing.registry import InMemoryRegistry

pytestmark = pytest.mark.integration

GATED = "no online: starting (notifying drainers)"


def _write(addr: str, cluster_id: int, b: bl.Binlog) -> str:
    with open_channel(addr) as ch:
        return pump_pb2_grpc.PumpStub(ch).WriteBinlog(
            pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=bl.encode(b)), timeout=10).errmsg


class _RecordingCistern(cistern_pb2_grpc.CisternServicer):
    """On Notify: record the pump's registry state, then try a Prewrite on it."""

    def __init__(self, registry, *, fail: bool = False):
        self.registry = registry
        self.fail = fail
        self.events: list[tuple] = []

    def Notify(self, request, context):
        rec = self.registry.node(PUMP, "pump-1")
        self.events.append(("notify", rec.state))
        errmsg = _write(rec.host, self.registry.cluster_id(), bl.prewrite(10, b"v"))
        self.events.append(("prewrite during notify", errmsg))
        if self.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "drainer is shutting down")
        return cistern_pb2.NotifyResp()


@pytest.fixture
def drainer(tmp_path):
    servers = []

    def start(registry, **kw):
        cistern = _RecordingCistern(registry, **kw)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        cistern_pb2_grpc.add_CisternServicer_to_server(cistern, server)
        addr = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        server.start()
        servers.append(server)
        registry.update_node(DRAINER, NodeStatus("d1", addr, state=ONLINE))
        return cistern

    yield start
    for server in servers:
        server.stop(0)


def _cfg(tmp_path):
    return load_pump_config(None, {
        "data-dir": str(tmp_path / "pump"), "addr": "127.0.0.1:0", "node-id": "pump-1",
        "gen-binlog-interval": 3600, "storage.stop-write-at-available-space": 1 << 20})


def test_new_pump_notifies_before_it_accepts_prewrites(tmp_path, drainer):
    reg = InMemoryRegistry()
    cistern = drainer(reg)
    proc = open_pump(_cfg(tmp_path), registry=reg, status_addr="127.0.0.1:0")
    try:
        # The drainer saw an online record (so it merges the pump), and a Prewrite sent
        # while it was being told was refused, not stored.
        assert cistern.events == [("notify", ONLINE), ("prewrite during notify", GATED)]
        assert proc.node.storage.stats()["writes"] == 0
        cid = reg.cluster_id()
        assert _write(proc.addr, cid, bl.prewrite(20, b"v")) == ""      # after the round
        assert _write(proc.addr, cid, bl.commit(20, 21)) == ""
        assert proc.node.storage.wait_for_commit(20, 10) == 21
        assert proc.node.storage.get_binlog(10) is None
    finally:
        proc.stop()
    # Restarted from paused: not new, no Notify round, writes accepted at once.
    assert reg.node(PUMP, "pump-1").state == PAUSED
    proc = open_pump(_cfg(tmp_path), registry=reg, status_addr="127.0.0.1:0")
    try:
        assert len(cistern.events) == 2
        assert _write(proc.addr, reg.cluster_id(), bl.prewrite(30, b"v")) == ""
    finally:
        proc.stop()


def test_failed_notify_goes_offline_having_stored_nothing(tmp_path, drainer):
    reg = InMemoryRegistry()
    cistern = drainer(reg, fail=True)
    with pytest.raises(UnavailableError, match="fail to notify all living drainer") as info:
        open_pump(_cfg(tmp_path), registry=reg, status_addr="127.0.0.1:0")
    assert "d1@127.0.0.1:" in str(info.value)
    assert reg.node(PUMP, "pump-1").state == OFFLINE
    # Three attempts, each with its refused Prewrite.
    assert cistern.events == [("notify", ONLINE), ("prewrite during notify", GATED)] * 3
