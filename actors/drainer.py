"""The drainer's Ray actors: merger, schema keeper, coordinator.

One replication task is a pipeline of actors passing batches as object refs::

    PumpActor ×N ──pull──▶ MergerActor ──items──▶ SchemaKeeperActor ──plan──▶ CoordinatorActor
                                                        │ rows, one object per worker    │ Flush/DDL,
                                                        ▼                                ▼ slices
                                                  SqlWorkerActor ×W (syncer_workers) ◀───┘

- :class:`MergerActor` drives the pipeline from a thread: it keeps fetches in
  flight to every pump, merges by commit_ts (:class:`~tidb_binlog.drainer.merge.Merger`),
  and hands each ready batch to the keeper; the keeper's result *refs* go
  straight to the coordinator, so translated rows never pass through the merger.
  At most ``max_inflight`` batches are outstanding (backpressure).
- :class:`SchemaKeeperActor` owns the :class:`~tidb_binlog.drainer.schema.SchemaKeeper`
  and :class:`~tidb_binlog.drainer.translate.Translator` (decoding rows, DDL jobs
  from the upstream meta, filters). In exactly-once mode it also routes the rows
  (:meth:`SchemaKeeperActor.translate_routed`: the worker of a row is a function
  of its transaction, :mod:`tidb_binlog.drainer.routing`), keeps the conflict
  window and returns one object per worker plus a short plan: runs of parts
  between flush points, FLUSH where keys conflict, each DDL.
- :class:`CoordinatorActor` issues the flushes and owns the checkpoint. Routed
  (:meth:`CoordinatorActor.apply_routed`, exactly-once): it carries out the plan,
  handing each worker its object unread, one call per worker and run (one per
  worker and batch without conflicts), waiting for every worker at a FLUSH, running
  each DDL alone, one checkpoint item per run. Otherwise
  (:meth:`CoordinatorActor.apply`, the causality mode) its
  :class:`~tidb_binlog.drainer.dispatch.Dispatcher` splits the Txns, detects
  conflicts and emits Send/Flush/RunDDL actions, one call per worker and batch as
  well. It saves the checkpoint in the downstream every 3 s and after each DDL.

**Failure model.** Every actor has ``max_restarts=-1``. Durable state is the
downstream checkpoint (and, in exactly-once mode, each worker's progress row);
everything else is rebuilt. When a call to the keeper, coordinator or a worker
fails because the actor died, the merger *resets the pipeline*: the coordinator
reloads the checkpoint, the keeper rebuilds the schema at its schema version, and
the merger restarts every pump from its commit_ts. Workers skip the parts they
already committed (exactly-once) or replay in safe mode. A batch that fails
half-dispatched leaves the coordinator refusing every later batch until that
reset: a worker committing a later part would move its progress past the
undispatched rest, and the replay would skip it. A restarted keeper refuses to
translate until reset (its schema is not at the stream's position). A restarted merger does
the same from ``__init__``. Errors that retrying cannot fix (a downstream
refusing a statement, an unsupported DDL, undecodable rows) stop the task; its
status names the error.

Every Ray API call sits in :class:`_Ray`, so the plain classes are importable
and their logic testable without Ray.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque

from actors.process import tune_gc
from actors.ray_calls import PipelineReset
from actors.ray_calls import RayCalls as _Ray
from tidb_binlog.drainer.checkpoint import Advancer, Checkpoint
from tidb_binlog.drainer.dispatch import Dispatcher, Flush, RunDDL, Send
from tidb_binlog.drainer.dml import Txn
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.routing import FLUSH, ROWS, PlanStep
from tidb_binlog.errors import (
    BinlogError,  # noqa: F401 (re-exported errors live here)
    ConfigError,
    TransientDownstreamError,
)
from tidb_binlog.packed import unpack

__all__ = ["CoordinatorActor"]

log = logging.getLogger(__name__)

APPLY_SAMPLES = 100_000
"""How many (commit_ts, committed_at_s) samples the coordinator keeps for the lag."""


# -- coordinator ------------------------------------------------------------------------
class CoordinatorActor:
    """Causality, dispatch to SQL workers, flush barriers, DDL and the checkpoint."""

    def __init__(self, settings: TaskSettings, workers: list, *, store=None, now_ts=None):
        from tidb_binlog.drainer.checkpoint_store import MySQLCheckpointStore

        self.settings = settings
        self.workers = list(workers)
        self.store = store if store is not None else MySQLCheckpointStore(
            settings.downstream, settings.cluster_id, schema=settings.checkpoint_schema,
            table=settings.checkpoint_table)
        self._now_ts = now_ts
        self._lock = threading.Lock()
        # applied_rows, ddl_jobs and resets live in the Advancer and are saved with the
        # checkpoint (tidb_binlog.drainer.checkpoint), so they survive our restarts.
        self.routed_batches = 0  # batches the keeper routed (apply_routed)
        self.last_apply_s = 0.0
        # Per acknowledged worker call, newest last: (its parts' commit_ts, wall time they
        # were committed downstream); apply_samples() expands them to (commit_ts,
        # committed_at_s), the lag being the second minus the commit_ts's physical time.
        # Kept per call (not per part) so the ack path does no per-row work; _sampled
        # counts the commit_ts held.
        self._samples: deque[tuple[list, float]] = deque()
        self._sampled = 0
        # No downstream call here: a constructor that raises leaves a dead actor Ray never
        # restarts. The merger calls reset() before the first batch (and after every
        # restart), which loads the checkpoint; until then apply refuses to run.
        self._install(Checkpoint(0))
        self._expected_seq = None
        self._loaded = False
        tune_gc()

    def reset(self, replay: bool = False) -> Checkpoint:
        """Forget everything in flight; restart from the durable checkpoint. ``replay``:
        this start replays after a failure; counted in the checkpoint's ``resets``,
        saved at once (best effort: a failed save is retried with the next one)."""
        from tidb_binlog.drainer.checkpoint import resolve_initial_commit_ts, start_commit_ts

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
        self._loaded = True
        return cp

    def _install(self, cp: Checkpoint) -> None:
        with self._lock:
            self.advancer = Advancer(cp, save_interval_s=self.settings.save_interval_s,
                                     now_s=time.monotonic())
            self.dispatcher = Dispatcher(len(self.workers), self.advancer,
                                         batch_dmls=self.settings.txn_batch,
                                         exactly_once=self.settings.exactly_once)
            self._outstanding: dict = {}  # worker call ref -> the Sends it carries
            self._queued: dict[int, list[Send]] = {}  # Sends not yet handed to a worker
            self._expected_seq = 0
            self.start_checkpoint = cp

    def start_point(self) -> Checkpoint:
        return self.start_checkpoint

    def apply(self, seq: int, translated: list[tuple[int, Txn | None, int]]) -> int:
        """Dispatch one merged batch (``seq`` must follow the previous one); return the
        checkpoint commit_ts after the batch was handed out."""
        self._check_seq(seq)
        try:
            for commit_ts, txn, version in unpack(translated):
                for action in self.dispatcher.add(commit_ts, txn, version):
                    self._perform(action)
                if txn is not None and txn.dmls:
                    self.advancer.add_rows(commit_ts, len(txn.dmls))
            for action in self.dispatcher.drain():
                self._perform(action)
            self._send_queued()
        except BaseException:
            # Part of this batch was never dispatched: a later batch (already queued by
            # the merger) must not run, or workers would commit past the gap and the
            # replay would skip it as done. Refuse everything until reset().
            self._expected_seq = None
            raise
        return self._batch_done()

    def apply_routed(self, seq: int, plan: list[PlanStep], payloads: list) -> int:
        """Carry out one merged batch the keeper routed (exactly-once mode): ``plan``
        from :meth:`SchemaKeeperActor.translate_routed` (steps of
        :class:`~tidb_binlog.drainer.routing.BatchPlanner`, possibly packed),
        ``payloads`` the refs of its per-worker payloads (nested in a list, so Ray
        passes them on unresolved). Each run of parts is one call per worker it names
        (``execute_slice``) and one checkpoint item; ``FLUSH`` waits for every worker;
        a DDL runs alone. Returns what :meth:`apply` returns; the same sequencing and
        failure rules."""
        if len(payloads) != len(self.workers):
            raise ConfigError(f"the keeper routed over {len(payloads)} workers but the "
                              f"coordinator drives {len(self.workers)}; restart the task",
                              key="worker-count")
        self._check_seq(seq)
        try:
            cursor = [0] * len(self.workers)
            advancer = self.advancer
            for step in unpack(plan):
                kind = step[0]
                if kind == ROWS:
                    _, end_ts, version, counts, rows = step
                    runs = [(w, n) for w, n in enumerate(counts) if n]
                    # registered before any call: an ack may be collected at once
                    advancer.register(end_ts, len(runs), schema_version=version, rows=rows)
                    for w, n in runs:
                        lo = cursor[w]
                        hi = cursor[w] = lo + n
                        self._track(_Ray.call(self.workers[w], "execute_slice", payloads[w],
                                              lo, hi), end_ts)
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
            self._expected_seq = None  # see apply()
            raise
        self.routed_batches += 1
        return self._batch_done()

    def _check_seq(self, seq: int) -> None:
        if not self._loaded:
            raise PipelineReset(f"coordinator: batch {seq} before the checkpoint was loaded "
                                "(a restarted coordinator); the pipeline replays from it")
        if self._expected_seq is None:
            raise PipelineReset(f"coordinator: batch {seq} follows a failed batch; the "
                                "pipeline replays from the checkpoint")
        if seq != self._expected_seq:
            raise PipelineReset(f"coordinator expected batch {self._expected_seq}, got {seq}: "
                                "a pipeline actor restarted")

    def _batch_done(self) -> int:
        self._expected_seq += 1
        self._collect(block=False)
        self._maybe_save()
        self.last_apply_s = time.time()
        return self.advancer.commit_ts

    def idle(self) -> int:
        """Nothing new arrived: collect acks and save the checkpoint when due."""
        self._collect(block=False)
        self._maybe_save()
        return self.advancer.commit_ts

    def close(self) -> Checkpoint:
        """Wait for every worker, then save the final (consistent) checkpoint.

        After a batch failed half-dispatched nothing more is handed out (its rest
        is replayed from the checkpoint by the next run), so the checkpoint saved
        is not consistent. A coordinator that never loaded the checkpoint (restarted,
        no reset since) saves nothing and returns the saved one: it has nothing newer."""
        if not self._loaded:
            saved = self.store.load()
            return saved if saved is not None else Checkpoint(0)
        if self._expected_seq is not None:  # apply/apply_routed leave nothing pending
            for action in self.dispatcher.drain():
                self._perform(action)
            self._send_queued()
        self._collect(block=True)
        cp = self.advancer.final()
        self.store.save(cp)
        return cp

    def status(self) -> dict:
        cp = self.advancer.checkpoint()
        return {"commit_ts": cp.commit_ts, "schema_version": cp.schema_version,
                "pending": self.advancer.pending, "applied_rows": cp.applied_rows,
                "flushes": self.dispatcher.flushes, "outstanding": len(self._outstanding),
                "last_apply_s": self.last_apply_s, "ddl_jobs": cp.ddl_jobs,
                "resets": cp.resets,
                "savepoints": getattr(self.store, "saves", 0),
                "routed_batches": self.routed_batches}

    def apply_samples(self) -> list[tuple[int, float]]:
        """Take the ``(commit_ts, committed_at_s)`` samples recorded since the last call
        (one per transaction part a worker acknowledged; at most APPLY_SAMPLES kept)."""
        samples, self._samples, self._sampled = self._samples, deque(), 0
        out = [(commit_ts, at_s) for batch, at_s in samples for commit_ts in batch]
        return out[-APPLY_SAMPLES:]

    # -- actions --------------------------------------------------------------------------
    def _perform(self, action) -> None:
        if isinstance(action, Send):  # one worker call per worker and batch: queued
            self._queued.setdefault(action.worker, []).append(action)
        elif isinstance(action, Flush):
            self._send_queued()
            self._collect(block=True)
        elif isinstance(action, RunDDL):
            self._send_queued()
            _Ray.get(_Ray.call(self.workers[0], "execute_ddl", action.ddl))
            self.dispatcher.acked_ddl(action.ddl)
            self._maybe_save(force=True)
        else:  # pragma: no cover - the dispatcher only emits the three kinds
            raise TypeError(f"unknown action {action!r}")

    def _send_queued(self) -> None:
        """Hand each worker its queued Sends as one call (parts stay in commit order)."""
        queued, self._queued = self._queued, {}
        for worker, sends in queued.items():
            parts = [part for send in sends for part in send.parts]
            self._track(_Ray.call(self.workers[worker], "execute", parts), sends)

    def _track(self, ref, sends: list[Send] | int) -> None:
        """Remember a worker call: its Sends (apply), or the checkpoint item of its run
        (apply_routed: the run's end_ts, acked once per worker call)."""
        self._outstanding[ref] = sends
        if len(self._outstanding) > 2 * len(self.workers):
            self._collect(block=True, until=len(self.workers))

    def _collect(self, *, block: bool, until: int = 0) -> None:
        while self._outstanding:
            done = (_Ray.wait(list(self._outstanding), timeout_s=None) if block
                    else _Ray.wait(list(self._outstanding), timeout_s=0, all_ready=True))
            for ref in done:
                sends = self._outstanding.pop(ref)
                ack = _Ray.get(ref)  # raises the worker's error, or PipelineReset if it died
                if type(sends) is int:
                    self.advancer.ack(sends)
                else:
                    for send in sends:
                        self.dispatcher.acked(send)
                self._sample(getattr(ack, "commit_ts", ()), getattr(ack, "finished_at_s", 0.0))
            if not block or len(self._outstanding) <= until:
                return

    def _sample(self, commit_ts: tuple, finished_at_s: float) -> None:
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
        now = time.monotonic()
        if force or self.advancer.due(now):
            cp = self.advancer.checkpoint()
            try:
                self.store.save(cp)
            except TransientDownstreamError as exc:
                log.warning("checkpoint %d not saved yet: %s", cp.commit_ts, exc.message)
                return
            self.advancer.saved(cp, now)

