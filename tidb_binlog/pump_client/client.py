"""PumpClient: what TiDB embeds to write binlogs to the pumps.

The client is assembled from parts, each in a module of its own:

- :mod:`.writes` (:class:`~.writes.WritePath`): the channel per pump, one attempt,
  the Prewrite's failover over pumps (synchronous; raises
  :class:`~tidb_binlog.errors.UnavailableError`) and the Commit/Rollback's retries
  on the prewrite's pump (never raises; given up after ``commit_retry_s``). Read its
  docstring for the exact retry and give-up rules.
- :mod:`.membership` (:class:`~.membership.Membership`): the pumps from the
  registry (a watcher thread), a static list or the local socket; unavailable pumps
  and the prober that brings them back.
- :mod:`.payload`: deadlines that scale with the payload, the message size, the
  request serialized once for a large Prewrite.
- :mod:`.inflight`: the Commit/Rollback binlogs in flight, what ``flush`` waits for,
  and :class:`PumpClientTimeout` (bounded waits).
- :mod:`.batch` and :mod:`.batch_side`: the batched path and ``write_finish_nowait``.

This module holds the constructor, the public entry points, ``close``, and the hook
that closes a client left open at interpreter exit.

Commit / Rollback (``write_binlog_async``)
    Runs the commit's retry rules (:mod:`.writes`) on a small thread pool.

Batched path (``write_binlogs``)
    Pipelined first attempts for high-throughput callers, such as an upstream's
    commit sender handing over whatever Commit binlogs queued up; see
    :mod:`.batch`.

Commit / Rollback without a thread hand-off (``write_finish_nowait``)
    The first attempt is a gRPC future started on the caller's thread and
    finished in gRPC's completion callback; a failed attempt goes to the retry
    pool above. What an upstream's committing session calls per transaction.
"""

from __future__ import annotations

import atexit
import io
import logging
import random
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from tidb_binlog.binlog import Binlog, BinlogType, encode
from tidb_binlog.errors import InvalidArgument
from tidb_binlog.node import PUMP, NodeStatus, RegistryClient
from tidb_binlog.pump_client import metrics
from tidb_binlog.pump_client.batch import (
    COMPLETION_GRACE_S,
    WriteResult,
    write_batch,
    write_finish_nowait,
)
from tidb_binlog.pump_client.batch_side import BatchSide
from tidb_binlog.pump_client.book import DEFAULT_UNAVAILABLE_AFTER_ERRORS, PumpBook
from tidb_binlog.pump_client.inflight import NO_PUMP, InFlight, PumpClientTimeout
from tidb_binlog.pump_client.membership import Membership
from tidb_binlog.pump_client.payload import (
    DEFAULT_MIN_WRITE_BYTES_PER_S,
    DEFAULT_STREAM_ABOVE_BYTES,
    LARGE_REQUEST_BYTES,
    SerializedRequest,
    scaled_timeout_s,
)
from tidb_binlog.pump_client.selector import LOCAL, RANGE, new_selector
from tidb_binlog.pump_client.transport import (
    DEFAULT_MAX_MESSAGE_SIZE_BYTES,
    PumpChannel,
    PumpTLS,
    write_request_bytes,
    write_request_head,
)
from tidb_binlog.pump_client.writes import WritePath

__all__ = ["PumpClient", "PumpClientTimeout", "WriteResult", "LOCAL_PUMP_ID",
           "DEFAULT_MIN_WRITE_BYTES_PER_S", "DEFAULT_STREAM_ABOVE_BYTES", "LARGE_REQUEST_BYTES",
           "scaled_timeout_s"]

log = logging.getLogger("tidb_binlog.pump_client")

LOCAL_PUMP_ID = "localPump"
_TYPE_NAMES = {BinlogType.PREWRITE: "prewrite", BinlogType.COMMIT: "commit",
               BinlogType.ROLLBACK: "rollback"}


class PumpClient(WritePath, Membership):
    """See the module docstring; the write path is :class:`~.writes.WritePath`, the pump
    list and the prober :class:`~.membership.Membership`."""

    def __init__(self, registry: RegistryClient | None, *, cluster_id: int | None = None,
                 pumps: Sequence[str] | None = None, strategy: str = RANGE,
                 local_socket: str | None = None, write_timeout_s: float = 15.0,
                 rpc_timeout_s: float = 5.0, commit_retry_s: float = 600.0,
                 retry_interval_s: float = 0.1, commit_backoff_max_s: float = 1.0,
                 unavailable_after_errors: int = DEFAULT_UNAVAILABLE_AFTER_ERRORS,
                 probe_interval_s: float = 30.0, watch_timeout_s: float = 10.0,
                 max_message_size_bytes: int = DEFAULT_MAX_MESSAGE_SIZE_BYTES,
                 min_write_bytes_per_s: float = DEFAULT_MIN_WRITE_BYTES_PER_S,
                 stream_above_bytes: int = DEFAULT_STREAM_ABOVE_BYTES,
                 tls: PumpTLS | None = None, async_workers: int = 4,
                 rng: random.Random | None = None):
        if strategy == LOCAL and not local_socket:
            raise InvalidArgument("strategy 'local' needs local_socket (the pump's unix socket "
                                  "path)")
        if registry is None and not pumps and strategy != LOCAL:
            raise InvalidArgument("PumpClient needs a registry, a static pumps list or a "
                                  "local_socket")
        if not min_write_bytes_per_s > 0:
            raise InvalidArgument(f"min_write_bytes_per_s must be positive (bytes per second "
                                  f"the deadlines of big payloads are scaled by), got "
                                  f"{min_write_bytes_per_s!r}")
        if stream_above_bytes < 0:
            raise InvalidArgument(f"stream_above_bytes must be 0 (never stream) or the payload "
                                  f"size from which a binlog is streamed in chunks, got "
                                  f"{stream_above_bytes!r}")
        if cluster_id is None:
            if registry is None:
                raise InvalidArgument("cluster_id is required when there is no registry")
            cluster_id = registry.cluster_id()
        self.cluster_id = cluster_id
        self.write_timeout_s = write_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self.commit_retry_s = commit_retry_s
        self.min_write_bytes_per_s = min_write_bytes_per_s
        self.stream_above_bytes = stream_above_bytes
        self._retry_interval_s = retry_interval_s
        self._commit_backoff_max_s = commit_backoff_max_s
        self._max_message_size_bytes = max_message_size_bytes
        self._tls = tls
        self._lock = threading.Lock()
        self._book = PumpBook(new_selector(strategy, rng=rng),
                              unavailable_after_errors=unavailable_after_errors)
        self._channels: dict[str, PumpChannel] = {}
        self._closed = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=async_workers,
                                            thread_name_prefix="pump-client-commit")
        self._threads: list[threading.Thread] = []
        # Commit/Rollback futures not resolved yet (write_binlog_async, write_finish_nowait,
        # a batch's retries), guarded by the lock of the book
        self._inflight = InFlight(self._lock, self._describe)
        self._batch_side = BatchSide(self)
        if strategy == LOCAL:
            self._apply([NodeStatus(LOCAL_PUMP_ID, local_socket)], complete=True)
        elif registry is None:
            self._apply([NodeStatus(addr, addr) for addr in pumps], complete=True)
        else:
            revision, records = registry.watch(PUMP, 0, 0.0)
            self._apply(records, complete=True)
            self._spawn("pump-client-watch", self._watch_loop, registry, revision,
                        watch_timeout_s)
        self._spawn("pump-client-probe", self._probe_loop, probe_interval_s)
        _close_at_exit(self)

    def write_binlog(self, binlog: Binlog) -> str | None:
        """Write one binlog; return the node id of the pump that took it.

        A Prewrite raises UnavailableError when no pump took it in time (the
        transaction must not commit). A Commit/Rollback never raises; it returns
        None when it was given up.
        """
        kind = _TYPE_NAMES.get(binlog.tp, "other")
        started = time.monotonic()
        try:
            if kind == "prewrite":
                return self._write_prewrite(binlog.start_ts,
                                            self._prepared(self._encode(binlog)), {})
            return self._write_finish(binlog, encode(binlog), kind)
        finally:
            metrics.WRITE_SECONDS[kind].observe(time.monotonic() - started)

    def write_prewrite_from(self, start_ts: int, size: int, fill) -> str:
        """``write_binlog`` of a Prewrite the caller writes itself: ``fill(out)`` writes
        the ``size`` bytes of the marshalled ``Binlog`` into binary stream ``out``, once.
        A large one is written straight into the request being built (its header
        first), so the request is the only copy of the payload; a caller that frees
        what it wrote as it goes (the upstream drops each row image once written)
        never holds its data twice. Raises InvalidArgument (a ValueError) when ``fill``
        wrote another size (nothing is sent)."""
        started = time.monotonic()
        try:
            self._check_size(start_ts, size)
            large = size >= LARGE_REQUEST_BYTES
            out = io.BytesIO()
            head = write_request_head(self.cluster_id, size) if large else b""
            out.write(head)
            fill(out)
            if out.tell() != len(head) + size:
                raise InvalidArgument(f"prewrite of start_ts={start_ts}: fill wrote "
                                      f"{out.tell() - len(head)} bytes, not the {size} announced")
            data = out.getvalue()  # the stream's own buffer, not a copy
            out.close()
            payload = SerializedRequest(data, size) if large else data
            del data
            return self._write_prewrite(start_ts, payload, {})
        finally:
            metrics.WRITE_SECONDS["prewrite"].observe(time.monotonic() - started)

    def write_prewrite_parts(self, start_ts: int, parts: list) -> str:
        """``write_binlog`` of a Prewrite the caller serialized itself: ``parts`` (a list
        of bytes) concatenated are the marshalled ``Binlog``. The client takes the parts
        out of the list (it is emptied once the request is built), so a caller that
        keeps no other reference frees them while the write is in flight: the large
        transaction's path (see "Memory of a large Prewrite" in the README)."""
        started = time.monotonic()
        try:
            size = sum(len(p) for p in parts)
            self._check_size(start_ts, size)
            if size < LARGE_REQUEST_BYTES:
                payload = b"".join(parts)
                parts.clear()
            else:
                payload = SerializedRequest(write_request_bytes(self.cluster_id, parts), size)
            return self._write_prewrite(start_ts, payload, {})
        finally:
            metrics.WRITE_SECONDS["prewrite"].observe(time.monotonic() - started)

    def write_binlog_async(self, binlog: Binlog) -> Future:
        """``write_binlog`` on the client's thread pool (meant for Commit/Rollback).

        Never raises; once the client is closed the future resolves to None at once
        (given up, reason ``closed``). The future resolves within ``commit_retry_s``
        (plus one attempt); :meth:`flush` waits for it with a bound.
        """
        return self._retry_later(binlog)

    def write_finish_nowait(self, binlog: Binlog) -> Future:
        """Send a Commit/Rollback without a thread hand-off; never raises. The Future
        resolves to a :class:`WriteResult` once the first attempt is done (see
        :func:`.batch.write_finish_nowait`)."""
        return write_finish_nowait(self._batch_side, binlog)

    def _retry_later(self, binlog: Binlog, seq: int | None = None) -> Future:
        """``write_binlog`` on the pool, tracked for flush/close under ``seq`` (a new
        number when None); a given-up result once the client is closed.

        Runs on gRPC's callback thread (from ``write_finish_nowait``): it only takes
        the client's lock and queues work; ``submit`` may start a pool thread, which
        waits for the OS to schedule it, never for gRPC.
        """
        try:
            fut = self._executor.submit(self.write_binlog, binlog)
        except RuntimeError:  # the pool is shut down: close() ran
            done: Future = Future()
            done.set_result(self._give_up(binlog, _TYPE_NAMES.get(binlog.tp, "other"), "closed",
                                          "client closed before the retry"))
            return done
        self._track(fut, None, seq, start_ts=binlog.start_ts)
        return fut

    def _track(self, fut: Future, node_id: str | None, seq: int | None = None, *,
               start_ts: int | None = None) -> int:
        """Count ``fut`` as in flight to ``node_id`` (or the owner of ``start_ts``) until
        it resolves; return its flush sequence number."""
        with self._lock:
            if node_id is None:
                entry = self._book.owner(start_ts)
                node_id = NO_PUMP if entry is None else entry.node_id
            seq = self._inflight.add_locked(fut, node_id, seq)
        fut.add_done_callback(self._inflight.discard)  # runs at once if fut is already done
        return seq

    def in_flight(self) -> dict[str, int]:
        """Commit/Rollback binlogs not resolved yet (first attempts and retries), per pump."""
        return self._inflight.counts()

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every Commit/Rollback handed to the client before this call
        (``write_binlog_async``, ``write_finish_nowait``, a batch's ``pending``) is
        written or given up, its retries included.

        Raises :class:`PumpClientTimeout` after ``timeout_s``, naming the pumps and
        how many binlogs were still in flight to each; they keep being retried (a
        commit for up to ``commit_retry_s`` on its prewrite's pump). Must not be
        called on gRPC's callback thread (e.g. from a future's done-callback).
        """
        self._inflight.flush(timeout_s, commit_retry_s=self.commit_retry_s)

    def _describe(self, node_id: str) -> str:
        """``node_id`` with its address when they differ (called under the lock)."""
        entry = self._book.entry(node_id)
        if entry is None or entry.addr == node_id:
            return node_id
        return f"{node_id} at {entry.addr}"

    def write_binlogs(self, binlogs: Sequence[Binlog]) -> list[WriteResult]:
        """Write a batch, pipelining first attempts; per-binlog results in input order."""
        return write_batch(self._batch_side, binlogs)

    def pump_of(self, start_ts: int) -> str | None:
        """The pump that took the prewrite of ``start_ts`` (None once committed)."""
        with self._lock:
            entry = self._book.owner(start_ts)
        return None if entry is None else entry.node_id

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the client. Bounded: returns within about ``timeout_s + rpc_timeout_s``.

        1. Waits up to ``timeout_s`` for the Commit/Rollback binlogs in flight (as
           :meth:`flush`); what is still unresolved then is given up (logged, counted
           as ``closed``; the pump resolves those transactions after max-txn-timeout).
        2. Marks the client closed, so retries give up at their next step, and drops
           every channel, which cancels the calls still on the wire.
        3. Waits up to ``rpc_timeout_s`` (the longest an attempt can run) for the
           retries and the prober to finish; if gRPC or a thread still has not, raises
           :class:`PumpClientTimeout` naming the pumps (the threads are daemons).

        The registry watcher ends as well (its long poll gives up when the client
        closes), so once close() returns no thread of the client calls the registry. A
        client never closed is closed when the interpreter exits (before Ray shuts
        down, on Ray). Must not be called on gRPC's callback thread. Closing twice is
        harmless.
        """
        try:
            self.flush(timeout_s)
        except PumpClientTimeout as exc:
            log.warning("closing the pump client after %gs: the binlogs still in flight are "
                        "given up (%s)", timeout_s,
                        ", ".join(f"{node}: {n}" for node, n in exc.in_flight.items()))
        self._closed.set()
        self._executor.shutdown(wait=False)  # queued retries still run: they give up at once
        self._drop_channels()
        _OPEN_CLIENTS.discard(self)
        deadline = time.monotonic() + self.rpc_timeout_s + COMPLETION_GRACE_S
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(deadline - time.monotonic(), 0.0))
        stuck = [t.name for t in self._threads
                 if t is not threading.current_thread() and t.is_alive()]
        try:
            self.flush(max(deadline - time.monotonic(), 0.0))
        except PumpClientTimeout as exc:
            raise PumpClientTimeout(f"{exc} (after close() gave them up)",
                                    in_flight=exc.in_flight) from None
        finally:
            self._drop_channels()  # a retry may have dialled again meanwhile
        if stuck:
            raise PumpClientTimeout(f"PumpClient.close: thread(s) {', '.join(stuck)} still "
                                    f"running {self.rpc_timeout_s + COMPLETION_GRACE_S:g}s "
                                    "after the client closed (a probe stuck in gRPC?)",
                                    in_flight={})

    def __enter__(self) -> PumpClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _spawn(self, name: str, target, *args) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)


_OPEN_CLIENTS: weakref.WeakSet[PumpClient] = weakref.WeakSet()
_exit_hook_lock = threading.Lock()
_exit_hook_registered = False


def _close_at_exit(client: PumpClient) -> None:
    """Close ``client`` when the interpreter exits if it is still open then.

    The hook is registered with the first client, so on Ray (imported before any
    client is made: the registry client is a Ray one) it runs before Ray's own exit
    hook, which shuts down the core worker: the watcher's long poll to the registry
    ends first, and the Commit binlogs still in flight get close()'s flush.
    """
    global _exit_hook_registered
    _OPEN_CLIENTS.add(client)
    with _exit_hook_lock:
        if not _exit_hook_registered:
            atexit.register(_close_open_clients)
            _exit_hook_registered = True


def _close_open_clients() -> None:
    for client in list(_OPEN_CLIENTS):
        try:
            client.close()
        except Exception as exc:  # noqa: BLE001 - at exit: say so, close the others
            log.warning("closing a pump client left open at interpreter exit: %s", exc)
