"""MergerActor._batch_limit: merged batches grow only while the input is backed up and
earlier batches are still in flight (the merger as a plain object, no Ray)."""

from __future__ import annotations

from actors.merger import _BACKLOG_BATCHES, MergerActor
from tidb_binlog.drainer.pipeline.settings import TaskSettings


class Buffered:
    def __init__(self, n: int):
        self.n = n

    def buffered(self) -> int:
        return self.n


def merger(batch: int = 512) -> MergerActor:
    return MergerActor(TaskSettings(cluster_id=1, merge_batch=batch), keeper=None,
                       coordinator=None, pumps={}, autostart=False)


def test_batches_grow_only_when_backed_up_and_busy():
    m = merger()
    assert m._batch_limit(Buffered(100_000), inflight=0) == 512  # idle pipeline: start now
    assert m._batch_limit(Buffered(100_000), inflight=1) == _BACKLOG_BATCHES * 512
    assert m._batch_limit(Buffered(3000), inflight=2) == 3000  # all that is buffered
    assert m._batch_limit(Buffered(1000), inflight=3) == 512   # not backed up: live batches
