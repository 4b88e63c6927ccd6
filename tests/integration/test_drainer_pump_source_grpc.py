"""GrpcPumpSource against a real pump (durable storage, gRPC on 127.0.0.1)."""

from __future__ import annotations

import time
from concurrent import futures

import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.drainer.service.metrics import build_drainer_metrics
from tidb_binlog.drainer.source.pump_source import GrpcPumpSource
from tidb_binlog.errors import ClusterIDMismatch, ProtocolError, PurgedError
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel, open_pump
from tidb_binlog.tso import compose, extract_physical

CLUSTER_ID = 7


@pytest.fixture
def start_pump(tmp_path):
    started = []

    def start(addr="127.0.0.1:0", data_dir=None):
        keys = {"data-dir": str(data_dir or tmp_path / f"pump{len(started)}"), "addr": addr,
                "node-id": "pump-1", "cluster-id": CLUSTER_ID, "gen-binlog-interval": 3600,
                "storage.stop-write-at-available-space": 1 << 20}
        proc = open_pump(load_pump_config(None, keys), status_addr="127.0.0.1:0")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            proc.stop()
        except Exception:
            pass


@pytest.fixture
def sources():
    made = []

    def make(*args, **kw):
        made.append(GrpcPumpSource(*args, **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def write_txns(addr, start_ts, n):
    """n committed transactions (start_ts, start_ts + 1), start_ts stepping by 2."""
    with open_channel(addr) as ch:
        stub = pump_pb2_grpc.PumpStub(ch)
        for i in range(n):
            s_ts = start_ts + 2 * i
            for b in (bl.prewrite(s_ts, b"v%d" % s_ts, prewrite_key=b"k"),
                      bl.commit(s_ts, s_ts + 1)):
                resp = stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                                                payload=bl.encode(b)), timeout=10)
                assert resp.errmsg == ""
    return [start_ts + 2 * i + 1 for i in range(n)]


def drain(source, since, want, max_bytes=4 << 20, rounds=200):
    """Fetch until ``want`` items arrived (each fetch waits at most 0.2 s)."""
    got = []
    for _ in range(rounds):
        items, watermark = source.fetch(since, max_bytes, 0.2)
        assert watermark == (items[-1][0] if items else since)
        got.extend(items)
        since = watermark
        if len(got) >= want:
            break
    return got, since


def test_items_arrive_in_order_with_their_prewrite_values(start_pump, sources):
    proc = start_pump()
    commits = write_txns(proc.addr, 1000, 60)
    metrics = build_drainer_metrics()
    src = sources(proc.addr, CLUSTER_ID, node_id="pump-1", metrics=metrics)
    got, watermark = drain(src, 0, 60, max_bytes=300)
    assert [ts for ts, _ in got] == commits and watermark == commits[-1]
    first = bl.decode(got[0][1])
    assert (first.tp, first.start_ts, first.prewrite_value) == (bl.BinlogType.COMMIT, 1000,
                                                                b"v1000")
    assert src.fetch(watermark, 1 << 20, 0.05) == ([], watermark)
    position = metrics.registry.get_sample_value("binlog_drainer_pump_position",
                                                 {"nodeID": "pump-1"})
    assert position == extract_physical(commits[-1])
    assert metrics.registry.get_sample_value("binlog_drainer_read_binlog_size_count",
                                             {"nodeID": "pump-1"}) == 60


def test_fetch_from_another_position_restarts_the_stream(start_pump, sources):
    proc = start_pump()
    commits = write_txns(proc.addr, 1000, 20)
    src = sources(proc.addr, CLUSTER_ID)
    got, watermark = drain(src, 0, 20)
    assert [ts for ts, _ in got] == commits
    got, _ = drain(src, commits[9], 10)              # rewind: served again from there
    assert [ts for ts, _ in got] == commits[10:]


def test_fake_binlogs_move_the_watermark(start_pump, sources):
    proc = start_pump()
    commits = write_txns(proc.addr, compose(1000, 0), 3)
    src = sources(proc.addr, CLUSTER_ID)
    _, watermark = drain(src, 0, 3)
    assert watermark == commits[-1]
    fake_ts = proc.node.write_fake_binlog()
    got, watermark = drain(src, watermark, 1)
    assert [ts for ts, _ in got] == [fake_ts] and watermark == fake_ts > commits[-1]
    assert bl.is_fake(bl.decode(got[0][1]))


def test_reconnects_after_the_pump_restarts(start_pump, sources, free_port, tmp_path):
    addr = f"127.0.0.1:{free_port()}"
    data_dir = tmp_path / "restarting"
    proc = start_pump(addr, data_dir)
    first = write_txns(addr, 1000, 10)
    src = sources(addr, CLUSTER_ID, reconnect_interval_s=0.2)
    got, watermark = drain(src, 0, 10)
    assert [ts for ts, _ in got] == first
    proc.stop()
    proc = start_pump(addr, data_dir)               # same port, same data dir
    second = write_txns(addr, 5000, 10)
    got, watermark = drain(src, watermark, 10)
    assert [ts for ts, _ in got] == second          # nothing lost, nothing repeated
    assert src.reconnects >= 1


def test_wrong_cluster_id_is_fatal(start_pump, sources):
    proc = start_pump()
    src = sources(proc.addr, CLUSTER_ID + 1, node_id="pump-1")
    with pytest.raises(ClusterIDMismatch, match="pump pump-1 at .* refused cluster id 8"):
        drain(src, 0, 1)


class _GarbagePump(pump_pb2_grpc.PumpServicer):
    """Streams one good binlog, then bytes that are no binlog, then an out-of-range error."""

    def __init__(self, purged=False):
        self.purged = purged

    def PullBinlogs(self, request, context):
        if self.purged:
            context.abort(grpc.StatusCode.OUT_OF_RANGE, "requested ts 0 is below gc ts 99")
        good = bl.encode(bl.commit(10, 11))
        yield pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
            pos=pump_pb2.Pos(offset=11), payload=good, meta=pump_pb2.Meta(startTs=10, commitTs=11)))
        yield pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
            pos=pump_pb2.Pos(offset=13), payload=b"\x0a\xff\xff\xff\xff",
            meta=pump_pb2.Meta(startTs=12, commitTs=13)))


@pytest.fixture
def fake_pump():
    servers = []

    def start(servicer):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pump_pb2_grpc.add_PumpServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(0)


def test_unmarshal_error_is_fatal_after_the_good_items(fake_pump, sources):
    src = sources(fake_pump(_GarbagePump()), CLUSTER_ID, node_id="pump-x")
    items, watermark = src.fetch(0, 1 << 20, 5.0)
    assert [ts for ts, _ in items] == [11] and watermark == 11
    with pytest.raises(ProtocolError, match="pump pump-x .* does not unmarshal at commit_ts 13"):
        drain(src, watermark, 1)
    with pytest.raises(ProtocolError):               # and stays failed
        src.fetch(watermark, 1 << 20, 0)


def test_rewinding_before_the_error_was_read_reads_again(fake_pump, sources):
    src = sources(fake_pump(_GarbagePump()), CLUSTER_ID, node_id="pump-x")
    assert [ts for ts, _ in src.fetch(0, 1 << 20, 5.0)[0]] == [11]
    items, watermark = src.fetch(0, 1 << 20, 5.0)    # rewind: the reader starts over
    assert [ts for ts, _ in items] == [11]
    with pytest.raises(ProtocolError, match="at commit_ts 13"):
        drain(src, watermark, 1)


def test_rewinding_after_the_error_was_read_ahead_reads_again(fake_pump, sources):
    """The reader met the bad binlog before the consumer asked for it (read ahead): the
    error stands at that position, and a rewind reads the good items again first."""
    src = sources(fake_pump(_GarbagePump()), CLUSTER_ID, node_id="pump-x")
    items, watermark = src.fetch(0, 1 << 20, 5.0)
    assert [ts for ts, _ in items] == [11]
    time.sleep(0.5)                                   # the reader has queued the error
    with pytest.raises(ProtocolError, match="at commit_ts 13"):
        drain(src, watermark, 1)
    items, watermark = src.fetch(0, 1 << 20, 5.0)    # rewind: read again, then the error
    assert [ts for ts, _ in items] == [11]
    with pytest.raises(ProtocolError, match="at commit_ts 13"):
        drain(src, watermark, 1)


def test_purged_start_is_fatal(fake_pump, sources):
    src = sources(fake_pump(_GarbagePump(purged=True)), CLUSTER_ID, node_id="pump-y")
    with pytest.raises(PurgedError, match="pump-y .* purged binlogs after commit_ts 0"):
        drain(src, 0, 1)
