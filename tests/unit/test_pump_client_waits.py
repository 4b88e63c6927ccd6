"""PumpClient.flush / close: bounded, and a timeout names the pumps and the counts.

Pure bookkeeping: futures stand in for writes (no pump is dialled; channels are
lazy). The real faults (a pump SIGKILLed or SIGSTOPped with calls in flight) are in
tests/integration/test_pump_client_faults.py.
"""

from __future__ import annotations

import pickle
import threading
import time
from concurrent.futures import Future

import pytest

from tidb_binlog.binlog import commit, prewrite
from tidb_binlog.errors import UnavailableError
from tidb_binlog.pump_client import PumpClient, PumpClientTimeout


@pytest.fixture
def client():
    c = PumpClient(None, cluster_id=1, pumps=["127.0.0.1:1"], probe_interval_s=3600)
    yield c
    c.close(timeout_s=0)


def test_flush_times_out_naming_pumps_and_counts(client):
    a, b, c = Future(), Future(), Future()
    client._track(a, "pump-1")
    client._track(b, "pump-1")
    client._track(c, "pump-2")
    with pytest.raises(PumpClientTimeout) as info:
        client.flush(timeout_s=0.01)
    err = info.value
    assert err.in_flight == {"pump-1": 2, "pump-2": 1}
    assert "3 Commit/Rollback binlog(s) still in flight after 0.01s" in str(err)
    assert "pump-1: 2, pump-2: 1" in str(err)
    assert isinstance(err, TimeoutError) and isinstance(err, UnavailableError)
    assert pickle.loads(pickle.dumps(err)).in_flight == err.in_flight  # crosses Ray
    for f in (a, b, c):
        f.set_result(None)
    client.flush(timeout_s=0.01)
    assert client.in_flight() == {}


def test_flush_waits_for_a_retry_of_an_earlier_write_but_not_for_later_writes(client):
    first = Future()
    seq = client._track(first, "pump-1")
    retry = Future()
    client._track(retry, "pump-1", seq)  # what a failed first attempt hands over
    first.set_result(None)
    with pytest.raises(PumpClientTimeout) as info:
        client.flush(timeout_s=0.01)
    assert info.value.in_flight == {"pump-1": 1}

    flushed = threading.Event()
    waiter = threading.Thread(target=lambda: (client.flush(timeout_s=30), flushed.set()))
    waiter.start()
    deadline = time.monotonic() + 30
    while not retry._waiters and time.monotonic() < deadline:  # the flush waits on it
        time.sleep(0.001)
    later = Future()
    client._track(later, "pump-2")  # handed over after the flush began
    retry.set_result("pump-1")
    waiter.join(30)
    assert flushed.is_set()
    assert client.in_flight() == {"pump-2": 1}
    later.set_result(None)


def test_after_close_commits_are_given_up_at_once_and_prewrites_refused(client):
    client.close(timeout_s=0)
    fut = client.write_binlog_async(commit(5, 6))
    assert fut.result(timeout=0) is None  # given up, never raised
    result = client.write_finish_nowait(commit(7, 8)).result(timeout=0)
    assert result.pending.result(timeout=0) is None
    with pytest.raises(UnavailableError, match="pump client is closed"):
        client.write_binlog(prewrite(9, b"pv"))
