"""A real pump (durable storage, gRPC on 127.0.0.1) and large or repeated Prewrites:
a Prewrite the client sent again after its deadline is stored once and served once, and a
large one (received as a view, header read without parsing its value, appended with
writev) is served byte for byte."""

from __future__ import annotations

import os

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.config import load_pump_config
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.server import open_channel, open_pump
from tidb_binlog.pump.wire import LARGE_PAYLOAD_BYTES

pytestmark = pytest.mark.integration

CLUSTER_ID = 7


@pytest.fixture
def pump(tmp_path):
    proc = open_pump(load_pump_config(None, {
        "data-dir": str(tmp_path / "pump"), "addr": "127.0.0.1:0", "node-id": "pump-1",
        "cluster-id": CLUSTER_ID, "gen-binlog-interval": 3600,
        "max-message-size": 8 << 20, "storage.sync-log": False,
        "storage.stop-write-at-available-space": 1 << 20}), status_addr="127.0.0.1:0")
    yield proc
    proc.stop()


def _write(proc, payload: bytes) -> str:
    stub = pump_pb2_grpc.PumpStub(open_channel(proc.addr, None, 16 << 20))
    return stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID, payload=payload),
                            timeout=30).errmsg


def _vlog_bytes(proc) -> int:
    return proc.node.storage.stats()["vlog_bytes"]


def _served(proc, commit_ts: int) -> list[bl.Binlog]:
    proc.node.storage.wait_for_commit(commit_ts - 1, 10.0)
    batch, _ = proc.node.pull(0, 64 << 20)
    return [bl.decode(payload) for _, payload in batch]


@pytest.mark.parametrize("size", [100, LARGE_PAYLOAD_BYTES + 12345])
def test_the_same_prewrite_written_three_times_is_stored_once_and_served_once(pump, size):
    value = os.urandom(size)
    prewrite = bl.encode(bl.prewrite(100, value, prewrite_key=b"pk"))
    duplicates = pump.node.storage.metrics.duplicate_prewrite_count
    before = duplicates._value.get()
    assert _write(pump, prewrite) == ""
    stored = _vlog_bytes(pump)
    assert stored >= len(prewrite)
    assert _write(pump, prewrite) == "" and _write(pump, prewrite) == ""
    assert _vlog_bytes(pump) == stored  # the retries wrote nothing
    assert duplicates._value.get() - before == 2
    assert _write(pump, bl.encode(bl.commit(100, 101))) == ""
    served = _served(pump, 101)
    assert [(b.tp, b.start_ts, b.commit_ts) for b in served] == [(bl.BinlogType.COMMIT, 100, 101)]
    assert served[0].prewrite_value == value and served[0].prewrite_key == b"pk"


def test_another_payload_under_the_same_start_ts_is_stored_and_the_later_one_served(pump):
    first = bl.encode(bl.prewrite(200, b"a" * 50))
    second = bl.encode(bl.prewrite(200, b"b" * 50))
    assert _write(pump, first) == ""
    stored = _vlog_bytes(pump)
    assert _write(pump, second) == ""
    assert _vlog_bytes(pump) > stored
    assert _write(pump, bl.encode(bl.commit(200, 201))) == ""
    assert [b.prewrite_value for b in _served(pump, 201)] == [b"b" * 50]


def test_a_prewrite_after_its_commit_is_not_taken_for_a_retry(pump):
    """The memory of a Prewrite ends with its Commit: the same bytes again are new."""
    prewrite = bl.encode(bl.prewrite(300, b"v" * 10))
    assert _write(pump, prewrite) == ""
    assert _write(pump, bl.encode(bl.commit(300, 301))) == ""
    stored = _vlog_bytes(pump)
    assert _write(pump, prewrite) == ""
    assert _vlog_bytes(pump) > stored


def test_a_large_malformed_payload_is_refused_with_the_decoders_message(pump):
    bad = bl.encode(bl.prewrite(400, os.urandom(LARGE_PAYLOAD_BYTES)))[:-10]  # cut short
    errmsg = _write(pump, bad)
    assert errmsg.startswith("malformed binlog payload"), errmsg
