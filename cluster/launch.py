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
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE, UPSTREAM_META_KEY, pump_actor_name

__all__ = ["LocalCluster", "PumpOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PumpOptions:
    """Pump settings the launcher passes as pump.toml overrides."""

    gen_binlog_interval_s: float = 0.2   # sub-second so an idle pump never stalls the merge
    heartbeat_interval_s: float = 1.0
    max_txn_timeout_s: float = 10.0
    sync_log: bool = True
    stop_write_at_available_space: str = "1 GiB"
    extra: dict = field(default_factory=dict)


class LocalCluster:
    """Registry/TSO actor plus ``pumps`` PumpActors on the current Ray cluster."""

    def __init__(self, work_dir: str | os.PathLike, *, pumps: int = 2,
                 upstream_params: dict | None = None, namespace: str = DEFAULT_NAMESPACE,
                 pump_options: PumpOptions = PumpOptions(), detached: bool = False):
        self.work_dir = Path(work_dir)
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
        from cluster.registry import get_or_create_registry

        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.registry = registry if registry is not None else get_or_create_registry(
            self.work_dir / "registry", namespace=self.namespace)
        if self.upstream_params:
            self.registry.kv_put(UPSTREAM_META_KEY, json.dumps(self.upstream_params))
        for i in range(self.pump_count):
            self.start_pump(f"pump-{i}")
        return self

    def pump_config(self, node_id: str):
        from tidb_binlog.config import load_pump_config

        o = self.pump_options
        overrides = {"data-dir": str(self.work_dir / node_id), "addr": "127.0.0.1:0",
                     "node-id": node_id, "cluster-id": self.registry.cluster_id(),
                     "gen-binlog-interval": o.gen_binlog_interval_s,
                     "heartbeat-interval": o.heartbeat_interval_s,
                     "max-txn-timeout": o.max_txn_timeout_s,
                     "storage.sync-log": o.sync_log,
                     "storage.stop-write-at-available-space": o.stop_write_at_available_space}
        overrides.update(o.extra)
        return load_pump_config(None, overrides)

    def start_pump(self, node_id: str):
        """Start (or restart after a stop) the pump actor of ``node_id``."""
        import ray

        from actors.pump import start_pump_actor

        resolver = None
        if self.upstream_params:
            from tidb_binlog.upstream.meta import UpstreamMeta

            resolver = UpstreamMeta(self.upstream_params)
        actor = start_pump_actor(self.pump_config(node_id), name=pump_actor_name(node_id),
                                 namespace=self.namespace, registry=self.registry,
                                 resolver=resolver,
                                 lifetime="detached" if self.detached else None)
        ray.get(actor.address.remote(), timeout=120)  # constructed and serving
        self.pumps[node_id] = actor
        return actor

    def pump_addresses(self) -> dict[str, str]:
        import ray

        return {n: ray.get(a.address.remote()) for n, a in self.pumps.items()}

    def pump_client(self, **kw):
        """A pump client following this cluster's registry (TiDB's embedded client)."""
        from tidb_binlog.pump_client import PumpClient

        client = PumpClient(self.registry, **kw)
        self._pump_clients.append(client)
        return client

    def get_ts(self) -> int:
        """A timestamp from the registry's TSO; concurrent callers share one registry
        call (PD-client style, :class:`~tidb_binlog.upstream.tso_batch.TsoBatcher`),
        which keeps every guarantee of a direct call: see its docstring."""
        if self._tso is None:
            from tidb_binlog.upstream.tso_batch import TsoBatcher

            self._tso = TsoBatcher(self.registry.get_ts)
        return self._tso.get_ts()

    def stop(self) -> None:
        import ray

        for client in self._pump_clients:
            client.close()
        for actor in self.pumps.values():
            try:
                ray.get(actor.stop.remote(), timeout=30)
            except ray.exceptions.RayError as exc:  # a dead pump has nothing to stop
                log.warning("pump actor did not stop cleanly: %s", exc)
            ray.kill(actor, no_restart=True)
        self.pumps.clear()
        if self.registry is not None:
            ray.kill(self.registry.actor, no_restart=True)
            self.registry = None
            self._tso = None
