"""An in-memory pump ``Storage`` for unit tests of the pump node and server.

It honours the storage contract the pump node relies on, without disks:

- ``write_binlog`` stores a Prewrite under its start_ts and every other binlog
  under its commit_ts (a Rollback with commit_ts 0 only matches its prewrite).
  Prewrites fail with :class:`DiskSpaceError` when
  ``available_space_bytes() <= stop_write_at_available_space_bytes``.
- Pairing: items are kept in arrival order; ``max_commit_ts`` advances past a
  commit only when every earlier-arrived prewrite is matched by its commit or
  rollback (TiDB's sorter), so served commit_ts are strictly increasing.
- ``pull_commit_binlogs(since)`` returns ``(commit_ts, payload)`` for every commit
  or fake binlog with ``since < commit_ts <= max_commit_ts``, ascending, each
  commit carrying its prewrite's ``prewrite_value``, ``prewrite_key``,
  ``ddl_query``, ``ddl_job_id`` and ``ddl_schema_state``. ``since < gc_ts``
  raises :class:`PurgedError`.
- ``wait_for_commit(above_ts, timeout_s)`` blocks on a condition variable (no
  polling) until ``max_commit_ts > above_ts`` or the timeout passes.

Nothing here is durable; integration tests use ``tidb_binlog.pump.storage``.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque

from tidb_binlog import binlog as bl
from tidb_binlog.errors import DiskSpaceError, PurgedError, StorageError

__all__ = ["MemoryStorage", "memory_storage_factory"]


class MemoryStorage:
    """Dict-backed storage; ``free_bytes`` is settable to exercise the disk guard."""

    def __init__(self, *, stop_write_at_available_space_bytes: int = 0,
                 free_bytes: int = 1 << 40):
        self.stop_write_at_available_space_bytes = stop_write_at_available_space_bytes
        self.free_bytes = free_bytes
        self._cond = threading.Condition()
        self._prewrites: dict[int, bl.Binlog] = {}     # start_ts -> prewrite
        self._commits: dict[int, bl.Binlog] = {}       # commit_ts -> commit or fake
        self._commit_keys: list[int] = []              # sorted commit_ts of _commits
        self._pending: set[int] = set()                # start_ts of unmatched prewrites
        self._arrivals: deque[tuple[str, int]] = deque()  # ("p", start_ts) | ("c", commit_ts)
        self._max_commit_ts = 0
        self._gc_ts = 0
        self._closed = False
        self.writes = 0

    # -- writing -----------------------------------------------------------------
    def write_binlog(self, binlog: bl.Binlog, payload: bytes | None = None) -> None:
        fake = bl.is_fake(binlog)
        if binlog.tp == bl.BinlogType.PREWRITE and \
                self.available_space_bytes() <= self.stop_write_at_available_space_bytes:
            raise DiskSpaceError(
                f"no available space: {self.available_space_bytes()} bytes free, "
                f"stop-write-at-available-space is {self.stop_write_at_available_space_bytes}",
                available_bytes=self.available_space_bytes(),
                threshold_bytes=self.stop_write_at_available_space_bytes)
        stored = bl.Binlog()
        stored.CopyFrom(binlog)
        with self._cond:
            if self._closed:
                raise StorageError("storage is closed")
            self.writes += 1
            if binlog.tp == bl.BinlogType.PREWRITE:
                self._prewrites[binlog.start_ts] = stored
                self._pending.add(binlog.start_ts)
                self._arrivals.append(("p", binlog.start_ts))
            else:
                self._pending.discard(binlog.start_ts)
                if binlog.commit_ts > 0 and (binlog.tp == bl.BinlogType.COMMIT or fake):
                    if binlog.commit_ts not in self._commits:
                        bisect.insort(self._commit_keys, binlog.commit_ts)
                    self._commits[binlog.commit_ts] = stored
                    self._arrivals.append(("c", binlog.commit_ts))
            self._advance()

    def _advance(self) -> None:
        while self._arrivals:
            kind, ts = self._arrivals[0]
            if kind == "p" and ts in self._pending:
                break
            self._arrivals.popleft()
            if kind == "c" and ts > self._max_commit_ts:
                self._max_commit_ts = ts
                self._cond.notify_all()

    # -- reading -----------------------------------------------------------------
    @property
    def max_commit_ts(self) -> int:
        return self._max_commit_ts

    @property
    def gc_ts(self) -> int:
        return self._gc_ts

    def pull_commit_binlogs(self, since_commit_ts: int, max_bytes: int = 4 << 20,
                            max_count: int = 10_000) -> list[tuple[int, bytes]]:
        with self._cond:
            if since_commit_ts < self._gc_ts:
                raise PurgedError(
                    f"binlogs at or below gc_ts {self._gc_ts} were purged; "
                    f"requested from commit_ts {since_commit_ts}",
                    requested_ts=since_commit_ts, gc_ts=self._gc_ts)
            out: list[tuple[int, bytes]] = []
            size = 0
            i = bisect.bisect_right(self._commit_keys, since_commit_ts)
            while i < len(self._commit_keys) and len(out) < max_count:
                ts = self._commit_keys[i]
                if ts > self._max_commit_ts:
                    break
                payload = bl.encode(self._filled(self._commits[ts]))
                if out and size + len(payload) > max_bytes:
                    break
                out.append((ts, payload))
                size += len(payload)
                i += 1
            return out

    def _filled(self, c: bl.Binlog) -> bl.Binlog:
        p = self._prewrites.get(c.start_ts)
        if p is None or bl.is_fake(c):
            return c
        out = bl.Binlog()
        out.CopyFrom(c)
        out.prewrite_key = p.prewrite_key
        out.prewrite_value = p.prewrite_value
        if p.HasField("ddl_query"):
            out.ddl_query = p.ddl_query
        out.ddl_job_id = p.ddl_job_id
        out.ddl_schema_state = p.ddl_schema_state
        return out

    def wait_for_commit(self, above_ts: int, timeout_s: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._max_commit_ts > above_ts or self._closed,
                                timeout=timeout_s)
            return self._max_commit_ts

    def get_binlog(self, ts: int) -> bl.Binlog | None:
        with self._cond:
            return self._commits.get(ts) or self._prewrites.get(ts)

    # -- maintenance ---------------------------------------------------------------
    def gc(self, ts: int) -> None:
        with self._cond:
            if ts <= self._gc_ts:
                return
            self._gc_ts = ts
            for k in [k for k in self._commit_keys if k <= ts]:
                del self._commits[k]
            self._commit_keys = [k for k in self._commit_keys if k > ts]
            for k in [k for k in self._prewrites if k <= ts and k not in self._pending]:
                del self._prewrites[k]

    def all_matched(self) -> bool:
        with self._cond:
            return not self._pending

    def available_space_bytes(self) -> int:
        return self.free_bytes

    def stats(self) -> dict:
        with self._cond:
            return {"max_commit_ts": self._max_commit_ts, "gc_ts": self._gc_ts,
                    "pending_prewrites": len(self._pending), "commits": len(self._commits),
                    "writes": self.writes, "available_bytes": self.free_bytes}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def memory_storage_factory(cfg) -> MemoryStorage:
    """A ``storage_factory`` for ``actors.pump.PumpActor`` in tests (ignores ``cfg``)."""
    return MemoryStorage()
