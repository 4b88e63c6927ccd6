"""Start the cluster-side parts on the current Ray: registry/TSO and pump actors.

:class:`LocalCluster` is what the demo, the end-to-end tests and the benchmarks
use to stand up "PD + pumps" in one call::

    cluster = LocalCluster(work_dir, pumps=2, upstream_params=upstream_db.params())
    cluster.start()                     # registry actor, pump actors, upstream meta published
    client = cluster.pump_client()      # what the upstream (TiDB's role) writes through
    ...
    cluster.stop()

Each pump runs as a PumpActor named :func:`tidb_binlog.drainer.pipeline.names.pump_actor_name` of
its node id (``pump-0``, ``pump-1``, ...), with its data under
``work_dir/pump-N``, registered online in the registry, resolving missing commit
binlogs through the upstream meta. The upstream meta's connection parameters are
published in the registry KV so drainers find the DDL history the way TiDB's
drainer finds TiKV through PD.

Placement: a pump is pinned to this driver's node, or, with
``start_pump(node_id, resources={"pump-host-1": 1})``, placed on the node that offers
that custom resource, where ``work_dir/<node id>`` is then on that node's disk (a
multi-node cluster: ``cluster/README.md``, "Several nodes").

Every Ray API call goes through :mod:`actors.ray_calls`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from actors.pump import start_pump_actor
from actors.ray_calls import RayCalls, RayError
from cluster.registry import get_or_create_registry
from tidb_binlog.config import load_pump_config
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE, UPSTREAM_META_KEY, pump_actor_name
from tidb_binlog.errors import ConfigError
from tidb_binlog.pump_client import PumpClient
from tidb_binlog.upstream.meta import UpstreamMeta
from tidb_binlog.upstream.tso_batch import TsoBatcher

__all__ = ["LocalCluster", "PumpOptions", "PUMP_START_TIMEOUT_S"]

log = logging.getLogger(__name__)

PUMP_START_TIMEOUT_S = 120.0
"""How long :meth:`LocalCluster.start_pump` waits for a new pump to serve."""


@dataclass(frozen=True)
class PumpOptions:
    """Pump settings the launcher passes as pump.toml overrides."""

    gen_binlog_interval_s: float = 0.2   # sub-second so an idle pump never stalls the merge
    heartbeat_interval_s: float = 1.0
    # A prewrite unmatched this long is asked about upstream (UpstreamMeta.txn_status,
    # a NOWAIT read whose answer holds at any age: a running transaction still holds
    # its status row's lock). Until then the pump's watermark, and every drainer's
    # merge, waits for it: after an upstream crash the prewrites in flight are never
    # finished, so this is how long the drainer stalls (10 s made a killed upstream
    # MariaDB cost 10 s and more of recovery). 3 s is far above a Commit's normal
    # delay, so the query stays off the normal path.
    max_txn_timeout_s: float = 3.0
    sync_log: bool = True
    stop_write_at_available_space: str = "1 GiB"
    extra: dict = field(default_factory=dict)


class LocalCluster:
    """Registry/TSO actor plus ``pumps`` PumpActors on the current Ray cluster."""

    def __init__(self, work_dir: str | os.PathLike, *, pumps: int = 2,
                 upstream_params: dict | None = None, namespace: str = DEFAULT_NAMESPACE,
                 pump_options: PumpOptions = PumpOptions(), detached: bool = False):
        self.work_dir = Path(work_dir).absolute()  # the actors' cwd is not the driver's
        self.pump_count = pumps
        self.upstream_params = dict(upstream_params or {})
        self.namespace = namespace
        self.pump_options = pump_options
        self.detached = detached  # pumps outlive this driver (the task API's start_pumps)
        self.registry = None
        self.pumps: dict[str, object] = {}
        self._pump_clients: list = []
        self._tso = None  # TsoBatcher over the registry, made on first get_ts

    def start(self, registry=None) -> LocalCluster:
        """Start (or join: ``registry``, a running registry's client) the registry, then
        the pumps."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.registry = registry if registry is not None else get_or_create_registry(
            self.work_dir / "registry", namespace=self.namespace)
        if self.upstream_params:
            self.registry.kv_put(UPSTREAM_META_KEY, json.dumps(self.upstream_params))
        for i in range(self.pump_count):
            self.start_pump(f"pump-{i}")
        return self

    def pump_config(self, node_id: str, config: dict | None = None):
        """The pump.toml of ``node_id``: data under ``work_dir/<node_id>``, this cluster's
        :class:`PumpOptions`, then ``config`` (this pump's own keys, e.g. its ``addr`` on a
        multi-host cluster)."""
        o = self.pump_options
        overrides = {"data-dir": str(self.work_dir / node_id), "addr": "127.0.0.1:0",
                     "node-id": node_id, "cluster-id": self.registry.cluster_id(),
                     "gen-binlog-interval": o.gen_binlog_interval_s,
                     "heartbeat-interval": o.heartbeat_interval_s,
                     "max-txn-timeout": o.max_txn_timeout_s,
                     "storage.sync-log": o.sync_log,
                     "storage.stop-write-at-available-space": o.stop_write_at_available_space}
        overrides.update(o.extra)
        overrides.update(config or {})
        return load_pump_config(None, overrides)

    def start_pump(self, node_id: str, *, resources: dict[str, float] | None = None,
                   config: dict | None = None):
        """Start (or restart after a stop) the pump actor of ``node_id``.

        Pinned to this driver's node; ``resources`` (custom Ray resources, e.g.
        ``{"pump-host-1": 1}``) place it on the node offering them instead, which is how
        a pump survives its node's death: Ray restarts it when a node offering them
        joins, on the same ``work_dir/<node_id>`` (see :mod:`actors.pump`). ConfigError
        when no alive node offers them. ``config``: this pump's pump.toml keys."""
        if resources:
            _check_offered(resources, node_id)
        resolver = UpstreamMeta(self.upstream_params) if self.upstream_params else None
        actor = start_pump_actor(self.pump_config(node_id, config),
                                 name=pump_actor_name(node_id), namespace=self.namespace,
                                 registry=self.registry, resolver=resolver,
                                 lifetime="detached" if self.detached else None,
                                 resources=resources)
        RayCalls.call_within(actor, "address", timeout_s=PUMP_START_TIMEOUT_S)  # serving
        self.pumps[node_id] = actor
        return actor

    def pump_addresses(self, timeout_s: float = 60.0) -> dict[str, str]:
        return {n: RayCalls.call_within(a, "address", timeout_s=timeout_s)
                for n, a in self.pumps.items()}

    def pump_client(self, **kw):
        """A pump client following this cluster's registry (TiDB's embedded client)."""
        client = PumpClient(self.registry, **kw)
        self._pump_clients.append(client)
        return client

    def get_ts(self) -> int:
        """A timestamp from the registry's TSO; concurrent callers share one registry
        call (PD-client style, :class:`~tidb_binlog.upstream.tso_batch.TsoBatcher`),
        which keeps every guarantee of a direct call: see its docstring."""
        if self._tso is None:
            self._tso = TsoBatcher(self.registry.get_ts)
        return self._tso.get_ts()

    def stop(self) -> None:
        for client in self._pump_clients:
            client.close()
        for actor in self.pumps.values():
            try:
                RayCalls.call_within(actor, "stop", timeout_s=30)
            except RayError as exc:  # a dead pump has nothing to stop
                log.warning("pump actor did not stop cleanly: %s", exc)
            RayCalls.kill(actor)
        self.pumps.clear()
        if self.registry is not None:
            RayCalls.kill(self.registry.actor)
            self.registry = None
            self._tso = None


def _check_offered(resources: dict[str, float], node_id: str) -> None:
    """ConfigError unless some alive node offers every resource a pump asks for (Ray
    would keep it pending without a word)."""
    nodes = RayCalls.alive_node_resources()
    if any(all(n.get(k, 0) >= v for k, v in resources.items()) for n in nodes):
        return
    offered = sorted({k for n in nodes for k in n if not k.startswith("node:")
                      and k not in ("CPU", "GPU", "memory", "object_store_memory")})
    raise ConfigError(f"pump {node_id!r} asks for resources {resources} but no alive Ray node "
                      f"offers them (custom resources offered: {offered or 'none'}); start the "
                      "pump's node with `ray start --resources='{\"NAME\": 1}'` (or "
                      "add_node(resources=...)) first", key="resources")
