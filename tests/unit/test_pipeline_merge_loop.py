"""MergeLoop: merged batches grow only while the input is backed up and earlier batches
are still in flight; one step hands a batch on in the mode the settings choose, keeps at
most max_inflight outstanding and idles the sink when nothing moves (no Ray)."""

from __future__ import annotations

from tidb_binlog.drainer.pipeline.merge_loop import BACKLOG_BATCHES as _BACKLOG_BATCHES
from tidb_binlog.drainer.pipeline.merge_loop import MergeLoop
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.source.merge import Merger


class Buffered:
    def __init__(self, n: int):
        self.n = n

    def buffered(self) -> int:
        return self.n


def merger(batch: int = 512) -> MergeLoop:
    return MergeLoop(TaskSettings(cluster_id=1, merge_batch=batch), calls=None)


def test_batches_grow_only_when_backed_up_and_busy():
    m = merger()
    assert m.batch_limit(Buffered(100_000), inflight=0) == 512  # idle pipeline: start now
    assert m.batch_limit(Buffered(100_000), inflight=1) == _BACKLOG_BATCHES * 512
    assert m.batch_limit(Buffered(3000), inflight=2) == 3000  # all that is buffered
    assert m.batch_limit(Buffered(1000), inflight=3) == 512   # not backed up: live batches


class Calls:
    """The keeper and the sink: every batch handed on is recorded, finished at once
    unless ``busy``."""

    def __init__(self):
        self.sent: list[tuple[str, int, int]] = []  # (mode, seq, items)
        self.collected: list[int] = []
        self.idles = 0
        self.waits = 0
        self.busy = False

    def send(self, seq, items):
        from tidb_binlog.packed import unpack

        self.sent.append(("translate", seq, len(unpack(items))))
        return seq

    def send_routed(self, seq, items, worker_count):
        from tidb_binlog.packed import unpack

        self.sent.append((f"routed/{worker_count}", seq, len(unpack(items))))
        return seq

    more = 0  # how many more times the keeper answers `more`

    def keeper_more(self):
        if self.more:
            self.more -= 1
            return True
        return False

    def done(self, handle):
        return not self.busy

    def result(self, handle):
        self.collected.append(handle)

    def idle(self):
        self.idles += 1
        return 0

    def wait_for_pulls(self, refs, timeout_s):
        self.waits += 1


class Feed:
    def __init__(self, batches):
        self.batches = list(batches)

    def poll(self):
        return [self.batches.pop(0)] if self.batches else []

    def refs(self):
        return []


def run(settings, feeds, steps=3):
    calls = Calls()
    merger = Merger(start_ts=0)
    for name in feeds:
        merger.add_source(name, start_after_ts=0)
    loop = MergeLoop(settings, calls, merger)
    for _ in range(steps):
        loop.step(feeds)
    return loop, calls


def test_the_mode_comes_from_the_settings():
    feeds = {"p": Feed([([(1, b"a"), (2, b"b")], 2)])}
    _, calls = run(TaskSettings(cluster_id=1, worker_count=4), feeds)
    assert calls.sent == [("routed/4", 0, 2)]
    feeds = {"p": Feed([([(1, b"a"), (2, b"b")], 2)])}
    _, calls = run(TaskSettings(cluster_id=1, sink="file", exactly_once=False), feeds)
    assert calls.sent == [("translate", 0, 2)]


def test_batches_are_numbered_and_bounded_in_flight():
    settings = TaskSettings(cluster_id=1, merge_batch=1, max_inflight=2)
    feeds = {"p": Feed([([(ts, b"x")], ts) for ts in range(1, 6)])}
    calls = Calls()
    calls.busy = True
    merger = Merger(start_ts=0)
    merger.add_source("p", start_after_ts=0)
    loop = MergeLoop(settings, calls, merger)
    for _ in range(5):
        loop.step(feeds)
        assert len(loop.inflight) < settings.max_inflight  # collected at the bound
    assert [seq for _, seq, _ in calls.sent] == [0, 1, 2, 3, 4]
    assert calls.collected == [0, 1, 2, 3]
    loop.drain()
    assert calls.collected == [0, 1, 2, 3, 4] and loop.merged == 5
    loop.start(Merger(start_ts=5))  # a reset: numbered from 0 again, merged carries over
    assert loop.seq == 0 and loop.merged == 5


def test_nothing_moving_idles_the_sink_and_waits_for_a_pull():
    loop, calls = run(TaskSettings(cluster_id=1), {"p": Feed([])}, steps=2)
    assert calls.sent == [] and calls.idles == 1 and calls.waits == 2


def test_a_keeper_holding_a_large_transaction_is_called_again_without_items():
    settings = TaskSettings(cluster_id=1, worker_count=2)
    calls = Calls()
    calls.more = 2  # the keeper answers `more` twice: two more chunks
    merger = Merger(start_ts=0)
    merger.add_source("p", start_after_ts=0)
    loop = MergeLoop(settings, calls, merger)
    feeds = {"p": Feed([([(1, b"big")], 1)])}
    for _ in range(4):
        loop.step(feeds)
    assert calls.sent == [("routed/2", 0, 1), ("routed/2", 1, 0), ("routed/2", 2, 0)]
    assert calls.idles == 1  # only once the keeper had nothing left


def test_the_parquet_keeper_holding_a_large_transaction_is_called_again_without_items():
    calls = Calls()
    calls.more = 1  # not routed (db-type parquet): translate_more answered `more` once
    merger = Merger(start_ts=0)
    merger.add_source("p", start_after_ts=0)
    loop = MergeLoop(TaskSettings(cluster_id=1, sink="parquet"), calls, merger)
    feeds = {"p": Feed([([(1, b"big")], 1)])}
    for _ in range(3):
        loop.step(feeds)
    assert calls.sent == [("translate", 0, 1), ("translate", 1, 0)]
