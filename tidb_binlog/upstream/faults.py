"""Fault knobs: make the upstream fail the way a TiDB node can, for tests.

Each knob is a count of the next transactions it hits (``-1`` = every one). What a
pump then sees is what it would see from TiDB:

- ``drop_commit_binlog``: the transaction commits but its Commit binlog is never
  sent (TiDB crashed after COMMIT). The pump holds the Prewrite until
  ``max-txn-timeout`` and resolves it with ``UpstreamMeta.txn_status`` → committed.
- ``crash_after_prewrite``: the Prewrite binlog is written, then the connection is
  dropped without COMMIT (TiDB died between prewrite and commit). MariaDB rolls the
  transaction back; no Commit/Rollback binlog is sent; ``txn_status`` →
  rolled back. The call raises :class:`SimulatedCrash`.
- ``fail_prewrite``: writing the Prewrite binlog fails; the transaction is rolled
  back (it must not commit) and, as TiDB does after a failed 2PC, a Rollback binlog
  is sent. The call raises :class:`~tidb_binlog.errors.PumpUnavailable` (retryable).
  A DDL round retries it (see ``ddl.py``), so each hit costs the round one attempt.
- ``ddl_round_conflict``: a DDL round's catalog transaction fails as a deadlock
  victim does (MariaDB error 1213, before its Prewrite); counted per attempt. The
  round is retried; when every attempt fails (``-1``) the DDL is undone in MariaDB
  where an inverse exists, and :class:`~tidb_binlog.errors.DDLNotRecorded` raised.
"""

from __future__ import annotations

import threading

from tidb_binlog.errors import InvalidArgument, UpstreamError

__all__ = ["Faults", "SimulatedCrash", "KNOBS"]

KNOBS = ("drop_commit_binlog", "crash_after_prewrite", "fail_prewrite", "ddl_round_conflict")


class SimulatedCrash(UpstreamError):
    """The upstream 'crashed' on purpose (``crash_after_prewrite``)."""


class Faults:
    """Thread-safe counters for the knobs above."""

    def __init__(self, **counts: int):
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KNOBS, 0)
        self.arm(**counts)

    def arm(self, **counts: int) -> Faults:
        unknown = set(counts) - set(KNOBS)
        if unknown:
            raise InvalidArgument(f"unknown fault knob(s) {sorted(unknown)}; known: {list(KNOBS)}")
        with self._lock:
            self._counts.update(counts)
        return self

    def clear(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(KNOBS, 0)

    def take(self, knob: str) -> bool:
        """True if ``knob`` fires for this transaction (and count it down)."""
        with self._lock:
            n = self._counts[knob]
            if n == 0:
                return False
            if n > 0:
                self._counts[knob] = n - 1
            return True

    def __repr__(self) -> str:
        return f"Faults({self._counts})"
