"""The upstream's asynchronous Commit/Rollback sender: order, batching, flush, errors."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from tidb_binlog import binlog as bl
from tidb_binlog.upstream.core import _FinishSender


class BatchWriter:
    """Blocks in its first call until released, so later binlogs queue up meanwhile."""

    def __init__(self, refuse: set[int] = frozenset()):
        self.calls: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.refuse = refuse

    def write_binlog(self, b):
        self.entered.set()
        assert self.release.wait(30)
        self.calls.append([b.start_ts])

    def write_binlogs(self, batch):
        self.calls.append([b.start_ts for b in batch])
        return [SimpleNamespace(error="refused" if b.start_ts in self.refuse else None)
                for b in batch]


def commits(start_ts_list):
    return [bl.commit(s, s + 1) for s in start_ts_list]


def test_what_queues_during_a_write_goes_out_as_one_ordered_batch():
    w = BatchWriter(refuse={7})
    sender = _FinishSender(w)
    for b in commits([1]):
        sender.submit(b)
    assert w.entered.wait(30)  # the sender thread took #1 and blocks in write_binlog
    for b in commits(range(2, 10)):
        sender.submit(b)
    w.release.set()
    sender.flush()
    assert w.calls == [[1], list(range(2, 10))]
    assert sender.errors == 1  # start_ts 7 refused: counted, the rest delivered
    sender.close()


def test_a_writer_without_batches_gets_one_call_per_binlog():
    calls = []
    sender = _FinishSender(SimpleNamespace(write_binlog=lambda b: calls.append(b.start_ts)))
    for b in commits(range(1, 50)):
        sender.submit(b)
    sender.flush()
    assert calls == list(range(1, 50))
    sender.close()


class NowaitWriter:
    """``write_finish_nowait`` whose futures the test completes by hand."""

    def __init__(self):
        self.sent: list[int] = []
        self.futures = []

    def write_finish_nowait(self, b):
        from concurrent.futures import Future

        self.sent.append(b.start_ts)
        fut = Future()
        self.futures.append(fut)
        return fut

    def write_binlog(self, b):  # pragma: no cover - must not be used when nowait exists
        raise AssertionError("the direct path must not fall back to write_binlog")


def test_direct_path_sends_on_the_caller_thread_and_flush_waits_for_first_attempts():
    from tidb_binlog.upstream.core import _FinishDirect

    w = NowaitWriter()
    sender = _FinishDirect(w)
    for b in commits([1, 2, 3]):
        sender.submit(b)
    assert w.sent == [1, 2, 3]  # already handed over: no thread in between
    flushed = threading.Event()
    waiter = threading.Thread(target=lambda: (sender.flush(), flushed.set()))
    waiter.start()
    w.futures[0].set_result(SimpleNamespace(node_id="p", error=None, pending=None))
    w.futures[1].set_result(SimpleNamespace(node_id=None, error="refused", pending=None))
    assert not flushed.wait(0.05)  # #3 is still in flight
    w.futures[2].set_exception(RuntimeError("boom"))
    waiter.join(30)
    assert flushed.is_set()
    assert sender.errors == 2  # the refusal and the failure are counted, not raised
    sender.close()


def test_direct_path_counts_a_send_that_raises_instead_of_failing_the_commit():
    from tidb_binlog.upstream.core import _FinishDirect

    def boom(b):
        raise RuntimeError("writer broken")

    sender = _FinishDirect(SimpleNamespace(write_finish_nowait=boom))
    sender.submit(commits([1])[0])  # returns: the transaction already committed
    sender.flush()
    assert sender.errors == 1


class PumpNowaitWriter(NowaitWriter):
    """A pump-client-like writer: knows which pump took each Prewrite."""

    def pump_of(self, start_ts):
        return "pump-a:8250" if start_ts % 2 else "pump-b:8250"


def test_direct_flush_and_close_are_bounded_and_name_what_is_in_flight():
    """A Commit whose first attempt never completes (a pump hangs): flush and close
    give up after their timeout and say how many binlogs, to which pumps."""
    import pytest

    from tidb_binlog.errors import FinishTimeout, UpstreamError
    from tidb_binlog.upstream.core import _FinishDirect

    w = PumpNowaitWriter()
    sender = _FinishDirect(w)
    for b in commits([1, 2, 3]):
        sender.submit(b)
    w.futures[1].set_result(SimpleNamespace(node_id="pump-b:8250", error=None, pending=None))
    with pytest.raises(FinishTimeout) as err:
        sender.flush(0.05)
    assert isinstance(err.value, UpstreamError)
    assert err.value.pending == 2 and err.value.pumps == {"pump-a:8250": 2}
    assert "2 Commit/Rollback binlog(s) are still in flight (2 to pump-a:8250)" in str(err.value)
    with pytest.raises(FinishTimeout, match=r"Upstream\.close\(\) waited"):
        sender.close(0.05)
    for fut in (w.futures[0], w.futures[2]):
        fut.set_result(SimpleNamespace(node_id="pump-a:8250", error=None, pending=None))
    sender.flush(0.05)  # nothing left


def test_sender_flush_and_close_are_bounded_for_a_writer_that_hangs():
    import pytest

    from tidb_binlog.errors import FinishTimeout

    w = BatchWriter()
    sender = _FinishSender(w)
    sender.submit(commits([5])[0])
    assert w.entered.wait(30)  # the sender thread is stuck in write_binlog
    with pytest.raises(FinishTimeout) as err:
        sender.flush(0.05)
    assert err.value.pending == 1 and err.value.pumps == {"BatchWriter": 1}
    with pytest.raises(FinishTimeout, match="close"):
        sender.close(0.05)
    w.release.set()
    sender._thread.join(30)
    assert w.calls == [[5]]


def test_upstream_rejects_a_timeout_that_is_not_positive():
    import pytest

    from tidb_binlog.upstream.core import _check_timeout

    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="timeout must be a positive"):
            _check_timeout(bad)
    assert _check_timeout(2) == 2.0
