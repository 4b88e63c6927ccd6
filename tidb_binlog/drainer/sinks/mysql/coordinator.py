"""Coordinator: the MySQL sink's logic, its SQL worker calls passed in.

It issues the flushes and owns the checkpoint (TiDB Binlog's ``drainer/syncer.go`` and
``pkg/loader``'s causality). Two ways in, both behind one
:class:`~tidb_binlog.drainer.pipeline.gate.SequenceGate`:

- :meth:`Coordinator.apply_routed` (exactly-once): the schema keeper routed the rows
  (:class:`~tidb_binlog.drainer.apply.routing.BatchPlanner`) and sent one payload per worker;
  the coordinator carries out the plan: per run of parts one ``execute_slice`` call per
  worker it names and one checkpoint item; ``FLUSH`` waits for every worker; a DDL
  runs alone on worker 0 after a flush.
- :meth:`Coordinator.apply` (the causality mode): its
  :class:`~tidb_binlog.drainer.apply.dispatch.Dispatcher` splits the Txns, detects conflicts
  and emits Send/Flush/RunDDL; the Sends of one batch go out as one ``execute`` call
  per worker. **Large transactions** (``txn-chunk-rows``): the keeper
  (``RowKeeper.translate_more``) hands one over in chunks, ``(commit_ts, txn, version,
  chunk)`` for each but the last. With exactly-once off and ``txn-atomic`` off each
  chunk is dispatched like a batch of its rows (conflict detection per chunk,
  :meth:`Dispatcher.add_chunk
  <tidb_binlog.drainer.apply.dispatch.Dispatcher.add_chunk>`) and committed on its own,
  counted for nothing in the checkpoint; before the last chunk every worker is flushed
  and the last one is registered as the transaction, so the checkpoint passes
  ``commit_ts`` only once every chunk was applied. A crash in between leaves the
  applied chunks downstream (non-atomic, as TiDB Binlog without exactly-once) until the
  replay from the checkpoint applies the whole transaction again (idempotent where this
  mode's replays are: safe mode, merge's REPLACE; drainer README "Large transactions
  with exactly-once off"). With exactly-once (a relay log: the keeper does not route)
  or ``txn-atomic`` the chunks are *atomic* (``Dispatcher.atomic_chunks``): a flush
  first, every chunk to the transaction's one worker, run there without COMMIT in one
  open downstream transaction that the last chunk commits (with the worker's progress
  row under exactly-once), a flush after it: as the keeper-routed path does, so a crash
  before the last chunk's COMMIT leaves nothing of the transaction downstream.

**Back-pressure.** At most ``2 x workers`` worker calls are outstanding; past that it
waits until at most ``workers`` are. **Checkpoint.** The
:class:`~tidb_binlog.drainer.checkpoint.checkpoint.Advancer` passes a commit_ts once every part
at or below it was acknowledged; it is saved every ``save_interval_s`` and after each
DDL. A downstream that is down only delays the save (it stays due). **Lag samples.**
Each acknowledged worker call gives ``(its parts' commit_ts, committed_at_s)``,
expanded by :meth:`Coordinator.apply_samples`; at most :data:`APPLY_SAMPLES` kept.

**Failures.** A batch that fails part-way closes the gate: later batches (already
queued by the merger) are refused until :meth:`reset`, else a worker committing them
would move its progress past the undispatched rest and the replay would skip it. So
does a worker call found failed after its batch passed (by the next batch, or
:meth:`idle`). **Epochs.** Each :meth:`reset` starts a new pipeline epoch and tells
every worker (``begin``, waiting for each: after the calls sent to it before); every
worker call carries the epoch, and a worker refuses a call of another epoch, or any
call before it was told one: Ray hands a restarted worker the calls submitted while it
restarted, which must not run without those lost in the crash
(:class:`~tidb_binlog.drainer.pipeline.gate.EpochFence`).
The constructor never reads the downstream (a Ray actor whose constructor raises is
never restarted): until the first reset, batches are refused.

**Relay log** (``[syncer.relay]``, :mod:`tidb_binlog.drainer.relay`): with one, each
batch's transactions are written and fdatasync'ed to it before any of them goes to a
worker, and a relay file is removed once a *saved* checkpoint passed its last record.
It needs the transactions themselves, so a task with a relay log runs :meth:`apply`
(the keeper does not route: :attr:`~tidb_binlog.drainer.pipeline.settings.TaskSettings.routed`).
A large transaction in chunks is written one record per chunk, each synced before that
chunk goes to a worker (relay/log.py); atomic chunks are marked so (record.py field 18),
which tells recovery that an unfinished one was never committed downstream.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from tidb_binlog.drainer.apply.dispatch import Dispatcher, Flush, RunDDL, Send
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.apply.routing import FLUSH, ROWS, PlanStep
from tidb_binlog.drainer.checkpoint.checkpoint import (
    Advancer,
    Checkpoint,
    resolve_initial_commit_ts,
    start_commit_ts,
)
from tidb_binlog.drainer.checkpoint.store import CheckpointStore
from tidb_binlog.drainer.pipeline.gate import PipelineReset, SequenceGate, new_epoch
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.pipeline.sink import SinkStatus
from tidb_binlog.drainer.relay.log import RelayLog
from tidb_binlog.errors import ConfigError, InvalidArgument, ProtocolError, TransientDownstreamError
from tidb_binlog.logs import txn
from tidb_binlog.packed import unpack

__all__ = ["Coordinator", "WorkerCalls", "APPLY_SAMPLES"]

log = logging.getLogger(__name__)

APPLY_SAMPLES = 100_000
"""How many (commit_ts, committed_at_s) samples the coordinator keeps for the lag."""


class WorkerCalls(Protocol):
    """The coordinator's calls to its SQL workers (``actors.ray_calls.WorkerCalls``
    over Ray; a scripted fake in unit tests). A handle stands for a call in flight.
    ``epoch``: the pipeline epoch the call is sent in (module doc)."""

    def __len__(self) -> int: ...

    def begin(self, epoch: int) -> None:
        """``SqlWorkerActor.begin(epoch)`` on every worker, waiting for each
        (PipelineReset: one is unavailable)."""
        ...

    def execute(self, worker: int, parts, epoch: int) -> Any:
        """Start ``SqlWorkerActor.execute(parts, epoch)``; a handle."""
        ...

    def execute_slice(self, worker: int, payload, lo: int, hi: int, epoch: int) -> Any:
        """Start ``execute_slice(payload, lo, hi, epoch)`` (``payload`` passed on unread)."""
        ...

    def execute_ddl(self, worker: int, ddl, epoch: int) -> Any:
        """Run one DDL and wait for it; its Ack."""
        ...

    def done(self, handles: list, block: bool) -> list:
        """``block``: wait for at least one; else those already done (maybe none)."""
        ...

    def result(self, handle) -> Any:
        """The call's Ack; raises the worker's error (PipelineReset: it died)."""
        ...


class _Call(NamedTuple):
    """A worker call in flight: the Sends it carries (causality mode), or the checkpoint
    item of its run (routed mode: ``end_ts``, acknowledged once per worker call)."""

    sends: list[Send] | None
    end_ts: int


class Coordinator:
    """The MySQL sink: causality or a routed plan, flushes, DDL and the checkpoint."""

    def __init__(self, settings: TaskSettings, workers: WorkerCalls, store: CheckpointStore,
                 *, now_ts: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 open_relay: Callable[[], RelayLog] | None = None):
        self.settings = settings
        self._open_relay = open_relay
        self.relay: RelayLog | None = None  # opened by the first reset (it takes a lock)
        self.workers = workers
        self.store = store
        self._now_ts = now_ts
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self.gate = SequenceGate("coordinator")
        # applied_rows, ddl_jobs and resets live in the Advancer and are saved with the
        # checkpoint, so they survive our restarts.
        self.routed_batches = 0  # batches the keeper routed (apply_routed)
        self.txn_chunks = 0  # chunks of large transactions applied before their last (apply)
        self.last_apply_s = 0.0
        # Per acknowledged worker call, newest last: (its parts' commit_ts, wall time they
        # were committed downstream); kept per call (not per part) so the ack path does
        # no per-row work; _sampled counts the commit_ts held.
        self._samples: deque[tuple[Sequence[int], float]] = deque()
        self._sampled = 0
        self.epoch = 0  # the pipeline epoch of the last reset (0: none yet)
        self._install(Checkpoint(0))

    # -- the Sink calls ----------------------------------------------------------------------
    def reset(self, replay: bool = False) -> Checkpoint:
        """Forget everything in flight; restart from the durable checkpoint. ``replay``:
        this start replays after a failure; counted in the checkpoint's ``resets``,
        saved at once (best effort: a failed save is retried with the next one). Starts
        a new pipeline epoch on every worker (module doc, Epochs); until that is done,
        batches are refused (a failed reset is retried by the merger)."""
        self.gate.failed()
        if self._open_relay is not None and self.relay is None:
            self.relay = self._open_relay()
        try:
            loaded = self.store.load()
        except TransientDownstreamError as exc:  # the merger retries the reset
            raise PipelineReset(f"coordinator: cannot read the checkpoint yet ({exc.message}); "
                                "retrying") from exc
        initial = self.settings.initial_commit_ts
        if (loaded is None or loaded.commit_ts == 0) and initial == -1 and self._now_ts:
            initial = resolve_initial_commit_ts(-1, self._now_ts())
        cp = start_commit_ts(loaded, max(initial, 0))
        if replay:
            cp = dataclasses.replace(cp, resets=cp.resets + 1)
            if loaded is not None:  # else the first save records it
                try:
                    self.store.save(dataclasses.replace(loaded, resets=cp.resets))
                except TransientDownstreamError as exc:
                    log.warning("reset count not saved yet: %s", exc.message)
        self._install(cp)
        # every worker refuses the calls sent before (their acks would be forgotten
        # anyway) and, restarted, everything until now: see Epochs in the module doc
        epoch = new_epoch()
        self.workers.begin(epoch)
        self.epoch = epoch
        self.gate.open()
        return cp

    def start_point(self) -> Checkpoint:
        return self.start_checkpoint

    def apply(self, seq: int, translated: list[tuple[int, Txn | None, int]]) -> int:
        """Dispatch one merged batch (causality mode); the checkpoint commit_ts after it
        was handed out."""
        self.gate.check(seq)
        try:
            translated = unpack(translated)
            if self.relay is not None:  # durable before any worker sees a row of it
                # a chunk: that chunk, before it is applied
                self.relay.append(translated, atomic=self.dispatcher.atomic_chunks)
            for item in translated:
                if len(item) == 4:  # a large transaction's chunk, not its last
                    self._apply_chunk(*item)
                    continue
                commit_ts, txn, version = item
                rows = len(txn.dmls) if txn is not None else 0
                if self._chunked_ts:  # its last chunk
                    rows += self._end_chunks(commit_ts)
                    if self.dispatcher.atomic_chunks:  # to the chunks' worker, committing
                        for action in self.dispatcher.last_chunk(commit_ts, txn, version):
                            self._perform(action)
                        if rows:
                            self.advancer.add_rows(commit_ts, rows)
                        continue
                for action in self.dispatcher.add(commit_ts, txn, version):
                    self._perform(action)
                if rows:
                    self.advancer.add_rows(commit_ts, rows)
            for action in self.dispatcher.drain():
                self._perform(action)
            self._send_queued()
        except BaseException:
            self.gate.failed()
            raise
        return self._batch_done()

    def _apply_chunk(self, commit_ts: int, txn: Txn, version: int, chunk: int) -> None:
        """One non-last chunk (module doc): its rows go out now, acked for nothing."""
        if self._chunked_ts != commit_ts:
            if self._chunked_ts:
                raise ProtocolError(f"chunk {chunk} of the transaction at commit_ts "
                                    f"{commit_ts} arrived while the one at "
                                    f"{self._chunked_ts} had not ended")
            # what is pending goes first: a Send never mixes counted parts with a chunk's
            for action in self.dispatcher.drain():
                self._perform(action)
            self._send_queued()
            self._chunked_ts, self._chunked_rows = commit_ts, 0
        for action in self.dispatcher.add_chunk(commit_ts, txn.dmls, chunk):
            if isinstance(action, Send):
                self._track(self.workers.execute(action.worker, list(action.parts),
                                                 self.epoch), _Call(None, 0))
            else:
                self._perform(action)
        self._chunked_rows += len(txn.dmls)
        self.txn_chunks += 1

    def _end_chunks(self, commit_ts: int) -> int:
        """Before the last chunk: wait until every chunk was applied (atomic chunks: they
        are open on one worker, the last one follows them there); their rows."""
        if commit_ts != self._chunked_ts:
            raise ProtocolError(f"the transaction at commit_ts {self._chunked_ts} was handed "
                                f"in chunks but the next item is at {commit_ts}, not its "
                                "last chunk")
        if not self.dispatcher.atomic_chunks:
            for action in self.dispatcher.end_chunks():
                self._perform(action)
        rows, self._chunked_ts, self._chunked_rows = self._chunked_rows, 0, 0
        return rows

    def apply_routed(self, seq: int, plan: list[PlanStep], payloads: list) -> int:
        """Carry out one batch the keeper routed (exactly-once): ``plan`` from
        :class:`~tidb_binlog.drainer.apply.routing.BatchPlanner` (possibly packed),
        ``payloads`` one per worker, passed on unread. Same result and rules as
        :meth:`apply`."""
        if len(payloads) != len(self.workers):
            raise ConfigError(f"the keeper routed over {len(payloads)} workers but the "
                              f"coordinator drives {len(self.workers)}; restart the task",
                              key="worker-count")
        if self._open_relay is not None:
            raise ConfigError("a task with a relay log must not route rows in the keeper "
                              "(the coordinator writes the transactions to the relay log); "
                              "restart the task", key="syncer.relay.log-dir")
        self.gate.check(seq)
        try:
            cursor = [0] * len(self.workers)
            advancer = self.advancer
            for step in unpack(plan):
                kind = step[0]
                if kind == ROWS:
                    _, end_ts, version, counts, rows = step
                    runs = [(w, n) for w, n in enumerate(counts) if n]
                    # registered before any call: an ack may be collected at once.
                    # end_ts 0: a chunk of a large transaction that continues (the
                    # keeper's translate_routed): nothing for the checkpoint yet
                    if end_ts:
                        advancer.register(end_ts, len(runs), schema_version=version, rows=rows)
                    for w, n in runs:
                        lo = cursor[w]
                        hi = cursor[w] = lo + n
                        self._track(self.workers.execute_slice(w, payloads[w], lo, hi,
                                                               self.epoch),
                                    _Call(None, end_ts))
                elif kind == FLUSH:
                    self._collect(block=True)
                    self.dispatcher.flushes += 1
                else:  # RUN_DDL: a barrier, then the DDL alone
                    _, commit_ts, version, ddl = step
                    self._collect(block=True)
                    self.dispatcher.flushes += 1
                    advancer.register(commit_ts, 1, ddl=True, schema_version=version)
                    self._perform(RunDDL(ddl, version))
        except BaseException:
            self.gate.failed()
            raise
        self.routed_batches += 1
        return self._batch_done()

    def idle(self) -> int:
        """Nothing new arrived: collect acks and save the checkpoint when due."""
        self._collect_or_close(block=False)
        self._maybe_save()
        return self.advancer.commit_ts

    def close(self) -> Checkpoint:
        """Wait for every worker, then save the final (consistent) checkpoint.

        After a batch failed part-way nothing more is handed out (its rest is replayed
        from the checkpoint by the next run), so the checkpoint saved is not
        consistent. A coordinator never reset returns the saved checkpoint."""
        if not self.gate.loaded:
            saved = self.store.load()
            return saved if saved is not None else Checkpoint(0)
        if self.gate.is_open:  # apply/apply_routed leave nothing pending
            for action in self.dispatcher.drain():
                self._perform(action)
            self._send_queued()
        self._collect(block=True)
        cp = self.advancer.final()
        if self._chunked_ts and not self.dispatcher.atomic_chunks:
            # chunks of a transaction above it are applied downstream (atomic chunks are
            # not: they were never committed, their worker rolls them back)
            cp = dataclasses.replace(cp, consistent=False)
        self.store.save(cp)
        self._relay_gc(cp)
        if self.relay is not None:  # unlock it: a resumed task's coordinator opens it again
            self.relay.close()
            self.relay = None
        return cp

    def status(self) -> SinkStatus:
        cp = self.advancer.checkpoint()
        return SinkStatus(
            commit_ts=cp.commit_ts, saved_commit_ts=self.advancer.saved_ts,
            schema_version=cp.schema_version, pending=self.advancer.pending, applied_rows=cp.applied_rows,
            flushes=self.dispatcher.flushes, outstanding=len(self._outstanding),
            last_apply_s=self.last_apply_s, ddl_jobs=cp.ddl_jobs, resets=cp.resets,
            savepoints=getattr(self.store, "saves", 0),
            extra={"routed_batches": self.routed_batches, "txn_chunks": self.txn_chunks,
                   **self._relay_status()})

    def apply_samples(self) -> list[tuple[int, float]]:
        """Take the ``(commit_ts, committed_at_s)`` samples recorded since the last call
        (one per transaction part a worker acknowledged; at most APPLY_SAMPLES kept)."""
        samples, self._samples, self._sampled = self._samples, deque(), 0
        out = [(commit_ts, at_s) for batch, at_s in samples for commit_ts in batch]
        return out[-APPLY_SAMPLES:]

    # -- internals -----------------------------------------------------------------------------
    def _install(self, cp: Checkpoint) -> None:
        with self._lock:
            self.advancer = Advancer(cp, save_interval_s=self.settings.save_interval_s,
                                     now_s=self._clock())
            self.dispatcher = Dispatcher(len(self.workers), self.advancer,
                                         batch_dmls=self.settings.txn_batch,
                                         exactly_once=self.settings.exactly_once,
                                         txn_atomic=self.settings.txn_atomic)
            self._outstanding: dict[Any, _Call] = {}  # worker call handle -> what it carries
            self._queued: dict[int, list[Send]] = {}  # Sends not yet handed to a worker
            # a large transaction being applied in chunks (causality mode): its commit_ts
            # (0: none) and the rows of its chunks so far
            self._chunked_ts = 0
            self._chunked_rows = 0
            self.start_checkpoint = cp

    def _batch_done(self) -> int:
        self.gate.passed()
        self._collect_or_close(block=False)
        self._maybe_save()
        self.last_apply_s = self._wall_clock()
        return self.advancer.commit_ts

    def _perform(self, action) -> None:
        if isinstance(action, Send):  # one worker call per worker and batch: queued
            self._queued.setdefault(action.worker, []).append(action)
        elif isinstance(action, Flush):
            self._send_queued()
            self._collect(block=True)
        elif isinstance(action, RunDDL):
            self._send_queued()
            self.workers.execute_ddl(0, action.ddl, self.epoch)
            self.dispatcher.acked_ddl(action.ddl)
            self._maybe_save(force=True)
        else:  # pragma: no cover - the dispatcher only emits the three kinds
            raise InvalidArgument(f"unknown action {action!r}")

    def _send_queued(self) -> None:
        """Hand each worker its queued Sends as one call (parts stay in commit order)."""
        queued, self._queued = self._queued, {}
        for worker, sends in queued.items():
            parts = [part for send in sends for part in send.parts]
            self._track(self.workers.execute(worker, parts, self.epoch), _Call(sends, 0))

    def _track(self, handle, call: _Call) -> None:
        """Remember a worker call; back-pressure past ``2 x workers`` in flight."""
        self._outstanding[handle] = call
        if len(self._outstanding) > 2 * len(self.workers):
            self._collect(block=True, until=len(self.workers))

    def _collect(self, *, block: bool, until: int = 0) -> None:
        while self._outstanding:
            for handle in self.workers.done(list(self._outstanding), block):
                call = self._outstanding.pop(handle)
                ack = self.workers.result(handle)  # the worker's error, or PipelineReset
                if call.sends is None:
                    if call.end_ts:  # 0: a chunk that continues (see apply_routed)
                        self.advancer.ack(call.end_ts)
                else:
                    for send in call.sends:
                        self.dispatcher.acked(send)
                self._sample(getattr(ack, "commit_ts", ()), getattr(ack, "finished_at_s", 0.0))
            if not block or len(self._outstanding) <= until:
                return

    def _collect_or_close(self, *, block: bool) -> None:
        """:meth:`_collect` after a batch passed: a worker call found failed closes the
        gate, as a batch failing part-way does (module doc, Failures)."""
        try:
            self._collect(block=block)
        except BaseException:
            self.gate.failed()
            raise

    def _sample(self, commit_ts: Sequence[int], finished_at_s: float) -> None:
        """One worker call acknowledged: its parts' commit_ts, committed at ``finished_at_s``."""
        if not commit_ts:
            return
        samples = self._samples
        samples.append((commit_ts, finished_at_s))
        self._sampled += len(commit_ts)
        while self._sampled - len(samples[0][0]) >= APPLY_SAMPLES:  # keep the newest
            self._sampled -= len(samples.popleft()[0])

    def _maybe_save(self, force: bool = False) -> None:
        """Save when due. A downstream that is down (transient error after the store's
        own retries) only delays the save: it stays due and the next call tries again,
        while the workers ride out the outage; a lagging checkpoint only lengthens the
        replay window."""
        now = self._clock()
        if force or self.advancer.due(now):
            cp = self.advancer.checkpoint()
            try:
                self.store.save(cp)
            except TransientDownstreamError as exc:
                log.warning("checkpoint %d not saved yet: %s", cp.commit_ts, exc.message,
                            extra=txn(cp.commit_ts))
                return
            self.advancer.saved(cp, now)
            self._relay_gc(cp)

    def _relay_gc(self, saved: Checkpoint) -> None:
        """Relay files wholly at or below a durable checkpoint are no longer needed."""
        if self.relay is not None:
            self.relay.gc(saved.commit_ts)

    def _relay_status(self) -> dict:
        if self.relay is None:
            return {}
        return {"relay_records": self.relay.records, "relay_last_ts": self.relay.last_ts,
                "relay_files": len(self.relay.files())}
