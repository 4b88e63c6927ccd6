"""The drainer as a node: registry presence, Cistern gRPC, HTTP status and metrics.

The task's driver (:class:`~tidb_binlog.drainer.pipeline.driver.TaskDriver`, in the
:class:`~actors.drainer.MergerActor`) owns one :class:`DrainerNode`; it runs in the
merger's process (pinned to the node whose ``addr`` it binds), next to the collector
that ``Cistern.Notify`` must reach. Nothing here calls Ray: the driver passes plain
callables.

**Addresses.** Cistern gRPC listens on ``addr`` (drainer.toml, TiDB's default
``127.0.0.1:8249``). HTTP status listens on ``status_addr``, by default the
Cistern host with the port + 1 (TiDB serves both on one port with cmux; grpcio
cannot share a socket; the pump uses the same convention). Port 0 picks free
ports. The registry record's ``host`` is ``advertise-addr`` (default ``addr``)
with the bound Cistern port: that is where pumps send ``Notify``.

**Node id.** ``node-id``, else ``<hostname>:<port of advertise-addr>`` (TiDB's
rule). With port 0 there is no stable port, so :func:`resolve_node_id` makes
``<hostname>:drainer-<8 hex>`` once, in the driver, and the merger keeps it
across restarts (Ray reruns ``__init__`` with the same arguments).

**Presence** (TiDB's ``drainer/server.go``): on start the record is written
``online`` with ``maxCommitTS`` = the checkpoint; a heartbeat rewrites it every
``heartbeat_interval_s`` (1 s) with the *saved* checkpoint (``checkpoint_ts()``,
read from the checkpoint store, so a pump never collects or goes offline past
what a restarted drainer would need). :meth:`DrainerNode.close` writes the final
state: ``paused`` (stop, SIGTERM, action ``pause``) or ``offline`` (action
``close``: the drainer no longer holds back any pump's GC).

**Losing the registry** (TiDB's ``heartbeatMaxErr``): a heartbeat whose record
write fails is counted; :data:`HEARTBEAT_MAX_FAILURES` (20) failures in a row end
the heartbeat and call ``on_lost(error)`` with an
:class:`~tidb_binlog.errors.UnavailableError` naming the streak, its start, what
it means (pumps cannot learn of this drainer; its checkpoint no longer holds back
their GC) and what to do (restart the task once the registry is back: it resumes
from its checkpoint). The merger fails the task on it. A shorter streak only logs;
one successful write resets the count. A failure to *read* the saved checkpoint
is not a heartbeat failure (the record is still written with the last value).

**Metrics.** ``GET /metrics`` is :func:`merge_expositions` of the merger's own
:class:`~tidb_binlog.drainer.service.metrics.DrainerMetrics` and every SQL worker's
Prometheus text (``SqlWorkerActor.metrics()``): series with the same name and
labels are *summed*, so the page reads like one TiDB drainer process (one
``binlog_drainer_event_total{type="Insert"}``, not one per worker). ``*_created``
series are dropped (a sum of creation times means nothing).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tidb_binlog.drainer.service.cistern import serve_cistern
from tidb_binlog.drainer.service.http_status import DrainerStatusServer
from tidb_binlog.errors import BinlogError, ConfigError, StateError, UnavailableError
from tidb_binlog.http_server import derive_status_addr
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, NodeStatus
from tidb_binlog.pump.transport import http_ssl_context
from tidb_binlog.security import server_allowed_cn
from tidb_binlog.tso import compose

__all__ = ["ServiceSettings", "DrainerNode", "resolve_node_id", "merge_expositions",
           "HEARTBEAT_INTERVAL_S", "HEARTBEAT_MAX_FAILURES"]

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_MAX_FAILURES = 20
"""Consecutive failed record writes after which the drainer gives up (TiDB's heartbeatMaxErr)."""
PORT_PAIR_ATTEMPTS = 20  # Cistern port 0 re-picks when the picked port + 1 is taken


def _port_of(addr: str) -> int:
    return int(addr.rpartition(":")[2])


def _with_port(addr: str, port: int) -> str:
    return f"{addr.rpartition(':')[0]}:{port}"


def resolve_node_id(configured: str, advertise_addr: str) -> str:
    """``node-id``, else ``hostname:port`` of the advertise address (see the module doc)."""
    if configured:
        return configured
    port = _port_of(advertise_addr)
    if port:
        return f"{socket.gethostname()}:{port}"
    return f"{socket.gethostname()}:drainer-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ServiceSettings:
    """Where and how the drainer node serves; derived once from drainer.toml."""

    node_id: str
    addr: str                          # Cistern gRPC listen address
    advertise_addr: str                # registered host (its port 0 → the bound port)
    status_addr: str = ""              # "" → the Cistern port + 1 (0 stays 0)
    detect_interval_s: float = 5.0
    synced_check_time_s: float = 300.0
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    heartbeat_max_failures: int = HEARTBEAT_MAX_FAILURES
    security: object = None            # tidb_binlog.config.SecurityConfig
    compressor: str = ""
    namespace: str = "tidb-binlog"     # Ray namespace of the PumpActors

    @classmethod
    def from_config(cls, cfg, *, namespace: str, addr: str | None = None,
                    status_addr: str = "", node_id: str | None = None) -> ServiceSettings:
        addr = addr or cfg.addr
        advertise = cfg.advertise_addr or addr
        if addr != cfg.addr and cfg.advertise_addr in ("", cfg.addr):
            advertise = addr  # an overridden addr is also what pumps should call
        return cls(node_id=node_id or resolve_node_id(cfg.node_id, advertise), addr=addr,
                   advertise_addr=advertise, status_addr=status_addr,
                   detect_interval_s=cfg.detect_interval_s,
                   synced_check_time_s=cfg.synced_check_time_s, security=cfg.security,
                   compressor=cfg.compressor, namespace=namespace)


def merge_expositions(texts: list[bytes | str]) -> bytes:
    """Prometheus texts → one text where equal series (name + labels) are summed."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple, float]] = {}
    for text in texts:
        if isinstance(text, bytes):
            text = text.decode()
        for fam in text_string_to_metric_families(text):
            if fam.name.endswith("_created"):
                continue  # creation times (a gauge family in the text format)
            if fam.name not in families:
                families[fam.name] = Metric(fam.name, fam.documentation, fam.type)
                values[fam.name] = {}
            acc = values[fam.name]
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                key = (s.name, tuple(sorted(s.labels.items())))
                acc[key] = acc.get(key, 0.0) + s.value

    class _Merged:
        def collect(self):
            for name, fam in families.items():
                out = Metric(fam.name, fam.documentation, fam.type)
                for (sample_name, labels), value in values[name].items():
                    out.add_sample(sample_name, dict(labels), value)
                yield out

    registry = CollectorRegistry()
    registry.register(_Merged())
    return generate_latest(registry)


class DrainerNode:
    """Registry record + heartbeat, Cistern and HTTP servers of one drainer."""

    def __init__(self, settings: ServiceSettings, registry, *,
                 checkpoint_ts: Callable[[], int],
                 on_lost: Callable[[UnavailableError], None] | None = None):
        if settings.heartbeat_max_failures < 1:
            raise ConfigError(f"heartbeat_max_failures must be >= 1, got "
                              f"{settings.heartbeat_max_failures}", key="heartbeat_max_failures")
        self.settings = settings
        self.registry = registry
        self.node_id = settings.node_id
        self._checkpoint_ts = checkpoint_ts
        self.state = PAUSED
        self.max_commit_ts = 0
        self.cistern = None
        self.http = None
        self.host = settings.advertise_addr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.heartbeat_failures = 0
        self.lost: UnavailableError | None = None   # set once the streak hit the limit
        self._on_lost = on_lost
        self._streak_since_s = 0.0                  # wall clock of the streak's first failure

    # -- lifecycle -----------------------------------------------------------------------
    def serve(self, *, on_notify: Callable[[], None], status_provider, metrics_provider,
              on_action: Callable[[str], None]) -> None:
        """Bind Cistern (``addr``) and HTTP (``status_addr``); ConfigError if one cannot."""
        s = self.settings
        # With port 0 and no status_addr, HTTP goes on the picked port + 1, which nobody
        # checked was free: when it is taken, pick another Cistern port (another pair).
        repick = not s.status_addr and _port_of(s.addr) == 0
        for attempt in range(1, PORT_PAIR_ATTEMPTS + 1):
            self.cistern = serve_cistern(s.addr, on_notify, security=s.security)
            bound = _with_port(s.addr, self.cistern.port)
            try:
                self.http = DrainerStatusServer(
                    derive_status_addr(bound, s.status_addr), node_id=self.node_id,
                    status_provider=status_provider, metrics_provider=metrics_provider,
                    on_action=on_action, synced_check_time_s=s.synced_check_time_s,
                    ssl_context=http_ssl_context(s.security),
                    allowed_cn=server_allowed_cn(s.security)).start()
                break
            except OSError as exc:
                self.cistern.stop(0)
                if repick and exc.errno == errno.EADDRINUSE and attempt < PORT_PAIR_ATTEMPTS:
                    log.info("drainer HTTP port %s+1 is taken; picking another Cistern port",
                             bound)
                    continue
                raise ConfigError(f"drainer cannot serve HTTP status on "
                                  f"{derive_status_addr(bound, s.status_addr)!r}: {exc}; set "
                                  "--status-addr or free the port", key="status-addr") from exc
        if _port_of(s.advertise_addr) == 0:
            self.host = _with_port(s.advertise_addr, self.cistern.port)

    def register(self, checkpoint_ts: int) -> None:
        """Write the record ``online`` and start the heartbeat."""
        self.max_commit_ts = checkpoint_ts
        with self._lock:
            self.state = ONLINE
            self._write()
        log.info("drainer %s online at %s (checkpoint %d)", self.node_id, self.host,
                 checkpoint_ts)
        self._thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                        name="drainer-heartbeat")
        self._thread.start()

    def set_state(self, state: str) -> None:
        """Write ``state`` now (the heartbeat rewrites the record only while online)."""
        with self._lock:
            self.state = state
            self._write()

    def check_action(self, action: str) -> None:
        """TiDB accepts ``pause``/``close`` only while online."""
        if self.state != ONLINE:
            raise StateError(f"drainer {self.node_id} is {self.state}; actions are accepted "
                             "only while online", state=self.state)

    def close(self, final_state: str, checkpoint_ts: int | None = None) -> None:
        """Stop the heartbeat, write ``final_state`` (paused/offline), stop the servers."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        if checkpoint_ts is not None:
            self.max_commit_ts = max(self.max_commit_ts, checkpoint_ts)
        if self.registry is not None and (self.state != final_state or checkpoint_ts):
            self.set_state(final_state)
            log.info("drainer %s is %s (checkpoint %d)", self.node_id, final_state,
                     self.max_commit_ts)
        self.stop_servers()

    def stop_servers(self) -> None:
        if self.http is not None:
            self.http.stop()
            self.http = None
        if self.cistern is not None:
            self.cistern.stop(0.5)
            self.cistern = None

    # -- heartbeat -----------------------------------------------------------------------
    def heartbeat(self) -> None:
        """Refresh ``maxCommitTS`` from the saved checkpoint and rewrite the record."""
        try:
            self.max_commit_ts = max(self.max_commit_ts, self._checkpoint_ts())
        except BinlogError as exc:  # keep the last known value; the record stays fresh
            log.warning("drainer %s: cannot read the saved checkpoint (%s); heartbeat keeps "
                        "maxCommitTS %d", self.node_id, exc, self.max_commit_ts)
        with self._lock:
            if self.state == ONLINE:
                self._write()

    def beat(self) -> bool:
        """One heartbeat with failure accounting; False once the registry is lost.

        A failed beat is logged and counted; the ``heartbeat_max_failures``-th in a
        row sets :attr:`lost` and calls ``on_lost`` (see the module doc).
        """
        if self.lost is not None:
            return False
        try:
            self.heartbeat()
        except Exception as exc:  # counted, and fatal once the streak reaches the limit
            if self.heartbeat_failures == 0:
                self._streak_since_s = time.time()
            self.heartbeat_failures += 1
            limit = self.settings.heartbeat_max_failures
            log.warning("drainer %s heartbeat failed (%d in a row, the task stops at %d): %s",
                        self.node_id, self.heartbeat_failures, limit, exc,
                        exc_info=not isinstance(exc, BinlogError))
            if self.heartbeat_failures >= limit:
                self.lost = self._lost_error(exc)
                log.error("%s", self.lost)
                if self._on_lost is not None:
                    self._on_lost(self.lost)
                return False
            return True
        self.heartbeat_failures = 0
        return True

    def _lost_error(self, last: BaseException) -> UnavailableError:
        since = datetime.fromtimestamp(self._streak_since_s, UTC).isoformat(timespec="seconds")
        return UnavailableError(
            f"drainer {self.node_id}: the registry did not answer {self.heartbeat_failures} "
            f"heartbeats in a row since {since} (last error: {type(last).__name__}: {last}). "
            "Pumps cannot learn of this drainer (a new pump cannot Notify it) and its "
            f"checkpoint ({self.max_commit_ts}) no longer holds back their GC, so the task "
            "stopped. Restart the task once the registry is back: it resumes from its "
            "checkpoint")

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_interval_s):
            if not self.beat():
                return

    def record(self) -> NodeStatus:
        return NodeStatus(node_id=self.node_id, host=self.host, state=self.state,
                          is_alive=self.state != OFFLINE, max_commit_ts=self.max_commit_ts,
                          update_ts=compose(int(time.time() * 1000), 0))

    def _write(self) -> None:
        if self.registry is not None:
            self.registry.update_node(DRAINER, self.record())
