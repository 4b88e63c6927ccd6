"""The standalone ``tidb-binlog pump`` process: start, write, SIGTERM, restart, kill -9."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc

pytest.importorskip("tidb_binlog.config", reason="pump.toml loader (tidb_binlog.config) not landed")
pytest.importorskip("tidb_binlog.pump.storage", reason="durable pump storage not landed")

CLUSTER_ID = 4242
REPO = Path(__file__).resolve().parents[2]


def two_free_ports() -> int:
    """A port p with p and p + 1 free (gRPC and the derived HTTP status port)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports")


class PumpProcess:
    def __init__(self, tmp_path: Path):
        self.port = two_free_ports()
        self.addr = f"127.0.0.1:{self.port}"
        self.config = tmp_path / "pump.toml"
        self.config.write_text(
            f'addr = "{self.addr}"\n'
            f'data-dir = "{tmp_path / "data"}"\n'
            f"cluster-id = {CLUSTER_ID}\n"
            "gen-binlog-interval = 3600\n"   # no fake binlogs among the test's own ts

            "[storage]\nsync-log = true\nstop-write-at-available-space = \"1 MiB\"\n")
        self.log_path = tmp_path / "pump.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidb_binlog.cli.main", "pump", "--config", str(self.config)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})
        log.close()
        with grpc.insecure_channel(self.addr) as ch:
            try:
                grpc.channel_ready_future(ch).result(timeout=60)
            except grpc.FutureTimeoutError:
                self.proc.kill()
                raise AssertionError(f"pump did not listen:\n{self.log_path.read_text()}") from None

    def stub(self):
        return pump_pb2_grpc.PumpStub(grpc.insecure_channel(self.addr))

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=60)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def pump_process(tmp_path):
    p = PumpProcess(tmp_path)
    yield p
    p.close()


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
    s = p.stub()
    assert write(s, bl.prewrite(10, b"a", prewrite_key=b"k")) == ""
    assert write(s, bl.commit(10, 11)) == ""
    assert p.terminate() == 0
    out = p.log_path.read_text()
    assert f"serving gRPC on {p.addr}" in out and "HTTP status on" in out
    assert "stopped (state paused)" in out
    p.start()
    assert write(p.stub(), bl.prewrite(20, b"b", prewrite_key=b"k")) == ""
    assert write(p.stub(), bl.commit(20, 21)) == ""
    assert pull_until(p.stub(), 21) == [(10, 11), (20, 21)]
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
        s = p.stub()
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
    p.kill9()
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 200

    p.start()
    s = p.stub()
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
