"""Deterministic routing of rows to workers, for exactly-once apply.

In exactly-once mode every worker commits its own progress (the last commit_ts it
applied) in the same downstream transaction as its rows; after a crash the replay
skips, per worker, what that worker already committed.  That is only sound if a
replayed row lands on the same worker as before, whatever happened before it in
the stream.  :class:`Causality` cannot promise that (a row joins whatever group an
earlier row founded), so exactly-once uses this kernel instead.

**Rule.**  The worker of a row is a function of the row alone::

    worker(row) = stable_hash(routing_key(row)) % worker_count

where ``routing_key`` is the row's first key: its first non-NULL unique key (the
primary key first), table-qualified, on the new image, or the CRC32 of all its
values when no unique key qualifies (:mod:`tidb_binlog.drainer.apply.causality`).

**Conflicts.**  The kernel remembers, for the current window (since the last
flush), the worker every key of every routed row went to (all unique keys, old and
new images).  A row any of whose keys sits with *another* worker in the window is
a conflict: :meth:`Router.route` returns :data:`CONFLICT` and records nothing; the
caller waits for every worker to commit what it holds, calls :meth:`Router.flushed`,
and routes the row again (now it cannot conflict).  Rows that share a key therefore
never run concurrently on two workers, and the worker of each row never depends on
the window, so a restarted task routes every row exactly as before (the flush
points may differ; the assignment does not).

**In the keeper** (:class:`BatchPlanner`).  Since the worker of a row is a function
of its transaction, the schema keeper routes rows as it translates them, keeps the
window itself and decides the flush points: :meth:`BatchPlanner.plan` turns a merged
batch into one payload per worker (its parts ``(commit_ts, dmls)`` in commit order)
and a short *plan* of :data:`PlanStep` for the coordinator: runs of parts between
flush points (how many parts each worker has in the run, the run's last commit_ts,
its highest schema version and row count), ``FLUSH`` where a transaction's keys sit
with another worker in the window, and each DDL (a barrier too).  The coordinator
carries the plan out step by step (one call per worker and run, a flush = wait for
every worker) and tracks the checkpoint per run, so nothing on its side is per row
or per transaction.  The window lives across batches and is reset exactly where the
coordinator waits for every worker (a ``FLUSH`` or a DDL) and when the pipeline
resets; extra waits on the coordinator's side only make it more conservative.
:func:`route_txn` is the same rule the coordinator's
:class:`~tidb_binlog.drainer.apply.dispatch.Dispatcher` applies to whole DMLs: each row to
its routing key's worker, unless two rows of the transaction share a key across two
workers; then the whole transaction goes to its first row's worker (one worker
commits it, in order; a replay routes it the same way).

**Transaction-atomic** (``[syncer] txn-atomic``, ``atomic=True`` /
``BatchPlanner(txn_atomic=True)``): every transaction goes whole to its first row's
worker, ``stable_hash(routing_key(first row)) % worker_count``, still a function of the
transaction alone, so exactly-once's per-worker progress stays sound; the loader then
commits it in one downstream transaction (several whole ones may share one, up to
``txn-batch``), together with that worker's progress row. A transaction whose keys sit
with another worker in the window is a ``FLUSH`` as above. (Without exactly-once the
dispatcher joins the worker that holds the keys instead:
:class:`~tidb_binlog.drainer.apply.causality.TxnCausality`.)

Changing ``worker_count`` changes the assignment, so progress rows written under the
old count no longer say what each new worker committed: ``Drainer.start`` reconciles
them first (``MySQLCheckpointStore.check_workers``: after a clean stop the old rows are
dropped; after a crash they are dropped and the replay window runs in safe mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

from tidb_binlog.drainer.apply.causality import CONFLICT, Conflict, row_keys, stable_hash
from tidb_binlog.drainer.apply.dml import DDL, DML, Txn
from tidb_binlog.errors import InvalidArgument

__all__ = ["Router", "CONFLICT", "route_txn", "BatchPlanner", "PlanStep", "StepKind",
           "RowsStep", "FlushStep", "DdlStep", "ROWS", "FLUSH", "RUN_DDL"]

class StepKind(IntEnum):
    """What a :data:`PlanStep` asks the coordinator to do (its first field)."""

    ROWS = 0
    FLUSH = 1
    RUN_DDL = 2


ROWS, FLUSH, RUN_DDL = StepKind.ROWS, StepKind.FLUSH, StepKind.RUN_DDL


class RowsStep(NamedTuple):
    """Hand each worker ``w`` the next ``counts[w]`` parts of its payload. The run covers
    every commit_ts up to ``end_ts`` (fake binlogs and filtered transactions included:
    they have no parts), its transactions hold ``rows`` row changes, and
    ``schema_version`` is the highest of them. All counts may be 0 (only fakes): the
    checkpoint still passes ``end_ts``."""

    kind: int
    end_ts: int
    schema_version: int
    counts: tuple[int, ...]
    rows: int


class FlushStep(NamedTuple):
    """Wait until every worker committed what it was handed (a conflict)."""

    kind: int


class DdlStep(NamedTuple):
    """Wait for every worker, then run the DDL alone."""

    kind: int
    commit_ts: int
    schema_version: int
    ddl: DDL


PlanStep = RowsStep | FlushStep | DdlStep
"""One step of a :meth:`BatchPlanner.plan`, carried out in order by the coordinator.
Each is a named tuple whose first field is its :class:`StepKind`, so it compares equal
to the plain tuple ``(kind, ...)`` and unpacks like one; read the fields by name."""

_FLUSH_STEP = FlushStep(FLUSH)


def route_txn(dmls: Sequence[DML], worker_count: int, *, atomic: bool = False
              ) -> tuple[list[int], list[list[str]]]:
    """``(worker per row, keys per row)`` of one transaction (see the module docstring);
    ``atomic``: every row to the first row's worker (transaction-atomic mode)."""
    keys = [row_keys(d) for d in dmls]
    if atomic:
        return [stable_hash(keys[0][0]) % worker_count] * len(keys), keys
    workers = [stable_hash(k[0]) % worker_count for k in keys]
    if len(workers) > 1 and len(set(workers)) > 1:
        owner: dict[str, int] = {}
        for row_keys_, w in zip(keys, workers, strict=True):
            if any(owner.setdefault(key, w) != w for key in row_keys_):
                workers = [workers[0]] * len(workers)
                break
    return workers, keys


class BatchPlanner:
    """Routes merged batches in the schema keeper and plans the flushes (see the module
    docstring, *In the keeper*). One per replication task and worker count; the window
    lives across :meth:`plan` calls until :meth:`reset`. ``txn_atomic``: each transaction
    goes whole to one worker (*Transaction-atomic* in the module docstring)."""

    def __init__(self, worker_count: int, *, txn_atomic: bool = False):
        if worker_count < 1:
            raise InvalidArgument(f"worker_count must be >= 1, got {worker_count}")
        self.worker_count = worker_count
        self.txn_atomic = txn_atomic
        self._window = Router(worker_count)
        self.flushes = 0  # FLUSH steps planned (conflicts), DDLs not counted

    def reset(self) -> None:
        """The pipeline restarts: nothing is held by any worker."""
        self._window.flushed()

    def plan(self, translated: Sequence[tuple[int, Txn | None, int]]
             ) -> tuple[list[PlanStep], list[list[tuple[int, tuple[DML, ...]]]]]:
        """``(steps, payloads)`` of the keeper's output ``(commit_ts, txn | None,
        schema_version)`` in commit order: ``payloads[w]`` is worker ``w``'s parts in
        commit order, handed out run by run as ``steps`` say."""
        workers = self.worker_count
        window = self._window
        payloads: list[list[tuple[int, tuple[DML, ...]]]] = [[] for _ in range(workers)]
        steps: list[PlanStep] = []
        counts = [0] * workers
        rows = 0
        end_ts = None
        version = 0

        def close_run() -> None:
            nonlocal counts, rows, end_ts, version
            if end_ts is not None:
                steps.append(RowsStep(ROWS, end_ts, version, tuple(counts), rows))
                counts, rows, end_ts, version = [0] * workers, 0, None, 0

        for commit_ts, txn, txn_version in translated:
            if txn is None or (txn.ddl is None and not txn.dmls):
                end_ts = commit_ts
                version = max(version, txn_version)
                continue
            if txn.ddl is not None:
                close_run()
                steps.append(DdlStep(RUN_DDL, commit_ts, txn_version, txn.ddl))
                window.flushed()
                continue
            dmls = txn.dmls
            if len(dmls) == 1:  # the common shape: no grouping to do
                keys = row_keys(dmls[0])
                w = stable_hash(keys[0]) % workers
                if window.conflicts_with(keys, w):
                    close_run()
                    steps.append(_FLUSH_STEP)
                    self.flushes += 1
                    window.flushed()
                window.hold(keys, w)
                payloads[w].append((commit_ts, dmls))
                counts[w] += 1
                rows += 1
            else:
                owners, keys = route_txn(dmls, workers, atomic=self.txn_atomic)
                for row_keys_, w in zip(keys, owners, strict=True):
                    if window.conflicts_with(row_keys_, w):
                        close_run()
                        steps.append(_FLUSH_STEP)
                        self.flushes += 1
                        window.flushed()
                        break
                by_worker: dict[int, list[DML]] = {}
                for dml, w, row_keys_ in zip(dmls, owners, keys, strict=True):
                    by_worker.setdefault(w, []).append(dml)
                    window.hold(row_keys_, w)
                for w in sorted(by_worker):
                    payloads[w].append((commit_ts, tuple(by_worker[w])))
                    counts[w] += 1
                rows += len(dmls)
            end_ts = commit_ts
            version = max(version, txn_version)
        close_run()
        return steps, payloads


class Router:
    """The deterministic dispatcher kernel; see the module docstring."""

    def __init__(self, worker_count: int):
        if worker_count < 1:
            raise InvalidArgument(f"worker_count must be >= 1, got {worker_count}")
        self.worker_count = worker_count
        self._worker_of: dict[str, int] = {}
        self.conflicts = 0

    def worker_for_key(self, key: str) -> int:
        """The worker a routing key maps to, independent of any state."""
        return stable_hash(key) % self.worker_count

    def route_keys(self, keys: Sequence[str]) -> int | Conflict:
        """Route a row given its keys (``keys[0]`` is its routing key)."""
        if not keys:
            raise InvalidArgument("a row has at least one key (see row_keys)")
        worker = self.worker_for_key(keys[0])
        window = self._worker_of
        for key in keys:
            held = window.get(key)
            if held is not None and held != worker:
                self.conflicts += 1
                return CONFLICT
        for key in keys:
            window[key] = worker
        return worker

    def route(self, dml: DML) -> int | Conflict:
        """The row's worker, or CONFLICT (flush every worker, call flushed(), retry)."""
        return self.route_keys(row_keys(dml))

    def conflicts_with(self, keys: Sequence[str], worker: int) -> bool:
        """Whether any of ``keys`` sits with a worker other than ``worker`` in the window."""
        window = self._worker_of
        for key in keys:
            held = window.get(key)
            if held is not None and held != worker:
                self.conflicts += 1
                return True
        return False

    def hold(self, keys: Sequence[str], worker: int) -> None:
        """Record that ``worker`` holds ``keys`` until the next flush."""
        for key in keys:
            self._worker_of[key] = worker

    def flushed(self) -> None:
        """Every worker has committed what it held: start a new window."""
        self._worker_of.clear()

    def __len__(self) -> int:
        return len(self._worker_of)
