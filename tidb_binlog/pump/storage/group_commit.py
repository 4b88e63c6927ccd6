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

Commit delay (``commit_delay_s``, like PostgreSQL's ``commit_delay`` with
``commit_siblings``): when the previous group held at least two records (writers
are concurrent), the writer waits up to ``commit_delay_s`` before it takes the
oldest group, so more writers join it. A lone writer (the previous group held
one record) is never delayed. Fewer, larger groups cost fewer writes, fsyncs,
wake-ups and indexer batches per record: under load on a 2-core machine the
per-group work of the writer and indexer threads (and their GIL share) was a
third of the pump's CPU per WriteBinlog. The delay adds at most
``commit_delay_s`` to an acknowledgement under load; 0 turns it off.

Asynchronous callers (the ``grpc.aio`` servicer) use :meth:`GroupCommitter.submit_async`
from their event loop instead: it returns an ``asyncio.Future`` at once, and the
writer settles every future of a group with ONE ``loop.call_soon_threadsafe``
per group (not one wake-up per request), right after the group's fdatasync, so
an acknowledgement still means durable.

Large records: an item's record may be a tuple of buffers (a small header and the
payload as the caller received it, e.g. a memoryview into the gRPC request) instead of
one framed ``bytes``; a group holding one is written with ``writev`` (``append`` gets
the list of buffers), so a 200 MB Prewrite is never copied to be framed or joined. Once
a group is written the writer drops its reference to the group's items (the indexer
gets the sizes), so nothing keeps a written payload alive while the writer waits.

Following a queued write (:meth:`GroupCommitter.enqueue` returns the group,
:meth:`GroupCommitter.wait` / :meth:`GroupCommitter.follow_async` wait for it): the
storage acknowledges a Prewrite it already has in flight by waiting for that one's
group instead of writing it again.

After an I/O failure the committer refuses every later write (the kernel's page
cache state is unknown after a failed fsync); reopen the storage to continue.
The writer holds :attr:`io_lock` while it appends and forwards a group, so the
slow chaser can briefly stop writes to finish a catch-up.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from tidb_binlog.errors import StorageError

__all__ = ["GroupCommitter"]

log = logging.getLogger(__name__)


def record_size(record) -> int:
    """Bytes of a record: one bytes-like, or a tuple of buffers written back to back."""
    if isinstance(record, tuple):
        return sum(len(part) for part in record)
    return len(record)


class _Group:
    __slots__ = ("items", "nbytes", "max_ts", "done", "error", "futures")

    def __init__(self):
        self.items: list[tuple] = []
        self.nbytes = 0
        self.max_ts = 0
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.futures: dict | None = None  # event loop -> [asyncio.Future] of async submitters


def _settle(futures: list, error: BaseException | None) -> None:
    """Event-loop side of a group's completion: one call settles all its futures."""
    for fut in futures:
        if not fut.done():  # a cancelled RPC leaves its future cancelled
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


class GroupCommitter:
    """One writer thread behind a queue of groups.

    ``append(buf, max_ts) -> start pointer`` writes (and syncs) a group;
    ``on_durable(start_pointer, items)`` receives each durable group in order.
    Each item is a tuple whose first element is the framed record bytes.
    """

    def __init__(self, append: Callable, on_durable: Callable, *, metrics,
                 max_group_bytes: int = 1 << 20, slow_write_threshold_s: float = 1.0,
                 commit_delay_s: float = 0.0, name: str = "pump-vlog-writer"):
        self._append = append
        self._on_durable = on_durable
        self._metrics = metrics
        self._max_group_bytes = max_group_bytes
        self._slow_s = slow_write_threshold_s
        self._delay_s = commit_delay_s
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
        self.wait(self.enqueue(item, ts))

    def enqueue(self, item: tuple, ts: int) -> _Group:
        """Queue ``item`` without waiting; the returned group is what :meth:`wait` and
        :meth:`follow_async` wait for."""
        with self._cond:
            return self._join(item, ts)

    @staticmethod
    def wait(g: _Group) -> None:
        """Block until group ``g`` is durable; raise its error if it failed."""
        g.done.wait()
        if g.error is not None:
            raise g.error

    def follow_async(self, g: _Group, loop) -> asyncio.Future:
        """A future of ``loop`` settled once group ``g`` is durable (at once if it is)."""
        fut = loop.create_future()
        with self._cond:  # _wake marks done and takes the futures under the same lock
            if not g.done.is_set():
                if g.futures is None:
                    g.futures = {loop: [fut]}
                else:
                    g.futures.setdefault(loop, []).append(fut)
                return fut
        _settle([fut], g.error)
        return fut

    def submit_async(self, item: tuple, ts: int, loop) -> asyncio.Future:
        """Queue ``item`` from event loop ``loop`` (its thread); the returned future is
        settled on that loop once the item is durable (or with the group's error)."""
        fut = loop.create_future()
        with self._cond:
            g = self._join(item, ts)
            if g.futures is None:
                g.futures = {loop: [fut]}
            else:
                g.futures.setdefault(loop, []).append(fut)
        return fut

    def _join(self, item: tuple, ts: int) -> _Group:
        """Add ``item`` to the newest open group (caller holds _cond)."""
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
        g.nbytes += record_size(item[0])
        if ts > g.max_ts:
            g.max_ts = ts
        return g

    def _wake(self, g: _Group) -> None:
        """Wake a finished group's callers: sync ones by its event, async ones with
        one ``call_soon_threadsafe`` per event loop."""
        with self._cond:  # against follow_async registering a future meanwhile
            g.done.set()
            waiting, g.futures = g.futures, None
        if waiting:
            for loop, futures in waiting.items():
                try:
                    loop.call_soon_threadsafe(_settle, futures, g.error)
                except RuntimeError:  # that loop is closed: its server is gone
                    log.warning("%d writers' event loop closed before their group was "
                                "%s", len(futures), "written" if g.error is None else "failed")

    def _run(self) -> None:
        m = self._metrics
        batch_s = m.write_duration_s.labels("batch")  # bound once: labels() costs a lock
        batch_bytes = m.write_size_bytes.labels("batch")
        concurrent = False  # the previous group held >= 2 records
        while True:
            with self._cond:
                while not self._groups and not self._closing:
                    self._cond.wait()
                if not self._groups:
                    return
                if concurrent and self._delay_s > 0 and not self._closing \
                        and len(self._groups) == 1:
                    self._cond.wait(self._delay_s)  # joins go on meanwhile (lock released)
                g = self._groups.popleft()
            concurrent = len(g.items) >= 2
            self._write(g, batch_s, batch_bytes)
            g = None  # no payload stays referenced while the writer waits for the next

    def _write(self, g: _Group, batch_s, batch_bytes) -> None:
        """Append, sync and hand over one group (a method so its buffers die with it)."""
        m = self._metrics
        t0 = time.perf_counter()
        records = [it[0] for it in g.items]
        if any(isinstance(r, tuple) for r in records):  # a large record: writev, no copy
            buf = [part for r in records for part in (r if isinstance(r, tuple) else (r,))]
        else:
            buf = b"".join(records)
        del records
        nbytes, count = g.nbytes, len(g.items)
        with self.io_lock:
            try:
                start = self._append(buf, g.max_ts)
            except BaseException as exc:  # fail this group and every later one
                self._fail(g, exc)
                return
            del buf
            self._wake(g)
            items, g.items = g.items, []  # a follower may keep the group: not its payloads
            try:
                self._on_durable(start, items)
            except BaseException:
                log.exception("forwarding a durable group to the indexer failed")
                m.error_count.labels("batch_write_kv").inc()
        self.groups_written += 1
        self.records_written += count
        elapsed_s = time.perf_counter() - t0
        batch_s.observe(elapsed_s)
        batch_bytes.observe(nbytes)
        if elapsed_s > self._slow_s:
            log.warning("slow value-log write: %d records, %d bytes took %.3f s",
                        count, nbytes, elapsed_s)

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
            self._wake(grp)

    def close(self) -> None:
        """Finish queued groups, then stop the writer; later submits raise StorageError."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
