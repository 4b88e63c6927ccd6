"""MergerActor: the drainer pipeline's driver (see :mod:`actors.drainer` for the picture).

It pulls every pump, merges by commit_ts
(:class:`~tidb_binlog.drainer.merge.Merger`), and hands each ready batch
(``merge_batch`` items, up to 16x that while the input is backed up and earlier
batches are in flight) to the schema keeper; the keeper's result *refs* go straight to the coordinator, so
translated rows never pass through the merger. In exactly-once mode the keeper
also routes the rows and plans the flushes (``translate_routed``: one returned
object per worker and a plan) and the coordinator, which receives only the plan
(``apply_routed``), hands each worker its own object: rows travel keeper → worker.
The file sink's pair (``settings.sink == "file"``) and the causality mode are
driven with ``translate`` → ``apply``. At most ``max_inflight`` batches are outstanding
(backpressure). On a :class:`~actors.ray_calls.PipelineReset`
(an actor of the pipeline died and Ray restarted it) it replays from the
durable checkpoint.

**Pumps come and go** (TiDB's ``drainer/collector.go``): a
:class:`~tidb_binlog.drainer.collector.Collector` lists the registry's pumps at
start, every ``detect-interval`` and at once on ``Cistern.Notify``, and applies
:func:`~tidb_binlog.drainer.collector.plan`'s actions to the merge sources: a new
pump is merged from the merger's latest ts, paused pumps are not pulled (the
merge waits for them), offline pumps are retired once their final
``maxCommitTS`` was pulled, then removed. A pump is pulled as the PumpActor named
:func:`~tidb_binlog.drainer.pipeline.names.pump_actor_name` of its node id in the task's namespace
(pipelined pulls, :class:`~tidb_binlog.drainer.pump_source.ActorPumpSource`)
when one exists, else over gRPC from its registered host
(:class:`~tidb_binlog.drainer.pump_source.GrpcPumpSource`, a standalone pump).
A pump that cannot be reached is retried every second from its last watermark;
the merge waits for it (the feeds: :mod:`actors.merger_feeds`). A fixed ``pumps`` dict (node id → PumpActor handle)
replaces the registry listing (tests, embedding).

**The node** (:class:`~actors.drainer_node.DrainerNode`, when ``service`` is
given): Cistern gRPC on ``addr`` (Notify waits until a refresh has added the new
pump), HTTP status on ``addr`` port + 1, the registry record ``online`` with the
saved checkpoint, refreshed every second; :meth:`MergerActor.stop` records
``paused``, ``PUT /state/{id}/close`` records ``offline``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque

from actors.drainer_node import DrainerNode, ServiceSettings, merge_expositions
from actors.merger_feeds import RETRY_S as _RETRY_S
from actors.merger_feeds import ActorFeed, GrpcFeed
from actors.ray_calls import PipelineReset, RayCalls
from tidb_binlog.drainer.checkpoint_store import MySQLCheckpointStore
from tidb_binlog.drainer.cistern import collector_notifier
from tidb_binlog.drainer.collector import Collector, MergerSources
from tidb_binlog.drainer.http_status import DrainerStatus
from tidb_binlog.drainer.merge import Merger
from tidb_binlog.drainer.metrics import build_drainer_metrics
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE, pump_actor_name
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.pump_source import GrpcPumpSource
from tidb_binlog.errors import BinlogError, TransientDownstreamError, UnavailableError
from tidb_binlog.node import OFFLINE, ONLINE, PAUSED, PUMP, NodeStatus
from tidb_binlog.packed import pack

__all__ = ["MergerActor"]

log = logging.getLogger(__name__)

_IDLE_WAIT_S = 0.05       # longest wait for a pull when idle (bounds the Notify latency)
_BIND_WAIT_S = 10.0       # how long a (re)started merger tries to bind its addresses
_BACKLOG_BATCHES = 16     # a merged batch grows up to this many merge_batch when backed up


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CREATION = re.compile(r"ray::(\w+)\.__init__")


def _one_line(exc: BaseException) -> str:
    """The error for a log line or ``status()``: a Ray error carries the remote traceback
    with terminal colour codes; keep its last line (the remote exception), uncoloured."""
    text = _ANSI.sub("", str(exc)).strip()
    if "\n" not in text or isinstance(exc, BinlogError) and type(exc) is not PipelineReset:
        return text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{lines[0]} ... {lines[-1]}" if len(lines) > 1 else lines[0]


def _init_failure(exc: BaseException) -> UnavailableError | None:
    """When ``exc`` says a pipeline actor's constructor raised (Ray does not restart such
    an actor, so replaying would loop forever), the error that stops the task."""
    seen = exc
    while seen is not None:
        if getattr(seen, "actor_init_failed", False):
            text = _ANSI.sub("", str(seen))
            actor = _CREATION.search(text)
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            return UnavailableError(
                f"the pipeline actor {actor.group(1) if actor else '(unknown)'} could not "
                f"start: {lines[-1] if lines else type(seen).__name__}; fix the cause and "
                "start the drainer again")
        seen = seen.__cause__ or seen.__context__
    return None


class MergerActor:
    """Drives the pipeline: pulls every pump, merges by commit_ts, feeds keeper → coordinator.

    ``pumps``: a fixed node id → PumpActor handle map, or None to follow ``registry``.
    ``service``: serve as a drainer node (Cistern, HTTP, registry record), or None.
    """

    def __init__(self, settings: TaskSettings, keeper, coordinator, pumps: dict | None = None,
                 *, registry=None, service: ServiceSettings | None = None,
                 workers: list | tuple = (), autostart: bool = True):
        self.settings = settings
        self.keeper = keeper
        self.coordinator = coordinator
        self.static_pumps = dict(pumps) if pumps is not None else None
        self.registry = registry
        self.service = service
        self.workers = list(workers)
        self.error: str | None = None
        self.state = "starting"
        self.resets = 0
        self.stop_stage = ""  # where stop() is (Drainer.stop names it when it times out)
        self.merged = 0
        self.positions: dict[str, int] = {}
        self.pumps: list[str] = []
        self.feed_kinds: dict[str, str] = {}  # node id -> "actor" | "grpc" (how it is pulled)
        self.metrics = build_drainer_metrics()
        self._start_ts = 0
        self._store = None
        self._buffered = 0
        self._inflight_batches = 0
        self._disorder = 0
        self._applied_rows = -1
        self._last_sync_s = time.time()
        self._collector_retry_at = 0.0
        self._result: dict | None = None
        self._startup_error: BinlogError | None = None
        self._stop_lock = threading.Lock()
        self._stop = threading.Event()
        self._started = threading.Event()
        detect_s = service.detect_interval_s if service is not None else 5.0
        self._collector = Collector(self._list_pumps, None, detect_interval_s=detect_s)
        self.node = None
        self._thread = threading.Thread(target=self._run, name="merger", daemon=True)
        if service is not None:
            def registry_lost(exc):  # HEARTBEAT_MAX_FAILURES heartbeats failed: stop
                self._fail(exc)
                self._stop.set()

            self.node = DrainerNode(service, registry, checkpoint_ts=self._saved_checkpoint_ts,
                                    on_lost=registry_lost)
            deadline = time.monotonic() + _BIND_WAIT_S
            while True:
                try:
                    self.node.serve(on_notify=collector_notifier(self._collector),
                                    status_provider=self._http_status,
                                    metrics_provider=self._metrics_text,
                                    on_action=self._on_action)
                    break
                except BinlogError as exc:
                    # After a crash Ray restarts us at once; the old process's ports may
                    # take a moment to be released.
                    if time.monotonic() < deadline:
                        time.sleep(0.5)
                        continue
                    self._startup_error = exc
                    self._fail(exc)
                    return
        if autostart:
            self._thread.start()

    # -- control ---------------------------------------------------------------------------
    def addresses(self) -> dict:
        """Where the node serves (raises the start-up error, e.g. an address in use)."""
        if self._startup_error is not None:
            raise self._startup_error
        node = self.node
        return {"node_id": node.node_id if node else "", "addr": node.host if node else "",
                "status_addr": node.http.addr if node and node.http else ""}

    def status(self) -> dict:
        return {"state": self.state, "error": self.error, "resets": self.resets,
                "merged": self.merged, "pump_positions": dict(self.positions),
                "pumps": list(self.pumps),
                "pump_feeds": {n: k for n, k in self.feed_kinds.items() if n in self.pumps},
                "node_id": self.node.node_id if self.node else "",
                "node_state": self.node.state if self.node else "",
                "saved_commit_ts": self.node.max_commit_ts if self.node else self._start_ts,
                "stop_stage": self.stop_stage}

    def wait_started(self, timeout_s: float = 60.0) -> str:
        """Block until the pipeline started merging (the node is online) or failed;
        returns the state (``starting`` if it is still reading the checkpoint)."""
        self._started.wait(timeout_s)
        return self.state

    def notify(self, timeout_s: float = 10.0) -> bool:
        """What ``Cistern.Notify`` does: refresh the pump list now and wait for it."""
        return self._collector.wait(self._collector.notify(), timeout_s)

    def stop(self, final_state: str = PAUSED) -> dict:
        """Stop pulling, let the coordinator finish, save the final checkpoint, and record
        ``final_state`` (``paused``, or ``offline`` for a ``close``) in the registry."""
        with self._stop_lock:
            if self._result is not None:
                return self._result
            self._stop.set()
            if self._thread.is_alive():
                self.stop_stage = "waiting for the merge thread to hand out its last batch"
                self._thread.join(timeout=60)
            final_ts = None
            if self.error is None:
                try:
                    self.stop_stage = ("waiting for the coordinator's close(): the SQL workers "
                                       "finishing, then the final checkpoint save")
                    cp = RayCalls.get(RayCalls.call(self.coordinator, "close"))
                    final_ts = cp.commit_ts
                    self._result = {"commit_ts": cp.commit_ts, "consistent": cp.consistent}
                    self.state = "stopped"
                except Exception as exc:  # no final checkpoint: the saved one stands
                    self._fail(exc)
            if self._result is None:
                self._result = {"error": self.error}
            if self.node is not None:
                self.stop_stage = f"recording {final_state} in the registry"
                self.node.close(final_state, final_ts)
            self.stop_stage = "stopped"
            return self._result

    def _on_action(self, action: str) -> None:
        """``PUT /state/{id}/{pause|close}``: start stopping, answer at once."""
        self.node.check_action(action)
        final = PAUSED if action == "pause" else OFFLINE
        threading.Thread(target=self.stop, args=(final,), name=f"drainer-{action}",
                         daemon=True).start()

    def _fail(self, exc: BaseException) -> None:
        text = _one_line(exc)
        if isinstance(exc, TransientDownstreamError):  # its retries are over: say so
            text = text.removesuffix("; will retry") + " (retried until the retry budget ran out)"
        self.error = f"{type(exc).__name__}: {text}"
        self.state = "failed"
        self._started.set()
        log.error("replication task stopped: %s", self.error)
        if self.node is not None and self.node.state == ONLINE:
            try:  # pumps must not wait for our Notify; our checkpoint still holds their GC
                self.node.set_state(PAUSED)
            except Exception as rec_exc:
                log.warning("could not record the drainer paused: %s", rec_exc)

    # -- loop ---------------------------------------------------------------------------------
    def _run(self) -> None:
        replay = RayCalls.reconstructed()  # a restarted merger replays too
        while not self._stop.is_set():
            try:
                self._pipeline(replay)
                return
            except PipelineReset as exc:
                if (failed := _init_failure(exc)) is not None:
                    self._fail(failed)  # a constructor that raised: Ray will not restart it
                    return
                self.resets += 1
                log.warning("pipeline reset (%s); replaying from the checkpoint",
                            _one_line(exc))
                time.sleep(0.5)
            except Exception as exc:  # the task stops; status() names the error
                if (failed := _init_failure(exc)) is not None:
                    self._fail(failed)
                    return
                if RayCalls.is_actor_died(exc):
                    self.resets += 1
                    log.warning("a pipeline actor died (%s); replaying from the checkpoint",
                                _one_line(exc))
                    time.sleep(0.5)
                    replay = True
                    continue
                self._fail(exc)
                return
            replay = True

    def _pipeline(self, replay: bool = False) -> None:
        if self.settings.downstream is not None:  # the SQL coordinator counts the replays
            cp = RayCalls.get(RayCalls.call(self.coordinator, "reset", replay))
            self.resets = max(self.resets, cp.resets)
        else:
            cp = RayCalls.get(RayCalls.call(self.coordinator, "reset"))
        RayCalls.get(RayCalls.call(self.keeper, "reset", cp.schema_version))
        self._start_ts = cp.commit_ts
        merger = Merger(start_ts=cp.commit_ts)
        target = MergerSources(merger, self._open_feed)
        self._collector.target = target
        try:
            if self.node is not None and self.node.state != ONLINE:
                self.node.register(cp.commit_ts)  # before the first refresh: see Notify
            self._first_refresh(target)
            self.state = "running"
            self._started.set()
            self._merge(merger, target)
        finally:
            target.close()

    def _first_refresh(self, target: MergerSources) -> None:
        """The merge starts only once the pump list was read (TiDB pauses it until then)."""
        while not self._stop.is_set():
            try:
                self._collector.refresh()
                self.pumps = sorted(target.sources)
                return
            except UnavailableError as exc:
                log.warning("cannot list the pumps (%s); retrying in %.0f s", exc, _RETRY_S)
                self._stop.wait(_RETRY_S)

    def _step_collector(self, target: MergerSources) -> None:
        now = time.monotonic()
        if now < self._collector_retry_at:
            return
        try:
            if self._collector.step():
                self.pumps = sorted(target.sources)
        except UnavailableError as exc:
            log.warning("pump discovery failed (%s); retrying in %.0f s", exc, _RETRY_S)
            self._collector_retry_at = now + _RETRY_S

    def _batch_limit(self, merger: Merger, inflight: int) -> int:
        """``merge_batch`` items, up to :data:`_BACKLOG_BATCHES` times that while the pumps'
        input is backed up *and* the pipeline is busy with earlier batches (catching up:
        fewer, bigger hops; live, or the pipeline idle: small, prompt ones, so the keeper
        and the workers start on the first rows at once instead of after a big batch)."""
        limit = self.settings.merge_batch
        backlog = merger.buffered()
        if inflight and backlog > 2 * limit:
            return min(backlog, _BACKLOG_BATCHES * limit)
        return limit

    def _merge(self, merger: Merger, target: MergerSources) -> None:
        routed, workers = self.settings.routed, self.settings.worker_count
        seq = 0
        inflight: deque = deque()
        last_idle = 0.0
        while not self._stop.is_set():
            self._step_collector(target)
            progressed = False
            feeds = target.pullable()
            for name, feed in feeds.items():
                for items, watermark in feed.poll():
                    merger.push(name, items, watermark)
                    progressed = True
            if progressed:
                self.positions = merger.positions()
            ready = merger.pop_ready_pairs(self._batch_limit(merger, len(inflight)))
            if ready:
                items = pack(ready)
                if routed:  # rows go keeper -> workers; the coordinator sees the plan
                    refs = RayCalls.call_n(self.keeper, "translate_routed", workers + 1,
                                         items, workers)
                    inflight.append(RayCalls.call(self.coordinator, "apply_routed", seq,
                                                refs[0], refs[1:]))
                else:
                    translated = RayCalls.call(self.keeper, "translate", items)
                    inflight.append(RayCalls.call(self.coordinator, "apply", seq, translated))
                seq += 1
                self.merged += len(ready)
                progressed = True
            disorder = merger.counters["out_of_order"]
            if disorder > self._disorder:
                self.metrics.disorder_binlog_count.inc(disorder - self._disorder)
                self._disorder = disorder
            while inflight and (len(inflight) >= self.settings.max_inflight
                                or RayCalls.ready(inflight[0])):
                RayCalls.get(inflight.popleft())
            self._buffered, self._inflight_batches = merger.buffered(), len(inflight)
            now = time.monotonic()
            if not progressed:
                if not inflight and now - last_idle > 0.5:
                    RayCalls.get(RayCalls.call(self.coordinator, "idle"))
                    last_idle = now
                RayCalls.wait_any([r for f in feeds.values() for r in f.refs()],
                                timeout_s=_IDLE_WAIT_S)
        while inflight:
            RayCalls.get(inflight.popleft())

    # -- pump sources ------------------------------------------------------------------
    def _list_pumps(self) -> list[NodeStatus]:
        if self.static_pumps is not None:
            return [NodeStatus(node_id, "") for node_id in self.static_pumps]
        if self.registry is None:
            return []
        return self.registry.nodes(PUMP)

    def _open_feed(self, node_id: str, host: str, since_ts: int):
        max_bytes = self.settings.pull_max_bytes
        if self.static_pumps is not None:
            actor = self.static_pumps[node_id]
        else:
            namespace = self.service.namespace if self.service else DEFAULT_NAMESPACE
            actor = RayCalls.find_actor(pump_actor_name(node_id), namespace)
        if actor is not None:
            log.info("merging pump %s (PumpActor) after commit_ts %d", node_id, since_ts)
            self.feed_kinds[node_id] = "actor"
            return ActorFeed(node_id, actor, since_ts, max_bytes, self.metrics)
        s = self.service
        log.info("merging pump %s over gRPC at %s after commit_ts %d", node_id, host, since_ts)
        self.feed_kinds[node_id] = "grpc"
        source = GrpcPumpSource(host, self.settings.cluster_id, s.security if s else None,
                                node_id=node_id, compressor=s.compressor if s else "")
        return GrpcFeed(node_id, source, since_ts, max_bytes, self.metrics)

    # -- status and metrics (HTTP threads) -------------------------------------------
    def _saved_checkpoint_ts(self) -> int:
        """The durable checkpoint (what a restarted drainer would start from); called by
        each heartbeat, which also samples the apply counter for ``Synced``."""
        st = None
        try:
            st = self._coordinator_status()
        except Exception as exc:  # restarting: Synced is sampled at the next beat
            log.debug("coordinator status unavailable: %s", exc)
        saved = 0
        if self.settings.downstream is None:  # a file sink: its savepoint, from its status
            saved = st.get("saved_commit_ts", 0) if st is not None else 0
        else:
            if self._store is None:
                s = self.settings
                self._store = MySQLCheckpointStore(s.downstream, s.cluster_id,
                                                   schema=s.checkpoint_schema,
                                                   table=s.checkpoint_table, attempts=1)
            cp = self._store.load()
            saved = cp.commit_ts if cp is not None else 0
        return max(saved, self._start_ts)

    def _coordinator_status(self) -> dict:
        st = RayCalls.status(self.coordinator)
        if st["applied_rows"] != self._applied_rows:
            self._applied_rows = st["applied_rows"]
            self._last_sync_s = time.time()
        return st

    def _http_status(self) -> DrainerStatus:
        try:
            st = self._coordinator_status()
        except Exception as exc:  # answered 500 with this one line, not a coloured traceback
            task = f"the task is {self.state}" + (f": {self.error}" if self.error else "")
            raise UnavailableError(f"the coordinator does not answer ({_one_line(exc)}); "
                                   f"{task}") from exc
        return DrainerStatus(checkpoint_ts=self.node.max_commit_ts, last_sync_s=self._last_sync_s,
                             pump_positions=dict(self.positions),
                             latest_commit_ts=st["commit_ts"])

    def _metrics_text(self) -> bytes:
        m = self.metrics
        if self.node is not None and self.node.max_commit_ts:
            m.set_checkpoint(self.node.max_commit_ts, time.time())
        m.queue_size.labels("merger_buffer").set(self._buffered)
        m.queue_size.labels("syncer_input").set(self._inflight_batches)
        try:
            m.observe_coordinator(self._coordinator_status())  # workers queue, DDLs, saves
        except Exception as exc:  # the coordinator is restarting: report the rest
            log.warning("coordinator status unavailable for /metrics: %s", exc)
        texts = [m.exposition()]
        if self.workers:
            texts += RayCalls.gather_metrics(self.workers, timeout_s=5.0)
        return merge_expositions(texts)
