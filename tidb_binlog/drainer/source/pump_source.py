"""Where the merge's items come from: one source per pump.

:class:`PumpSource` is the interface: ``fetch(since_commit_ts, max_bytes,
timeout_s) -> (items, watermark)`` returns ``items = [(commit_ts, payload)]``
ascending, all above ``since_commit_ts`` (payload = the marshalled binlog, fake
binlogs included), and ``watermark``: the source will deliver nothing at or below
it later (``since_commit_ts`` when nothing came); it waits up to ``timeout_s``
when nothing is there.  Feed both to ``Merger.push(node_id, items, watermark)``
and fetch again from ``watermark``.  ``close()`` releases the source.

**ActorPumpSource(actor, calls)**: a :class:`~actors.pump.PumpActor` pulled with
``pull.options(num_returns=2)``, so the batch stays an object ref until asked
for. With ``ref_above`` (``[syncer] large-binlog-bytes``, when the pipeline's keeper
reads references: ``TaskSettings.ref_above``) a Commit binlog of that many bytes or
more comes as a :class:`~tidb_binlog.binlog_ref.BinlogRef` item, opaque here
(``len()`` = its payload's size, for the batch accounting and metrics).  Besides the blocking ``fetch`` it pipelines: ``start_fetch(since)`` issues
a pull and returns a token; ``poll(timeout_s, max_fetches)`` returns the
completed fetches in issue order as :class:`Fetched` ``(since, items,
watermark)``, and as soon as the newest fetch's watermark has resolved it issues
the next one from that watermark, so the pump prepares batch k+1 while batch k
travels and is consumed.  At most ``max_outstanding`` fetches are issued and not
yet returned (backpressure: a caller that stops polling, or polls with a small
``max_fetches``, holds at most that many batches in the object store).  An
error ends the chain (``poll`` raises; :attr:`ActorPumpSource.position` is the
watermark of the last fetch returned, where to ``start_fetch`` again).  Every
Ray call is one of ``calls`` (:class:`PullCalls`: ``pull``, ``ready``, ``get``),
which the shell passes in (``actors.ray_calls.PumpPullCalls``; the pure core never
imports ray); it translates a dead actor to
:class:`~tidb_binlog.errors.UnavailableError`.

**GrpcPumpSource(addr, cluster_id, tls)**: a standalone pump (a real TiDB
setup) over ``binlog.Pump/PullBinlogs``, TLS when ``tls`` (the drainer's
``[security]``) names a CA or certificate; a stream error that looks like a TLS
mismatch logs what to set.  A reader thread keeps one stream open
from the last commit_ts received and feeds a bounded queue (``buffer_items``;
when full the reader blocks, and gRPC flow control stops the pump).  Any stream
error or end is logged and the stream reopened after ``reconnect_interval_s``
(1 s) from the last commit_ts received.  Fatal, raised by ``fetch`` after the
items before them: a payload that does not unmarshal (names the pump and the
commit_ts), a cluster id mismatch, a start below the pump's gc_ts, and a damaged
acknowledged binlog on the pump (``DATA_LOSS``: :class:`~tidb_binlog.errors.DamagedBinlog`
naming the pump and the ts; the drainer must not pass it).  The
watermark is the last commit_ts delivered (the pump's fake binlogs keep it
moving when idle).  ``fetch`` from another position than the last watermark
restarts the stream there.

Both record, when given :class:`~tidb_binlog.drainer.service.metrics.DrainerMetrics`,
``binlog_drainer_pump_position``, ``binlog_reach_duration_time`` (wall clock now
minus the commit's physical time) and ``read_binlog_size`` per binlog.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import grpc

from tidb_binlog import binlog as bl
from tidb_binlog.errors import (
    BinlogError,
    ClusterIDMismatch,
    ConfigError,
    DamagedBinlog,
    ProtocolError,
    PurgedError,
)
from tidb_binlog.grpc_errors import damaged_error, from_rpc_error
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.pump.transport import open_channel
from tidb_binlog.security import tls_enabled

__all__ = [
    "Items",
    "PumpSource",
    "Fetched",
    "PullCalls",
    "ActorPumpSource",
    "GrpcPumpSource",
    "DEFAULT_MAX_BYTES",
    "damaged_error",
]

log = logging.getLogger(__name__)

Items = list[tuple[int, bytes]]
DEFAULT_MAX_BYTES = 4 << 20
_LARGE_BINLOG_BYTES = 10 << 20   # logged, as TiDB does
# What ends a gRPC pull for good (raised by fetch); any other stream error reconnects.
_FATAL = (ClusterIDMismatch, PurgedError, DamagedBinlog)


class PumpSource(Protocol):
    """One pump's ordered stream of ``(commit_ts, payload)``; see the module doc."""

    def fetch(self, since_commit_ts: int, max_bytes: int = DEFAULT_MAX_BYTES,
              timeout_s: float = 1.0) -> tuple[Items, int]: ...

    def close(self) -> None: ...


class Fetched(NamedTuple):
    since_commit_ts: int
    items: Items
    watermark: int


def _observe(metrics, node_id: str, items: Items, wall_clock: Callable[[], float]) -> None:
    if metrics is None or not items:
        return
    now_s = wall_clock()
    for commit_ts, payload in items:
        metrics.observe_binlog(node_id, commit_ts, len(payload), now_s)


# -- the actor source's calls --------------------------------------------------------------
class PullCalls(Protocol):
    """The calls :class:`ActorPumpSource` makes to a PumpActor (implemented over Ray by
    ``actors.ray_calls.PumpPullCalls``; by a fake in unit tests)."""

    def pull(self, actor, since_commit_ts: int, max_bytes: int, timeout_s: float, *,
             ref_above: int = 0) -> tuple:
        """``(batch_ref, watermark_ref)`` of one pull, the batch packed; with
        ``ref_above``, a Commit binlog of that many bytes or more is a
        :class:`~tidb_binlog.binlog_ref.BinlogRef` in it (passed only when > 0)."""
        ...

    def ready(self, refs: Sequence, timeout_s: float) -> set:
        """The refs resolved, waiting up to ``timeout_s`` for the first."""
        ...

    def get(self, ref, what: str) -> Any:
        """The value (a batch unpacked); a dead pump actor is an UnavailableError."""
        ...


class _InFlight:
    __slots__ = ("token", "since", "batch_ref", "wm_ref", "watermark")

    def __init__(self, token: int, since: int, batch_ref, wm_ref):
        self.token = token
        self.since = since
        self.batch_ref = batch_ref
        self.wm_ref = wm_ref
        self.watermark: int | None = None


class ActorPumpSource:
    """A PumpActor as a pump source, with pipelined pulls; see the module doc."""

    def __init__(self, actor, calls: PullCalls | None = None, *, node_id: str = "",
                 max_bytes: int = DEFAULT_MAX_BYTES, pull_timeout_s: float = 1.0,
                 max_outstanding: int = 4, metrics=None,
                 wall_clock: Callable[[], float] = time.time, first_max_bytes: int = 0,
                 ref_above: int = 0):
        if calls is None:
            raise ConfigError("ActorPumpSource needs its calls (actors.ray_calls.PumpPullCalls() "
                              "over Ray)", key="calls")
        if max_outstanding < 1:
            raise ConfigError(f"max_outstanding must be >= 1, got {max_outstanding}",
                              key="max_outstanding")
        self.actor = actor
        self.node_id = node_id
        self.calls = calls
        self.max_bytes = max_bytes
        # the first pull of a chain asks for this much (0: max_bytes): a small first
        # batch lets the merge start while the pump reads the next, bigger one
        self.first_max_bytes = first_max_bytes
        self._first = True
        # Commit binlogs of ref_above bytes or more come as BinlogRef (0: never); asked
        # only when set, so calls (and pumps) that predate references keep working
        self._ref_kw = {"ref_above": ref_above} if ref_above > 0 else {}
        self.pull_timeout_s = pull_timeout_s
        self.max_outstanding = max_outstanding
        self.metrics = metrics
        self._wall_clock = wall_clock
        self._inflight: deque[_InFlight] = deque()
        self._tokens = 0
        self._chaining = False
        self.position: int | None = None

    @property
    def outstanding(self) -> int:
        return len(self._inflight)

    def fetch(self, since_commit_ts: int, max_bytes: int | None = None,
              timeout_s: float | None = None) -> tuple[Items, int]:
        """One blocking pull (not mixed with a running pipeline)."""
        batch_ref, wm_ref = self.calls.pull(
            self.actor, since_commit_ts, self.max_bytes if max_bytes is None else max_bytes,
            self.pull_timeout_s if timeout_s is None else timeout_s, **self._ref_kw)
        what = f"pull from pump {self.node_id or self.actor} after {since_commit_ts}"
        watermark = self.calls.get(wm_ref, what)
        items = self.calls.get(batch_ref, what)
        _observe(self.metrics, self.node_id, items, self._wall_clock)
        self.position = watermark
        return items, watermark

    def start_fetch(self, since_commit_ts: int) -> int:
        """Issue a pull after ``since_commit_ts`` and keep the chain going from it."""
        if len(self._inflight) >= self.max_outstanding:
            raise BinlogError(f"pump {self.node_id}: {len(self._inflight)} fetches already "
                              f"outstanding (max_outstanding={self.max_outstanding}); poll first")
        self._tokens += 1
        max_bytes = self.max_bytes
        if self._first and self.first_max_bytes:
            max_bytes = min(max_bytes, self.first_max_bytes)
        self._first = False
        batch_ref, wm_ref = self.calls.pull(self.actor, since_commit_ts, max_bytes,
                                            self.pull_timeout_s, **self._ref_kw)
        self._inflight.append(_InFlight(self._tokens, since_commit_ts, batch_ref, wm_ref))
        self._chaining = True
        return self._tokens

    def pending_refs(self) -> list:
        """Watermark refs not yet resolved (for one ``ray.wait`` across many sources)."""
        return [f.wm_ref for f in self._inflight if f.watermark is None]

    def poll(self, timeout_s: float = 0.0, max_fetches: int | None = None) -> list[Fetched]:
        """Completed fetches in issue order (waiting up to ``timeout_s`` for one)."""
        try:
            self._resolve(timeout_s)
            out: list[Fetched] = []
            while self._inflight and self._inflight[0].watermark is not None and \
                    (max_fetches is None or len(out) < max_fetches):
                f = self._inflight[0]
                items = self.calls.get(f.batch_ref, self._what(f))
                self._inflight.popleft()
                _observe(self.metrics, self.node_id, items, self._wall_clock)
                self.position = f.watermark
                out.append(Fetched(f.since, items, f.watermark))
            self._chain()
            return out
        except BaseException:
            self._stop_chain()
            raise

    def _what(self, f: _InFlight) -> str:
        return f"pull from pump {self.node_id or self.actor} after {f.since}"

    def _resolve(self, timeout_s: float) -> None:
        waiting = {f.wm_ref: f for f in self._inflight if f.watermark is None}
        if not waiting:
            return
        if self._inflight[0].watermark is not None:
            timeout_s = 0.0  # something is already returnable: do not block
        for ref in self.calls.ready(list(waiting), timeout_s):
            f = waiting[ref]
            f.watermark = self.calls.get(ref, self._what(f))
        self._chain()

    def _chain(self) -> None:
        """Issue the next pull from the newest watermark, within the outstanding bound."""
        if not self._chaining:
            return
        if self._inflight:
            tail = self._inflight[-1]
            if tail.watermark is None or len(self._inflight) >= self.max_outstanding:
                return
            self.start_fetch(tail.watermark)
        elif self.position is not None:
            self.start_fetch(self.position)

    def _stop_chain(self) -> None:
        self._chaining = False
        self._first = True  # a chain started again begins small again
        self._inflight.clear()   # a dropped pull ends within pull_timeout_s on the pump

    def close(self) -> None:
        """Stop the chain and drop the fetches in flight."""
        self._stop_chain()

    @staticmethod
    def wait_any(sources: Iterable[ActorPumpSource], timeout_s: float) -> bool:
        """Block until a fetch of any of ``sources`` resolved (or the timeout); True if one did."""
        sources = list(sources)
        refs = [ref for s in sources for ref in s.pending_refs()]
        if not refs:
            return any(s._inflight for s in sources)
        return bool(sources[0].calls.ready(refs, timeout_s))


# -- gRPC ---------------------------------------------------------------------------------
_COMPRESSION = {"": grpc.Compression.NoCompression, "gzip": grpc.Compression.Gzip}


class _Fatal(NamedTuple):
    error: BinlogError


class GrpcPumpSource:
    """A standalone pump over ``PullBinlogs``, read by a background thread; see the module doc."""

    def __init__(self, addr: str, cluster_id: int, tls=None, *, node_id: str = "",
                 buffer_items: int = 1024, reconnect_interval_s: float = 1.0,
                 compressor: str = "", metrics=None,
                 wall_clock: Callable[[], float] = time.time):
        if compressor not in _COMPRESSION:
            raise ConfigError(f"compressor {compressor!r} is not supported; use '' or 'gzip'",
                              key="compressor")
        self.addr = addr
        self.cluster_id = cluster_id
        self.tls = tls
        self.node_id = node_id or addr
        self.reconnect_interval_s = reconnect_interval_s
        self.metrics = metrics
        self._compression = _COMPRESSION[compressor]
        self._wall_clock = wall_clock
        self._queue: queue.Queue = queue.Queue(maxsize=buffer_items)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._wakeup = threading.Event()
        self._gen = 0              # bumped on every restart; older queue entries are dropped
        self._resume_ts = 0        # where the next stream starts (last commit_ts received)
        self._delivered_ts: int | None = None
        self._call = None
        self._thread: threading.Thread | None = None
        self._pending_error: BinlogError | None = None
        self.reconnects = 0

    # -- consumer side ----------------------------------------------------------------
    def fetch(self, since_commit_ts: int, max_bytes: int = DEFAULT_MAX_BYTES,
              timeout_s: float = 1.0) -> tuple[Items, int]:
        if self._pending_error is not None:
            if since_commit_ts == self._delivered_ts:
                raise self._pending_error
            # a rewind: the error was read ahead of what was delivered; the stream is
            # read again from since_commit_ts and meets it again in its place
            self._pending_error = None
        if self._closed.is_set():
            raise BinlogError(f"pump source {self.node_id} is closed")
        if self._thread is None or since_commit_ts != self._delivered_ts:
            self._restart(since_commit_ts)
            if self._thread is None or not self._thread.is_alive():
                # first fetch, or the reader stopped on a fatal error of an older position
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"pump-source-{self.node_id}")
                self._thread.start()
        gen = self._gen
        items: Items = []
        size_bytes = 0
        deadline = time.monotonic() + timeout_s
        while size_bytes < max_bytes:
            try:
                if items:
                    entry = self._queue.get_nowait()
                else:
                    entry = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            entry_gen, value = entry
            if entry_gen != gen:
                continue
            if isinstance(value, _Fatal):
                if items:
                    self._pending_error = value.error
                    break
                self._pending_error = value.error
                raise value.error
            items.append(value)
            size_bytes += len(value[1])
        watermark = items[-1][0] if items else since_commit_ts
        self._delivered_ts = watermark
        return items, watermark

    def _restart(self, since_commit_ts: int) -> None:
        with self._lock:
            self._gen += 1
            self._resume_ts = since_commit_ts
            self._delivered_ts = since_commit_ts
            call = self._call
        self._wakeup.set()
        if call is not None:
            call.cancel()

    def close(self) -> None:
        self._closed.set()
        self._wakeup.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- reader thread ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                gen, start_ts = self._gen, self._resume_ts
                self._wakeup.clear()
            fatal = None
            try:
                self._stream(gen, start_ts)
                reason = f"{self._where}: stream ended"
            except grpc.RpcError as exc:
                if self._closed.is_set() or gen != self._gen:
                    continue
                err = from_rpc_error(exc, self._where, self.addr,
                                     client_tls=tls_enabled(self.tls),
                                     client_cert=bool(getattr(self.tls, "ssl_cert", "")),
                                     cluster_id=self.cluster_id, since_ts=start_ts)
                if isinstance(err, _FATAL):
                    fatal = err
                else:
                    reason = str(err)
            except BinlogError as exc:
                fatal = exc
            if fatal is not None:
                if self._put(gen, _Fatal(fatal)):
                    return          # reported; a fetch from another position starts anew
                continue            # restarted meanwhile: read from the new position
            if self._closed.is_set() or gen != self._gen:
                continue
            with self._lock:
                resume = self._resume_ts
            log.warning("%s; reconnecting in %.1f s from commit_ts %d", reason,
                        self.reconnect_interval_s, resume)
            self.reconnects += 1
            self._wakeup.wait(self.reconnect_interval_s)

    @property
    def _where(self) -> str:
        return f"pump {self.node_id}" + (f" at {self.addr}" if self.addr != self.node_id else "")

    def _stream(self, gen: int, start_ts: int) -> None:

        req = pump_pb2.PullBinlogReq(clusterID=self.cluster_id,
                                     startFrom=pump_pb2.Pos(offset=start_ts))
        with open_channel(self.addr, self.tls) as channel:
            call = pump_pb2_grpc.PumpStub(channel).PullBinlogs(req,
                                                               compression=self._compression)
            with self._lock:
                if gen != self._gen or self._closed.is_set():
                    call.cancel()
                    return
                self._call = call
            try:
                last = start_ts
                for resp in call:
                    entity = resp.entity
                    commit_ts = entity.meta.commitTs or entity.pos.offset
                    payload = entity.payload
                    self._check(commit_ts, payload, last)
                    if not self._put(gen, (commit_ts, payload)):
                        return
                    last = commit_ts
                    with self._lock:
                        if gen == self._gen:
                            self._resume_ts = commit_ts
                    if self.metrics is not None:
                        self.metrics.observe_binlog(self.node_id, commit_ts, len(payload),
                                                    self._wall_clock())
            finally:
                with self._lock:
                    if self._call is call:
                        self._call = None

    def _check(self, commit_ts: int, payload: bytes, last_ts: int) -> None:
        try:
            b = bl.decode(payload)
        except ProtocolError as exc:
            raise ProtocolError(f"pump {self.node_id} at {self.addr} sent a binlog that does not "
                                f"unmarshal at commit_ts {commit_ts}: {exc}; the drainer stops "
                                "here (check the pump's storage with its /debug/binlog/"
                                f"{commit_ts})") from exc
        if commit_ts <= last_ts:
            raise ProtocolError(f"pump {self.node_id} at {self.addr} sent commit_ts {commit_ts} "
                                f"after {last_ts}; a pump must stream in ascending commit_ts")
        if b.commit_ts != commit_ts:
            raise ProtocolError(f"pump {self.node_id} at {self.addr}: entity meta commit_ts "
                                f"{commit_ts} but the binlog says {b.commit_ts}")
        if len(payload) >= _LARGE_BINLOG_BYTES:
            log.info("pump %s: large binlog at commit_ts %d (%d bytes)", self.node_id, commit_ts,
                     len(payload))

    def _put(self, gen: int, value: Any) -> bool:
        """Queue ``value`` (blocking while full); False when restarted or closed meanwhile."""
        while not self._closed.is_set() and gen == self._gen:
            try:
                self._queue.put((gen, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False
