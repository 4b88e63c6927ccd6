"""The standalone ``tidb-binlog pump`` process: start, write, SIGTERM, restart, kill -9."""

from __future__ import annotations

import itertools
import threading
import time

import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.testing.pump_process import PumpProcess

CLUSTER_ID = 4242


@pytest.fixture
def pump_process(tmp_path):
    p = PumpProcess({"cluster-id": CLUSTER_ID,
                     "gen-binlog-interval": 3600,  # no fake binlogs among the test's own ts
                     "storage.sync-log": True,
                     "storage.stop-write-at-available-space": "1 MiB"}, tmp_path)
    yield p
    p.close()


def pump_stub(p: PumpProcess):
    return pump_pb2_grpc.PumpStub(grpc.insecure_channel(p.addr))


def write(stub, b) -> str:
    return stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER_ID, payload=bl.encode(b)),
                            timeout=10).errmsg


def pull_until(stub, expected_last_commit_ts: int, timeout_s: float = 60.0) -> list:
    """Every (start_ts, commit_ts) served up to ``expected_last_commit_ts``, fakes left out."""
    call = stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID,
                                                   startFrom=pump_pb2.Pos(offset=0)),
                            timeout=timeout_s)
    got, last = [], 0
    for resp in call:
        commit_ts = resp.entity.meta.commitTs
        assert commit_ts > last, f"commit_ts {commit_ts} served after {last}"
        last = commit_ts
        if resp.entity.meta.startTs != commit_ts:
            got.append((resp.entity.meta.startTs, commit_ts))
        if commit_ts >= expected_last_commit_ts:
            call.cancel()
            break
    return got


def test_standalone_start_write_sigterm_restart(pump_process):
    p = pump_process
    p.start()
    s = pump_stub(p)
    assert write(s, bl.prewrite(10, b"a", prewrite_key=b"k")) == ""
    assert write(s, bl.commit(10, 11)) == ""
    assert p.terminate() == 0
    out = p.log_path.read_text()
    assert f"serving gRPC on {p.addr}" in out and "HTTP status on" in out
    assert "stopped (state paused)" in out
    p.start()
    assert write(pump_stub(p), bl.prewrite(20, b"b", prewrite_key=b"k")) == ""
    assert write(pump_stub(p), bl.commit(20, 21)) == ""
    assert pull_until(pump_stub(p), 21) == [(10, 11), (20, 21)]
    assert p.terminate() == 0


def test_kill9_during_concurrent_writes_loses_and_duplicates_nothing(pump_process):
    p = pump_process
    p.start()
    clock = itertools.count(1000)
    clock_lock = threading.Lock()
    acked: dict[int, int] = {}          # start_ts -> commit_ts, commit acknowledged
    prewritten: dict[int, int] = {}     # start_ts -> commit_ts planned, prewrite acknowledged
    attempted: list[int] = []           # start_ts of every prewrite sent
    lock = threading.Lock()
    stop = threading.Event()

    def next_ts() -> int:
        with clock_lock:
            return next(clock)

    def client():
        s = pump_stub(p)
        while not stop.is_set():
            start_ts = next_ts()
            with lock:
                attempted.append(start_ts)
            try:
                if write(s, bl.prewrite(start_ts, b"v%d" % start_ts, prewrite_key=b"k")):
                    return
                commit_ts = next_ts()
                with lock:
                    prewritten[start_ts] = commit_ts
                if write(s, bl.commit(start_ts, commit_ts)):
                    return
                with lock:
                    acked[start_ts] = commit_ts
            except grpc.RpcError:
                return                    # the pump died under us

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    p.kill()
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 200

    p.start()
    s = pump_stub(p)
    # What TiDB's pump client does after the crash: retry unacknowledged commits;
    # a prewrite that was never acknowledged aborts its transaction.
    for start_ts in attempted:
        if start_ts in acked:
            continue
        if start_ts in prewritten:
            assert write(s, bl.commit(start_ts, prewritten[start_ts])) == ""
            acked[start_ts] = prewritten[start_ts]
        else:
            assert write(s, bl.rollback(start_ts)) == ""
    got = pull_until(s, max(acked.values()))
    assert got == sorted(acked.items(), key=lambda kv: kv[1])
