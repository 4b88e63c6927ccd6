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
values when no unique key qualifies (:mod:`tidb_binlog.drainer.causality`).

**Conflicts.**  The kernel remembers, for the current window (since the last
flush), the worker every key of every routed row went to (all unique keys, old and
new images).  A row any of whose keys sits with *another* worker in the window is
a conflict: :meth:`Router.route` returns :data:`CONFLICT` and records nothing; the
caller waits for every worker to commit what it holds, calls :meth:`Router.flushed`,
and routes the row again (now it cannot conflict).  Rows that share a key therefore
never run concurrently on two workers, and the worker of each row never depends on
the window, so a restarted task routes every row exactly as before (the flush
points may differ; the assignment does not).

**In the keeper** (:func:`route_txn`, :func:`route_batch`).  Since the worker of a
row is a function of its transaction, the schema keeper routes rows as it translates
them and hands each worker its rows directly (one payload per worker and merged
batch), while the coordinator receives only a :data:`RoutedTxn` summary per
transaction: which workers it touches, how many rows each, and the keys each holds,
which is all the coordinator needs for conflicts, flushes, DDL order and the
checkpoint.  :func:`route_txn` is the same rule the coordinator's
:class:`~tidb_binlog.drainer.dispatch.Dispatcher` applies to whole DMLs: each row to
its routing key's worker, unless two rows of the transaction share a key across two
workers; then the whole transaction goes to its first row's worker (one worker
commits it, in order; a replay routes it the same way).

Changing ``worker_count`` changes the assignment, so progress rows written under the
old count no longer say what each new worker committed: ``Drainer.start`` reconciles
them first (``MySQLCheckpointStore.check_workers``: after a clean stop the old rows are
dropped; after a crash they are dropped and the replay window runs in safe mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidb_binlog.drainer.causality import CONFLICT, Conflict, row_keys, stable_hash
from tidb_binlog.drainer.dml import DDL, DML, Txn

__all__ = ["Router", "CONFLICT", "RoutedTxn", "route_txn", "route_batch"]

RoutedTxn = tuple[int, int, DDL | None, tuple[tuple[int, int, tuple[str, ...]], ...]]
"""The coordinator's view of one translated transaction: ``(commit_ts, schema_version,
ddl, parts)`` where ``parts`` holds ``(worker, row_count, keys)`` per worker the
transaction touches, in worker order (empty for a DDL or nothing to apply)."""


def route_txn(dmls: Sequence[DML], worker_count: int) -> tuple[list[int], list[list[str]]]:
    """``(worker per row, keys per row)`` of one transaction (see the module docstring)."""
    keys = [row_keys(d) for d in dmls]
    workers = [stable_hash(k[0]) % worker_count for k in keys]
    if len(workers) > 1 and len(set(workers)) > 1:
        owner: dict[str, int] = {}
        for row_keys_, w in zip(keys, workers, strict=True):
            if any(owner.setdefault(key, w) != w for key in row_keys_):
                workers = [workers[0]] * len(workers)
                break
    return workers, keys


def route_batch(translated: Sequence[tuple[int, Txn | None, int]], worker_count: int
                ) -> tuple[list[RoutedTxn], list[list[tuple[int, tuple[DML, ...]]]]]:
    """Split the keeper's output over the workers: ``(summary, payloads)``.

    ``translated`` is :meth:`SchemaKeeperActor.translate`'s ``(commit_ts, txn | None,
    schema_version)`` in commit order; ``summary`` has one :data:`RoutedTxn` per item;
    ``payloads[w]`` is worker ``w``'s parts ``(commit_ts, dmls)`` in commit order, one
    per summary entry whose parts name ``w`` (so the coordinator addresses a run of
    them by index).
    """
    if worker_count < 1:
        raise ValueError(f"worker_count must be >= 1, got {worker_count}")
    summary: list[RoutedTxn] = []
    payloads: list[list[tuple[int, tuple[DML, ...]]]] = [[] for _ in range(worker_count)]
    for commit_ts, txn, version in translated:
        if txn is None or not txn.dmls:
            summary.append((commit_ts, version, txn.ddl if txn is not None else None, ()))
            continue
        dmls = txn.dmls
        if len(dmls) == 1:  # the common shape: no grouping to do
            keys = row_keys(dmls[0])
            w = stable_hash(keys[0]) % worker_count
            payloads[w].append((commit_ts, dmls))
            summary.append((commit_ts, version, None, ((w, 1, tuple(keys)),)))
            continue
        workers, keys = route_txn(dmls, worker_count)
        rows: dict[int, list[DML]] = {}
        held: dict[int, list[str]] = {}
        for dml, w, row_keys_ in zip(dmls, workers, keys, strict=True):
            rows.setdefault(w, []).append(dml)
            held.setdefault(w, []).extend(row_keys_)
        parts: list[Any] = []
        for w in sorted(rows):
            payloads[w].append((commit_ts, tuple(rows[w])))
            parts.append((w, len(rows[w]), tuple(held[w])))
        summary.append((commit_ts, version, None, tuple(parts)))
    return summary, payloads


class Router:
    """The deterministic dispatcher kernel; see the module docstring."""

    def __init__(self, worker_count: int):
        if worker_count < 1:
            raise ValueError(f"worker_count must be >= 1, got {worker_count}")
        self.worker_count = worker_count
        self._worker_of: dict[str, int] = {}
        self.conflicts = 0

    def worker_for_key(self, key: str) -> int:
        """The worker a routing key maps to, independent of any state."""
        return stable_hash(key) % self.worker_count

    def route_keys(self, keys: Sequence[str]) -> int | Conflict:
        """Route a row given its keys (``keys[0]`` is its routing key)."""
        if not keys:
            raise ValueError("a row has at least one key (see row_keys)")
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
