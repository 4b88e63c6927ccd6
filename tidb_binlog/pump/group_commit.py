"""Group commit: many concurrent writers, one write + one fdatasync per group.

Callers hand :meth:`GroupCommitter.submit` a pre-framed record; it joins the
newest open *group* (a new group opens once the newest holds ``max_group_bytes``,
1 MiB like TiDB's) and blocks on that group's event. One writer thread takes the
oldest group, appends its records with a single ``write`` and a single
``fdatasync`` (``append``), then wakes every caller of the group at once, and
only then hands the group to ``on_durable`` (the indexer). So:

- a caller returns only after its bytes are durable (or the group failed, then
  it gets the :class:`~tidb_binlog.errors.StorageError`);
- groups reach the log and ``on_durable`` in submission order;
- per write the caller pays one lock, one list append and one event wait; per
  group the writer pays one join, one write, one fdatasync.

After an I/O failure the committer refuses every later write (the kernel's page
cache state is unknown after a failed fsync); reopen the storage to continue.
The writer holds :attr:`io_lock` while it appends and forwards a group, so the
slow chaser can briefly stop writes to finish a catch-up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from tidb_binlog.errors import StorageError

__all__ = ["GroupCommitter"]

log = logging.getLogger(__name__)


class _Group:
    __slots__ = ("items", "nbytes", "max_ts", "done", "error")

    def __init__(self):
        self.items: list[tuple] = []
        self.nbytes = 0
        self.max_ts = 0
        self.done = threading.Event()
        self.error: BaseException | None = None


class GroupCommitter:
    """One writer thread behind a queue of groups.

    ``append(buf, max_ts) -> start pointer`` writes (and syncs) a group;
    ``on_durable(start_pointer, items)`` receives each durable group in order.
    Each item is a tuple whose first element is the framed record bytes.
    """

    def __init__(self, append: Callable, on_durable: Callable, *, metrics,
                 max_group_bytes: int = 1 << 20, slow_write_threshold_s: float = 1.0,
                 name: str = "pump-vlog-writer"):
        self._append = append
        self._on_durable = on_durable
        self._metrics = metrics
        self._max_group_bytes = max_group_bytes
        self._slow_s = slow_write_threshold_s
        self._cond = threading.Condition(threading.Lock())
        self._groups: deque[_Group] = deque()
        self._closing = False
        self._failed: BaseException | None = None
        self.io_lock = threading.Lock()
        self.groups_written = 0
        self.records_written = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: tuple, ts: int) -> None:
        """Queue ``item`` (``item[0]`` = framed record) and wait until it is durable."""
        rec_len = len(item[0])
        with self._cond:
            if self._failed is not None:
                raise StorageError(f"storage refuses writes after an earlier I/O failure "
                                   f"({self._failed}); reopen the data dir") from self._failed
            if self._closing:
                raise StorageError("storage is closed")
            groups = self._groups
            if groups and groups[-1].nbytes < self._max_group_bytes:
                g = groups[-1]
            else:
                g = _Group()
                groups.append(g)
                self._cond.notify()
            g.items.append(item)
            g.nbytes += rec_len
            if ts > g.max_ts:
                g.max_ts = ts
        g.done.wait()
        if g.error is not None:
            raise g.error

    def _run(self) -> None:
        m = self._metrics
        batch_s = m.write_duration_s.labels("batch")  # bound once: labels() costs a lock
        batch_bytes = m.write_size_bytes.labels("batch")
        while True:
            with self._cond:
                while not self._groups and not self._closing:
                    self._cond.wait()
                if not self._groups:
                    return
                g = self._groups.popleft()
            t0 = time.perf_counter()
            buf = b"".join([it[0] for it in g.items])
            with self.io_lock:
                try:
                    start = self._append(buf, g.max_ts)
                except BaseException as exc:  # fail this group and every later one
                    self._fail(g, exc)
                    continue
                g.done.set()
                try:
                    self._on_durable(start, g.items)
                except BaseException:
                    log.exception("forwarding a durable group to the indexer failed")
                    m.error_count.labels("batch_write_kv").inc()
            self.groups_written += 1
            self.records_written += len(g.items)
            elapsed_s = time.perf_counter() - t0
            batch_s.observe(elapsed_s)
            batch_bytes.observe(len(buf))
            if elapsed_s > self._slow_s:
                log.warning("slow value-log write: %d records, %d bytes took %.3f s",
                            len(g.items), len(buf), elapsed_s)

    def _fail(self, g: _Group, exc: BaseException) -> None:
        err = exc if isinstance(exc, StorageError) else StorageError(
            f"value-log write failed: {exc}")
        if err is not exc:
            err.__cause__ = exc
        log.error("value-log write of %d records failed: %s", len(g.items), exc)
        self._metrics.error_count.labels("write_binlog_batch").inc()
        with self._cond:
            self._failed = err
            rest = list(self._groups)
            self._groups.clear()
        for grp in [g, *rest]:
            grp.error = err
            grp.done.set()

    def close(self) -> None:
        """Finish queued groups, then stop the writer; later submits raise StorageError."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
