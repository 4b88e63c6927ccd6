"""A real pump (durable storage, gRPC and HTTP on 127.0.0.1) under damage and a full
disk, read the way a drainer reads it (GrpcPumpSource through the merger's GrpcFeed)."""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.request

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.drainer.service.metrics import build_drainer_metrics
from tidb_binlog.drainer.source.feeds import GrpcFeed
from tidb_binlog.drainer.source.pump_source import GrpcPumpSource
from tidb_binlog.errors import DamagedBinlog
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel, open_pump
from tidb_binlog.pump.storage.vlog_record import FILE_END_MAGIC, ScanResult, scan_segment

pytestmark = pytest.mark.integration

CLUSTER_ID = 7


@pytest.fixture
def start_pump(tmp_path):
    started = []

    def start(**overrides):
        keys = {"data-dir": str(tmp_path / "pump"), "addr": "127.0.0.1:0", "node-id": "pump-1",
                "cluster-id": CLUSTER_ID, "gen-binlog-interval": 3600,
                "storage.stop-write-at-available-space": 0}
        keys.update(overrides)
        proc = open_pump(load_pump_config(None, keys), status_addr="127.0.0.1:0")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            proc.stop()
        except Exception:
            pass


def _write(addr, *binlogs) -> list[str]:
    with open_channel(addr) as ch:
        stub = pump_pb2_grpc.PumpStub(ch)
        return [stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID,
                                                         payload=bl.encode(b)),
                                 timeout=10).errmsg for b in binlogs]


def _pairs(start_ts: int, n: int) -> list[bl.Binlog]:
    out = []
    for i in range(n):
        s = start_ts + 10 * i
        out += [bl.prewrite(s, b"v%d" % s, prewrite_key=b"k"), bl.commit(s, s + 5)]
    return out


def _status(proc) -> dict:
    with urllib.request.urlopen(f"http://{proc.status_addr}/status", timeout=10) as resp:
        return json.loads(resp.read())


def test_damaged_binlog_reaches_the_drainer_as_an_error(start_pump, tmp_path):
    """Bytes flipped in a sealed value-log file: the drainer's feed gets every binlog
    before the damaged one, then DamagedBinlog naming the pump and the ts (counted in
    binlog_drainer_error_count), and never anything after it."""
    proc = start_pump(**{"storage.value-log-file-size": 200})
    assert set(_write(proc.addr, *_pairs(100, 10))) == {""}
    assert proc.node.storage.wait_for_commit(194, 10) == 195
    proc.stop()
    sealed = tmp_path / "pump" / "value" / "000002.vlog"
    raw = sealed.read_bytes()
    assert int.from_bytes(raw[-4:], "little") == FILE_END_MAGIC
    off, size, payload = next(r for r in scan_segment(raw, 0, len(raw) - 12, ScanResult())
                              if bl.decode(r[2]).tp == bl.BinlogType.COMMIT)
    victim = bl.decode(payload)
    with open(sealed, "r+b") as f:
        f.seek(off + size - 1)
        f.write(bytes([raw[off + size - 1] ^ 0xFF]))
    proc = start_pump(**{"storage.value-log-file-size": 200})
    metrics = build_drainer_metrics()
    feed = GrpcFeed("pump-1", GrpcPumpSource(proc.addr, CLUSTER_ID, node_id="pump-1"), 0,
                    4 << 20, metrics)
    got: list[int] = []
    try:
        with pytest.raises(DamagedBinlog) as ei:
            for _ in range(200):
                for items, _wm in feed.poll():
                    got += [ts for ts, _ in items]
                time.sleep(0.05)  # the reader thread fills the queue
    finally:
        feed.close()
    assert got == [c for c in range(105, 200, 10) if c < victim.commit_ts]
    assert ei.value.ts == victim.commit_ts
    assert str(ei.value) == (
        f"pump pump-1 at {proc.addr} cannot serve an acknowledged binlog: pump storage cannot "
        f"serve the binlog at ts {victim.commit_ts} (value log {sealed}: checksum mismatch at "
        f"offset {off}); pulls stop before it so no reader skips an acknowledged binlog: "
        "restore this pump's data dir from a copy, or let the drainers skip it with [storage] "
        f"skip-damaged-ts = [{victim.commit_ts}] in pump.toml (its transaction is then missing "
        "downstream); the drainer stops before it (its checkpoint stays below it); after the "
        "pump's storage is repaired, start the drainer again")
    assert metrics.registry.get_sample_value("binlog_drainer_error_count_total",
                                             {"type": "pump_damaged_binlog"}) == 1

    # the operator gives that transaction up in pump.toml: the drainer goes on past it
    proc.stop()
    proc = start_pump(**{"storage.value-log-file-size": 200,
                         "storage.skip-damaged-ts": [victim.commit_ts]})
    feed = GrpcFeed("pump-1", GrpcPumpSource(proc.addr, CLUSTER_ID, node_id="pump-1"),
                    got[-1], 4 << 20, metrics)
    try:
        for _ in range(400):
            for items, _wm in feed.poll():
                got += [ts for ts, _ in items]
            if got[-1] == 195:
                break
            time.sleep(0.05)  # the reader thread fills the queue
    finally:
        feed.close()
    assert got == [c for c in range(105, 200, 10) if c != victim.commit_ts]


def test_orphan_commit_logged_once_and_the_stream_moves_past_it(start_pump, caplog):
    """A Commit whose Prewrite is not on this pump: acknowledged, skipped, logged once;
    the stream's next read starts after it (it used to re-read it in a tight loop)."""
    proc = start_pump()
    assert _write(proc.addr, *_pairs(10, 1), bl.commit(5, 20)) == ["", "", ""]
    assert proc.node.storage.wait_for_commit(19, 10) == 20
    servicer = proc.grpc_server.servicer
    with caplog.at_level(logging.ERROR, logger="tidb_binlog.pump.storage.reader"):
        assert servicer._read_ahead(15) == (20, [])  # the next read waits above 20
        with open_channel(proc.addr) as ch:
            call = pump_pb2_grpc.PumpStub(ch).PullBinlogs(
                pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID, startFrom=pump_pb2.Pos(offset=0)),
                timeout=30)
            seen = []
            for resp in call:
                seen.append(resp.entity.meta.commitTs)
                if len(seen) == 1:
                    assert _write(proc.addr, *_pairs(40, 1)) == ["", ""]
                if len(seen) == 2:
                    call.cancel()
                    break
    assert seen == [15, 45]
    assert [m for m in caplog.messages if "is not on this pump" in m] == [
        "commit binlog at commit_ts 20: its prewrite (start_ts 5) is not on this pump (never "
        "written here, or purged by GC); skipped"]


def test_disk_guard_refuses_prewrites_only_and_shows_in_status(start_pump):
    """A full disk used to refuse the Commit of a stored Prewrite too, leaving an orphan
    Prewrite that stalled everything behind it, with /status saying nothing."""
    proc = start_pump()
    assert _write(proc.addr, bl.prewrite(10, b"v", prewrite_key=b"k")) == [""]
    guard = proc.node.storage.disk_guard
    guard.limit_bytes = 1 << 62  # the disk is "full" from now on
    pattern = (r"no available space: available \d+ bytes, stop-write-at-available-space "
               rf"{1 << 62} bytes in {re.escape(str(proc.node.storage.dir))}; free space or "
               r"lower the option \(new transactions' Prewrites are refused; Commits and "
               r"Rollbacks of stored ones are still accepted\)")
    commit_msg, prewrite_msg, rollback_msg = _write(
        proc.addr, bl.commit(10, 11), bl.prewrite(20, b"w", prewrite_key=b"k"),
        bl.rollback(20))
    assert commit_msg == "" and rollback_msg == ""
    assert re.fullmatch(pattern, prewrite_msg), prewrite_msg
    assert proc.node.storage.wait_for_commit(10, 10) == 11  # the stored one is served
    doc = _status(proc)
    assert re.fullmatch(pattern, doc["ErrMsg"]), doc
    record = doc["status"]["pump-1"]
    assert record["state"] == "online" and re.fullmatch(pattern, record["errMsg"])
    assert re.fullmatch(pattern, proc.node.status().err_msg)  # what heartbeats register
    guard.limit_bytes = 0  # space freed
    assert _write(proc.addr, bl.prewrite(30, b"x", prewrite_key=b"k")) == [""]
    doc = _status(proc)
    assert doc["ErrMsg"] == "" and "errMsg" not in doc["status"]["pump-1"]


def test_status_without_guard_keeps_tidb_fields(start_pump):
    proc = start_pump()
    record = _status(proc)["status"]["pump-1"]
    assert set(record) == {"nodeId", "host", "state", "isAlive", "score", "label",
                           "maxCommitTS", "updateTS"}
