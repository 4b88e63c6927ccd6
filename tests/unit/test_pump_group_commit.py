"""Group commit, asynchronous callers: settled after the append, one wake-up per group."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tidb_binlog.errors import StorageError
from tidb_binlog.pump.storage import group_commit
from tidb_binlog.pump.storage.group_commit import GroupCommitter
from tidb_binlog.pump.storage.metrics import StorageMetrics


class _Disk:
    """An append that blocks until released, recording what it wrote."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.entered = threading.Event()
        self.release = threading.Event()
        self.writes: list[bytes] = []
        self.durable: list[bytes] = []

    def append(self, buf: bytes, max_ts: int):
        self.writes.append(buf)
        self.entered.set()
        assert self.release.wait(30)
        if self.fail:
            raise OSError(5, "Input/output error")
        self.durable.append(buf)
        return (1, 0)


def _run(disk: _Disk, n_blocked: int, n_grouped: int):
    """Submit one item (the writer blocks in its append), then ``n_grouped`` more
    (one group behind it); return (futures, results, wake-ups per group)."""
    committer = GroupCommitter(disk.append, lambda start, items: None,
                               metrics=StorageMetrics())
    loop = asyncio.new_event_loop()
    wakes = []
    real = loop.call_soon_threadsafe

    def counting(callback, *args, **kw):
        if callback is group_commit._settle:        # not the executor's own wake-ups
            wakes.append(len(args[0]))
        return real(callback, *args, **kw)

    loop.call_soon_threadsafe = counting
    states = {}

    async def main():
        first = committer.submit_async((b"a", 1), 1, loop)
        await asyncio.get_running_loop().run_in_executor(None, disk.entered.wait, 30)
        rest = [committer.submit_async((b"b%d" % i, 1), 2 + i, loop) for i in range(n_grouped)]
        states["before"] = [f.done() for f in [first, *rest]]
        disk.release.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    try:
        results = loop.run_until_complete(main())
    finally:
        committer.close()
        loop.close()
    return states["before"], results, wakes


def test_async_writers_settle_after_the_append_with_one_wake_up_per_group():
    disk = _Disk()
    before, results, wakes = _run(disk, 1, 5)
    assert before == [False] * 6                    # nothing acknowledged before durable
    assert results == [None] * 6
    assert disk.durable == [b"a", b"b0b1b2b3b4"]    # two groups: one write each
    assert wakes == [1, 5]                          # ONE call_soon_threadsafe per group


def test_async_writers_get_the_group_error_and_later_writes_are_refused():
    disk = _Disk(fail=True)
    _, results, wakes = _run(disk, 1, 3)
    assert all(isinstance(r, StorageError) for r in results)
    assert "value-log write failed" in str(results[0])
    assert wakes == [1, 3]


def test_submit_async_after_close_raises_at_once():
    committer = GroupCommitter(lambda buf, ts: (1, 0), lambda start, items: None,
                               metrics=StorageMetrics())
    committer.close()
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(StorageError, match="closed"):
            committer.submit_async((b"x", 1), 1, loop)
    finally:
        loop.close()


def test_commit_delay_gathers_concurrent_writers_into_one_group():
    """After a group of two records the writer waits (commit_delay_s) for more writers:
    c0 is held back while c1 and c2 are submitted later, and all three land in ONE
    write. (The delay here is an hour: only close() ends it, so the passing case does
    not depend on timing.)"""
    disk = _Disk()
    committer = GroupCommitter(disk.append, lambda start, items: None,
                               metrics=StorageMetrics(), commit_delay_s=3600.0)
    loop = asyncio.new_event_loop()

    async def main():
        first = committer.submit_async((b"a", 1), 1, loop)
        await asyncio.get_running_loop().run_in_executor(None, disk.entered.wait, 30)
        pair = [committer.submit_async((b"b%d" % i, 1), 2 + i, loop) for i in range(2)]
        disk.release.set()
        await asyncio.gather(first, *pair)       # [a] alone: no delay; then [b0 b1]
        later = [committer.submit_async((b"c0", 1), 4, loop)]
        # The writer holds c0's group back (without the delay it would write it now).
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, 0.3)
        assert disk.durable == [b"a", b"b0b1"]
        later += [committer.submit_async((b"c%d" % i, 1), 4 + i, loop) for i in (1, 2)]
        await asyncio.get_running_loop().run_in_executor(None, committer.close)
        return await asyncio.gather(*later)

    try:
        assert loop.run_until_complete(main()) == [None] * 3
    finally:
        loop.close()
    assert disk.durable == [b"a", b"b0b1", b"c0c1c2"]


def test_commit_delay_never_delays_a_lone_writer():
    """One writer at a time (every group holds one record): never delayed, even with a
    delay of an hour."""
    disk = _Disk()
    disk.release.set()
    committer = GroupCommitter(disk.append, lambda start, items: None,
                               metrics=StorageMetrics(), commit_delay_s=3600.0)
    done = threading.Event()

    def serial():
        for i in range(20):
            committer.submit((b"x%d" % i, 1), i + 1)
        done.set()

    threading.Thread(target=serial, daemon=True).start()
    try:
        assert done.wait(30), "a lone writer waited for the commit delay"
    finally:
        committer.close()
    assert disk.durable == [b"x%d" % i for i in range(20)]
