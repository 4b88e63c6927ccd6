"""ActorPumpSource against a real PumpActor on the session's local Ray."""

from __future__ import annotations

import pytest

from actors.pump import start_pump_actor
from actors.ray_calls import PumpPullCalls
from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.drainer.service.metrics import build_drainer_metrics
from tidb_binlog.drainer.source.merge import Merger
from tidb_binlog.drainer.source.pump_source import ActorPumpSource
from tidb_binlog.errors import UnavailableError
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel
from tidb_binlog.testing.memory_storage import memory_storage_factory

CLUSTER_ID = 12


def start(ray, data_dir, node_id):
    cfg = load_pump_config(None, {"data-dir": data_dir, "addr": "127.0.0.1:0",
                                  "node-id": node_id, "cluster-id": CLUSTER_ID,
                                  "gen-binlog-interval": 3600,
                                  "storage.stop-write-at-available-space": "1 MiB"})
    actor = start_pump_actor(cfg, storage_factory=memory_storage_factory)
    return actor, ray.get(actor.address.remote(), timeout=60)


def write_txns(addr, start_ts, n, value_bytes=200):
    with open_channel(addr) as ch:
        stub = pump_pb2_grpc.PumpStub(ch)
        for i in range(n):
            s_ts = start_ts + 2 * i
            for b in (bl.prewrite(s_ts, b"%d:" % s_ts + b"x" * value_bytes, prewrite_key=b"k"),
                      bl.commit(s_ts, s_ts + 1)):
                resp = stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                                                payload=bl.encode(b)), timeout=10)
                assert resp.errmsg == ""
    return [start_ts + 2 * i + 1 for i in range(n)]


@pytest.fixture
def pump(ray_local, tmp_path):
    actor, addr = start(ray_local, str(tmp_path / "p"), "pump-a")
    yield actor, addr
    ray_local.kill(actor)


def sequential(source, last_ts):
    got, since = [], 0
    while since < last_ts:
        items, watermark = source.fetch(since, timeout_s=0.05)
        got.append((since, [ts for ts, _ in items], watermark))
        since = watermark
    return got


def test_pipelined_fetches_yield_the_sequential_stream(ray_local, pump):
    actor, addr = pump
    commits = write_txns(addr, 1000, 80)
    seq = sequential(ActorPumpSource(actor, PumpPullCalls(), max_bytes=2000, pull_timeout_s=0.05),
                     commits[-1])
    assert [ts for _, batch, _ in seq for ts in batch] == commits
    assert len(seq) > 5                                       # really several batches

    metrics = build_drainer_metrics()
    src = ActorPumpSource(actor, PumpPullCalls(), node_id="pump-a", max_bytes=2000,
                          pull_timeout_s=0.05, max_outstanding=3, metrics=metrics)
    src.start_fetch(0)
    piped, payloads = [], []
    while not piped or piped[-1][2] < commits[-1]:
        for f in src.poll(timeout_s=10):
            piped.append((f.since_commit_ts, [ts for ts, _ in f.items], f.watermark))
            payloads.extend(p for _, p in f.items)
        assert src.outstanding <= 3
    assert piped == seq                    # same batches, same order, chained by watermark
    assert bl.decode(payloads[0]).prewrite_value.startswith(b"1000:")
    assert src.position == commits[-1]
    assert metrics.registry.get_sample_value("binlog_drainer_read_binlog_size_count",
                                             {"nodeID": "pump-a"}) == 80
    src.close()
    assert src.outstanding == 0


def test_unpolled_fetches_stop_at_the_outstanding_bound(ray_local, pump):
    actor, addr = pump
    commits = write_txns(addr, 5000, 40)
    src = ActorPumpSource(actor, PumpPullCalls(), max_bytes=1000, pull_timeout_s=0.05,
                          max_outstanding=2)
    src.start_fetch(0)
    while src.pending_refs() or src.outstanding < 2:          # resolve, never hand out
        assert src.poll(timeout_s=10, max_fetches=0) == []
    assert src.outstanding == 2 and src.poll(timeout_s=0, max_fetches=0) == []
    assert src.outstanding == 2                               # nothing more was issued
    first = src.poll(max_fetches=1)
    assert len(first) == 1 and first[0].since_commit_ts == 0
    got = [ts for ts, _ in first[0].items]
    while not got or got[-1] < commits[-1]:
        got.extend(ts for f in src.poll(timeout_s=10) for ts, _ in f.items)
    assert got == commits
    src.close()


def test_two_pumps_merge_through_pipelined_sources(ray_local, pump, tmp_path):
    actor_a, addr_a = pump
    actor_b, addr_b = start(ray_local, str(tmp_path / "b"), "pump-b")
    try:
        a = write_txns(addr_a, 1000, 30) + write_txns(addr_a, 3000, 1)
        b = write_txns(addr_b, 1001, 30) + write_txns(addr_b, 3002, 1)
        # interleaved (odd and even commit_ts); 3003 waits for pump a to show a ts >= 3003 (a fake binlog would do it)
        expected = sorted(a + b)[:-1]
        merger = Merger()
        sources = {}
        for name, actor in (("a", actor_a), ("b", actor_b)):
            merger.add_source(name)
            sources[name] = ActorPumpSource(actor, PumpPullCalls(), node_id=name, max_bytes=800,
                                            pull_timeout_s=0.05)
            sources[name].start_fetch(0)
        out = []
        for _ in range(1000):
            if len(out) >= len(expected):
                break
            ActorPumpSource.wait_any(sources.values(), timeout_s=10)
            for name, src in sources.items():
                for f in src.poll():
                    merger.push(name, f.items, f.watermark)
            out.extend(i.commit_ts for i in merger.pop_ready())
        assert out == expected and merger.buffered() == 1
        for src in sources.values():
            src.close()
    finally:
        ray_local.kill(actor_b)


def test_a_dead_pump_actor_is_unavailable(ray_local, tmp_path):
    actor, addr = start(ray_local, str(tmp_path / "dead"), "pump-dead")
    write_txns(addr, 100, 3)
    src = ActorPumpSource(actor, PumpPullCalls(), node_id="pump-dead", pull_timeout_s=0.05)
    assert [ts for ts, _ in src.fetch(0)[0]] == [101, 103, 105]
    ray_local.kill(actor, no_restart=True)
    with pytest.raises(UnavailableError, match="pump pump-dead after 105: the pump actor is"):
        src.fetch(105)
    src.start_fetch(105)
    with pytest.raises(UnavailableError):
        while True:
            src.poll(timeout_s=10)
    assert src.outstanding == 0                               # the chain stopped
