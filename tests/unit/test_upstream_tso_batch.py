"""TsoBatcher: concurrent requests coalesced into one source call, never served early."""

from __future__ import annotations

import threading

import pytest

from tidb_binlog.errors import TSOError, UnavailableError
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream.tso_batch import TsoBatcher


class GatedSource:
    """A TSO whose calls block until the test opens them, one at a time."""

    def __init__(self, fail_call: int | None = None):
        self.oracle = TimestampOracle()
        self.counts: list[int] = []
        self.returned: list[int] = []  # the first ts of each call
        self.entered = threading.Semaphore(0)
        self.gate = threading.Semaphore(0)
        self.fail_call = fail_call

    def __call__(self, count: int) -> int:
        self.counts.append(count)
        self.entered.release()
        assert self.gate.acquire(timeout=30)
        if self.fail_call == len(self.counts):
            raise UnavailableError("registry down")
        first = self.oracle.get_ts(count)
        self.returned.append(first)
        return first


def _spawn(batcher: TsoBatcher, out: dict, name: str) -> threading.Thread:
    def run():
        try:
            out[name] = batcher.get_ts()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            out[name] = exc

    t = threading.Thread(target=run, name=name)
    t.start()
    return t


def _wait_queued(batcher: TsoBatcher, n: int) -> None:
    with batcher._cv:
        assert batcher._cv.wait_for(lambda: len(batcher._queue) == n, timeout=30)


def test_requests_made_during_a_call_share_the_next_call_not_the_current_one():
    src = GatedSource()
    b = TsoBatcher(src)
    got: dict = {}
    first = _spawn(b, got, "a")
    assert src.entered.acquire(timeout=30)  # a's call (count 1) is in flight
    later = [_spawn(b, got, n) for n in "bcd"]
    _wait_queued(b, 3)
    src.gate.release()  # a's call returns: b, c, d were not part of it
    assert src.entered.acquire(timeout=30)
    assert src.counts == [1, 3]
    src.gate.release()
    for t in [first, *later]:
        t.join(30)
    assert got["a"] == src.returned[0]
    # the next call started after b, c, d queued and served all three, consecutively
    assert sorted(got[n] for n in "bcd") == [src.returned[1] + i for i in range(3)]
    assert min(got[n] for n in "bcd") > got["a"]
    assert (b.calls, b.served) == (2, 4)


def test_max_batch_splits_and_the_rest_is_served_by_a_later_call():
    src = GatedSource()
    b = TsoBatcher(src, max_batch=2)
    got: dict = {}
    threads = [_spawn(b, got, "a")]
    assert src.entered.acquire(timeout=30)
    threads += [_spawn(b, got, n) for n in "bcde"]
    _wait_queued(b, 4)
    for _ in range(3):
        src.gate.release()
        if len(src.counts) < 3:
            assert src.entered.acquire(timeout=30)
    for t in threads:
        t.join(30)
    assert src.counts == [1, 2, 2]
    assert len(set(got.values())) == 5


def test_a_failed_call_fails_its_batch_only():
    src = GatedSource(fail_call=2)
    b = TsoBatcher(src)
    got: dict = {}
    threads = [_spawn(b, got, "a")]
    assert src.entered.acquire(timeout=30)
    threads += [_spawn(b, got, n) for n in "bc"]
    _wait_queued(b, 2)
    src.gate.release()  # call 1 (a) succeeds
    assert src.entered.acquire(timeout=30)
    src.gate.release()  # call 2 (b, c) fails
    for t in threads:
        t.join(30)
    assert isinstance(got["a"], int)
    assert isinstance(got["b"], UnavailableError) and isinstance(got["c"], UnavailableError)
    src.gate.release()  # the batcher is free again: a new request makes call 3
    assert b.get_ts() > got["a"]


def test_a_source_returning_nonsense_raises_tso_error():
    b = TsoBatcher(lambda count: 0)
    with pytest.raises(TSOError, match="returned 0"):
        b.get_ts()


def test_many_threads_get_unique_increasing_timestamps_in_fewer_calls():
    oracle = TimestampOracle()
    b = TsoBatcher(oracle.get_ts)
    per_thread: list[list[int]] = [[] for _ in range(8)]

    def run(i):
        for _ in range(200):
            per_thread[i].append(b.get_ts())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = [ts for seq in per_thread for ts in seq]
    assert len(set(every)) == 1600 and b.served == 1600
    assert all(seq == sorted(seq) for seq in per_thread)  # each session sees them increase
