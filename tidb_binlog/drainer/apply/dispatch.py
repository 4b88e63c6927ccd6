"""The coordinator's kernel: split transactions over workers, decide flushes and batches.

Input: translated items in commit order (:meth:`Dispatcher.add`): a
:class:`~tidb_binlog.drainer.apply.dml.Txn` of DMLs, a DDL Txn, or ``None`` for a
commit_ts with nothing to apply (fake binlog, filtered or ignored txn). Output:
:class:`Send` / :class:`Flush` / :class:`RunDDL` actions, which the shell
carries out **in order** and reports back (:meth:`acked`).

**Rules.**

- Each DML goes to the worker its dispatcher says: the deterministic
  :class:`~tidb_binlog.drainer.apply.routing.Router` (exactly-once mode) or TiDB's
  :class:`~tidb_binlog.drainer.apply.causality.Causality`. A conflict (the row's keys
  sit with another worker in this window) emits every pending batch and a
  :class:`Flush` (wait until every sent batch committed), resets the window and
  routes the row again.
- ``txn_atomic`` (``[syncer] txn-atomic``): a transaction is never split. With
  exactly-once it goes whole to its first row's worker
  (:func:`~tidb_binlog.drainer.apply.routing.route_txn` ``atomic``); otherwise
  :class:`~tidb_binlog.drainer.apply.causality.TxnCausality` sends it to the worker that
  holds its keys, or emits a :class:`Flush` first when several workers hold them.
- A transaction's DMLs for one worker form one *part* ``(commit_ts, dmls)``;
  parts are never split across batches. The checkpoint :class:`Advancer` learns
  the transaction with as many parts as workers it touched.
- A worker's pending parts are emitted as one :class:`Send` once they hold
  ``batch_dmls`` DMLs, and all pending parts are emitted by :meth:`drain`
  (called by the shell when its input is momentarily empty).
- A DDL emits every pending batch, a :class:`Flush`, then :class:`RunDDL`: it
  runs alone, after everything before it committed and before anything after it.
- ``None`` items and transactions without DMLs are registered as already done:
  the checkpoint passes them once everything before them is acked.

**Chunks of a large transaction** (``txn-chunk-rows``: the keeper's ``translate_more``).
Two ways, by :attr:`Dispatcher.atomic_chunks`:

- *Non-atomic* (the causality mode: exactly-once and txn-atomic off): :meth:`add_chunk`
  dispatches one chunk's rows like a transaction of its own for the conflict rules,
  emits them at once and registers nothing (the coordinator does not count them for the
  checkpoint); :meth:`end_chunks` before the last chunk, which comes through :meth:`add`
  as usual.
- *Atomic* (exactly-once, i.e. a relay log, or ``txn-atomic``: the transaction must
  reach the downstream as one): the first :meth:`add_chunk` emits every pending batch
  and a :class:`Flush` (a barrier: everything before it committed), resets the window
  and picks the transaction's one worker (its first row's key hash, a function of the
  transaction alone, as the keeper-routed path picks it); each chunk but the last is a
  part ``(commit_ts, dmls, chunk)`` that the worker runs without COMMIT, registered for
  nothing; :meth:`last_chunk` sends the last one ``(commit_ts, dmls)`` (even empty: it
  commits the open downstream transaction, with the worker's progress row under
  exactly-once), registers the transaction as one part, then a :class:`Flush` (its keys
  were never held in the window: later transactions wait for its COMMIT) and an empty
  window.

The keeper-routed path of exactly-once mode does not come through here: the schema
keeper routes the rows and plans the flushes itself
(:class:`~tidb_binlog.drainer.apply.routing.BatchPlanner`, the same rules per
transaction), and the coordinator carries out the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidb_binlog.drainer.apply.causality import (
    CONFLICT,
    Causality,
    TxnCausality,
    row_keys,
    stable_hash,
)
from tidb_binlog.drainer.apply.dml import DDL, DML, Txn
from tidb_binlog.drainer.apply.routing import Router, route_txn
from tidb_binlog.drainer.checkpoint.checkpoint import Advancer
from tidb_binlog.errors import InvalidArgument

__all__ = ["Part", "Send", "Flush", "RunDDL", "Dispatcher"]

Part = tuple[int, tuple[DML, ...]]
"""One worker's share of one transaction: ``(commit_ts, dmls)``."""


@dataclass(frozen=True)
class Send:
    """Hand ``parts`` to ``worker`` (one downstream batch, commit order within it)."""

    worker: int
    parts: tuple[Part, ...]

    @property
    def dml_count(self) -> int:
        return sum(len(dmls) for _, dmls in self.parts)


@dataclass(frozen=True)
class Flush:
    """Wait until every batch sent so far is committed (and acked) before going on."""


@dataclass(frozen=True)
class RunDDL:
    """Run one DDL downstream, alone; ack it with ``acked_ddl``."""

    ddl: DDL
    schema_version: int = 0


@dataclass
class _Segment:
    by_worker: dict[int, list[DML]] = field(default_factory=dict)
    flush_before: bool = False


@dataclass
class _Pending:
    parts: list[Part] = field(default_factory=list)
    dmls: int = 0


class Dispatcher:
    """See the module docstring. ``exactly_once`` picks the deterministic router;
    ``txn_atomic`` keeps every transaction whole on one worker."""

    def __init__(self, worker_count: int, advancer: Advancer, *, batch_dmls: int = 20,
                 exactly_once: bool = True, txn_atomic: bool = False):
        if batch_dmls < 1:
            raise InvalidArgument(f"batch_dmls must be >= 1, got {batch_dmls}")
        self.worker_count = worker_count
        self.advancer = advancer
        self.batch_dmls = batch_dmls
        self.exactly_once = exactly_once
        self.txn_atomic = txn_atomic
        self._router = Router(worker_count) if exactly_once else None
        self._causality = None if exactly_once or txn_atomic else Causality(worker_count)
        self._txn_causality = (TxnCausality(worker_count)
                               if txn_atomic and not exactly_once else None)
        self._pending = [_Pending() for _ in range(worker_count)]
        self.flushes = 0
        # the worker of the large transaction being sent in atomic chunks (-1: none)
        self._chunk_worker = -1

    @property
    def atomic_chunks(self) -> bool:
        """Whether a large transaction's chunks go to one worker in one downstream
        transaction (exactly-once or txn-atomic; module doc) rather than committed one
        by one."""
        return self.exactly_once or self.txn_atomic

    # -- input ----------------------------------------------------------------------
    def add(self, commit_ts: int, txn: Txn | None, schema_version: int = 0) -> list:
        """Dispatch one item; return the actions to carry out, in order."""
        if txn is None or (not txn.dmls and txn.ddl is None):
            self.advancer.register_done(commit_ts, schema_version=schema_version)
            return []
        if txn.ddl is not None:
            actions = self._emit_all()
            actions.append(Flush())
            self._reset_window()
            self.advancer.register(commit_ts, 1, ddl=True, schema_version=schema_version)
            actions.append(RunDDL(txn.ddl, schema_version))
            return actions
        if self._router is not None:
            segments = self._segments_exactly_once(txn)
        elif self._txn_causality is not None:
            segments = self._segments_atomic(txn)
        else:
            segments = self._segments_causality(txn)
        actions: list = []
        parts = 0
        for segment in segments:
            if segment.flush_before:
                actions += self._emit_all()
                actions.append(Flush())
            parts += len(segment.by_worker)
            for worker, dmls in segment.by_worker.items():
                pending = self._pending[worker]
                pending.parts.append((commit_ts, tuple(dmls)))
                pending.dmls += len(dmls)
        self.advancer.register(commit_ts, parts, schema_version=schema_version)
        for worker in sorted({w for seg in segments for w in seg.by_worker}):
            if self._pending[worker].dmls >= self.batch_dmls:
                actions.append(self._emit(worker))
        return actions

    def add_chunk(self, commit_ts: int, dmls: tuple[DML, ...], chunk: int = 0) -> list:
        """One non-last chunk of a large transaction (module doc): its Sends (and the
        Flushes its conflicts need), all emitted now, nothing registered. Call
        :meth:`drain` before the first chunk, so no Send mixes a chunk's parts with
        counted ones. With :attr:`atomic_chunks` the chunk is one part ``(commit_ts,
        dmls, chunk)`` on the transaction's one worker (``chunk``: its number, 1, 2,
        ...), a Flush before the first."""
        if self.atomic_chunks:
            return self._add_atomic_chunk(commit_ts, dmls, chunk)
        actions: list = []
        for segment in self._segments_causality(Txn.of_dmls(commit_ts, dmls)):
            if segment.flush_before:
                actions += self._emit_all()
                actions.append(Flush())
            for worker, rows in segment.by_worker.items():
                pending = self._pending[worker]
                pending.parts.append((commit_ts, tuple(rows)))
                pending.dmls += len(rows)
        actions += self._emit_all()
        return actions

    def _add_atomic_chunk(self, commit_ts: int, dmls: tuple[DML, ...], chunk: int) -> list:
        if chunk < 1:
            raise InvalidArgument(f"chunk {chunk} of the transaction at commit_ts {commit_ts}: "
                                  "atomic chunks are numbered from 1")
        actions: list = []
        if self._chunk_worker < 0:  # the first chunk: a barrier, then its worker
            actions += self._emit_all()
            actions.append(Flush())
            self._reset_window()
            self._chunk_worker = (stable_hash(row_keys(dmls[0])[0]) % self.worker_count
                                  if dmls else 0)
        actions.append(Send(self._chunk_worker, ((commit_ts, tuple(dmls), chunk),)))
        return actions

    def last_chunk(self, commit_ts: int, txn: Txn | None, schema_version: int = 0) -> list:
        """The last chunk of a large transaction sent in atomic chunks (module doc): its
        Send (it commits the transaction), registered as the transaction's one part,
        then a Flush; the window starts empty."""
        if self._chunk_worker < 0:
            raise InvalidArgument(f"the last chunk of the transaction at commit_ts {commit_ts} "
                                  "came without its earlier chunks")
        dmls = txn.dmls if txn is not None else ()
        send = Send(self._chunk_worker, ((commit_ts, tuple(dmls)),))
        self._chunk_worker = -1
        self.advancer.register(commit_ts, 1, schema_version=schema_version)
        actions: list = [*self._emit_all(), send, Flush()]
        self._reset_window()
        return actions

    def end_chunks(self) -> list:
        """Before a large transaction's last chunk: a Flush (every chunk committed
        before the last one is registered, so the checkpoint cannot pass the
        transaction early), and the conflict window starts empty."""
        actions: list = [*self._emit_all(), Flush()]
        self._reset_window()
        return actions

    def drain(self) -> list[Send]:
        """Emit every pending batch (the input is momentarily empty)."""
        return self._emit_all()

    @property
    def window_keys(self) -> int:
        """Keys the causality window holds (0 in the other modes): it grows with every
        row until a flush, so a caller feeding one huge transaction in chunks bounds it
        with :meth:`end_chunks` (a flush) now and then."""
        return len(self._causality) if self._causality is not None else 0

    # -- feedback ----------------------------------------------------------------------
    def acked(self, send: Send) -> None:
        """The worker committed ``send``: every part of it counts for the checkpoint."""
        self.advancer.ack_parts(send.parts)

    def acked_ddl(self, ddl: DDL) -> None:
        self.advancer.ack(ddl.commit_ts)

    # -- internals -------------------------------------------------------------------
    def _segments_exactly_once(self, txn: Txn) -> list[_Segment]:
        """One segment: the txn's rows by worker, a function of the txn alone.

        Each row goes to its routing key's worker, unless rows of this txn share a
        key across two workers: then the whole txn goes to its first row's worker
        (so one worker commits it in order, and a replay routes it the same way).
        A key held by another worker in the window means a flush before the txn.
        """
        router = self._router
        workers, keys = route_txn(txn.dmls, self.worker_count, atomic=self.txn_atomic)
        flush = False
        for row_keys_, w in zip(keys, workers, strict=True):
            if router.conflicts_with(row_keys_, w):
                flush = True
                break
        if flush:
            self._reset_window()
        segment = _Segment(flush_before=flush)
        for dml, row_keys_, w in zip(txn.dmls, keys, workers, strict=True):
            router.hold(row_keys_, w)
            segment.by_worker.setdefault(w, []).append(dml)
        return [segment]

    def _segments_atomic(self, txn: Txn) -> list[_Segment]:
        """One segment on one worker: the worker holding the txn's keys (or its first
        key's hash); keys held by several workers mean a flush before the txn."""
        kernel = self._txn_causality
        keys: list[str] = []
        for dml in txn.dmls:
            keys += row_keys(dml)
        worker = kernel.assign(keys)
        flush = worker is CONFLICT
        if flush:
            self._reset_window()
            worker = kernel.assign(keys)
        return [_Segment(by_worker={worker: list(txn.dmls)}, flush_before=flush)]

    def _segments_causality(self, txn: Txn) -> list[_Segment]:
        """TiDB's rule: rows join their keys' group; a row bridging two groups is a
        conflict, flushed mid-transaction (a new segment starts after the flush)."""
        segments = [_Segment()]
        for dml in txn.dmls:
            keys = row_keys(dml)
            worker = self._causality.assign(keys)
            if worker is CONFLICT:
                self._reset_window()
                segments.append(_Segment(flush_before=True))
                worker = self._causality.assign(keys)
            segments[-1].by_worker.setdefault(worker, []).append(dml)
        if not segments[0].by_worker:  # the first row already conflicted
            segments.pop(0)
        return segments

    def _reset_window(self) -> None:
        self.flushes += 1
        if self._router is not None:
            self._router.flushed()
        elif self._txn_causality is not None:
            self._txn_causality.reset()
        else:
            self._causality.reset()

    def _emit(self, worker: int) -> Send:
        pending = self._pending[worker]
        send = Send(worker, tuple(pending.parts))
        self._pending[worker] = _Pending()
        return send

    def _emit_all(self) -> list[Send]:
        return [self._emit(w) for w in range(self.worker_count) if self._pending[w].parts]
