"""The Python API to run one replication task: :class:`Drainer`.

::

    from cluster.drainer import Drainer
    from tidb_binlog.config import load_drainer_config

    cfg = load_drainer_config("drainer.toml")
    drainer = Drainer.start(cfg, registry=registry_client)   # on the current Ray cluster
    drainer.wait_for_checkpoint(commit_ts, timeout_s=60)      # downstream caught up
    print(drainer.status())
    drainer.stop()                                            # final consistent checkpoint

``start`` creates the pipeline of :mod:`actors.drainer` (merger, schema keeper,
coordinator) and ``worker-count`` SQL workers (:mod:`actors.syncer_workers`).
Pumps are found in the registry: every pump that is not offline, as the
PumpActor named :func:`pump_actor_name` of its node id. The upstream meta (the
DDL history the schema keeper reads; TiKV's role in TiDB) is found in the
registry KV under :data:`UPSTREAM_META_KEY` unless given.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

from actors.drainer import CoordinatorActor, MergerActor, SchemaKeeperActor, TaskSettings
from tidb_binlog.errors import ConfigError, UnavailableError
from tidb_binlog.node import OFFLINE, PUMP

__all__ = ["Drainer", "pump_actor_name", "UPSTREAM_META_KEY", "DEFAULT_NAMESPACE"]

log = logging.getLogger(__name__)

UPSTREAM_META_KEY = "upstream/meta"
"""Registry KV key: JSON connection parameters of the upstream meta (UpstreamMeta)."""

DEFAULT_NAMESPACE = "tidb-binlog"


def pump_actor_name(node_id: str) -> str:
    """The Ray actor name a pump with this node id runs under."""
    return f"tidb-binlog-pump-{node_id}"


class Drainer:
    """A running replication task (see the module docstring)."""

    def __init__(self, settings: TaskSettings, merger, keeper, coordinator, workers,
                 pump_names: list[str]):
        self.settings = settings
        self.merger = merger
        self.keeper = keeper
        self.coordinator = coordinator
        self.workers = workers
        self.pump_names = pump_names

    @classmethod
    def start(cls, cfg, *, registry=None, upstream_meta: dict | None = None,
              pumps: dict | None = None, namespace: str = DEFAULT_NAMESPACE,
              **settings_overrides) -> Drainer:
        """Start the actors of one task from a :class:`~tidb_binlog.config.DrainerConfig`.

        ``pumps`` maps node ids to PumpActor handles (default: from the registry).
        """
        import ray

        from actors.syncer_workers import start_sql_workers

        if cfg.syncer.db_type not in ("mysql", "tidb"):
            raise ConfigError(f"db-type {cfg.syncer.db_type!r} is not supported by the Ray "
                              "drainer yet; use mysql or tidb", key="syncer.db-type")
        if upstream_meta is None:
            upstream_meta = _upstream_meta_from(registry)
        if registry is not None:  # the registry's cluster id is the one pumps use (PD's)
            cfg = dataclasses.replace(cfg, cluster_id=registry.cluster_id())
        settings = TaskSettings.from_config(cfg, upstream_meta=upstream_meta,
                                            **settings_overrides)
        if pumps is None:
            pumps = _pumps_from(registry, namespace)
        if not pumps:
            raise UnavailableError("no pump is registered (or every pump is offline); start "
                                   "the pumps first")
        workers = start_sql_workers(cfg, settings.worker_count)
        opts = dict(max_restarts=-1, max_task_retries=0, num_cpus=0)
        coordinator = ray.remote(concurrency_groups={"status": 1}, **opts)(
            CoordinatorActor).remote(settings, workers)
        keeper = ray.remote(**opts)(SchemaKeeperActor).remote(settings)
        merger = ray.remote(max_concurrency=4, **opts)(MergerActor).remote(
            settings, keeper, coordinator, pumps)
        log.info("replication task started: %d pump(s) %s, %d SQL worker(s), downstream %s",
                 len(pumps), sorted(pumps), len(workers), settings.downstream.address)
        return cls(settings, merger, keeper, coordinator, workers, sorted(pumps))

    # -- observing ------------------------------------------------------------------------
    def status(self) -> dict:
        """Merger state and error, pump positions, checkpoint and apply counters."""
        import ray

        merger = ray.get(self.merger.status.remote())
        coord = ray.get(self.coordinator.status.options(concurrency_group="status").remote())
        return {**merger, **{f"checkpoint_{k}" if k == "commit_ts" else k: v
                             for k, v in coord.items()}}

    def checkpoint_ts(self) -> int:
        return self.status()["checkpoint_commit_ts"]

    def wait_for_checkpoint(self, commit_ts: int, timeout_s: float = 60.0,
                            poll_s: float = 0.2) -> dict:
        """Block until the checkpoint reaches ``commit_ts``; raise on failure or timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.status()
            if st["state"] == "failed":
                raise UnavailableError(f"replication task failed: {st['error']}")
            if st["checkpoint_commit_ts"] >= commit_ts:
                return st
            if time.monotonic() > deadline:
                raise UnavailableError(f"checkpoint {st['checkpoint_commit_ts']} did not reach "
                                       f"{commit_ts} within {timeout_s} s (status: {st})")
            time.sleep(poll_s)

    # -- stopping ---------------------------------------------------------------------------
    def stop(self) -> dict:
        """Stop pulling, wait for the workers, save the final checkpoint, end the actors."""
        import ray

        result = ray.get(self.merger.stop.remote())
        for actor in [self.merger, self.keeper, self.coordinator, *self.workers]:
            ray.kill(actor, no_restart=True)
        return result


def _upstream_meta_from(registry) -> dict:
    text = registry.kv_get(UPSTREAM_META_KEY) if registry is not None else None
    if not text:
        raise ConfigError("the upstream meta location is unknown: no registry entry "
                          f"{UPSTREAM_META_KEY!r}; pass upstream_meta= or start the upstream "
                          "with a registry", key=UPSTREAM_META_KEY)
    return json.loads(text)


def _pumps_from(registry, namespace: str) -> dict:
    import ray

    if registry is None:
        raise ConfigError("no registry and no pumps given: the drainer cannot find its pumps",
                          key="pd-urls")
    pumps = {}
    for status in registry.nodes(PUMP):
        if status.state == OFFLINE:
            continue
        try:
            pumps[status.node_id] = ray.get_actor(pump_actor_name(status.node_id),
                                                  namespace=namespace)
        except ValueError as exc:
            raise UnavailableError(
                f"pump {status.node_id} at {status.host} is registered but no PumpActor named "
                f"{pump_actor_name(status.node_id)!r} runs in namespace {namespace!r}") from exc
    return pumps
