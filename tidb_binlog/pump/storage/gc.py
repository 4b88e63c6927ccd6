"""Garbage collection and the disk-space guard of the pump storage.

:class:`GarbageCollector` — ``request(ts, max_commit_ts)``:

- ignored when ``ts <= gc_ts`` (GC never moves back) or ``ts >= max_commit_ts``
  (TiDB's rule: never collect what is not yet served);
- otherwise persists ``!binlog!gcts = ts`` first (synced, so a pull below it is
  refused even after a crash), then, on one background thread, deletes the
  sealed value-log files whose footer max ts is ``<= ts - gc_margin_s`` and the
  index keys at or below that same bound, and finally publishes
  ``done_gc_ts = ts``. The active file is never deleted; the margin keeps the
  last ``gc_margin_s`` (600 s) of binlogs below ``gc_ts`` on disk.

:class:`DiskGuard` — ``check()`` raises :class:`~tidb_binlog.errors.DiskSpaceError`
once the data dir's free space is at or below ``stop_write_at_available_space_bytes``
(the storage calls it for every Prewrite: Commits and Rollbacks of stored Prewrites
are small and must get in, or those Prewrites would stall every later commit;
``refusal()`` is the same message for ``/status``); the free space comes from
``statvfs``, polled at most every ``poll_s`` seconds, and is exported as
``binlog_pump_storage_storage_size_bytes{type=available|capacity}``.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from tidb_binlog.errors import DiskSpaceError
from tidb_binlog.pump.storage import index as ix
from tidb_binlog.tso import compose, extract_physical

__all__ = ["GarbageCollector", "DiskGuard"]

log = logging.getLogger(__name__)

SPACE_POLL_S = 3.0


class GarbageCollector:
    """Persisted gc_ts plus the background deleter (see the module docstring)."""

    def __init__(self, index, vlog, metrics, *, gc_ts: int, gc_margin_s: float):
        self._index = index
        self._vlog = vlog
        self._metrics = metrics
        self._margin_s = gc_margin_s
        self.gc_ts = gc_ts            # persisted before any deletion
        self.done_gc_ts = gc_ts       # deletions finished up to here
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def request(self, ts: int, max_commit_ts: int, *, wait: bool = False) -> None:
        """Move gc_ts to ``ts`` and delete below it (in the background unless ``wait``)."""
        with self._lock:
            if ts <= self.gc_ts or self._closed:
                return
            if ts >= max_commit_ts:
                log.warning("gc ts %d is not below max_commit_ts %d; ignored", ts, max_commit_ts)
                return
            self._index.put_int(ix.GC_TS_KEY, ts, sync=True)
            self.gc_ts = ts
            self._metrics.gc_ts.set(extract_physical(ts))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._worker, daemon=True, name="pump-gc")
                self._thread.start()
            thread = self._thread
        if wait:
            thread.join()

    def close(self) -> None:
        """Stop after the deletion in progress (a restart resumes from the persisted gc_ts
        at the next request)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join()

    def _worker(self) -> None:
        margin_ts = compose(int(self._margin_s * 1000), 0)
        while True:
            with self._lock:
                target = self.gc_ts
                if target <= self.done_gc_ts or self._closed:
                    return
            upto = target - margin_ts
            if upto > 0:
                fids = self._vlog.delete_sealed_upto(upto)
                n = self._index.delete_upto(upto)
                self._metrics.deleted_kv.inc(n)
                log.info("gc to ts %d (margin %.0f s): deleted value-log files %s and %d index "
                         "keys", target, self._margin_s, fids, n)
            with self._lock:
                self.done_gc_ts = target
            self._metrics.done_gc_ts.set(extract_physical(target))


class DiskGuard:
    """Free-space check of one directory (see the module docstring)."""

    def __init__(self, path, stop_write_at_available_space_bytes: int, metrics, *,
                 poll_s: float = SPACE_POLL_S, clock=time.monotonic):
        self._path = path
        self.limit_bytes = stop_write_at_available_space_bytes
        self._metrics = metrics
        self._poll_s = poll_s
        self._clock = clock
        self._at = None
        self.available = 0            # bytes, as of the last poll
        self.capacity = 0             # bytes, as of the last poll

    def available_bytes(self) -> int:
        """Free bytes of the directory's file system (polled at most every ``poll_s``)."""
        now = self._clock()
        if self._at is None or now - self._at >= self._poll_s:
            st = os.statvfs(self._path)
            self.available = st.f_bavail * st.f_frsize
            self.capacity = st.f_blocks * st.f_frsize
            self._at = now
            self._metrics.storage_size_bytes.labels("available").set(self.available)
            self._metrics.storage_size_bytes.labels("capacity").set(self.capacity)
        return self.available

    def refusal(self) -> str:
        """The refusal message while free space is at or below the limit, else ""."""
        avail = self.available_bytes()
        if avail > self.limit_bytes:
            return ""
        return (f"no available space: available {avail} bytes, stop-write-at-available-space "
                f"{self.limit_bytes} bytes in {self._path}; free space or lower the option "
                "(new transactions' Prewrites are refused; Commits and Rollbacks of stored "
                "ones are still accepted)")

    def check(self) -> None:
        """Raise DiskSpaceError when free space is at or below the limit."""
        msg = self.refusal()
        if msg:
            raise DiskSpaceError(msg, available_bytes=self.available,
                                 threshold_bytes=self.limit_bytes)
