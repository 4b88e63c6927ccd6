"""The pump's gRPC and HTTP servers on real sockets (127.0.0.1, ephemeral ports)."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from concurrent import futures

import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.errors import UnavailableError
from tidb_binlog.node import DRAINER, PAUSED, PAUSING, PUMP, NodeStatus
from tidb_binlog.proto import cistern_pb2, cistern_pb2_grpc, pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel, open_pump
from tidb_binlog.testing.certs import make_pki
from tidb_binlog.testing.registry import InMemoryRegistry

CLUSTER_ID = 7


@pytest.fixture
def start_pump(tmp_path):
    """Start a pump (durable storage, real gRPC and HTTP sockets) from pump.toml keys."""
    started = []

    def start(*, registry=None, socket_path="", **overrides):
        keys = {"data-dir": str(tmp_path / f"pump{len(started)}"), "addr": "127.0.0.1:0",
                "node-id": "pump-1", "cluster-id": CLUSTER_ID, "gen-binlog-interval": 3600,
                "max-message-size": 1 << 20, "socket": socket_path,
                "storage.stop-write-at-available-space": 1 << 20}
        keys.update(overrides)
        proc = open_pump(load_pump_config(None, keys), registry=registry,
                         status_addr="127.0.0.1:0")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def settled(proc, commit_ts: int) -> int:
    """Wait until the storage's max_commit_ts (advanced after indexing) reaches commit_ts."""
    return proc.node.storage.wait_for_commit(commit_ts - 1, 10.0)


def writes(proc) -> int:
    return proc.node.storage.stats()["writes"]


def stub(proc, security=None):
    return pump_pb2_grpc.PumpStub(open_channel(proc.addr, security))


def write(s, payload, cluster_id=CLUSTER_ID):
    return s.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=payload),
                         timeout=10).errmsg


def pw(start_ts, value=b"v"):
    return bl.encode(bl.prewrite(start_ts, value, prewrite_key=b"pk"))


def cm(start_ts, commit_ts):
    return bl.encode(bl.commit(start_ts, commit_ts))


def http(proc, method, path):
    req = urllib.request.Request(f"http://{proc.status_addr}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def loss_count(proc) -> float:
    return proc.node.metrics.loss_binlog_count._value.get()


# -- WriteBinlog refusals: each with its errmsg, nothing stored -----------------------------
def test_wrong_cluster_id(start_pump):
    proc = start_pump()
    assert write(stub(proc), pw(10), cluster_id=8) == "cluster ID are mismatch, 8 vs 7"
    assert writes(proc) == 0 and loss_count(proc) == 1


def test_garbage_payload(start_pump):
    proc = start_pump()
    errmsg = write(stub(proc), b"\x0a\xff\xff\xff\xff")
    assert errmsg.startswith("malformed binlog payload (5 bytes)")
    assert write(stub(proc), b"") == "malformed binlog payload (0 bytes): field tp missing"
    assert writes(proc) == 0 and loss_count(proc) == 2


def test_oversize_payload_refused_by_grpc(start_pump):
    proc = start_pump(**{"max-message-size": 64 << 10})
    with pytest.raises(grpc.RpcError) as info:
        write(stub(proc), pw(10, b"x" * (100 << 10)))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in info.value.details()
    assert writes(proc) == 0
    assert write(stub(proc), pw(10, b"x" * (60 << 10))) == ""


def test_prewrite_while_paused(start_pump):
    reg = InMemoryRegistry()
    proc = start_pump(registry=reg)
    s = stub(proc)
    cid = reg.cluster_id()
    assert write(s, pw(10), cid) == ""
    code, body = http(proc, "PUT", "/state/pump-1/pause")
    assert code == 200
    assert json.loads(body) == {"message": "apply action pause success!", "code": 200}
    # pausing until the transaction in flight has its Commit: Prewrites refused meanwhile
    assert not proc.node.done.wait(0.5) and reg.node(PUMP, "pump-1").state == PAUSING
    assert write(s, pw(20), cid) == "no online: pausing"
    assert writes(proc) == 1
    assert write(s, cm(10, 11), cid) == ""
    assert writes(proc) == 2 and settled(proc, 11) == 11
    assert proc.node.done.wait(30) and reg.node(PUMP, "pump-1").state == PAUSED
    assert write(s, pw(30), cid) == "no online: paused"
    assert proc.node.storage.get_binlog(20) is None
    code, body = http(proc, "PUT", "/state/pump-1/close")
    assert code == 400 and "only an online pump" in json.loads(body)["message"]


def test_disk_space_guard(start_pump):
    proc = start_pump(**{"storage.stop-write-at-available-space": 1 << 60})
    assert write(stub(proc), pw(10)).startswith("no available space")
    assert writes(proc) == 0 and loss_count(proc) == 1


def test_probe_acknowledged_not_stored(start_pump):
    proc = start_pump()
    assert write(stub(proc), bl.encode(bl.probe())) == ""
    assert writes(proc) == 0 and loss_count(proc) == 0


# -- PullBinlogs ------------------------------------------------------------------------------
def test_pull_streams_in_order_and_waits_for_new_data(start_pump):
    proc = start_pump()
    s = stub(proc)
    assert write(s, pw(100, b"first")) == ""
    assert write(s, pw(102, b"second")) == ""
    assert write(s, cm(102, 103)) == ""       # waits behind the unmatched prewrite 100
    assert write(s, cm(100, 101)) == ""
    call = s.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID,
                                                startFrom=pump_pb2.Pos(offset=0)))
    got = []
    for resp in call:
        b = bl.decode(resp.entity.payload)
        got.append((resp.entity.meta.startTs, resp.entity.meta.commitTs, b.prewrite_value))
        assert resp.entity.pos.offset == b.commit_ts
        if len(got) == 2:
            break
    assert got == [(100, 101, b"first"), (102, 103, b"second")]
    # A new stream from offset 103 blocks until new commits arrive, then gets them.
    received = []
    call = s.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID,
                                                startFrom=pump_pb2.Pos(offset=103)))

    def consume():
        for resp in call:
            received.append(resp.entity.meta.commitTs)
            if len(received) == 3:
                return

    t = threading.Thread(target=consume)
    t.start()
    t.join(0.3)
    assert received == []
    for i in range(3):
        assert write(s, pw(200 + 2 * i)) == ""
        assert write(s, cm(200 + 2 * i, 201 + 2 * i)) == ""
    t.join(10)
    assert received == [201, 203, 205]
    call.cancel()


def test_pull_prefetching_one_binlog_per_batch_is_exactly_once_in_order(start_pump):
    """Batches of one binlog: every batch is read by the prefetch thread while the one
    before it is streamed, and the stream keeps following new writes."""
    proc = start_pump()
    proc.grpc_server.servicer.pull_batch_bytes = 1
    s = stub(proc)
    expected = []
    for i in range(20):
        start_ts = 1000 + 2 * i
        assert write(s, pw(start_ts, b"v%d" % i)) == ""
        assert write(s, cm(start_ts, start_ts + 1)) == ""
        expected.append((start_ts, start_ts + 1, b"v%d" % i))
    call = s.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID,
                                                startFrom=pump_pb2.Pos(offset=1002)))
    got = []
    for resp in call:
        b = bl.decode(resp.entity.payload)
        got.append((resp.entity.meta.startTs, resp.entity.meta.commitTs, b.prewrite_value))
        if len(got) == 19:
            assert write(s, pw(2000, b"late")) == "" and write(s, cm(2000, 2001)) == ""
            expected.append((2000, 2001, b"late"))
        if len(got) == 20:
            break
    call.cancel()
    assert got == expected[1:]


def test_pull_resumes_after_cancel_without_duplicates_and_sends_protobufs_bytes(start_pump):
    """Batches of 3: a client cancels mid-batch and reconnects from the last commit_ts
    it got; it sees every commit once, in order, then waits for and gets new ones. Each
    message is byte for byte what protobuf serializes for the same PullBinlogResp."""
    proc = start_pump()
    proc.grpc_server.servicer.pull_batch_bytes = 3 * 40
    s = stub(proc)
    expected = []
    for i in range(10):
        start_ts = 3000 + 2 * i
        assert write(s, pw(start_ts, b"val%d" % i)) == ""
        assert write(s, cm(start_ts, start_ts + 1)) == ""
        expected.append(start_ts + 1)
    assert write(s, bl.encode(bl.fake(3100))) == ""
    expected.append(3100)
    channel = open_channel(proc.addr)
    raw_pull = channel.unary_stream("/binlog.Pump/PullBinlogs",
                                    request_serializer=pump_pb2.PullBinlogReq.SerializeToString,
                                    response_deserializer=None)
    got, last = [], 0
    for stop_after in (4, 9):                  # cancel inside the second batch, then again
        call = raw_pull(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID,
                                               startFrom=pump_pb2.Pos(offset=last)))
        for raw in call:
            resp = pump_pb2.PullBinlogResp.FromString(raw)
            b = bl.decode(resp.entity.payload)
            assert raw == pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
                pos=pump_pb2.Pos(offset=b.commit_ts), payload=resp.entity.payload,
                meta=pump_pb2.Meta(startTs=b.start_ts, commitTs=b.commit_ts))).SerializeToString()
            if b.tp == bl.BinlogType.COMMIT:
                assert b.prewrite_value == b"val%d" % ((b.start_ts - 3000) // 2)
            got.append(b.commit_ts)
            last = b.commit_ts
            if len(got) == stop_after:
                break
        call.cancel()
    assert got == expected[:9]
    call = s.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID,
                                                startFrom=pump_pb2.Pos(offset=last)))
    rest = []

    def consume():
        for resp in call:
            rest.append(resp.entity.meta.commitTs)
            if len(rest) == 4:
                return

    t = threading.Thread(target=consume)
    t.start()
    t.join(0.5)                                # got the two left, now waits for new data
    assert rest == expected[9:]
    assert write(s, pw(3200)) == "" and write(s, cm(3200, 3201)) == ""
    assert write(s, bl.encode(bl.fake(3300))) == ""
    t.join(10)
    call.cancel()
    channel.close()
    assert rest == expected[9:] + [3201, 3300]


def test_pull_below_gc_is_an_error(start_pump):
    proc = start_pump()
    s = stub(proc)
    for i in range(5):
        write(s, bl.encode(bl.fake(100 + i)))
    assert settled(proc, 104) == 104
    proc.node.storage.gc(102)
    call = s.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID,
                                                startFrom=pump_pb2.Pos(offset=50)))
    with pytest.raises(grpc.RpcError) as info:
        next(iter(call))
    assert info.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert "gc_ts 102" in info.value.details()
    call = s.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID + 1))
    with pytest.raises(grpc.RpcError) as info:
        next(iter(call))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_unix_socket_listener(start_pump, tmp_path):
    sock = str(tmp_path / "pump.sock")
    proc = start_pump(socket_path=sock)
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        assert write(pump_pb2_grpc.PumpStub(ch), bl.encode(bl.fake(77))) == ""
    assert settled(proc, 77) == 77


# -- HTTP ----------------------------------------------------------------------------------------
class _Cistern(cistern_pb2_grpc.CisternServicer):
    def __init__(self):
        self.notified = 0

    def Notify(self, request, context):
        self.notified += 1
        return cistern_pb2.NotifyResp()


@pytest.fixture
def drainer_stub():
    """A real gRPC Cistern service standing in for an online drainer."""
    cistern = _Cistern()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    cistern_pb2_grpc.add_CisternServicer_to_server(cistern, server)
    cistern.addr = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    yield cistern
    server.stop(0)


def test_http_endpoints(start_pump, drainer_stub):
    reg = InMemoryRegistry()
    reg.update_node(DRAINER, NodeStatus("d1", drainer_stub.addr, max_commit_ts=0))
    proc = start_pump(registry=reg)
    assert drainer_stub.notified == 1                 # a new pump notifies online drainers
    s = stub(proc)
    cid = reg.cluster_id()
    pv = bl.encode(bl.new_prewrite_value(5, [bl.new_table_mutation(42, inserted_rows=[b"r"])]))
    assert write(s, pw(10, pv), cid) == ""
    assert write(s, cm(10, 11), cid) == ""
    write(s, b"junk", cid)
    assert settled(proc, 11) == 11

    code, body = http(proc, "GET", "/status")
    doc = json.loads(body)
    assert code == 200 and doc["ErrMsg"] == "" and doc["CommitTS"] > 11
    assert doc["status"]["pump-1"]["state"] == "online"
    assert doc["Checkpoint"]["maxCommitTS"] == 11
    code, body = http(proc, "GET", "/drainers")
    assert code == 200 and [d["nodeId"] for d in json.loads(body)] == ["d1"]
    code, body = http(proc, "GET", "/debug/binlog/10")
    assert code == 200 and "table_id: 42" in body and "schema_version: 5" in body
    assert http(proc, "GET", "/debug/binlog/999")[0] == 404
    assert http(proc, "GET", "/debug/binlog/abc")[0] == 400
    code, body = http(proc, "POST", "/debug/gc/trigger")
    assert code == 200 and body.startswith("trigger gc success")
    code, body = http(proc, "GET", "/metrics")
    assert code == 200
    assert "binlog_pump_loss_binlog_count_total 1.0" in body
    assert 'binlog_pump_rpc_duration_seconds_count{label="succ",method="WriteBinlog"} 2.0' in body
    assert "binlog_pump_storage_max_commit_ts" in body
    code, body = http(proc, "PUT", "/state/other-pump/close")
    assert code == 400 and "not this pump" in body
    assert http(proc, "GET", "/nope")[0] == 404


def test_port_0_repicks_when_the_picked_port_plus_1_is_taken(tmp_path, monkeypatch):
    # HTTP defaults to the gRPC port + 1; with port 0 that port was never checked free.
    import errno
    import socket

    from tidb_binlog.pump import server as pump_server

    real_build, blockers, picked = pump_server.build_server, [], []

    def build_and_steal_the_next_port(*args, **kwargs):
        grpc_server = real_build(*args, **kwargs)
        picked.append(grpc_server.port)
        if not blockers:                       # another process holds port + 1
            blocker = socket.socket()
            blockers.append(blocker)
            try:
                blocker.bind(("127.0.0.1", grpc_server.port + 1))
                blocker.listen()
            except OSError as exc:             # already taken by someone else: as good
                assert exc.errno == errno.EADDRINUSE, exc
        return grpc_server

    monkeypatch.setattr(pump_server, "build_server", build_and_steal_the_next_port)
    keys = {"data-dir": str(tmp_path / "p"), "addr": "127.0.0.1:0", "node-id": "pump-1",
            "cluster-id": CLUSTER_ID, "gen-binlog-interval": 3600,
            "storage.stop-write-at-available-space": 1 << 20}
    try:
        proc = open_pump(load_pump_config(None, keys))
        try:
            # A second pick whose port + 1 someone else holds is re-picked again.
            assert len(picked) >= 2 and proc.addr == f"127.0.0.1:{picked[-1]}"
            assert proc.status_addr == f"127.0.0.1:{picked[-1] + 1}"
            assert proc.node.options.advertise_addr == proc.addr
            assert http(proc, "GET", "/status")[0] == 200
        finally:
            proc.stop()
    finally:
        for blocker in blockers:
            blocker.close()


def test_unreachable_drainer_refuses_start(start_pump, free_port):
    reg = InMemoryRegistry()
    reg.update_node(DRAINER, NodeStatus("d1", f"127.0.0.1:{free_port()}"))
    with pytest.raises(UnavailableError, match="fail to notify all living drainer"):
        start_pump(registry=reg)
    assert reg.node(PUMP, "pump-1").state == "offline"


def test_close_action_goes_offline_via_http(start_pump):
    reg = InMemoryRegistry()
    proc = start_pump(registry=reg)
    code, _ = http(proc, "PUT", "/state/pump-1/close")
    assert code == 200
    assert proc.node.done.wait(10)
    assert reg.node(PUMP, "pump-1").state == "offline"


# -- TLS -------------------------------------------------------------------------------------------
def test_tls_mutual_auth(start_pump, tmp_path):
    pytest.importorskip("cryptography")
    pki = make_pki(tmp_path / "pki")
    server_sec, client_sec = pki.server, pki.client
    proc = start_pump(**server_sec.keys())
    assert write(stub(proc, client_sec), bl.encode(bl.fake(55))) == ""
    assert settled(proc, 55) == 55
    with pytest.raises(grpc.RpcError) as info:
        write(stub(proc), bl.encode(bl.fake(56)))      # plaintext client
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    ctx = ssl.create_default_context(cafile=client_sec.ssl_ca)
    ctx.load_cert_chain(client_sec.ssl_cert, client_sec.ssl_key)
    with urllib.request.urlopen(f"https://{proc.status_addr}/status", context=ctx,
                                timeout=10) as resp:
        assert json.loads(resp.read())["Checkpoint"]["maxCommitTS"] == 55
    with pytest.raises(OSError):          # plaintext HTTP is not served
        urllib.request.urlopen(f"http://{proc.status_addr}/status", timeout=10).read()
    no_cert = pki.ca_only
    with pytest.raises(grpc.RpcError):
        write(stub(proc, no_cert), bl.encode(bl.fake(57)))   # no client certificate
    assert writes(proc) == 1
