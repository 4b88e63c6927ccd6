"""The streaming write (binlog_stream.PumpStream/WriteBinlogChunks) end to end: our pump
client → a real pump gRPC server on 127.0.0.1 → its value log; no Ray, no MariaDB.
What the unary WriteBinlog guarantees holds for a streamed binlog: same stored bytes,
durable across a restart, a retry stored once, a bad stream stores nothing and says why,
a wrong cluster refused; and a pump without the service gets WriteBinlog instead."""

from __future__ import annotations

from concurrent import futures

import google_crc32c
import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import ClusterIDMismatch
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.grpc_server import build_server
from tidb_binlog.pump.node import PumpNode, PumpNodeOptions
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.vlog import HEADER_SIZE
from tidb_binlog.pump_client import PumpClient
from tidb_binlog.pump_client.transport import chunk_messages

pytestmark = pytest.mark.integration

CLUSTER = 7
OPTS = StorageOptions(sync_log=True, stop_write_at_available_space_bytes=0,
                      resolve_interval_s=3600)
STREAM_ABOVE = 64 << 10
VALUE = bytes(range(256)) * (3 * 4096 + 17)  # ~3 MiB: a few 4 MiB-bounded chunks' worth


class Pump:
    """A real pump: storage, node and gRPC server over ``data_dir``."""

    def __init__(self, data_dir):
        self.metrics = StorageMetrics()
        self.storage = Storage(data_dir, OPTS, metrics=self.metrics)
        self.node = PumpNode(PumpNodeOptions(data_dir=str(data_dir), cluster_id=CLUSTER),
                             self.storage)
        self.node.start(background=False)
        self.server = build_server(self.node, "127.0.0.1:0")
        self.addr = self.server.addr

    def vlog_bytes(self) -> int:
        return self.storage.stats()["vlog_bytes"]

    def served(self) -> list[tuple[int, bytes]]:
        return self.storage.pull_commit_binlogs(0, max_bytes=64 << 20)

    def close(self):
        self.server.stop(0)
        self.node.stop()
        self.storage.close()


def client(addr, stream_above=STREAM_ABOVE, cluster_id=CLUSTER) -> PumpClient:
    return PumpClient(None, cluster_id=cluster_id, pumps=[addr], rpc_timeout_s=10,
                      write_timeout_s=20, stream_above_bytes=stream_above,
                      probe_interval_s=3600)


def raw_stream(addr, messages) -> str:
    with grpc.insecure_channel(addr) as ch:
        call = ch.stream_unary("/binlog_stream.PumpStream/WriteBinlogChunks",
                               request_serializer=None,
                               response_deserializer=pump_pb2.WriteBinlogResp.FromString)
        return call(iter(messages), timeout=10).errmsg


@pytest.fixture
def pump(tmp_path):
    p = Pump(tmp_path / "streamed")
    yield p
    p.close()


def test_streamed_write_is_stored_like_a_unary_one_durably_and_once(tmp_path, pump):
    payload = bl.encode(bl.prewrite(100, VALUE, prewrite_key=b"k"))
    unary = Pump(tmp_path / "unary")
    try:
        with client(pump.addr) as c, client(unary.addr, stream_above=0) as u:
            assert u.write_prewrite_parts(100, [payload])
            assert c.write_prewrite_parts(100, [payload])
            assert c._channels[pump.addr].streams  # it did stream (the pump serves it)
            # a retried Prewrite (same start_ts, size, crc) is acknowledged, not stored again
            before = pump.vlog_bytes()
            assert c.write_prewrite_parts(100, [payload])
            assert pump.vlog_bytes() == before == HEADER_SIZE + len(payload)
            assert pump.metrics.duplicate_prewrite_count._value.get() == 1
            for cl in (c, u):
                assert cl.write_binlog(bl.commit(100, 101))
        for p in (pump, unary):
            p.storage.wait_for_commit(100, 10.0)
        assert pump.served() == unary.served()
        assert bl.decode(pump.served()[0][1]).prewrite_value == VALUE
        streamed_log = (tmp_path / "streamed" / "value" / "000001.vlog").read_bytes()
        unary_log = (tmp_path / "unary" / "value" / "000001.vlog").read_bytes()
        assert streamed_log[:HEADER_SIZE + len(payload)] == unary_log[:HEADER_SIZE + len(payload)]
    finally:
        unary.close()
    pump.close()  # a restart: the acknowledged record is durable
    again = Pump(tmp_path / "streamed")
    try:
        again.storage.wait_for_commit(100, 10.0)
        assert bl.decode(again.served()[0][1]).prewrite_value == VALUE
        assert list((tmp_path / "streamed" / "spill").iterdir()) == []
    finally:
        again.close()
    pump.close = lambda: None  # already closed for the fixture


def test_a_bad_stream_stores_nothing_and_says_why(pump):
    payload = bl.encode(bl.prewrite(200, VALUE[:300_000]))
    crc = google_crc32c.value(payload)
    view = memoryview(payload)
    cut = list(chunk_messages(CLUSTER, view, crc, chunk_bytes=100_000))[:-1]
    assert "the stream announced" in raw_stream(pump.addr, cut)
    assert "corrupted in transit" in raw_stream(
        pump.addr, chunk_messages(CLUSTER, view, crc ^ 1, chunk_bytes=100_000))
    longer = list(chunk_messages(CLUSTER, view, crc, chunk_bytes=100_000)) + \
        [b"\x22\x01x"]
    assert "longer than the" in raw_stream(pump.addr, longer)
    assert "cluster ID are mismatch, 8 vs 7" in raw_stream(
        pump.addr, chunk_messages(8, view, crc))
    assert pump.vlog_bytes() == 0
    with client(pump.addr, cluster_id=8) as c, pytest.raises(ClusterIDMismatch):
        c.write_prewrite_parts(200, [payload])
    pump.node._accepting = False  # as paused: a streamed Prewrite is refused at once
    assert "no online" in raw_stream(pump.addr, chunk_messages(CLUSTER, view, crc))
    assert pump.vlog_bytes() == 0


class _UnaryOnlyPump(pump_pb2_grpc.PumpServicer):
    """A pump of another build: binlog.Pump only (WriteBinlogChunks is UNIMPLEMENTED)."""

    def __init__(self):
        self.payloads = []

    def WriteBinlog(self, request, context):
        self.payloads.append(request.payload)
        return pump_pb2.WriteBinlogResp()


def test_a_pump_without_the_stream_service_gets_write_binlog():
    servicer = _UnaryOnlyPump()
    server = grpc.server(futures.ThreadPoolExecutor(2), options=[
        ("grpc.max_receive_message_length", 64 << 20)])
    pump_pb2_grpc.add_PumpServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        payload = bl.encode(bl.prewrite(300, VALUE[:200_000]))
        with client(f"127.0.0.1:{port}") as c:
            assert c.write_prewrite_parts(300, [payload])
            assert not c._channels[f"127.0.0.1:{port}"].streams  # remembered
            assert c.write_binlog(bl.prewrite(301, VALUE[:100_000]))
        assert servicer.payloads[0] == payload and len(servicer.payloads) == 2
    finally:
        server.stop(0)
