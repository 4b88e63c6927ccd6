"""PumpActor on a real local Ray: gRPC writes, batched pull, crash and restart."""

from __future__ import annotations

from actors.pump import start_pump_actor
from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
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


def write_pairs(addr, start, n):
    with open_channel(addr) as ch:
        stub = pump_pb2_grpc.PumpStub(ch)
        for i in range(n):
            s_ts = start + 2 * i
            for b in (bl.prewrite(s_ts, b"v%d" % s_ts, prewrite_key=b"k"), bl.commit(s_ts, s_ts + 1)):
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
        ray.kill(actor, no_restart=False)
        got, _ = pull_all(ray, actor)                  # retried across the restart
        assert [ts for ts, _ in got] == [2001 + 2 * i for i in range(30)]
        new_incarnation(actor, pid)      # the old one may have answered
        got, _ = pull_all(ray, actor)                  # the restarted one reopened the log
        assert [ts for ts, _ in got] == [2001 + 2 * i for i in range(30)]
        write_pairs(ray.get(actor.address.remote()), 3000, 5)
        got, watermark = pull_all(ray, actor, since=2059)
        assert [ts for ts, _ in got] == [3001 + 2 * i for i in range(5)] and watermark == 3009
    finally:
        ray.kill(actor)
