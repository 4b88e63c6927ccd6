"""``Upstream``: a TiDB-behaving database over one MariaDB server.

An Upstream owns the connection parameters, the binlog writer (anything with
``write_binlog(binlog)``, e.g. the pump client), the TSO (``get_ts() -> int``),
the shared catalog snapshot, the fault knobs and the asynchronous sending of
Commit/Rollback binlogs, as TiDB's ``writeFinishBinlog`` goroutine does: a writer
with ``write_finish_nowait`` (the pump client) gets each one straight from the
committing thread, which does not wait for it (a gRPC future, no thread hand-off);
any other writer gets them from one background thread, batched when it has
``write_binlogs``. Sessions (``upstream.session()``) run transactions; ``upstream.ddl(sql)``
runs DDL. ``upstream.meta()`` answers what pumps and drainers ask TiKV/PD.

``clustered_index`` is TiDB's ``tidb_enable_clustered_index``: ``"on"`` (our
default, so tests exercise common handles: every primary key is clustered) or
``"int_only"`` (TiDB's older default: only a single integer PK is the handle;
other tables use the hidden ``_tidb_rowid``). It applies to tables created after
it is set, as in TiDB.

``cluster_id`` makes the upstream, the registry and the pumps agree on one id: a
new catalog adopts it; an existing catalog with another id raises
:class:`~tidb_binlog.errors.ClusterIDMismatch`. ``None`` keeps the catalog's (a
random one for a new catalog).
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable

import pymysql

from tidb_binlog.errors import FinishTimeout, InvalidArgument, UpstreamError
from tidb_binlog.model import Job, TableInfo
from tidb_binlog.upstream.catalog import Catalog, Snapshot
from tidb_binlog.upstream.conn import connect, translate
from tidb_binlog.upstream.ddl import resume_ddl_jobs, run_ddl
from tidb_binlog.upstream.faults import Faults
from tidb_binlog.upstream.introspect import CLUSTERED_INT_ONLY, CLUSTERED_ON
from tidb_binlog.upstream.meta import UpstreamMeta
from tidb_binlog.upstream.rows import TableCodec
from tidb_binlog.upstream.txn import Session

__all__ = ["Upstream", "DEFAULT_WAIT_TIMEOUT_S"]

DEFAULT_WAIT_TIMEOUT_S = 60.0

log = logging.getLogger(__name__)

_FINISH_BATCH = 256  # Commit/Rollback binlogs per write_binlogs call, at most
_BOOTSTRAP_ATTEMPTS = 5


def _finish_timeout(what: str, writer, pending: Counter, timeout_s: float) -> FinishTimeout:
    """The error for a flush/close that waited ``timeout_s``: how many Commit/Rollback
    binlogs were still in flight, and to which pumps (``writer.pump_of(start_ts)``, the
    pump client's record of who took the Prewrite, when the writer has it)."""
    pump_of = getattr(writer, "pump_of", None)
    pumps: Counter = Counter()
    for start_ts, n in pending.items():
        pump = pump_of(start_ts) if callable(pump_of) else None
        pumps[pump or type(writer).__name__] += n
    total = sum(pending.values())
    where = ", ".join(f"{n} to {p}" for p, n in sorted(pumps.items()))
    return FinishTimeout(
        f"Upstream.{what}() waited {timeout_s:g} s and {total} Commit/Rollback binlog(s) are "
        f"still in flight ({where}); their transactions are already decided in MariaDB, and a "
        "pump resolves a Prewrite whose Commit never arrives after max-txn-timeout. Check that "
        f"the pumps are up, or pass a longer timeout to {what}()",
        pending=total, pumps=dict(pumps), timeout_s=timeout_s)


class _FinishSender:
    """Sends Commit/Rollback binlogs on one background thread, in submission order.

    Whatever queued up while the previous write ran goes out as one batch when the
    writer has ``write_binlogs`` (the pump client pipelines a batch over its gRPC
    channels), else one ``write_binlog`` at a time."""

    def __init__(self, writer, max_batch: int = _FINISH_BATCH):
        self._writer = writer
        self._batched = callable(getattr(writer, "write_binlogs", None))
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._submitted = 0
        self._done = 0
        self._pending: Counter = Counter()  # start_ts -> binlogs submitted, not yet written
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="upstream-finish-binlog",
                                        daemon=True)
        self._thread.start()

    def submit(self, binlog) -> None:
        with self._idle:
            self._submitted += 1
            self._pending[binlog.start_ts] += 1
        self._queue.put(binlog)

    def _take(self) -> list:
        batch = [self._queue.get()]
        while len(batch) < self._max_batch and batch[-1] is not None:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = self._take()
            if batch[-1] is None:
                stop = True
                batch.pop()
            try:
                self._write(batch)
            finally:
                with self._idle:
                    self._done += len(batch)
                    for b in batch:
                        self._pending[b.start_ts] -= 1
                        if self._pending[b.start_ts] <= 0:
                            del self._pending[b.start_ts]
                    self._idle.notify_all()

    def _write(self, batch: list) -> None:
        if self._batched and len(batch) > 1:
            try:
                results = self._writer.write_binlogs(batch)
            except Exception:  # the pump client never raises here; count and log if one does
                self.errors += len(batch)
                log.exception("failed to write %d finish binlogs", len(batch))
                return
            for b, r in zip(batch, results, strict=True):
                if getattr(r, "error", None) is not None:
                    self.errors += 1
                    log.error("finish binlog start_ts=%s was refused: %s", b.start_ts, r.error)
            return
        for b in batch:
            try:
                self._writer.write_binlog(b)
            except Exception:  # the pump client never raises here; count and log if one does
                self.errors += 1
                log.exception("failed to write finish binlog start_ts=%s", b.start_ts)

    def flush(self, timeout_s: float = DEFAULT_WAIT_TIMEOUT_S, what: str = "flush") -> None:
        with self._idle:
            target = self._submitted
            if self._idle.wait_for(lambda: self._done >= target, timeout_s):
                return
            pending = Counter(self._pending)
        # outside our lock: naming the pumps takes the writer's
        raise _finish_timeout(what, self._writer, pending, timeout_s)

    def close(self, timeout_s: float = DEFAULT_WAIT_TIMEOUT_S) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            with self._idle:
                pending = Counter(self._pending)
            raise _finish_timeout("close", self._writer, pending, timeout_s)


class _FinishDirect:
    """Sends Commit/Rollback binlogs from the committing thread, without a hand-off.

    For writers with ``write_finish_nowait(binlog) -> Future`` (the pump client):
    the first attempt starts on the caller's thread and completes on the writer's
    own (gRPC's) thread; the Future resolves to a result with ``node_id``, ``error``
    or ``pending`` (retried in the writer's background). ``flush`` waits for every
    first attempt, as :class:`_FinishSender`'s waits for every hand-over."""

    def __init__(self, writer):
        self._writer = writer
        self._send = writer.write_finish_nowait
        self._idle = threading.Condition()
        self._inflight = 0
        self._pending: Counter = Counter()  # start_ts -> first attempts not completed
        self.errors = 0

    def submit(self, binlog) -> None:
        with self._idle:
            self._inflight += 1
            self._pending[binlog.start_ts] += 1
        try:
            fut = self._send(binlog)
        except Exception:  # the pump client never raises here; the txn is committed anyway
            log.exception("failed to send finish binlog start_ts=%s", binlog.start_ts)
            self._done(None, binlog)
            return
        fut.add_done_callback(lambda f: self._done(f, binlog))

    def _done(self, fut, binlog) -> None:
        error = None
        if fut is None:
            error = "not sent"
        elif fut.exception() is not None:
            error = fut.exception()
        elif getattr(fut.result(), "error", None) is not None:
            error = fut.result().error
        with self._idle:
            self._inflight -= 1
            self._pending[binlog.start_ts] -= 1
            if self._pending[binlog.start_ts] <= 0:
                del self._pending[binlog.start_ts]
            if error is not None:
                self.errors += 1
            self._idle.notify_all()
        if error is not None:
            log.error("finish binlog start_ts=%s was not written: %s", binlog.start_ts, error)

    def flush(self, timeout_s: float = DEFAULT_WAIT_TIMEOUT_S, what: str = "flush") -> None:
        with self._idle:
            if self._idle.wait_for(lambda: self._inflight == 0, timeout_s):
                return
            pending = Counter(self._pending)
        # outside our lock: naming the pumps takes the writer's (whose callbacks take ours)
        raise _finish_timeout(what, self._writer, pending, timeout_s)

    def close(self, timeout_s: float = DEFAULT_WAIT_TIMEOUT_S) -> None:
        self.flush(timeout_s, "close")


def _check_timeout(timeout: float) -> float:
    if not timeout > 0:
        raise InvalidArgument(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


class Upstream:
    """See the module docstring. Thread-safe; sessions are not shared between threads."""

    def __init__(self, params: dict, writer, get_ts: Callable[[], int], *,
                 database: str | None = None, clustered_index: str = CLUSTERED_ON,
                 faults: Faults | None = None, tz: datetime.tzinfo = datetime.UTC,
                 check_schema_at_commit: bool = True, cluster_id: int | None = None):
        if clustered_index not in (CLUSTERED_ON, CLUSTERED_INT_ONLY):
            raise InvalidArgument(f"clustered_index must be {CLUSTERED_ON!r} or "
                                  f"{CLUSTERED_INT_ONLY!r}, got {clustered_index!r}")
        self.params = dict(params)
        self.writer = writer
        self.get_ts = get_ts
        self.database = database
        self.clustered_index = clustered_index
        self.faults = faults or Faults()
        self.tz = tz
        self.check_schema_at_commit = check_schema_at_commit
        self._lock = threading.Lock()
        self._codecs: dict[int, TableCodec] = {}
        self.cluster_id, self._snapshot = self._bootstrap(cluster_id)
        if callable(getattr(writer, "write_finish_nowait", None)):
            self._sender = _FinishDirect(writer)
        else:
            self._sender = _FinishSender(writer)

    # -- catalog ---------------------------------------------------------------------
    def _bootstrap(self, cluster_id: int | None) -> tuple[int, Snapshot]:
        """Create/read the catalog. Every statement is idempotent and autocommitted, so
        upstreams starting together that deadlock on the meta rows retry it whole."""
        for attempt in range(_BOOTSTRAP_ATTEMPTS):
            conn = connect(self.params, autocommit=True)
            try:
                with conn.cursor() as cur:
                    return Catalog.bootstrap(cur, cluster_id), Catalog.load(cur)
            except pymysql.err.MySQLError as exc:
                err = translate(exc, "bootstrap catalog")
                if not err.retryable or attempt + 1 == _BOOTSTRAP_ATTEMPTS:
                    raise err from exc
            finally:
                conn.close()
            time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def reload(self, cur=None) -> Snapshot:
        """Re-read the catalog (after a DDL, or when a commit saw a newer version)."""
        if cur is None:
            conn = connect(self.params, autocommit=True)
            try:
                with conn.cursor() as c:
                    snap = Catalog.load(c)
            finally:
                conn.close()
        else:
            snap = Catalog.load(cur)
        with self._lock:
            if snap.version >= self._snapshot.version:
                self._snapshot = snap
            return self._snapshot

    def resolve(self, table: str, database: str | None = None) -> tuple[str, str]:
        db, _, name = table.rpartition(".")
        db = db.strip("`") or database or self.database
        if not db:
            raise UpstreamError(f"table {table!r} names no database and the session has none")
        return db, name.strip("`")

    def table(self, table: str, database: str | None = None) -> TableInfo:
        db, name = self.resolve(table, database)
        return self._snapshot.table(db, name)

    def codec(self, info: TableInfo) -> TableCodec:
        key = id(info)
        c = self._codecs.get(key)
        if c is None or c.info is not info:
            c = TableCodec(info, self.tz)
            with self._lock:
                if len(self._codecs) > 4096:
                    self._codecs.clear()
                self._codecs[key] = c
        return c

    # -- sessions, DDL, meta -----------------------------------------------------------
    def session(self, database: str | None = None) -> Session:
        return Session(self, database or self.database)

    def ddl(self, sql: str, database: str | None = None) -> Job | None:
        """Run one DDL statement as TiDB would (see ``tidb_binlog.upstream.ddl``)."""
        return run_ddl(self, sql, database or self.database)

    def resume_ddl_jobs(self) -> list[Job]:
        """Finish the DDL jobs left queued by a final round that failed (e.g. DROP COLUMN
        after its DeleteOnly round, when MariaDB went away), with their own job ids, as
        TiDB's next DDL owner does; return them. Every ``ddl()`` does this first, so call
        it when no DDL follows (see "The job queue" in ``tidb_binlog.upstream.ddl``)."""
        return resume_ddl_jobs(self)

    def meta(self) -> UpstreamMeta:
        return UpstreamMeta(self.params)

    def send_finish(self, binlog) -> None:
        self._sender.submit(binlog)

    def flush(self, timeout: float = DEFAULT_WAIT_TIMEOUT_S) -> None:
        """Wait until every queued Commit/Rollback binlog has been handed to the writer
        (with the pump client: every first attempt completed).

        Raises :class:`~tidb_binlog.errors.FinishTimeout` after ``timeout`` seconds,
        saying how many were still in flight and to which pumps; they keep going."""
        self._sender.flush(_check_timeout(timeout))

    @property
    def finish_binlog_errors(self) -> int:
        return self._sender.errors

    def close(self, timeout: float = DEFAULT_WAIT_TIMEOUT_S) -> None:
        """Send what is queued and stop the finish sender; bounded by ``timeout`` seconds
        (:class:`~tidb_binlog.errors.FinishTimeout` names what was still in flight)."""
        self._sender.close(_check_timeout(timeout))

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
