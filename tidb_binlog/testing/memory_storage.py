"""An in-memory pump storage for unit tests of the pump node and server.

:class:`MemoryStorage` implements
:class:`~tidb_binlog.pump.storage.protocol.PumpStorage` (its contract is in that
module's docstring; ``tests/unit/test_pump_storage_protocol.py`` runs it over this and
the real storage alike), without disks:

- ``write_binlog`` checks the binlog as the real storage does (``ProtocolError``), then
  stores a Prewrite under its start_ts and every other binlog under its commit_ts (a
  Rollback with commit_ts 0 only matches its prewrite). Prewrites fail with
  :class:`DiskSpaceError` when
  ``available_space_bytes() <= stop_write_at_available_space_bytes`` (``free_bytes``
  is settable). A write is applied before it returns, so ``flush()`` has nothing to
  wait for.
- The async writes (``write_binlog_async``, ``write_binlog_file_async``) write at once
  and return a future that is already done; the file write reads the binlog from the
  file range (this storage keeps binlogs, not payloads: ``stores_payload`` is False).
- Pairing: items are kept in arrival order; ``max_commit_ts`` advances past a
  commit only when every earlier-arrived prewrite is matched by its commit or
  rollback (TiDB's sorter), so served commit_ts are strictly increasing.
- ``pull_commits`` serves every commit or fake binlog with ``since < commit_ts <=
  max_commit_ts``, ascending, each commit carrying its prewrite's ``prewrite_value``,
  ``prewrite_key``, ``ddl_query``, ``ddl_job_id`` and ``ddl_schema_state`` (a commit
  whose prewrite is not here is skipped), references included (``ref_above``), built
  from the dict; ``read_payload`` slices the payload a pull serves.
- ``dir`` is None: no data directory (the streaming write spills to the temp dir).

Nothing here is durable; integration tests use ``tidb_binlog.pump.storage``.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef
from tidb_binlog.errors import DiskSpaceError, ProtocolError, PurgedError, StorageError
from tidb_binlog.pump.storage.protocol import REF_ITEM_BYTES

if TYPE_CHECKING:
    from tidb_binlog.pump.storage.vlog_segment import FileRange

__all__ = ["MemoryStorage", "memory_storage_factory"]

_PREWRITE, _COMMIT, _ROLLBACK = bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT, bl.BinlogType.ROLLBACK


def _done_future() -> asyncio.Future[None]:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut


class MemoryStorage:
    """Dict-backed storage; ``free_bytes`` is settable to exercise the disk guard."""

    dir: Path | None = None
    stores_payload = False

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
    def write_binlog(self, binlog: bl.Binlog, payload: bytes | memoryview | None = None
                     ) -> None:
        """Store ``binlog`` (``payload`` is not needed: ``stores_payload`` is False)."""
        tp, start_ts, commit_ts = binlog.tp, binlog.start_ts, binlog.commit_ts
        if tp not in (_PREWRITE, _COMMIT, _ROLLBACK):
            raise ProtocolError(f"binlog type {tp} (start_ts {start_ts}) is not stored by a pump; "
                                "only Prewrite, Commit and Rollback are")
        if start_ts <= 0 or (tp == _COMMIT and commit_ts <= start_ts):
            raise ProtocolError(f"binlog type {tp} with start_ts {start_ts}, commit_ts {commit_ts} "
                                "is not storable: start_ts must be positive and a Commit's "
                                "commit_ts above it (drop probes before the storage)")
        if tp == _PREWRITE:
            refusal = self.disk_guard_message()
            if refusal:
                raise DiskSpaceError(refusal, available_bytes=self.available_space_bytes(),
                                     threshold_bytes=self.stop_write_at_available_space_bytes)
        stored = bl.Binlog()
        stored.CopyFrom(binlog)
        with self._cond:
            if self._closed:
                raise StorageError("storage is closed")
            self.writes += 1
            if tp == _PREWRITE:
                self._prewrites[start_ts] = stored
                self._pending.add(start_ts)
                self._arrivals.append(("p", start_ts))
            else:
                self._pending.discard(start_ts)
                if commit_ts > 0 and (tp == _COMMIT or bl.is_fake(binlog)):
                    if commit_ts not in self._commits:
                        bisect.insort(self._commit_keys, commit_ts)
                    self._commits[commit_ts] = stored
                    self._arrivals.append(("c", commit_ts))
            self._advance()

    def write_binlog_async(self, binlog: bl.Binlog, payload: bytes | memoryview | None = None
                           ) -> asyncio.Future[None]:
        """:meth:`write_binlog` now; a future of the running loop, already done."""
        self.write_binlog(binlog, payload)
        return _done_future()

    def write_binlog_file_async(self, binlog: bl.Binlog, source: FileRange, crc: int
                                ) -> asyncio.Future[None]:
        """The binlog serialized in ``source`` (read and decoded: this storage keeps
        whole binlogs), written now; a future of the running loop, already done."""
        whole = bl.decode(os.pread(source.owner.fileno(), source.length, source.offset))
        return self.write_binlog_async(whole)

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

    def pull_commits(self, since_commit_ts: int, max_bytes: int = 4 << 20,
                     max_count: int = 10_000, *, ref_above: int = 0, node_id: str = ""
                     ) -> tuple[list[tuple[int, bytes | BinlogRef]], int]:
        with self._cond:
            self._check_open()
            if since_commit_ts < self._gc_ts:
                raise PurgedError(
                    f"binlogs at or below gc_ts {self._gc_ts} were purged; "
                    f"requested from commit_ts {since_commit_ts}",
                    requested_ts=since_commit_ts, gc_ts=self._gc_ts)
            out: list[tuple[int, bytes | BinlogRef]] = []
            size = 0
            position = upto = self._max_commit_ts
            i = bisect.bisect_right(self._commit_keys, since_commit_ts)
            while i < len(self._commit_keys):
                ts = self._commit_keys[i]
                i += 1
                if ts > upto:
                    break
                c = self._commits[ts]
                payload = self._served(c)
                if payload is None:
                    continue  # an orphan commit: skipped, as the real storage does
                if ref_above > 0 and c.tp == _COMMIT and len(payload) >= ref_above:
                    if out and size + REF_ITEM_BYTES > max_bytes:
                        position = out[-1][0]
                        break
                    out.append((ts, BinlogRef(node_id, ts, c.start_ts, len(payload))))
                    position = ts
                    break
                if out and size + len(payload) > max_bytes:
                    position = out[-1][0]
                    break
                out.append((ts, payload))
                size += len(payload)
                if len(out) >= max_count:
                    position = ts
                    break
            return out, position

    def pull_commit_binlogs(self, since_commit_ts: int, max_bytes: int = 4 << 20,
                            max_count: int = 10_000) -> list[tuple[int, bytes]]:
        return self.pull_commits(since_commit_ts, max_bytes, max_count)[0]

    def read_payload(self, commit_ts: int, offset: int, size: int) -> bytes | bytearray:
        if offset < 0 or size < 0:
            raise ProtocolError(f"read of {size} bytes at offset {offset} of the binlog at "
                                f"commit_ts {commit_ts}: offset and size must be >= 0")
        with self._cond:
            self._check_open()
            if commit_ts <= self._gc_ts:
                raise PurgedError(
                    f"the binlog at commit_ts {commit_ts} was purged by GC (gc_ts "
                    f"{self._gc_ts})", requested_ts=commit_ts, gc_ts=self._gc_ts)
            c = self._commits.get(commit_ts)
            payload = self._served(c) if c is not None else None
        if payload is None:
            raise StorageError(f"no binlog is served at commit_ts {commit_ts}: pull again "
                               "from the checkpoint")
        if offset + size > len(payload):
            raise ProtocolError(f"read of {size} bytes at offset {offset} is past the end of "
                                f"the binlog at commit_ts {commit_ts} ({len(payload)} bytes)")
        return payload[offset:offset + size]

    def _served(self, c: bl.Binlog) -> bytes | None:
        """The payload a pull serves for commit or fake ``c``; None for an orphan."""
        if bl.is_fake(c):
            return bl.encode(c)
        p = self._prewrites.get(c.start_ts)
        if p is None:
            return None
        out = bl.Binlog()
        out.CopyFrom(c)
        out.prewrite_key = p.prewrite_key
        out.prewrite_value = p.prewrite_value
        if p.HasField("ddl_query"):
            out.ddl_query = p.ddl_query
        out.ddl_job_id = p.ddl_job_id
        out.ddl_schema_state = p.ddl_schema_state
        return bl.encode(out)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("storage is closed")

    def wait_for_commit(self, above_ts: int, timeout_s: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._max_commit_ts > above_ts or self._closed,
                                timeout=timeout_s)
            return self._max_commit_ts

    def get_binlog(self, ts: int) -> bl.Binlog | None:
        with self._cond:
            return self._commits.get(ts) or self._prewrites.get(ts)

    def all_matched(self) -> bool:
        with self._cond:
            return not self._pending

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Every write was applied before it returned: nothing to wait for."""
        return True

    # -- maintenance ---------------------------------------------------------------
    def gc(self, ts: int, *, wait: bool = False) -> None:
        """Drop commits at or below ``ts`` and the matched prewrites no commit above it
        needs (always before returning, whatever ``wait``)."""
        with self._cond:
            if ts <= self._gc_ts or ts >= self._max_commit_ts:
                return
            self._gc_ts = ts
            for k in [k for k in self._commit_keys if k <= ts]:
                del self._commits[k]
            self._commit_keys = [k for k in self._commit_keys if k > ts]
            needed = {c.start_ts for c in self._commits.values()}
            for k in [k for k in self._prewrites
                      if k <= ts and k not in self._pending and k not in needed]:
                del self._prewrites[k]

    def available_space_bytes(self) -> int:
        return self.free_bytes

    def disk_guard_message(self) -> str:
        avail, limit = self.available_space_bytes(), self.stop_write_at_available_space_bytes
        if avail > limit:
            return ""
        return (f"no available space: available {avail} bytes, stop-write-at-available-space "
                f"{limit} bytes in the in-memory storage; raise free_bytes or lower the option "
                "(new transactions' Prewrites are refused; Commits and Rollbacks of stored "
                "ones are still accepted)")

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
