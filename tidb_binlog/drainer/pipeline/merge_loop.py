"""One step of the merger's loop: pull, merge, hand out a batch, keep the pipeline bounded.

:meth:`MergeLoop.step` is one round of the task's main loop
(:class:`~.driver.TaskDriver` runs it until stopped):

1. poll every pullable feed and push what arrived into the
   :class:`~tidb_binlog.drainer.source.merge.Merger`;
2. pop the ready items (``merge_batch``, up to :data:`BACKLOG_BATCHES` times that while
   the pumps' input is backed up *and* earlier batches are in flight) and hand them on
   as batch ``seq`` (0, 1, 2, ... from each reset). The mode comes from the settings
   (:attr:`~.settings.TaskSettings.routed`): routed (exactly-once into MySQL: the keeper
   routes the rows and returns one object per worker plus a plan, and only the plan
   goes to the coordinator) or ``translate`` → ``apply`` (the causality mode, the file
   sink). Either way the keeper's result refs go straight to the sink: translated rows
   never pass through the merger. A batch goes packed, except that one with a large
   payload carries it out of band (:func:`routed_items`, either mode); a payload the pump
   serves by reference (a ``BinlogRef``) is handed on as it came, never fetched here.
   Every keeper that chunks (routed, the causality mode, the pb and Parquet keepers)
   hands a large transaction out one chunk per call; while it answers ``more``
   (:meth:`PipelineCalls.keeper_more`) and nothing new is ready, the merger calls it
   again with no items;
3. back-pressure: at most ``max_inflight`` batches outstanding; a finished one's result
   is collected (which raises the sink's error, or PipelineReset);
4. when nothing moved: the sink's ``idle()`` (at most every :data:`IDLE_EVERY_S`, when
   nothing is in flight), then wait up to :data:`IDLE_WAIT_S` for a pull to resolve.

Every call to the keeper and the sink is one of :class:`PipelineCalls`, passed in
(``actors.ray_calls.PipelineCalls`` over Ray; a fake in unit tests).
"""

from __future__ import annotations

import pickle
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tidb_binlog.binlog_ref import is_ref
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.source.merge import Merger
from tidb_binlog.packed import pack
from tidb_binlog.packed import unpack as _unpack

__all__ = ["MergeLoop", "PipelineCalls", "BACKLOG_BATCHES", "IDLE_WAIT_S", "IDLE_EVERY_S",
           "OUT_OF_BAND_BYTES", "routed_items", "keeper_items"]

BACKLOG_BATCHES = 16   # a merged batch grows up to this many merge_batch when backed up
IDLE_WAIT_S = 0.05     # longest wait for a pull when idle (bounds the Notify latency)
IDLE_EVERY_S = 0.5     # the sink's idle() at most this often
OUT_OF_BAND_BYTES = 256 << 10  # a payload this large goes to the keeper out of band


def routed_items(ready: list) -> Any:
    """The merged ``(commit_ts, payload)`` pairs as the routed keeper call carries them.

    Usually packed (:mod:`tidb_binlog.packed`: one ``bytes``). A batch holding a payload
    of :data:`OUT_OF_BAND_BYTES` or more goes as the list itself, each such payload
    wrapped in a :class:`pickle.PickleBuffer`: Ray writes that buffer straight into its
    object store (no packed copy of a large transaction in the merger, which held it
    three times over: the pulled payload, the packed batch, the object store's copy)
    and hands it to the keeper as a read-only buffer over the object store (no copy
    there either: the keeper reads the binlog in place, ``translate/wire.py``). Every
    keeper call takes this form, routed or not (:meth:`RowKeeper.translate_routed
    <tidb_binlog.drainer.translate.row_keeper.RowKeeper.translate_routed>`, the row, pb and
    Parquet keepers' ``translate`` and ``translate_more``: :func:`keeper_items` reads
    it), which matters where references cannot be used (standalone gRPC pumps,
    ``large-binlog-bytes = 0``, a path that takes transactions whole). Such batches are rare (a transaction of 256 KiB or more), so Ray's slower per-item
    serialisation of the few small items beside it does not matter.

    A :class:`~tidb_binlog.binlog_ref.BinlogRef` (a Commit binlog the pump serves by
    reference, ``[syncer] large-binlog-bytes``) is a few dozen bytes whatever its
    ``len()``: it goes packed, untouched; the keeper reads the payload from the pump."""
    if not any(_out_of_band(payload) for _, payload in ready):
        return pack(ready)
    return [(commit_ts, pickle.PickleBuffer(payload) if _out_of_band(payload) else payload)
            for commit_ts, payload in ready]


def _out_of_band(payload) -> bool:
    return len(payload) >= OUT_OF_BAND_BYTES and not is_ref(payload)


def keeper_items(items: Any) -> list:
    """The ``(commit_ts, payload)`` pairs of :func:`routed_items` (or of a packed batch,
    or the plain list a unit test passes); an out-of-band payload as a read-only
    ``memoryview`` (over the object store when it came through Ray), a
    :class:`~tidb_binlog.binlog_ref.BinlogRef` as it is (the keeper opens it)."""
    return [(commit_ts, payload if type(payload) is bytes or is_ref(payload)
             else memoryview(payload)) for commit_ts, payload in _unpack(items)]


class PipelineCalls(Protocol):
    """The driver's calls to the keeper and the sink. A handle stands for a batch in
    flight; :meth:`result` raises what the keeper or the sink raised."""

    def reset(self, replay: bool) -> Checkpoint:
        """Reset the sink (it loads the durable checkpoint); wait for it."""
        ...

    def reset_keeper(self, schema_version: int) -> int: ...

    def send(self, seq: int, items: bytes) -> Any:
        """``keeper.translate(items)`` → ``sink.apply(seq, <its result>)``; a handle."""
        ...

    def send_routed(self, seq: int, items: bytes, worker_count: int) -> Any:
        """``keeper.translate_routed`` → ``sink.apply_routed(seq, plan, payloads)``."""
        ...

    def keeper_more(self) -> bool:
        """Whether the keeper answered its last routed call with ``more``: it still holds
        a large transaction's chunks (or items queued behind one). Read once."""
        ...

    def done(self, handle) -> bool: ...

    def result(self, handle) -> Any: ...

    def idle(self) -> int: ...

    def close(self) -> Checkpoint: ...

    def wait_for_pulls(self, refs: list, timeout_s: float) -> None:
        """Block until one of the feeds' pending pulls resolved (or the timeout)."""
        ...


class Feed(Protocol):
    def poll(self) -> list[tuple[list, int]]: ...

    def refs(self) -> list: ...


class MergeLoop:
    """The merge and the batches in flight of the current run (:meth:`start` at each
    reset); ``merged`` and ``positions`` carry over runs (the task's status)."""

    def __init__(self, settings: TaskSettings, calls: PipelineCalls, merger: Merger | None = None,
                 *,
                 on_disorder: Callable[[int], None] = lambda n: None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.calls = calls
        self._on_disorder = on_disorder
        self._clock = clock
        self.merged = 0          # items handed on, in every run
        self.positions: dict[str, int] = {}
        self.buffered = 0
        self._disorder = 0
        self.start(merger)

    def start(self, merger: Merger | None) -> None:
        """A new run (after a reset): batches are numbered from 0 again."""
        self.merger = merger
        self.seq = 0
        self.inflight: deque = deque()
        self._last_idle = 0.0

    def step(self, feeds: Mapping[str, Feed]) -> bool:
        """One round (see the module doc); whether anything moved."""
        merger, calls, settings = self.merger, self.calls, self.settings
        progressed = False
        for name, feed in feeds.items():
            for items, watermark in feed.poll():
                merger.push(name, items, watermark)
                progressed = True
        if progressed:
            self.positions = merger.positions()
        inflight = self.inflight
        ready = merger.pop_ready_pairs(self.batch_limit(merger, len(inflight)))
        if ready:
            if settings.routed:  # rows go keeper -> workers; the coordinator sees the plan
                inflight.append(calls.send_routed(self.seq, routed_items(ready),
                                                  settings.worker_count))
            else:  # the same out-of-band form: every keeper reads it (keeper_items)
                inflight.append(calls.send(self.seq, routed_items(ready)))
            self.seq += 1
            self.merged += len(ready)
            del ready  # a large payload: the merger holds it no longer than the call
            progressed = True
        elif calls.keeper_more():
            # a large transaction goes out one chunk per keeper call: ask for the next
            if settings.routed:
                inflight.append(calls.send_routed(self.seq, pack([]), settings.worker_count))
            else:  # translate_more (row, pb, Parquet keepers)
                inflight.append(calls.send(self.seq, pack([])))
            self.seq += 1
            progressed = True
        disorder = merger.counters["out_of_order"]
        if disorder > self._disorder:
            self._on_disorder(disorder - self._disorder)
            self._disorder = disorder
        while inflight and (len(inflight) >= settings.max_inflight or calls.done(inflight[0])):
            calls.result(inflight.popleft())
        self.buffered = merger.buffered()
        if not progressed:
            now = self._clock()
            if not inflight and now - self._last_idle > IDLE_EVERY_S:
                calls.idle()
                self._last_idle = now
            calls.wait_for_pulls([r for f in feeds.values() for r in f.refs()], IDLE_WAIT_S)
        return progressed

    def drain(self) -> None:
        """Wait for every batch in flight (raises the first failure)."""
        while self.inflight:
            self.calls.result(self.inflight.popleft())

    def batch_limit(self, merger: Merger, inflight: int) -> int:
        """``merge_batch`` items, up to :data:`BACKLOG_BATCHES` times that while the pumps'
        input is backed up *and* the pipeline is busy with earlier batches (catching up:
        fewer, bigger hops; live, or the pipeline idle: small, prompt ones, so the keeper
        and the workers start on the first rows at once instead of after a big batch)."""
        limit = self.settings.merge_batch
        backlog = merger.buffered()
        if inflight and backlog > 2 * limit:
            return min(backlog, BACKLOG_BATCHES * limit)
        return limit
