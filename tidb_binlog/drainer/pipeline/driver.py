"""TaskDriver: the replication task's main loop and its life cycle, without Ray.

The :class:`~actors.drainer.MergerActor` is a shell around one TaskDriver; everything it
needs from Ray is one :class:`DriverCalls` object (``actors.ray_calls.PipelineCalls``).

- **Run loop and reset policy** (:meth:`TaskDriver.run`): reset the sink (it loads the
  durable checkpoint), place the keeper's schema at the checkpoint's version, merge the
  pumps from the checkpoint (:class:`~.merge_loop.MergeLoop`) until stopped. A
  :class:`~.gate.PipelineReset` or a pipeline actor that died replays from the
  checkpoint after 0.5 s; any other error stops the task (:mod:`.failures`). A
  restarted merger replays too.
- **Pumps come and go** (TiDB's ``drainer/collector.go``): a
  :class:`~tidb_binlog.drainer.source.collector.Collector` lists the registry's pumps at start,
  every ``detect-interval`` and at once on ``Cistern.Notify``. A pump is pulled as the
  PumpActor named :func:`~.names.pump_actor_name` of its node id in the task's
  namespace when one exists (:class:`~tidb_binlog.drainer.source.feeds.ActorFeed`), else over
  gRPC from its registered host (:class:`~tidb_binlog.drainer.source.feeds.GrpcFeed`, a
  standalone pump). A fixed ``pumps`` map replaces the registry listing.
- **The node** (when ``service`` is given): a
  :class:`~tidb_binlog.drainer.service.node.DrainerNode` (Cistern gRPC, HTTP status, the
  registry record), bound with retries for :data:`BIND_WAIT_S` (a restarted merger's
  old ports may take a moment to be released). Its heartbeat reports the *saved*
  checkpoint (the sink's savepoint for a file sink, the downstream's checkpoint row
  otherwise). :meth:`TaskDriver.stop` records ``paused``; ``PUT /state/{id}/close``
  records ``offline``.
- **Status and metrics**: :meth:`TaskDriver.status` (the merger's keys of
  ``Drainer.status``), ``/status`` and ``/metrics`` (the driver's
  :class:`~tidb_binlog.drainer.service.metrics.DrainerMetrics`, the sink's counters and every
  SQL worker's exposition, merged).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from tidb_binlog.drainer.pipeline import failures
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.merge_loop import MergeLoop, PipelineCalls
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE, pump_actor_name
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.service.cistern import collector_notifier
from tidb_binlog.drainer.service.http_status import DrainerStatus
from tidb_binlog.drainer.service.metrics import build_drainer_metrics
from tidb_binlog.drainer.service.node import DrainerNode, ServiceSettings, merge_expositions
from tidb_binlog.drainer.source.collector import Collector, MergerSources
from tidb_binlog.drainer.source.feeds import RETRY_S, ActorFeed, GrpcFeed
from tidb_binlog.drainer.source.merge import Merger
from tidb_binlog.drainer.source.pump_source import GrpcPumpSource, PullCalls
from tidb_binlog.errors import BinlogError, UnavailableError
from tidb_binlog.node import OFFLINE, ONLINE, PAUSED, PUMP, NodeStatus

__all__ = ["TaskDriver", "DriverCalls", "BIND_WAIT_S"]

log = logging.getLogger(__name__)

BIND_WAIT_S = 10.0   # how long a (re)started driver tries to bind its addresses
REPLAY_PAUSE_S = 0.5


class DriverCalls(PipelineCalls, Protocol):
    """:class:`~.merge_loop.PipelineCalls` plus what the driver asks Ray for."""

    pull_calls: PullCalls  # the PumpActor feeds' calls

    def sink_status(self, timeout_s: float = 10.0) -> dict:
        """The sink's ``status()`` (its ``status`` concurrency group), within the time."""
        ...

    def worker_metrics(self, timeout_s: float) -> list[bytes]:
        """Every SQL worker's Prometheus text that came within ``timeout_s``."""
        ...

    def find_actor(self, name: str, namespace: str) -> Any | None: ...

    def restarted(self) -> bool:
        """Whether this process is a restart of the merger (Ray reconstructed it)."""
        ...

    def actor_died(self, exc: BaseException) -> bool: ...


class TaskDriver:
    """Drives the pipeline: pulls every pump, merges by commit_ts, feeds keeper → sink.

    ``pumps``: a fixed node id → PumpActor handle map, or None to follow ``registry``.
    ``service``: serve as a drainer node (Cistern, HTTP, registry record), or None.
    """

    def __init__(self, settings: TaskSettings, calls: DriverCalls, pumps: dict | None = None,
                 *, registry=None, service: ServiceSettings | None = None,
                 has_workers: bool = False, autostart: bool = True):
        self.settings = settings
        self.calls = calls
        self.static_pumps = dict(pumps) if pumps is not None else None
        self.registry = registry
        self.service = service
        self.has_workers = has_workers
        self.error: str | None = None
        self.state = "starting"
        self.resets = 0
        self.stop_stage = ""  # where stop() is (Drainer.stop names it when it times out)
        self.pumps: list[str] = []
        self.feed_kinds: dict[str, str] = {}  # node id -> "actor" | "grpc" (how it is pulled)
        self.metrics = build_drainer_metrics()
        self.loop = MergeLoop(settings, calls,
                              on_disorder=self.metrics.disorder_binlog_count.inc)
        self._start_ts = 0
        self._saved_ts = 0  # the sink's durable checkpoint, as last reported
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
        self.node: DrainerNode | None = None
        self._thread = threading.Thread(target=self.run, name="merger", daemon=True)
        if service is not None and not self._serve(service):
            return
        if autostart:
            self._thread.start()

    @property
    def merged(self) -> int:
        return self.loop.merged

    @property
    def positions(self) -> dict[str, int]:
        return self.loop.positions

    def _serve(self, service: ServiceSettings) -> bool:
        def registry_lost(exc):  # HEARTBEAT_MAX_FAILURES heartbeats failed: stop
            self._fail(exc)
            self._stop.set()

        self.node = DrainerNode(service, self.registry, checkpoint_ts=self._saved_checkpoint_ts,
                                on_lost=registry_lost)
        deadline = time.monotonic() + BIND_WAIT_S
        while True:
            try:
                self.node.serve(on_notify=collector_notifier(self._collector),
                                status_provider=self._http_status,
                                metrics_provider=self._metrics_text,
                                on_action=self._on_action)
                return True
            except BinlogError as exc:
                # After a crash Ray restarts us at once; the old process's ports may
                # take a moment to be released.
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                self._startup_error = exc
                self._fail(exc)
                return False

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
        """Stop pulling, let the sink finish, save the final checkpoint, and record
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
                    cp = self.calls.close()
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
        self.error = failures.task_error(exc)
        self.state = "failed"
        self._started.set()
        log.error("replication task stopped: %s", self.error)
        if self.node is not None and self.node.state == ONLINE:
            try:  # pumps must not wait for our Notify; our checkpoint still holds their GC
                self.node.set_state(PAUSED)
            except Exception as rec_exc:
                log.warning("could not record the drainer paused: %s", rec_exc)

    # -- loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        """The merge thread: runs until stopped or the task fails (see the module doc)."""
        replay = self.calls.restarted()  # a restarted merger replays too
        while not self._stop.is_set():
            try:
                self._pipeline(replay)
                return
            except Exception as exc:
                outcome, error = failures.decide(exc, self.calls.actor_died)
                if outcome == failures.STOP:
                    self._fail(error)  # the task stops; status() names the error
                    return
                self.resets += 1
                what = ("pipeline reset" if isinstance(exc, PipelineReset)
                        else "a pipeline actor died")
                log.warning("%s (%s); replaying from the checkpoint", what,
                            failures.one_line(exc))
                time.sleep(REPLAY_PAUSE_S)
            replay = True

    def _pipeline(self, replay: bool = False) -> None:
        cp = self.calls.reset(replay)
        self.resets = max(self.resets, cp.resets)  # the coordinator counts the replays
        self.calls.reset_keeper(cp.schema_version)
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
            self.loop.start(merger)
            while not self._stop.is_set():
                self._step_collector(target)
                self.loop.step(target.pullable())
            self.loop.drain()
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
                log.warning("cannot list the pumps (%s); retrying in %.0f s", exc, RETRY_S)
                self._stop.wait(RETRY_S)

    def _step_collector(self, target: MergerSources) -> None:
        now = time.monotonic()
        if now < self._collector_retry_at:
            return
        try:
            if self._collector.step():
                self.pumps = sorted(target.sources)
        except UnavailableError as exc:
            log.warning("pump discovery failed (%s); retrying in %.0f s", exc, RETRY_S)
            self._collector_retry_at = now + RETRY_S

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
            actor = self.calls.find_actor(pump_actor_name(node_id), namespace)
        if actor is not None:
            log.info("merging pump %s (PumpActor) after commit_ts %d", node_id, since_ts)
            self.feed_kinds[node_id] = "actor"
            return ActorFeed(node_id, actor, since_ts, max_bytes, self.metrics,
                             self.calls.pull_calls, ref_above=self._ref_above(node_id))
        # The task's [security]/compressor (TaskSettings), not the node's: a task that does
        # not serve (Drainer.start(serve=False)) pulls TLS pumps too; the service's stay
        # the fallback for settings built by hand.
        s = self.service
        security = self.settings.pump_security or (s.security if s else None)
        compressor = self.settings.pump_compressor or (s.compressor if s else "")
        log.info("merging pump %s over gRPC at %s after commit_ts %d", node_id, host, since_ts)
        self.feed_kinds[node_id] = "grpc"
        source = GrpcPumpSource(host, self.settings.cluster_id, security, node_id=node_id,
                                compressor=compressor)
        return GrpcFeed(node_id, source, since_ts, max_bytes, self.metrics)

    def _ref_above(self, node_id: str) -> int:
        """``ref_above`` for the pull of this PumpActor: the settings' (the pipeline's
        keeper reads references), provided the keeper can find the pump where it looks,
        by its name in the task's namespace; else 0 (payloads whole, as before). A pump
        handed in as a handle (``pumps``) without that name, or registered in another
        namespace, is pulled whole."""
        ref_above = self.settings.ref_above
        if ref_above and self.calls.find_actor(pump_actor_name(node_id),
                                               self.settings.namespace) is None:
            log.info("pump %s: no actor %r in namespace %r for the keeper to read large "
                     "binlogs from; its binlogs come whole", node_id,
                     pump_actor_name(node_id), self.settings.namespace)
            return 0
        return ref_above

    # -- status and metrics (HTTP threads) -------------------------------------------
    def _saved_checkpoint_ts(self) -> int:
        """The durable checkpoint (what a restarted drainer would start from), as the
        sink reports it (``SinkStatus.saved_commit_ts``); called by each heartbeat, which
        also samples the apply counter for ``Synced``. Never moves back: a sink that is
        restarting (no status, or none loaded yet) leaves the last one standing."""
        try:
            st = self._sink_status()
        except Exception as exc:  # restarting: Synced is sampled at the next beat
            log.debug("sink status unavailable: %s", exc)
        else:
            self._saved_ts = max(self._saved_ts, st.get("saved_commit_ts", 0))
        return max(self._saved_ts, self._start_ts)

    def _sink_status(self) -> dict:
        st = self.calls.sink_status()
        if st["applied_rows"] != self._applied_rows:
            self._applied_rows = st["applied_rows"]
            self._last_sync_s = time.time()
        return st

    def _http_status(self) -> DrainerStatus:
        try:
            st = self._sink_status()
        except Exception as exc:  # answered 500 with this one line, not a coloured traceback
            task = f"the task is {self.state}" + (f": {self.error}" if self.error else "")
            raise UnavailableError(f"the coordinator does not answer "
                                   f"({failures.one_line(exc)}); {task}") from exc
        return DrainerStatus(checkpoint_ts=self.node.max_commit_ts, last_sync_s=self._last_sync_s,
                             pump_positions=dict(self.positions),
                             latest_commit_ts=st["commit_ts"])

    def _metrics_text(self) -> bytes:
        m = self.metrics
        if self.node is not None and self.node.max_commit_ts:
            m.set_checkpoint(self.node.max_commit_ts, time.time())
        m.queue_size.labels("merger_buffer").set(self.loop.buffered)
        m.queue_size.labels("syncer_input").set(len(self.loop.inflight))
        try:
            m.observe_coordinator(self._sink_status())  # workers queue, DDLs, saves
        except Exception as exc:  # the coordinator is restarting: report the rest
            log.warning("coordinator status unavailable for /metrics: %s", exc)
        texts = [m.exposition()]
        if self.has_workers:
            texts += self.calls.worker_metrics(timeout_s=5.0)
        return merge_expositions(texts)


