"""PumpClient: what TiDB embeds to write binlogs to the pumps.

Pumps come from the registry (every record of kind ``pumps``, followed by a
watcher thread that long-polls ``RegistryClient.watch``), from a static address
list, or are the single local unix socket (strategy ``local``).

Prewrite (``write_binlog`` of a ``Prewrite``; synchronous, raises)
    Sent to the pump the strategy picks. A failed attempt (RPC error or a
    non-empty errmsg) counts against that pump and the binlog goes to the next
    available pump at once; a retry interval (0.1 s) is slept only between
    rounds, when every available pump has failed it. Each attempt waits at most
    ``rpc_timeout_s`` plus the payload's transfer time at the throughput floor
    (see "Deadlines that scale with the payload" below). The client gives up when
    ``write_timeout_s`` (scaled the same way) has passed
    *and* every available pump was tried (TiDB's rule), or when no pump is
    available; it then tries each unavailable-but-online pump once, and finally
    raises :class:`~tidb_binlog.errors.UnavailableError` naming every pump it
    tried and its last error. A message the pump refuses as too large or
    malformed, and a cluster id mismatch, raise at once (retrying elsewhere
    cannot help). On success the client remembers which pump took ``start_ts``.

Commit / Rollback (never raises)
    Sent to the pump that took the prewrite, retried *only there* with
    exponential backoff (0.1 s doubling to 1 s) for up to ``commit_retry_s``
    (10 min), even while that pump is unavailable or restarting. When the budget
    is spent, the client is closed, the pump refuses the message, or no prewrite
    of that start_ts went through this client, the binlog is dropped with an
    error log and ``binlog_pump_client_commit_given_up_total{reason}``; the pump
    resolves the transaction itself after ``max-txn-timeout``.
    ``write_binlog_async`` runs this on a small thread pool.

Unavailable pumps and probing
    ``unavailable_after_errors`` failed writes in a row move a pump to the
    unavailable list (see :mod:`.book`). A prober thread sends the empty probe
    binlog (``start_ts == commit_ts == 0``) to every unavailable pump whose
    registry state is ``online`` each ``probe_interval_s`` (TiDB: 30 s) and
    brings back the ones that answer; :meth:`PumpClient.probe_now` runs one round.

Batched path (``write_binlogs``)
    Pipelined first attempts for high-throughput callers, such as an upstream's
    commit sender handing over whatever Commit binlogs queued up; see
    :mod:`.batch`.

Commit / Rollback without a thread hand-off (``write_finish_nowait``)
    The first attempt is a gRPC future started on the caller's thread and
    finished in gRPC's completion callback; a failed attempt goes to the retry
    pool above. What an upstream's committing session calls per transaction.

Deadlines that scale with the payload
    A Prewrite carries the whole transaction: 200 MB for a million small rows. A
    fixed 5 s deadline cut such a write off while the pump was still receiving and
    fsyncing it; the client then retried, the budget ran out, the transaction rolled
    back, and the pump had stored every abandoned copy. So each attempt's deadline is
    ``rpc_timeout_s + len(payload) / min_write_bytes_per_s`` and the Prewrite's budget
    ``write_timeout_s + len(payload) / min_write_bytes_per_s``
    (:func:`scaled_timeout_s`). ``min_write_bytes_per_s`` (default 8 MiB/s) is a
    conservative floor for "gRPC transfer + pump write + fdatasync" on a loaded
    machine, not an estimate: a 200 MB Prewrite gets 5 + 24 s per attempt, a 1 GiB one
    5 + 128 s, a 1 KB one 5.0001 s (small binlogs keep TiDB's deadlines). Raising the
    floor detects a stopped pump sooner for big payloads; lowering it tolerates a
    slower disk. The pump acknowledges a Prewrite it already stored for the same
    start_ts (same size and checksum) without writing it again, so an attempt that
    did time out costs the retry nothing at the pump.

Message size
    ``max_message_size_bytes`` (default 2^31 - 1, gRPC's int32 ceiling) is the
    channel's send and receive limit; a Prewrite above it raises ProtocolError before
    anything is sent. The pumps' own limit is ``max-message-size`` in pump.toml (same
    default); keep the client's at or below it.

Bounded waits
    Every wait of the public API ends: each RPC carries a deadline
    (``rpc_timeout_s``), so a killed pump (connection reset) fails its calls at
    once and a stopped one (SIGSTOP: the connection stays, nothing answers) at
    their deadline. :meth:`PumpClient.flush` and :meth:`PumpClient.close` take a
    ``timeout_s``; running out raises :class:`PumpClientTimeout` naming each pump
    and how many binlogs were in flight to it. Code that runs on gRPC's callback
    thread never blocks (see the README's threading model): a done-callback that
    waits stops every other completion of its channel.
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
from concurrent.futures import wait as wait_futures

import google_crc32c

from tidb_binlog.binlog import Binlog, BinlogType, encode, probe
from tidb_binlog.errors import (
    BinlogError,
    ClusterIDMismatch,
    ProtocolError,
    UnavailableError,
)
from tidb_binlog.node import PUMP, NodeStatus, RegistryClient
from tidb_binlog.pump_client import metrics
from tidb_binlog.pump_client.batch import (
    COMPLETION_GRACE_S,
    WriteResult,
    write_batch,
    write_finish_nowait,
)
from tidb_binlog.pump_client.book import DEFAULT_UNAVAILABLE_AFTER_ERRORS, PumpBook, PumpEntry
from tidb_binlog.pump_client.selector import LOCAL, RANGE, new_selector
from tidb_binlog.pump_client.transport import (
    DEFAULT_MAX_MESSAGE_SIZE_BYTES,
    PumpChannel,
    PumpTLS,
    StreamUnsupported,
    write_request_bytes,
    write_request_head,
)

__all__ = ["PumpClient", "PumpClientTimeout", "WriteResult", "LOCAL_PUMP_ID",
           "DEFAULT_MIN_WRITE_BYTES_PER_S", "DEFAULT_STREAM_ABOVE_BYTES", "scaled_timeout_s"]

log = logging.getLogger("tidb_binlog.pump_client")

LOCAL_PUMP_ID = "localPump"
_TYPE_NAMES = {BinlogType.PREWRITE: "prewrite", BinlogType.COMMIT: "commit",
               BinlogType.ROLLBACK: "rollback"}
_NO_PUMP = "(no pump)"  # in_flight key of a commit whose prewrite did not go through us

# The throughput floor the deadlines of big payloads are scaled by (see the module
# docstring): gRPC transfer + the pump's write and fdatasync, on a loaded machine.
DEFAULT_MIN_WRITE_BYTES_PER_S = 8 << 20


# A Prewrite this large is sent as a request serialized once by the client (no
# WriteBinlogReq message holding a copy of it, no serialization copy per attempt).
LARGE_REQUEST_BYTES = 1 << 20

# A binlog this large goes through the streaming write (WriteBinlogChunks, 4 MiB
# chunks sliced from the request buffer) when the pump serves it: neither gRPC on
# this side nor the pump holds it whole. Below it, one WriteBinlog message costs less.
DEFAULT_STREAM_ABOVE_BYTES = 8 << 20
_CRC_PIECE_BYTES = 1 << 20


class _Serialized:
    """A pre-serialized WriteBinlogReq; ``len()`` is its payload's size (what the
    deadlines scale with). The payload is the request's last ``size`` bytes; its
    crc32c is computed once, when it is first streamed."""

    __slots__ = ("request", "size", "_crc")

    def __init__(self, request: bytes, size: int):
        self.request = request
        self.size = size
        self._crc: int | None = None

    def __len__(self) -> int:
        return self.size

    def payload_view(self) -> memoryview:
        return memoryview(self.request)[len(self.request) - self.size:]

    def crc32c(self) -> int:
        if self._crc is None:
            self._crc = _crc32c(self.payload_view())
        return self._crc


def _crc32c(view: memoryview) -> int:
    """crc32c of a possibly large view in 1 MiB pieces (the library takes bytes only)."""
    crc = 0
    for off in range(0, len(view), _CRC_PIECE_BYTES):
        crc = google_crc32c.extend(crc, bytes(view[off:off + _CRC_PIECE_BYTES]))
    return crc


def scaled_timeout_s(base_s: float, nbytes: int, min_bytes_per_s: float) -> float:
    """``base_s`` plus the time ``nbytes`` take at ``min_bytes_per_s``: the deadline of an
    attempt (base ``rpc_timeout_s``) or a Prewrite's budget (base ``write_timeout_s``)."""
    return base_s + nbytes / min_bytes_per_s


class PumpClientTimeout(UnavailableError, TimeoutError):
    """A bounded wait of the pump client (``flush``, ``close``) ran out.

    ``in_flight`` maps each pump's node id to how many Commit/Rollback binlogs were
    still being written to it (first attempts and retries). Also a ``TimeoutError``.
    """

    _fields = ("in_flight",)


class PumpClient:
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
            raise ValueError("strategy 'local' needs local_socket (the pump's unix socket path)")
        if registry is None and not pumps and strategy != LOCAL:
            raise ValueError("PumpClient needs a registry, a static pumps list or a local_socket")
        if not min_write_bytes_per_s > 0:
            raise ValueError(f"min_write_bytes_per_s must be positive (bytes per second the "
                             f"deadlines of big payloads are scaled by), got "
                             f"{min_write_bytes_per_s!r}")
        if stream_above_bytes < 0:
            raise ValueError(f"stream_above_bytes must be 0 (never stream) or the payload size "
                             f"from which a binlog is streamed in chunks, got "
                             f"{stream_above_bytes!r}")
        if cluster_id is None:
            if registry is None:
                raise ValueError("cluster_id is required when there is no registry")
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
        # a batch's retries): future -> (flush sequence number, the pump it goes to). A
        # retry inherits the number of the first attempt it continues, so a flush waits
        # for it too.
        self._inflight: dict[Future, tuple[int, str]] = {}
        self._seq = 0
        self._batch_side = _BatchSide(self)
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

    # -- public API --------------------------------------------------------------

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
        never holds its data twice. Raises ValueError when ``fill`` wrote another size
        (nothing is sent)."""
        started = time.monotonic()
        try:
            self._check_size(start_ts, size)
            large = size >= LARGE_REQUEST_BYTES
            out = io.BytesIO()
            head = write_request_head(self.cluster_id, size) if large else b""
            out.write(head)
            fill(out)
            if out.tell() != len(head) + size:
                raise ValueError(f"prewrite of start_ts={start_ts}: fill wrote "
                                 f"{out.tell() - len(head)} bytes, not the {size} announced")
            data = out.getvalue()  # the stream's own buffer, not a copy
            out.close()
            payload = _Serialized(data, size) if large else data
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
                payload = _Serialized(write_request_bytes(self.cluster_id, parts), size)
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
                node_id = _NO_PUMP if entry is None else entry.node_id
            if seq is None:
                self._seq += 1
                seq = self._seq
            self._inflight[fut] = (seq, node_id)
        fut.add_done_callback(self._async_done)  # runs at once if fut is already done
        return seq

    def _async_done(self, fut: Future) -> None:
        with self._lock:
            self._inflight.pop(fut, None)

    def in_flight(self) -> dict[str, int]:
        """Commit/Rollback binlogs not resolved yet (first attempts and retries), per pump."""
        with self._lock:
            return self._count_in_flight(None)

    def _count_in_flight(self, up_to: int | None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for fut, (seq, node_id) in self._inflight.items():
            if (up_to is None or seq <= up_to) and not fut.done():
                counts[node_id] = counts.get(node_id, 0) + 1
        return dict(sorted(counts.items()))

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every Commit/Rollback handed to the client before this call
        (``write_binlog_async``, ``write_finish_nowait``, a batch's ``pending``) is
        written or given up, its retries included.

        Raises :class:`PumpClientTimeout` after ``timeout_s``, naming the pumps and
        how many binlogs were still in flight to each; they keep being retried (a
        commit for up to ``commit_retry_s`` on its prewrite's pump). Must not be
        called on gRPC's callback thread (e.g. from a future's done-callback).
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            target = self._seq
        while True:
            with self._lock:
                waiting = [f for f, (seq, _) in self._inflight.items()
                           if seq <= target and not f.done()]
            if not waiting:
                return
            _, not_done = wait_futures(waiting, timeout=max(deadline - time.monotonic(), 0.0))
            if not_done:
                raise self._timeout_error("flush", timeout_s, target)

    def _timeout_error(self, what: str, waited_s: float, up_to: int | None) -> PumpClientTimeout:
        with self._lock:
            counts = self._count_in_flight(up_to)
            where = {node: self._describe(node) for node in counts}
        total = sum(counts.values())
        per_pump = ", ".join(f"{where[node]}: {n}" for node, n in counts.items()) or "none left"
        return PumpClientTimeout(
            f"PumpClient.{what}: {total} Commit/Rollback binlog(s) still in flight after "
            f"{waited_s:g}s ({per_pump}); a commit is retried only on its prewrite's pump, "
            f"for up to commit_retry_s={self.commit_retry_s:g}s. Check those pumps "
            "(binlogctl -cmd pumps), or wait longer.", in_flight=counts)

    def _describe(self, node_id: str) -> str:
        """``node_id`` with its address when they differ (called under the lock)."""
        entry = self._book.entry(node_id)
        if entry is None or entry.addr == node_id:
            return node_id
        return f"{node_id} at {entry.addr}"

    def write_binlogs(self, binlogs: Sequence[Binlog]) -> list[WriteResult]:
        """Write a batch, pipelining first attempts; per-binlog results in input order."""
        return write_batch(self._batch_side, binlogs)

    def probe_now(self) -> list[str]:
        """Probe every unavailable online pump once; return the ones brought back."""
        with self._lock:
            candidates = self._book.probe_candidates()
        payload = encode(probe())
        back = []
        for entry in candidates:
            if self._closed.is_set():  # close() waits for this thread: one probe at most
                break
            channel = self._channel(entry)
            channel.reset()
            try:
                errmsg = channel.write(self.cluster_id, payload, self.rpc_timeout_s)
            except BinlogError as exc:
                errmsg = str(exc)
            if errmsg:
                metrics.PROBE_TOTAL.labels("error").inc()
                log.debug("probe of pump %s failed: %s", entry.node_id, errmsg)
                continue
            metrics.PROBE_TOTAL.labels("ok").inc()
            with self._lock:
                if self._book.mark_available(entry.node_id):
                    back.append(entry.node_id)
                    log.info("pump %s answered the probe: available again", entry.node_id)
        return back

    def available_pumps(self) -> list[str]:
        with self._lock:
            return self._book.available()

    def unavailable_pumps(self) -> list[str]:
        with self._lock:
            return self._book.unavailable()

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

    def _drop_channels(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()  # on a background thread: never waits here

    def __enter__(self) -> PumpClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- prewrite ------------------------------------------------------------------

    def rpc_timeout_for(self, nbytes: int) -> float:
        """The deadline of one WriteBinlog attempt carrying ``nbytes``."""
        return scaled_timeout_s(self.rpc_timeout_s, nbytes, self.min_write_bytes_per_s)

    def write_timeout_for(self, nbytes: int) -> float:
        """The budget of a Prewrite of ``nbytes`` over all its attempts."""
        return scaled_timeout_s(self.write_timeout_s, nbytes, self.min_write_bytes_per_s)

    def _encode(self, binlog: Binlog) -> bytes:
        payload = encode(binlog)
        self._check_size(binlog.start_ts, len(payload))
        return payload

    def _check_size(self, start_ts: int, size: int) -> None:
        if size > self._max_message_size_bytes:
            raise ProtocolError(
                f"prewrite binlog start_ts={start_ts} is {size} bytes, above "
                f"max_message_size_bytes={self._max_message_size_bytes}; raise max-message-size "
                "on the pumps and the client, or split the transaction")

    def _prepared(self, payload: bytes):
        """A large payload as its serialized request (built once, sent by every attempt
        without a protobuf message or serialization copy); a small one as it is."""
        if len(payload) < LARGE_REQUEST_BYTES:
            return payload
        return _Serialized(write_request_bytes(self.cluster_id, [payload]), len(payload))

    def _write_prewrite(self, start_ts: int, payload, tried: dict[str, str]) -> str:
        """``payload``: the marshalled Binlog, or a :class:`_Serialized` request."""
        if self._closed.is_set():
            raise UnavailableError(f"the pump client is closed: the prewrite binlog of "
                                   f"start_ts={start_ts} was not written; the transaction must "
                                   "not commit")
        budget_s = self.write_timeout_for(len(payload))
        rpc_s = self.rpc_timeout_for(len(payload))
        deadline = time.monotonic() + budget_s
        attempt = len(tried)
        while not self._closed.is_set():
            with self._lock:
                entry = self._book.select(start_ts, attempt, tried.keys())
                available = self._book.available_count
            if entry is None:
                break
            if entry.node_id in tried:  # a new round over pumps that all failed
                self._closed.wait(self._retry_interval_s)
            timeout_s = min(rpc_s, max(deadline - time.monotonic(), 0.05))
            error = self._attempt(entry, payload, timeout_s, remember_ts=start_ts)
            if error is None:
                metrics.WRITE_OK["prewrite"].inc()
                return entry.node_id
            tried[entry.node_id] = error
            attempt += 1
            if time.monotonic() >= deadline and len(tried) >= available:
                break
        # TiDB's last resort: every pump the registry says is online, once more.
        with self._lock:
            last_resort = self._book.probe_candidates()
        for entry in last_resort:
            if self._closed.is_set():
                break
            self._channel(entry).reset()
            error = self._attempt(entry, payload, rpc_s)
            if error is None:
                with self._lock:
                    self._book.mark_available(entry.node_id)
                    self._book.remember(start_ts, entry.node_id)
                metrics.WRITE_OK["prewrite"].inc()
                return entry.node_id
            tried[entry.node_id] = error
        metrics.WRITE_TOTAL.labels("prewrite", "error").inc()
        detail = "; ".join(f"{node}: {err}" for node, err in tried.items()) or "no pump is online"
        raise UnavailableError(
            f"no pump took the prewrite binlog of start_ts={start_ts} ({len(payload)} bytes) "
            f"within {budget_s:g}s ({detail}); the transaction must not commit. "
            "Check that pumps are running and online (binlogctl -cmd pumps).")

    def _attempt(self, entry: PumpEntry, payload: bytes, timeout_s: float, *,
                 remember_ts: int | None = None, forget_ts: int | None = None) -> str | None:
        """One WriteBinlog; None on success, else the error text (also booked).

        On success the prewrite's owner is recorded (``remember_ts``) or the
        commit's dropped (``forget_ts``) in the same lock section as the outcome.
        """
        try:
            channel = self._channel(entry)
            errmsg = None
            if 0 < self.stream_above_bytes <= len(payload) and channel.streams:
                try:
                    errmsg = self._stream(channel, payload, timeout_s)
                except StreamUnsupported:
                    errmsg = None   # another build of pump: WriteBinlog, in this attempt
            if errmsg is not None:
                pass
            elif isinstance(payload, _Serialized):
                errmsg = channel.write_request(payload.request, timeout_s)
            else:
                errmsg = channel.write(self.cluster_id, payload, timeout_s)
        except UnavailableError as exc:
            errmsg = str(exc)
        return self._outcome(entry, errmsg, remember_ts=remember_ts, forget_ts=forget_ts)

    def _stream(self, channel: PumpChannel, payload, timeout_s: float) -> str:
        """One WriteBinlogChunks of ``payload`` (a :class:`_Serialized` request's payload
        or bytes), sliced in chunks from the buffer it is in: no copy of it whole."""
        if isinstance(payload, _Serialized):
            view, crc = payload.payload_view(), payload.crc32c()
        else:
            view, crc = memoryview(payload), google_crc32c.value(bytes(payload))
        return channel.write_stream(self.cluster_id, view, crc, timeout_s)

    def _outcome(self, entry: PumpEntry, errmsg: str, *, remember_ts: int | None = None,
                 forget_ts: int | None = None) -> str | None:
        if not errmsg:
            with self._lock:
                if entry.errors:
                    self._book.record_success(entry.node_id)
                if remember_ts is not None:
                    self._book.remember(remember_ts, entry.node_id)
                elif forget_ts is not None:
                    self._book.forget(forget_ts)
            return None
        if "cluster ID are mismatch" in errmsg:
            raise ClusterIDMismatch(
                f"pump {entry.node_id} at {entry.addr} belongs to another cluster: {errmsg}; "
                f"this client uses cluster id {self.cluster_id}", got=self.cluster_id)
        metrics.RPC_ERRORS.labels(entry.node_id).inc()
        with self._lock:
            moved = self._book.record_failure(entry.node_id)
        if moved:
            metrics.PUMP_UNAVAILABLE.labels(entry.node_id).inc()
            log.warning("pump %s failed %d writes in a row, moved to unavailable: %s",
                        entry.node_id, entry.errors, errmsg)
        else:
            log.debug("write to pump %s failed: %s", entry.node_id, errmsg)
        return errmsg

    # -- commit / rollback -------------------------------------------------------

    def _write_finish(self, binlog: Binlog, payload: bytes, kind: str) -> str | None:
        with self._lock:
            entry = self._book.owner(binlog.start_ts)
        if entry is None:
            return self._give_up(binlog, kind, "no_prewrite",
                                 "no prewrite of this start_ts went through this client")
        deadline = time.monotonic() + self.commit_retry_s
        backoff_s = self._retry_interval_s
        error = "none: the client was closed before the first attempt"
        while True:
            if self._closed.is_set():  # close() is bounded: no new attempt once closed
                return self._give_up(binlog, kind, "closed", f"client closed; last error: {error}")
            try:
                error = self._attempt(entry, payload, self.rpc_timeout_s,
                                      forget_ts=binlog.start_ts)
            except BinlogError as exc:  # refused for good (too large, other cluster)
                return self._give_up(binlog, kind, "rejected", str(exc))
            if error is None:
                metrics.WRITE_OK[kind].inc()
                return entry.node_id
            if time.monotonic() >= deadline:
                return self._give_up(binlog, kind, "timeout",
                                     f"pump {entry.node_id} did not take it within "
                                     f"{self.commit_retry_s:g}s; last error: {error}")
            self._closed.wait(min(backoff_s, max(deadline - time.monotonic(), 0.0)))
            backoff_s = min(backoff_s * 2, self._commit_backoff_max_s)

    def _give_up(self, binlog: Binlog, kind: str, reason: str, why: str) -> None:
        with self._lock:
            self._book.forget(binlog.start_ts)
        metrics.COMMIT_GIVEN_UP.labels(reason).inc()
        metrics.WRITE_TOTAL.labels(kind, "given_up").inc()
        log.error("gave up the %s binlog of start_ts=%d commit_ts=%d: %s; the pump resolves "
                  "the transaction after max-txn-timeout", kind, binlog.start_ts,
                  binlog.commit_ts, why)
        return None

    # -- membership and background threads ----------------------------------------

    def _channel(self, entry: PumpEntry) -> PumpChannel:
        channel = self._channels.get(entry.node_id)  # lock-free hit: the common case
        if channel is not None and channel.addr == entry.addr:
            return channel
        with self._lock:
            channel = self._channels.get(entry.node_id)
            if channel is None or channel.addr != entry.addr:
                if channel is not None:
                    channel.close()
                channel = PumpChannel(entry.node_id, entry.addr, tls=self._tls,
                                      max_message_size_bytes=self._max_message_size_bytes)
                self._channels[entry.node_id] = channel
            return channel

    def _apply(self, records: list[NodeStatus], *, complete: bool) -> None:
        with self._lock:
            events = self._book.apply_statuses(records, complete=complete)
        for line in events:
            log.info("pump client: %s", line)

    def _spawn(self, name: str, target, *args) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _watch_loop(self, registry: RegistryClient, revision: int, timeout_s: float) -> None:
        # the long poll returns None soon after close() sets _closed: the thread never
        # outlives close() inside a registry call (on Ray, a call that runs while the
        # interpreter exits and Ray's core worker shuts down is reported as a crash)
        while not self._closed.is_set():
            try:
                got = registry.watch(PUMP, revision, timeout_s, stop=self._closed)
            except Exception as exc:  # noqa: BLE001 - the registry may restart; keep following
                if self._closed.is_set():
                    return
                log.warning("watching the registry failed, retrying in 1 s: %s", exc)
                self._closed.wait(1.0)
                continue
            if got is None:
                return
            revision, records = got
            self._apply(records, complete=True)

    def _probe_loop(self, interval_s: float) -> None:
        while not self._closed.wait(interval_s):
            try:
                self.probe_now()
            except Exception:  # noqa: BLE001 - logged; the next round tries again
                log.exception("probing unavailable pumps failed")


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


class _BatchSide:
    """The :class:`~.batch.BatchClient` of one client: the narrow view the batched
    path and ``write_finish_nowait`` get instead of the client itself. Each member
    is one call into the client (the ``select``/``owner`` look-ups under its lock, as
    everywhere else in the client)."""

    __slots__ = ("_client",)

    def __init__(self, client: PumpClient):
        self._client = client

    @property
    def cluster_id(self) -> int:
        return self._client.cluster_id

    @property
    def rpc_timeout_s(self) -> float:
        return self._client.rpc_timeout_s

    def rpc_timeout_for(self, nbytes: int) -> float:
        return self._client.rpc_timeout_for(nbytes)

    def closed(self) -> bool:
        return self._client._closed.is_set()

    def channel(self, entry: PumpEntry) -> PumpChannel:
        return self._client._channel(entry)

    def encode_prewrite(self, binlog: Binlog) -> bytes:
        return self._client._encode(binlog)

    def select(self, start_ts: int) -> PumpEntry | None:
        c = self._client
        with c._lock:
            return c._book.select(start_ts)

    def owner(self, start_ts: int) -> PumpEntry | None:
        c = self._client
        with c._lock:
            return c._book.owner(start_ts)

    def outcome(self, entry: PumpEntry, errmsg: str, *, remember_ts: int | None = None,
                forget_ts: int | None = None) -> str | None:
        return self._client._outcome(entry, errmsg, remember_ts=remember_ts,
                                     forget_ts=forget_ts)

    def write_prewrite(self, binlog: Binlog, payload: bytes, tried: dict[str, str]) -> str:
        return self._client._write_prewrite(binlog.start_ts, payload, tried)

    def give_up(self, binlog: Binlog, kind: str, reason: str, why: str) -> None:
        return self._client._give_up(binlog, kind, reason, why)

    def retry_later(self, binlog: Binlog, seq: int | None = None) -> Future:
        return self._client._retry_later(binlog, seq)

    def track(self, fut: Future, node_id: str) -> int:
        return self._client._track(fut, node_id)
