"""PumpActor on a real local Ray: gRPC writes, batched pull, crash and restart."""

from __future__ import annotations

import pytest

from actors.pump import start_pump_actor
from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.errors import ProtocolError
from tidb_binlog.packed import unpack
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel
from tidb_binlog.testing.memory_storage import memory_storage_factory

CLUSTER_ID = 11


def Cfg(data_dir, **kw):
    overrides = {"data-dir": data_dir, "addr": "127.0.0.1:0", "node-id": "pump-ray",
                 "cluster-id": CLUSTER_ID, "gen-binlog-interval": 3600,
                 "storage.stop-write-at-available-space": "1 MiB"}
    overrides.update(kw)
    return load_pump_config(None, overrides)


def write_pairs(addr, start, n, value=None):
    with open_channel(addr) as ch:
        stub = pump_pb2_grpc.PumpStub(ch)
        for i in range(n):
            s_ts = start + 2 * i
            for b in (bl.prewrite(s_ts, value or b"v%d" % s_ts, prewrite_key=b"k"),
                      bl.commit(s_ts, s_ts + 1)):
                resp = stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                                                payload=bl.encode(b)), timeout=10)
                assert resp.errmsg == ""


def pull_all(ray, actor, since=0, max_bytes=4 << 20):
    got = []
    while True:
        batch, watermark = ray.get(actor.pull.remote(since, max_bytes, 0.05), timeout=60)
        if not batch:
            return got, watermark
        got.extend(batch)
        since = watermark


def test_pull_batches_with_watermark(ray_local, tmp_path):
    ray = ray_local
    actor = start_pump_actor(Cfg(str(tmp_path / "p1")), storage_factory=memory_storage_factory)
    try:
        addr = ray.get(actor.address.remote(), timeout=60)
        write_pairs(addr, 1000, 50)
        batch_ref, wm_ref = actor.pull.options(num_returns=2).remote(0, 1 << 10, 0)
        batch, watermark = ray.get(batch_ref), ray.get(wm_ref)
        assert 1 <= len(batch) < 50 and watermark == batch[-1][0]
        got, watermark = pull_all(ray, actor, max_bytes=512)
        assert [ts for ts, _ in got] == [1001 + 2 * i for i in range(50)]
        assert watermark == 1099
        assert bl.decode(got[0][1]).prewrite_value == b"v1000"
        # packed (what the drainer's feeds ask for): the same batch as one bytes
        packed_ref, wm_ref = actor.pull.options(num_returns=2).remote(0, 4 << 20, 0,
                                                                       packed=True)
        packed = ray.get(packed_ref)
        assert type(packed) is bytes and unpack(packed) == got
        assert ray.get(wm_ref) == 1099
        assert ray.get(actor.status.remote()).state == "online"
        assert ray.get(actor.pause.remote()) == "apply action pause success!"
    finally:
        ray.kill(actor)


def test_crash_restart_serves_everything(ray_local, tmp_path, new_incarnation):
    ray = ray_local
    actor = start_pump_actor(Cfg(str(tmp_path / "p2")))
    try:
        addr = ray.get(actor.address.remote(), timeout=60)
        pid = ray.get(actor.pid.remote())
        write_pairs(addr, 2000, 30)
        write_pairs(addr, 2060, 1, value=bytes(range(256)) * 1200)  # 300 KiB: a reference
        packed, _ = ray.get(actor.pull.remote(2059, 4 << 20, 1.0, packed=True, ref_above=1024))
        [(ts, ref)] = unpack(packed)
        assert ts == 2061 and (ref.node_id, ref.commit_ts, ref.start_ts) == ("pump-ray",
                                                                             2061, 2060)
        ray.kill(actor, no_restart=False)
        got, _ = pull_all(ray, actor)                  # retried across the restart
        assert [ts for ts, _ in got] == [2001 + 2 * i for i in range(31)]
        whole = got[-1][1]
        assert ref.size == len(whole)
        ray.kill(actor, no_restart=False)              # read_payload is retried likewise
        out = ray.get(actor.read_payload.remote(2061, 0, ref.size), timeout=60)
        assert memoryview(out) == whole   # out of band: a read-only buffer over the store
        step = 100_000
        parts = ray.get([actor.read_payload.remote(2061, off, min(step, ref.size - off))
                         for off in range(0, ref.size, step)], timeout=60)
        assert b"".join(bytes(memoryview(p)) for p in parts) == whole
        with pytest.raises(ProtocolError, match="pump pump-ray: .*past the end"):
            ray.get(actor.read_payload.remote(2061, ref.size - 1, 2), timeout=60)
        new_incarnation(actor, pid)      # the old one may have answered
        got, _ = pull_all(ray, actor)                  # the restarted one reopened the log
        assert [ts for ts, _ in got] == [2001 + 2 * i for i in range(31)]
        write_pairs(ray.get(actor.address.remote()), 3000, 5)
        got, watermark = pull_all(ray, actor, since=2061)
        assert [ts for ts, _ in got] == [3001 + 2 * i for i in range(5)] and watermark == 3009
    finally:
        ray.kill(actor)


def test_damaged_binlog_stops_the_actor_feed_with_a_typed_error(ray_local, tmp_path):
    """A pump actor whose sealed value-log file has a flipped byte: the drainer's
    ActorFeed gets the binlogs before it, then DamagedBinlog naming the pump and ts
    (counted), never the ones after it. It used to skip the transaction silently."""
    from actors.ray_calls import PumpPullCalls
    from tidb_binlog.drainer.service.metrics import build_drainer_metrics
    from tidb_binlog.drainer.source.feeds import ActorFeed
    from tidb_binlog.errors import DamagedBinlog
    from tidb_binlog.pump.storage import Storage, StorageOptions
    from tidb_binlog.pump.storage.metrics import StorageMetrics
    from tidb_binlog.pump.storage.vlog_record import ScanResult, scan_segment

    data_dir = tmp_path / "damaged"
    s = Storage(data_dir, StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                                         value_log_file_size_bytes=200),
                metrics=StorageMetrics())
    for i in range(10):
        s.write_binlog(bl.prewrite(100 + 10 * i, b"v", prewrite_key=b"k"))
        s.write_binlog(bl.commit(100 + 10 * i, 105 + 10 * i))
    s.close()
    sealed = data_dir / "value" / "000002.vlog"
    raw = bytearray(sealed.read_bytes())
    off, size, payload = next(r for r in scan_segment(bytes(raw), 0, len(raw) - 12, ScanResult())
                              if bl.decode(r[2]).tp == bl.BinlogType.COMMIT)
    raw[off + size - 1] ^= 0xFF
    sealed.write_bytes(bytes(raw))
    victim = bl.decode(payload).commit_ts
    actor = start_pump_actor(Cfg(str(data_dir), **{"storage.value-log-file-size": 200}))
    metrics = build_drainer_metrics()
    got: list[int] = []
    feed = ActorFeed("pump-ray", actor, 0, 4 << 20, metrics, PumpPullCalls())
    try:
        with pytest.raises(DamagedBinlog) as ei:
            for _ in range(400):
                for items, _wm in feed.poll():
                    got += [ts for ts, _ in items]
                if feed.refs():
                    ray_local.wait(feed.refs(), num_returns=1, timeout=0.5)
        assert got == [c for c in range(105, 200, 10) if c < victim]
        assert ei.value.ts == victim
        assert str(ei.value).startswith(
            "pump pump-ray cannot serve an acknowledged binlog: pump storage cannot serve the "
            f"binlog at ts {victim} (value log {sealed}: checksum mismatch at offset {off}); ")
        assert "RayTaskError" not in str(ei.value)
        assert metrics.registry.get_sample_value("binlog_drainer_error_count_total",
                                                 {"type": "pump_damaged_binlog"}) == 1
    finally:
        feed.close()
        ray_local.kill(actor)
