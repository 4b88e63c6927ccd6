"""The pump client against a real ``tidb-binlog pump`` process that dies or stops.

A pump SIGKILLed with calls in flight once deadlocked gRPC's callback thread: the
done-callback of the first failed call (UNAVAILABLE) closed the channel there, and
``grpc.Channel.close()`` waits for the channel's other calls, whose completions only
that blocked thread delivers. No callback ran again, futures never resolved, the
Commit binlogs were never retried. These tests keep calls in flight deterministically
by SIGSTOPping the pump first (the TCP connection stays, nothing answers), then kill
it; every wait here is bounded and fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import grpc
import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import BinlogError, UnavailableError
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump_client import PumpChannel, PumpClient, PumpClientTimeout
from tidb_binlog.testing.pump_process import PumpProcess

pytestmark = pytest.mark.integration

CLUSTER_ID = 4343
IN_FLIGHT = 8  # the failing runs had 2; one call alone never hung
BOUND_S = 30.0  # far above what completion takes (~50 ms); a hang fails the test


def new_pump(tmp_path, name: str = "pump") -> PumpProcess:
    return PumpProcess({"cluster-id": CLUSTER_ID,
                        "gen-binlog-interval": 3600,  # no fake binlogs among ours
                        "storage.sync-log": True}, tmp_path, name=name)


@pytest.fixture
def pump(tmp_path):
    p = new_pump(tmp_path).start()
    yield p
    if p.is_running():
        os.kill(p.pid, signal.SIGCONT)
    p.close()


def stop(p: PumpProcess) -> None:
    os.kill(p.pid, signal.SIGSTOP)


def resume(p: PumpProcess) -> None:
    os.kill(p.pid, signal.SIGCONT)


def wait_all(futures, what: str, budget_s: float = BOUND_S) -> list:
    deadline = time.monotonic() + budget_s
    out = []
    for f in futures:
        try:
            out.append(f.result(timeout=max(deadline - time.monotonic(), 0.0)))
        except TimeoutError:
            done = sum(1 for g in futures if g.done())
            pytest.fail(f"{what}: only {done} of {len(futures)} resolved within {budget_s}s")
    return out


def committed(p: PumpProcess, commit_tss: set[int], budget_s: float = 60.0) -> set[int]:
    """The commit_ts of ``commit_tss`` the pump serves to a drainer (PullBinlogs)."""
    with grpc.insecure_channel(p.addr) as channel:
        call = pump_pb2_grpc.PumpStub(channel).PullBinlogs(
            pump_pb2.PullBinlogReq(clusterID=CLUSTER_ID, startFrom=pump_pb2.Pos(offset=0)),
            timeout=budget_s)
        seen: set[int] = set()
        for resp in call:
            seen.add(resp.entity.meta.commitTs)
            if commit_tss <= seen:
                call.cancel()
                break
    return seen & commit_tss


def test_channel_callbacks_all_complete_when_the_pump_is_killed_under_load(pump):
    channel = PumpChannel("pump", pump.addr)
    assert channel.write(CLUSTER_ID, bl.encode(bl.prewrite(10, b"pv", prewrite_key=b"k")),
                         10.0) == ""
    stop(pump)
    results: list = []
    lock = threading.Lock()
    all_done = threading.Event()

    def done(call):  # what the client's callbacks do: translate (and reset) on failure
        try:
            r = channel.result(call)
        except BinlogError as exc:
            r = exc
        with lock:
            results.append(r)
            if len(results) == IN_FLIGHT:
                all_done.set()

    for i in range(IN_FLIGHT):
        channel.write_future(CLUSTER_ID, bl.encode(bl.commit(10, 11 + i)),
                             600.0).add_done_callback(done)
    pump.kill()
    assert all_done.wait(BOUND_S), f"{len(results)} of {IN_FLIGHT} callbacks ran"
    assert all(isinstance(r, UnavailableError) for r in results), results
    # the channel dials again: a restarted pump at the same address takes writes
    pump.start()
    assert channel.write(CLUSTER_ID, bl.encode(bl.prewrite(50, b"pv", prewrite_key=b"k")),
                         10.0) == ""
    channel.close()


def test_commits_in_flight_when_the_pump_dies_resolve_and_are_retried(pump):
    # a long rpc deadline: the futures must resolve because the pump died, not by deadline
    with PumpClient(None, cluster_id=CLUSTER_ID, pumps=[pump.addr], rpc_timeout_s=600.0,
                    probe_interval_s=3600, commit_backoff_max_s=0.2) as client:
        starts = [100 + 10 * i for i in range(IN_FLIGHT)]
        for ts in starts:
            assert client.write_binlog(bl.prewrite(ts, b"pv", prewrite_key=b"k")) == pump.addr
        stop(pump)
        futures = [client.write_finish_nowait(bl.commit(ts, ts + 5)) for ts in starts]
        pump.kill()
        results = wait_all(futures, "first attempts after SIGKILL")
        assert all(r.node_id is None and r.error is None and r.pending is not None
                   for r in results), results
        assert client.in_flight() == {pump.addr: IN_FLIGHT}  # the retries, on the same pump
        with pytest.raises(PumpClientTimeout, match=f"{IN_FLIGHT} Commit/Rollback") as info:
            client.flush(timeout_s=0.2)  # still dead: the bounded wait says what it waited for
        assert pump.addr in str(info.value) and info.value.in_flight == {pump.addr: IN_FLIGHT}

        pump.start()  # same address, same data: the retries land there
        assert wait_all([r.pending for r in results], "retries after the restart") == \
            [pump.addr] * IN_FLIGHT
        client.flush(timeout_s=BOUND_S)
        assert client.in_flight() == {}
    assert committed(pump, {ts + 5 for ts in starts}) == {ts + 5 for ts in starts}


def test_a_stopped_pump_is_bounded_by_deadlines_prewrites_fail_over_commits_retry(tmp_path):
    a = new_pump(tmp_path, "pump-a").start()
    b = new_pump(tmp_path, "pump-b").start()
    try:
        client = PumpClient(None, cluster_id=CLUSTER_ID, pumps=[a.addr, b.addr],
                            rpc_timeout_s=0.5, write_timeout_s=5.0, probe_interval_s=3600,
                            commit_backoff_max_s=0.2, unavailable_after_errors=1)
        owners = {ts: client.write_binlog(bl.prewrite(ts, b"pv", prewrite_key=b"k"))
                  for ts in range(1000, 1040, 2)}
        on_a = [ts for ts, node in owners.items() if node == a.addr]
        assert on_a and len(on_a) < len(owners)  # range spreads over both
        last = on_a.pop()  # left open for close() below
        stop(a)
        futures = [client.write_finish_nowait(bl.commit(ts, ts + 1)) for ts in on_a]
        results = wait_all(futures, "first attempts to a stopped pump")  # by their deadline
        assert all(r.pending is not None for r in results)
        for ts in range(2000, 2020, 2):  # new prewrites go to the pump that answers
            assert client.write_binlog(bl.prewrite(ts, b"pv", prewrite_key=b"k")) == b.addr
        with pytest.raises(PumpClientTimeout) as info:
            client.flush(timeout_s=0.3)
        assert info.value.in_flight == {a.addr: len(on_a)}
        resume(a)
        assert wait_all([r.pending for r in results], "retries after SIGCONT") == \
            [a.addr] * len(on_a)
        stop(a)  # close() with a commit stuck on a stopped pump is bounded too
        stuck = client.write_finish_nowait(bl.rollback(last))
        client.close(timeout_s=0.3)
        assert stuck.done() and client.in_flight() == {}
        pending = stuck.result().pending
        assert pending is not None and pending.result(timeout=0) is None  # given up: closed
    finally:
        if a.is_running():
            resume(a)
        a.close()
        b.close()
