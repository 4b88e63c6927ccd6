"""Pairing kernel: advance max_commit_ts only past fully matched history.

Step-driven, pure (no threads, no I/O, no clock of its own). The storage pushes
every stored binlog in value-log order and then calls :meth:`Sorter.pop_ready`.

Specification (TiDB Binlog's sorter, ``pump/storage/sorter.go``):

- Items are kept in arrival order. A Prewrite ``P(s)`` is *waiting* from its
  push until a Commit or Rollback with the same start_ts is pushed, or until
  :meth:`Sorter.resolve` settles it.
- :meth:`pop_ready` pops items from the head while the head is not a waiting
  prewrite. A popped Commit or fake binlog (``start_ts == commit_ts``) whose
  commit_ts is above the current watermark raises ``max_commit_ts`` to it.
  Rollbacks (commit_ts 0) and commits at or below the watermark only pop.
- Hence ``max_commit_ts`` is non-decreasing, and when it reaches ``M`` every
  prewrite that arrived before the commit carrying ``M`` has been matched. A
  transaction gets its commit_ts after its prewrite was stored, so every commit
  with ``commit_ts <= M`` has already arrived: the set of commits a reader sees
  at or below the watermark never grows afterwards, which is what lets the
  drainer merge pumps by commit_ts. The kernel never emits a value at or below
  one it already emitted.
- :meth:`pending` lists waiting prewrites with their age (``now_s`` minus the
  ``now_s`` given at push) so the storage can ask the resolver about old ones.
  ``resolve(s, commit_ts)`` counts ``P(s)`` as committed at ``commit_ts``
  (popped as if it were that commit); ``resolve(s, None)`` drops it (rolled back).
- Each item carries an opaque ``pos`` (the storage passes the value-log pointer
  just past the record); :attr:`handle_pos` is the ``pos`` of the last popped
  item: everything up to it is settled, so a restart re-feeds from there.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from tidb_binlog.binlog import BinlogType
from tidb_binlog.errors import ProtocolError

__all__ = ["PREWRITE", "COMMIT", "ROLLBACK", "PendingPrewrite", "Sorter"]

PREWRITE = BinlogType.PREWRITE
COMMIT = BinlogType.COMMIT
ROLLBACK = BinlogType.ROLLBACK


class PendingPrewrite(NamedTuple):
    start_ts: int
    age_s: float


class Sorter:
    """Pairs prewrites with commits; see the module docstring for the rules."""

    def __init__(self, max_commit_ts: int = 0, handle_pos=None):
        self._items: deque[tuple[int, int, int, object]] = deque()  # (start, commit, tp, pos)
        self._waiting: dict[int, float] = {}   # start_ts -> push time of the prewrite
        self._resolved: dict[int, int] = {}    # start_ts -> commit_ts given by resolve()
        self._max_commit_ts = max_commit_ts
        self._handle_pos = handle_pos

    @property
    def max_commit_ts(self) -> int:
        return self._max_commit_ts

    @property
    def handle_pos(self):
        return self._handle_pos

    def __len__(self) -> int:
        return len(self._items)

    def push(self, start_ts: int, commit_ts: int, tp: int, now_s: float = 0.0,
             pos=None) -> None:
        """Add one stored binlog (in storage order)."""
        if tp == PREWRITE:
            self._waiting.setdefault(start_ts, now_s)
            self._items.append((start_ts, 0, PREWRITE, pos))
            return
        if tp not in (COMMIT, ROLLBACK):
            raise ProtocolError(f"sorter: unsupported binlog type {tp} (start_ts {start_ts})")
        self._waiting.pop(start_ts, None)
        self._items.append((start_ts, commit_ts, tp, pos))

    def pop_ready(self) -> int | None:
        """Pop every settled head item; return the new max_commit_ts if it rose."""
        items, waiting = self._items, self._waiting
        start_max = self._max_commit_ts
        top = start_max
        while items:
            start_ts, commit_ts, tp, pos = items[0]
            if tp == PREWRITE:
                if start_ts in waiting:
                    break
                commit_ts = self._resolved.pop(start_ts, 0)
            if commit_ts > top:
                top = commit_ts
            items.popleft()
            self._handle_pos = pos
        if top > start_max:
            self._max_commit_ts = top
            return top
        return None

    def pending(self, now_s: float) -> list[PendingPrewrite]:
        """Waiting prewrites, oldest first, with their age at ``now_s``."""
        return sorted((PendingPrewrite(s, now_s - t) for s, t in self._waiting.items()),
                      key=lambda p: -p.age_s)

    def resolve(self, start_ts: int, commit_ts: int | None) -> bool:
        """Settle a waiting prewrite: committed at ``commit_ts``, or dropped if None.

        Returns False if ``start_ts`` was not waiting (already matched).
        """
        if self._waiting.pop(start_ts, None) is None:
            return False
        if commit_ts:
            self._resolved[start_ts] = commit_ts
        return True

    def all_matched(self) -> bool:
        """True when no prewrite waits for its commit."""
        return not self._waiting

    def waiting_count(self) -> int:
        return len(self._waiting)
