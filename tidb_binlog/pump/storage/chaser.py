"""The indexing stage behind the value log, with TiDB's *slow chaser* fallback.

Durable groups reach the indexer in log order through a bounded queue
(:meth:`Indexer.forward`, called by the writer thread). One indexer thread turns
each group (and every group queued behind it, up to 1024 records) into entries ``(key_ts, start_ts, commit_ts, tp, pointer, next_pointer)``
and hands them to ``apply(entries, head)``, which writes the LevelDB batch
(entries + headPointer) and feeds the sorter. ``head`` is always the pointer just
past the last applied record.

Slow chaser: if the queue stays full for ``forward_timeout_s`` (LevelDB stalled,
indexer paused), the writer stops forwarding instead of blocking writes: the
chaser is *turned on* and that group is left in the log only. Once the queue is
drained, the indexer re-reads the value log from ``head`` up to the durable end
(*catch-up*), which is the same data in the same order. When a catch-up pass
took less than ``recovery_threshold_s``, it takes the writer's ``io_lock``
(blocking new groups for at most the time to read what arrived meanwhile),
catches up to the very end and *turns off*: the writer forwards in memory again.
Every transition is logged and counted in
``binlog_pump_storage_slow_chaser_count{type=turned_on|catch_up|turned_off}``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from tidb_binlog.pump.storage.vlog import ValueLog
from tidb_binlog.pump.storage.vlog_record import ValuePointer

__all__ = ["Indexer"]

log = logging.getLogger(__name__)

_SCAN_BATCH = 1024
_IDLE_TICK_S = 0.05
_MAX_RETRY_DELAY_S = 2.0


class _Stopped(Exception):
    """Raised inside the indexer thread to leave it after a failure during stop."""


class Indexer:
    """Stage 2/3 of the write pipeline (see the module docstring)."""

    def __init__(self, vlog: ValueLog, apply: Callable, *, head: ValuePointer, io_lock,
                 decode: Callable, metrics, queue_groups: int = 8192,
                 forward_timeout_s: float = 1.0, recovery_threshold_s: float = 1.0,
                 on_idle: Callable | None = None):
        self._vlog = vlog
        self._apply = apply
        self._decode = decode  # payload -> (key_ts, start_ts, commit_ts, tp)
        self._io_lock = io_lock
        self._metrics = metrics
        self._q: queue.Queue = queue.Queue(maxsize=max(1, queue_groups))
        self._forward_timeout_s = forward_timeout_s
        self._recovery_s = recovery_threshold_s
        self._on_idle = on_idle or (lambda: None)
        self.head = head
        self.chasing = False
        self._gate = threading.Event()
        self._gate.set()
        self._stop = False
        self._drain = True
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="pump-indexer", daemon=True)
        self._thread.start()

    # -- writer side -------------------------------------------------------------------
    def forward(self, start: ValuePointer, items: list[tuple]) -> None:
        """Hand a durable group over (writer thread, under io_lock)."""
        if self.chasing:
            return
        try:
            self._q.put((start, items), timeout=self._forward_timeout_s)
        except queue.Full:
            self.chasing = True
            self._metrics.slow_chaser_count.labels("turned_on").inc()
            log.warning("indexing is more than %.1f s behind the value log; slow chaser "
                        "turned on (indexing continues from the log at %s)",
                        self._forward_timeout_s, start)

    # -- test knobs ----------------------------------------------------------------------
    def pause(self) -> None:
        """Stop indexing after the current batch (tests: simulate a stalled LevelDB)."""
        self._gate.clear()

    def resume(self) -> None:
        self._gate.set()

    # -- indexer thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except _Stopped:
            pass

    def _loop(self) -> None:
        while True:
            self._gate.wait()
            if self._stop and not self._drain:
                return
            job = None  # the previous job is done: do not hold it through an idle wait
            try:
                job = self._q.get(timeout=_IDLE_TICK_S)
            except queue.Empty:
                try:
                    if self.chasing:
                        self._catch_up()
                    elif self._stop:
                        return
                    else:
                        self._on_idle()
                except _Stopped:
                    raise
                except Exception:  # a scan or meta write failed: logged, retried next tick
                    log.exception("indexer %s failed; retrying",
                                  "catch-up" if self.chasing else "meta flush")
                    time.sleep(_IDLE_TICK_S)
                continue
            # Groups queued meanwhile join this batch: one LevelDB write and one sorter
            # pass for all of them (they are consecutive in the log, in order).
            entries = self._entries(*job)
            while len(entries) < _SCAN_BATCH:
                try:
                    entries += self._entries(*self._q.get_nowait())
                except queue.Empty:
                    break
            self._applied(entries)

    @staticmethod
    def _entries(start: ValuePointer, items: list[tuple]) -> list[tuple]:
        fid, off = start
        entries = []
        for it in items:
            size = it[0]  # the record's size: the storage forwards sizes, not the bytes
            end = off + (size if isinstance(size, int) else len(size))
            entries.append((it[1], it[2], it[3], it[4], ValuePointer(fid, off),
                            ValuePointer(fid, end)))
            off = end
        return entries

    def _applied(self, entries: list[tuple]) -> None:
        """Apply one batch, retrying (logged) until it succeeds or the indexer stops:
        a failed batch changes nothing, and a restart re-indexes from headPointer."""
        head = entries[-1][5]
        delay_s = 0.05
        while True:
            try:
                self._apply(entries, head)
                break
            except Exception:
                if self._stop:
                    log.exception("indexing up to %s failed while stopping; the next open "
                                  "re-indexes from the value log", head)
                    raise _Stopped from None
                log.exception("indexing %d records up to %s failed; retrying in %.2f s",
                              len(entries), head, delay_s)
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, _MAX_RETRY_DELAY_S)
        with self._progress:
            self.head = head
            self._progress.notify_all()

    def _scan_apply(self, until: ValuePointer) -> None:
        entries = []
        for ptr, nxt, payload in self._vlog.scan(self.head, until):
            entries.append((*self._decode(payload), ptr, nxt))
            if len(entries) >= _SCAN_BATCH:
                self._applied(entries)
                entries = []
                if self._stop and not self._drain:
                    return
        if entries:
            self._applied(entries)
        with self._progress:
            self.head = max(self.head, until)
            self._progress.notify_all()

    def _catch_up(self) -> None:
        t0 = time.perf_counter()
        self._scan_apply(self._vlog.end())
        self._metrics.slow_chaser_count.labels("catch_up").inc()
        if time.perf_counter() - t0 >= self._recovery_s:
            return
        with self._io_lock:
            self._scan_apply(self._vlog.end())
            self.chasing = False
        self._metrics.slow_chaser_count.labels("turned_off").inc()
        log.info("slow chaser caught up with the value log at %s and turned off", self.head)

    # -- progress ------------------------------------------------------------------------
    def wait_caught_up(self, timeout_s: float) -> bool:
        """Block until everything durable in the log is applied (or the timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while self.head < self._vlog.end():
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._progress.wait(min(left, 0.1))
        return True

    def stop(self, drain: bool = True) -> None:
        """Stop the thread; with ``drain`` first apply everything queued or in the log."""
        self._drain = drain  # the loop drains the queue before it looks at the stop flag
        self._stop = True
        self._gate.set()
        self._thread.join()
        if drain and self.head < self._vlog.end():
            try:
                self._scan_apply(self._vlog.end())
            except _Stopped:
                pass
