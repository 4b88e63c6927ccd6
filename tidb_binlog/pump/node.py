"""The pump node: storage owner, state machine, heartbeats, fake binlogs, GC.

A :class:`PumpNode` wraps one storage (a
:class:`~tidb_binlog.pump.storage.protocol.PumpStorage`: the durable ``Storage``, or
the in-memory one of unit tests) and is what the gRPC server, the HTTP status server,
the standalone CLI and the Ray actor drive. It never imports ray.

State machine (TiDB Binlog's, ``tidb_binlog.node``)::

    start ──► online ──pause──► pausing ──► paused          (stop / SIGTERM: ──► paused)
                 └────close──► closing ──(safe to offline)──► offline

- Only ``online`` accepts Prewrite binlogs (``no online: <state>``); Commit,
  Rollback and fake binlogs are accepted in every state so in-flight
  transactions finish. Actions are accepted only while ``online``.
- *Pausing*: ``pausing`` lasts until every Prewrite stored here has its Commit or
  Rollback (the transactions in flight when the pause came finish; one whose Commit
  never arrives is settled by the missing-commit resolver after ``max-txn-timeout``),
  then ``paused``: a paused pump's data is complete up to its ``max_commit_ts``
  until it is back online. TiDB's pump is ``pausing`` while its process shuts
  down; ours stays up (it keeps serving pulls), so the in-flight transactions are
  what pausing waits for.
- *Safe to offline*: write a fake binlog, wait until it is stored and every
  prewrite is matched, note ``max_commit_ts`` as the target, then wait until
  every non-offline drainer's ``max_commit_ts`` (its checkpoint) reaches the
  target, writing a fake binlog every ``offline_fake_interval_s``.
- Node id: ``data-dir/.node`` if present, else the configured ``node_id``,
  else ``hostname:port`` of the advertise address; the chosen id is written to
  ``.node`` so a restart keeps it.
- Start (TiDB's order): register ``online`` (a drainer adds any pump that is
  not offline), then, if the registry had no record of this node or its state
  was ``offline``, tell every online drainer through ``Cistern.Notify``
  (``notify_retries`` attempts each), and only then accept Prewrites: until the
  Notify round is over they are refused with "no online: starting (notifying
  drainers)", so no binlog is stored before every drainer merges this pump. A
  failed Notify writes ``offline`` back and refuses to start with "fail to
  notify all living drainer" (no Prewrite was accepted).

Periodic work is step-driven: :meth:`PumpNode.tick` does whatever is due at the
injected ``clock`` (heartbeat every ``heartbeat_interval_s``, a fake binlog
when nothing was written for ``gen_binlog_interval_s``, GC every
``gc_interval_s``) and returns the seconds until the next duty. ``start()``
runs it on one background thread; unit tests call it directly.

GC target: ``TSO(now - gc_s)``, never past the smallest ``max_commit_ts`` of a
non-offline drainer unless forced (the hold-back is logged and counted in
``binlog_pump_detected_drainer_binlog_purge_count{id}``), and skipped when it
is not above the current ``gc_ts`` or not below ``max_commit_ts``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef
from tidb_binlog.errors import (
    ClusterIDMismatch,
    ProtocolError,
    StateError,
    StorageError,
    UnavailableError,
)
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, PAUSING, PUMP, NodeStatus
from tidb_binlog.pump.metrics import PumpMetrics
from tidb_binlog.pump.node_rules import (
    NODE_ID_FILE,
    GCDecision,
    decide_gc,
    fake_binlog_due,
    lagging_drainers,
    needs_notify,
    next_state,
    resolve_node_id,
)
from tidb_binlog.pump.storage.protocol import PumpStorage
from tidb_binlog.pump.transport import notify_drainer
from tidb_binlog.pump.wire import LARGE_PAYLOAD_BYTES, binlog_header
from tidb_binlog.tso import TimestampOracle

__all__ = [
    "NODE_ID_FILE",
    "PumpNodeOptions",
    "PumpNode",
    "GCDecision",
    "resolve_node_id",
    "needs_notify",
    "next_state",
    "fake_binlog_due",
    "decide_gc",
    "lagging_drainers",
]

log = logging.getLogger(__name__)

PAUSING_POLL_S = 0.1
"""How often a pausing pump looks whether its in-flight transactions finished."""



@dataclass(frozen=True)
class PumpNodeOptions:
    """What the node needs from ``PumpConfig`` (see :meth:`from_config`)."""

    data_dir: str
    advertise_addr: str = "127.0.0.1:8250"
    node_id: str = ""
    cluster_id: int = 0
    heartbeat_interval_s: float = 2.0
    gen_binlog_interval_s: float = 3.0
    gc_s: float = 7 * 86400.0
    gc_interval_s: float = 3600.0
    offline_fake_interval_s: float = 1.0
    notify_retries: int = 3
    label: dict | None = field(default=None, compare=False)

    @classmethod
    def from_config(cls, cfg) -> PumpNodeOptions:
        """Adapt a ``tidb_binlog.config.PumpConfig`` (or any object with its field names)."""
        names = [f for f in cls.__dataclass_fields__ if hasattr(cfg, f)]
        kwargs = {n: getattr(cfg, n) for n in names}
        if not kwargs.get("advertise_addr"):
            kwargs["advertise_addr"] = getattr(cfg, "addr", cls.advertise_addr)
        kwargs["node_id"] = kwargs.get("node_id") or ""
        kwargs["cluster_id"] = kwargs.get("cluster_id") or 0
        return cls(**kwargs)


# -- the node ------------------------------------------------------------------------
class PumpNode:
    """One pump: storage + registry record + periodic duties. Thread-safe."""

    def __init__(self, options: PumpNodeOptions, storage: PumpStorage, *, registry=None,
                 tso=None, notifier=None, metrics: PumpMetrics | None = None,
                 clock=time.monotonic):
        self.options = options
        self.storage = storage
        self.registry = registry
        self.metrics = metrics or PumpMetrics()
        self._clock = clock
        if tso is None:
            if registry is not None:
                tso = registry.get_ts
            else:
                tso = TimestampOracle(Path(options.data_dir) / "tso").get_ts
        self._tso = tso
        self._notifier = notifier
        self.cluster_id = registry.cluster_id() if registry is not None else options.cluster_id
        self.node_id = resolve_node_id(options.data_dir, options.node_id, options.advertise_addr)
        self._lock = threading.RLock()
        self._state = PAUSED
        self._accepting = False   # Prewrites: only once start() finished its Notify round
        self._last_err_msg = ""   # the storage refusal the last heartbeat saw (logged on change)
        now = clock()
        self._last_write_s = now
        self._next_heartbeat_s = now
        self._next_gc_s = now + options.gc_interval_s
        self._stop = threading.Event()
        self.done = threading.Event()      # set once paused/offline by an action, or stopped
        self._threads: list[threading.Thread] = []

    # -- lifecycle -------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    def start(self, background: bool = True) -> None:
        """Register ``online``, Notify the drainers if needed, then accept Prewrites and
        start the duty loop (see the module docstring for the order)."""
        previous = self.registry.node(PUMP, self.node_id) if self.registry else None
        self._accepting = False        # until the Notify round is done
        self._set_state(ONLINE)        # drainers add a pump that is not offline
        if self.registry is not None and needs_notify(previous):
            try:
                self._notify_drainers()
            except UnavailableError as exc:
                self._set_state(OFFLINE)
                raise UnavailableError(f"fail to notify all living drainer: {exc}") from exc
        self._accepting = True
        log.info("pump %s online at %s (cluster id %d)", self.node_id,
                 self.options.advertise_addr, self.cluster_id)
        if background:
            self._spawn(self._run, "pump-duties")

    def stop(self) -> None:
        """Graceful stop (SIGTERM): ``online``/``pausing`` become ``paused`` (``closing``
        and ``offline`` stay), stop the loops, publish the final state, close the storage."""
        with self._lock:
            if self._state in (ONLINE, PAUSING):
                self._set_state(PAUSED)
        self._stop.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=10)
        # A heartbeat that read the state before the change above may have published it
        # after; with the loops joined, publish the final state once more (last word).
        try:
            if self.registry is not None:
                with self._lock:
                    self.registry.update_node(PUMP, self.status())
        finally:
            self.storage.close()
            self.done.set()

    def apply_action(self, node_id: str, action: str) -> str:
        """HTTP ``PUT /state/{node_id}/{action}``: validate, then act asynchronously."""
        if node_id != self.node_id:
            raise StateError(f"node {node_id!r} is not this pump ({self.node_id!r}); "
                             "send the action to that pump's own address", state=self._state)
        with self._lock:
            self._set_state(next_state(self._state, action))
        target = self._pause if action == "pause" else self._wait_safe_to_offline
        self._spawn(target, f"pump-{action}")
        return f"apply action {action} success!"

    def _pause(self) -> None:
        """``pausing`` until every Prewrite stored here has its Commit or Rollback (the
        in-flight transactions finish: new Prewrites are refused, Commits accepted; one
        whose Commit never comes is settled by the missing-commit resolver after
        ``max-txn-timeout``), then ``paused``. A stop() meanwhile makes it ``paused``."""
        logged = False
        while not self._stop.is_set() and not self.storage.all_matched():
            if not logged:
                log.info("pump %s pausing: waiting for the Commit/Rollback of the "
                         "transactions in flight", self.node_id)
                logged = True
            self._stop.wait(PAUSING_POLL_S)
        with self._lock:
            if self._state == PAUSING:
                self._set_state(PAUSED)
        log.info("pump %s is paused", self.node_id)
        self.done.set()

    def _wait_safe_to_offline(self) -> None:
        fake_ts = self.write_fake_binlog()
        while not self._stop.is_set():
            self.storage.wait_for_commit(fake_ts - 1, 1.0)
            if self.storage.max_commit_ts >= fake_ts and self.storage.all_matched():
                break
        target = self.storage.max_commit_ts
        while not self._stop.is_set():
            lagging = lagging_drainers(self.drainers(), target)
            if not lagging:
                break
            log.info("pump %s closing: waiting for drainers %s to reach %d", self.node_id,
                     lagging, target)
            self.write_fake_binlog()
            self._stop.wait(self.options.offline_fake_interval_s)
        if self._stop.is_set():
            return
        with self._lock:
            self._set_state(OFFLINE)
        log.info("pump %s is offline", self.node_id)
        self.done.set()

    # -- writing / reading -------------------------------------------------------------
    def write_binlog(self, cluster_id: int, payload: bytes) -> None:
        """The WriteBinlog rule set; durable on return. Raises a BinlogError naming
        what was refused."""
        b = self._admit(cluster_id, payload)
        if b is not None:
            self.storage.write_binlog(b, payload)
            self._last_write_s = self._clock()

    def submit_binlog(self, cluster_id: int, payload: bytes):
        """:meth:`write_binlog` for an event loop (call it on the loop's thread): the
        rules now, then an awaitable that completes once durable (None for the probe)."""
        b = self._admit(cluster_id, payload)
        if b is None:
            return None
        self._last_write_s = self._clock()
        return self.storage.write_binlog_async(b, payload)

    def submit_binlog_file(self, cluster_id: int, spill):
        """:meth:`submit_binlog` of a binlog received into a spill file (the streaming
        write, :mod:`tidb_binlog.pump.stream_write`): the same rules, the header fields
        read from a map of the file, the record appended from the file by the storage
        (``write_binlog_file_async``), so the binlog is never in memory whole."""
        self.check_cluster(cluster_id)
        mapped = spill.mapped() if spill.size else None
        try:
            view = memoryview(mapped) if mapped is not None else memoryview(b"")
            try:
                b = self._admit(cluster_id, view)
            finally:
                view.release()
        finally:
            if mapped is not None:
                try:
                    mapped.close()
                except BufferError:  # a view held by a raised error's frames: freed with it
                    pass
        if b is None:
            return None
        self._last_write_s = self._clock()
        return self.storage.write_binlog_file_async(b, spill.source(), spill.crc)

    def check_cluster(self, cluster_id: int) -> None:
        """Raise ClusterIDMismatch (TiDB's message) unless ``cluster_id`` is this pump's."""
        if cluster_id != self.cluster_id:
            raise ClusterIDMismatch(f"cluster ID are mismatch, {cluster_id} vs {self.cluster_id}",
                                    expected=self.cluster_id, got=cluster_id)

    def check_prewrite_accepted(self) -> None:
        """Raise StateError unless a Prewrite would be accepted now (online, after the
        start's Notify round): what a paused or starting pump answers."""
        if not (self._accepting and self._state == ONLINE):
            state = self._state if self._state != ONLINE else "starting (notifying drainers)"
            raise StateError(f"no online: {state}", state=self._state)

    def _admit(self, cluster_id: int, payload: bytes) -> bl.Binlog | None:
        """Cluster id, decoding (once), probe (None), Prewrite only when accepting."""
        self.check_cluster(cluster_id)
        if len(payload) >= LARGE_PAYLOAD_BYTES and self.storage.stores_payload:
            b = binlog_header(payload)  # a storage that stores the payload needs no more
        else:
            b = bl.decode(bytes(payload) if isinstance(payload, memoryview) else payload)
        if bl.is_probe(b):
            return None
        if b.tp == bl.BinlogType.PREWRITE:
            self.check_prewrite_accepted()
        return b

    def write_fake_binlog(self) -> int:
        ts = self._tso()
        self.storage.write_binlog(bl.fake(ts))
        self._last_write_s = self._clock()
        self.metrics.fake_binlog_count.inc()
        return ts

    def pull(self, since_commit_ts: int, max_bytes: int = 4 << 20,
             timeout_s: float = 0.0, ref_above: int = 0
             ) -> tuple[list[tuple[int, bytes | BinlogRef]], int]:
        """Commits above ``since_commit_ts`` and the watermark they are complete up to.

        Every binlog this pump will ever serve with commit_ts <= watermark is either
        at or below ``since_commit_ts`` or in the returned batch. With nothing new,
        waits up to ``timeout_s`` on the storage (no polling).

        A stopped pump (SIGTERM, ``stop()``: ``paused``, storage closed) raises
        UnavailableError, not the closed storage's StorageError: like TiDB's pump
        whose server is gone, it is expected back, and a drainer retries an
        unavailable pump where it treats a storage fault as fatal.

        With ``ref_above > 0`` a Commit whose served payload is ``ref_above`` bytes or
        more comes as a :class:`~tidb_binlog.binlog_ref.BinlogRef` (this node's id,
        commit_ts, start_ts, size) instead of its bytes, the pump never building that
        payload; at most one per batch, last, counted as a small item against
        ``max_bytes``. Read it with :meth:`read_payload`.
        """
        self._check_serving()
        try:
            batch, position = self._pull(since_commit_ts, max_bytes, ref_above)
            if not batch and position <= since_commit_ts and timeout_s > 0:
                self.storage.wait_for_commit(since_commit_ts, timeout_s)
                batch, position = self._pull(since_commit_ts, max_bytes, ref_above)
        except StorageError:
            self._check_serving()  # closed by a stop() while this pull ran
            raise
        # Everything served in (since, position] was returned: past keys that serve
        # nothing (an orphan commit) the position still moves, so no caller reads them
        # again in a loop.
        return batch, max(position, since_commit_ts)

    def _check_serving(self) -> None:
        if self._stop.is_set():
            raise UnavailableError(f"pump {self.node_id} is stopped (state {self._state}); "
                                   "pull again once it is restarted")

    def read_payload(self, commit_ts: int, offset: int, size: int) -> bytes | bytearray:
        """Bytes ``[offset, offset+size)`` of the payload :meth:`pull` serves at
        ``commit_ts`` (what a ``BinlogRef`` of this pump names), read from the value log
        without building the payload. Looked up by ``commit_ts`` on every call, so it
        works across a restart and is safe to retry. Errors name this pump: PurgedError
        (at or below gc_ts), StorageError (nothing served there), ProtocolError (a range
        outside the payload), CorruptRecord (a damaged record), UnavailableError
        (stopped)."""
        self._check_serving()
        try:
            return self.storage.read_payload(commit_ts, offset, size)
        except (StorageError, ProtocolError) as exc:
            self._check_serving()  # closed by a stop() while this read ran
            fields = {name: getattr(exc, name) for name in exc._fields}
            raise type(exc)(f"pump {self.node_id}: cannot read {size} bytes at offset "
                            f"{offset} of the binlog at commit_ts {commit_ts}: {exc.message}",
                            **fields) from exc

    def _pull(self, since_commit_ts: int, max_bytes: int, ref_above: int = 0
              ) -> tuple[list[tuple[int, bytes | BinlogRef]], int]:
        """``(batch, position)`` from the storage, references naming this node."""
        return self.storage.pull_commits(since_commit_ts, max_bytes, ref_above=ref_above,
                                         node_id=self.node_id)

    # -- periodic duties -----------------------------------------------------------------
    def tick(self) -> float:
        """Do every duty that is due now; return seconds until the next one."""
        now = self._clock()
        opts = self.options
        if self._state != OFFLINE and fake_binlog_due(now, self._last_write_s,
                                                      opts.gen_binlog_interval_s):
            self.write_fake_binlog()
            now = self._clock()
        if now >= self._next_heartbeat_s:
            self.heartbeat()
            self._next_heartbeat_s = now + opts.heartbeat_interval_s
        if now >= self._next_gc_s:
            self._next_gc_s = now + opts.gc_interval_s
            self.gc()
        next_fake_s = self._last_write_s + opts.gen_binlog_interval_s
        return max(0.0, min(next_fake_s, self._next_heartbeat_s, self._next_gc_s) - now)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait_s = self.tick()
            except Exception:
                log.exception("pump %s: periodic duty failed; retrying in 1 s", self.node_id)
                wait_s = 1.0
            self._stop.wait(min(wait_s, 1.0))

    def heartbeat(self) -> None:
        status = self.status()
        if self.registry is not None:
            self.registry.update_node(PUMP, status)
            # A pause/close (or stop) between reading the state and this write published
            # its state first; this stale write then undid it (the registry lets a record
            # go back to online): publish the state as it is now, so a state change always
            # has the last word. Not holding the lock across the registry call keeps
            # stop() and actions from waiting on a slow registry.
            if self._state != status.state:
                with self._lock:
                    self.registry.update_node(PUMP, self.status())
        if status.err_msg != self._last_err_msg:  # logged when it starts and when it ends
            if status.err_msg:
                log.warning("pump %s: %s", self.node_id, status.err_msg)
            else:
                log.info("pump %s: the disk guard accepts Prewrites again", self.node_id)
            self._last_err_msg = status.err_msg

    def gc(self, force: bool = False) -> GCDecision:
        d = decide_gc(self._tso(), self.options.gc_s, self.storage.gc_ts,
                      self.storage.max_commit_ts, self.drainers(), force)
        for drainer_id in d.held_back_by:
            self.metrics.drainer_purge_count.labels(drainer_id).inc()
        if d.held_back_by:
            log.warning("pump %s GC %s", self.node_id, d.reason)
        if d.gc_ts is not None:
            log.info("pump %s GC up to ts %d%s", self.node_id, d.gc_ts,
                     f" ({d.reason})" if d.reason else "")
            self.storage.gc(d.gc_ts)
        return d

    # -- status ------------------------------------------------------------------------
    def status(self) -> NodeStatus:
        return NodeStatus(node_id=self.node_id, host=self.options.advertise_addr,
                          state=self._state, is_alive=self._state != OFFLINE,
                          label=self.options.label, max_commit_ts=self.storage.max_commit_ts,
                          update_ts=self._tso(), err_msg=self.storage_error())

    def storage_error(self) -> str:
        """What the storage refuses now (the disk guard's message), else "": ``/status``
        shows it as ``ErrMsg``, the registry record as ``errMsg`` (refreshed by each
        heartbeat, which logs when it starts and ends)."""
        return self.storage.disk_guard_message()

    def pumps(self) -> list[NodeStatus]:
        if self.registry is None:
            return [self.status()]
        return self.registry.nodes(PUMP)

    def drainers(self) -> list[NodeStatus]:
        return self.registry.nodes(DRAINER) if self.registry is not None else []

    def get_ts(self) -> int:
        return self._tso()

    # -- internals -----------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        self._state = state
        if self.registry is not None:
            self.registry.update_node(PUMP, self.status())

    def _notify_drainers(self) -> None:
        notifier = self._notifier
        if notifier is None:
            notifier = notify_drainer
        failed = []
        for d in self.drainers():
            if d.state != ONLINE:
                continue
            for attempt in range(1, self.options.notify_retries + 1):
                try:
                    notifier(d.host)
                    break
                except Exception as exc:  # any transport error: retry, then report
                    log.warning("notify drainer %s at %s failed (attempt %d/%d): %s",
                                d.node_id, d.host, attempt, self.options.notify_retries, exc)
            else:
                failed.append(f"{d.node_id}@{d.host}")
        if failed:
            raise UnavailableError(f"drainers {failed} did not answer Notify")

    def _spawn(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=f"{name}-{self.node_id}", daemon=True)
        self._threads.append(t)
        t.start()
