"""Starting a replication task's actors: the checks first (config, name, downstream),
then the sink side, the SQL workers and the merger, then the wait until the task merges.

:meth:`cluster.drainer.Drainer.start` is the public entry (its docstring says what every
argument does); this module holds the work so the handle stays about observing and
stopping a task.
"""

from __future__ import annotations

import dataclasses
import json
import logging

from actors.drainer import CoordinatorActor, MergerActor, SchemaKeeperActor
from actors.file_sink import start_file_sink_actors
from actors.parquet_sink import start_parquet_sink_actors
from actors.ray_calls import RayCalls
from actors.syncer_workers import start_sql_workers
from cluster.downstream_check import check_downstream
from cluster.task_actors import TaskActors, answer
from tidb_binlog.config import DrainerConfig
from tidb_binlog.drainer.pipeline.names import (
    DEFAULT_NAMESPACE,
    UPSTREAM_META_KEY,
    check_task_name,
    sink_role,
    task_actor_name,
)
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.service.node import ServiceSettings
from tidb_binlog.errors import ConfigError

__all__ = ["start_task_actors"]

log = logging.getLogger(__name__)


def start_task_actors(cfg, *, registry=None, upstream_meta: dict | None = None,
                      pumps: dict | None = None, namespace: str | None = None,
                      addr: str | None = None, status_addr: str = "",
                      node_id: str | None = None, serve: bool = True,
                      start_timeout_s: float = 60.0, downstream_wait_s: float | None = None,
                      name: str | None = None, detached: bool = False,
                      resources: dict[str, float] | None = None,
                      **settings_overrides) -> TaskActors:
    """Start one task's actors (see :meth:`cluster.drainer.Drainer.start`); on any failure
    the actors started so far are killed and the error raised."""
    if detached and not name:
        raise ConfigError("a detached replication task needs a name (it is found again "
                          "by it)", key="name")
    if name is not None:
        try:
            check_task_name(name)
        except ValueError as exc:
            raise ConfigError(str(exc), key="name") from None
    if cfg.syncer.db_type not in ("mysql", "tidb", "file", "parquet"):
        raise ConfigError(f"db-type {cfg.syncer.db_type!r} is not supported by the Ray "
                          "drainer yet; use mysql, tidb, file or parquet",
                          key="syncer.db-type")
    file_sink = cfg.syncer.db_type == "file"
    parquet_sink = cfg.syncer.db_type == "parquet"
    if registry is None and pumps is None:
        raise ConfigError("no registry and no pumps given: the drainer cannot find its "
                          "pumps", key="registry")
    if upstream_meta is None:
        upstream_meta = _upstream_meta_from(registry)
    if registry is not None:  # the registry's cluster id is the one pumps use (PD's)
        cfg = dataclasses.replace(cfg, cluster_id=registry.cluster_id())
    settings = TaskSettings.from_config(cfg, upstream_meta=upstream_meta,
                                        **settings_overrides)
    layout = None
    if not (file_sink or parquet_sink):  # a downstream we cannot use fails the start here
        layout = check_downstream(settings, wait_s=downstream_wait_s)
    if addr is None and cfg.addr == _default_addr():
        addr = "127.0.0.1:0"  # see cluster.drainer's doc: tasks and tests share hosts
    if namespace is None:
        namespace = getattr(registry, "namespace", None) or DEFAULT_NAMESPACE
    # where the PumpActors are named, for an unnamed task too: its keeper reads large
    # binlogs from them by name there ([syncer] large-binlog-bytes)
    settings = dataclasses.replace(settings, namespace=namespace)
    names: dict[str, str | None] = {"merger": None, "keeper": None, "sink": None}
    if name is not None:
        settings = dataclasses.replace(settings, task=name, namespace=namespace)
        if RayCalls.find_actor(task_actor_name(name, "merger"), namespace) is not None:
            raise ConfigError(f"a replication task named {name!r} already runs in Ray "
                              f"namespace {namespace!r}; stop or remove it first, or pick "
                              "another name", key="name")
        names = {"merger": task_actor_name(name, "merger"),
                 "keeper": task_actor_name(name, "keeper"),
                 "sink": task_actor_name(name, sink_role(settings.sink))}
    service = ServiceSettings.from_config(cfg, namespace=namespace, addr=addr,
                                          status_addr=status_addr,
                                          node_id=node_id) if serve else None
    opts = dict(max_restarts=-1, max_task_retries=0, num_cpus=0,
                namespace=namespace if name else None,
                lifetime="detached" if detached else None)
    keeper = coordinator = merger = None
    workers: list = []
    actors = TaskActors(settings, workers=workers)
    try:
        if file_sink:  # pb records in [syncer.to] dir: no SQL workers, no downstream
            settings = dataclasses.replace(settings, downstream=None, exactly_once=False,
                                           worker_count=1, sink="file")
            names["sink"] = task_actor_name(name, "file-sink") if name else None
            actors.settings = settings
            keeper, coordinator = start_file_sink_actors(
                cfg, settings, names={"keeper": names["keeper"], "sink": names["sink"]},
                **opts)
        elif parquet_sink:  # a Parquet lake in [syncer.to] dir: no SQL workers
            settings = dataclasses.replace(settings, downstream=None, exactly_once=False,
                                           worker_count=1, sink="parquet")
            names["sink"] = task_actor_name(name, "parquet-sink") if name else None
            actors.settings = settings
            keeper, coordinator = start_parquet_sink_actors(
                cfg, settings, names={"keeper": names["keeper"], "sink": names["sink"]},
                **opts)
        else:
            worker_overrides = {}
            if layout is not None and layout.safe_mode:  # another count's replay window
                worker_overrides["safe_mode_until_ts"] = layout.safe_mode_until_ts
            workers.extend(start_sql_workers(
                settings, name_prefix=name, namespace=opts["namespace"],
                lifetime=opts["lifetime"], resources=resources, **worker_overrides))
            # a named task's actors get no handles: they look their peers up by name
            coordinator = RayCalls.start_actor(
                CoordinatorActor, settings, None if name else workers,
                options={**opts, "concurrency_groups": {"status": 1},
                         "name": names["sink"],
                         # its relay log is a local directory: keep it on this node
                         **({"scheduling_strategy": RayCalls.pinned()}
                            if settings.relay_dir else {"resources": resources})})
            keeper = RayCalls.start_actor(SchemaKeeperActor, settings,
                                          options={**opts, "name": names["keeper"],
                                                   "resources": resources})
        actors.keeper, actors.coordinator = keeper, coordinator
        peers = (None, None, None) if name else (keeper, coordinator, workers)
        merger = RayCalls.start_actor(  # pinned here: addr is this host's
            MergerActor, settings, peers[0], peers[1], pumps, registry=registry,
            service=service, workers=peers[2],
            options={**opts, "max_concurrency": 8, "name": names["merger"],
                     "scheduling_strategy": RayCalls.pinned()})
        actors.merger = merger
    except BaseException:
        actors.kill()
        raise
    try:
        actors.addresses = answer(RayCalls.call(merger, "addresses"), "merger",
                                  "addresses()", start_timeout_s)
    except BaseException:
        actors.kill()
        raise
    # Online (and merging) before returning: a pump started afterwards notifies us.
    state = RayCalls.get(RayCalls.call(merger, "wait_started", start_timeout_s))
    if state == "starting":
        log.warning("the replication task is still starting after %.0f s (reading the "
                    "checkpoint from the downstream?); see status()", start_timeout_s)
    log.info("replication task started: %s, %d SQL worker(s), downstream %s%s",
             f"pumps {sorted(pumps)}" if pumps is not None else "pumps from the registry",
             len(workers), settings.downstream.address if settings.downstream else
             f"files in {cfg.syncer.to.dir}",
             f"; drainer {actors.addresses['node_id']} serving Cistern gRPC on "
             f"{actors.addresses['addr']}, HTTP status on {actors.addresses['status_addr']}"
             if serve else "")
    return actors


def _default_addr() -> str:
    return next(f.default for f in dataclasses.fields(DrainerConfig) if f.name == "addr")


def _upstream_meta_from(registry) -> dict:
    text = registry.kv_get(UPSTREAM_META_KEY) if registry is not None else None
    if not text:
        raise ConfigError("the upstream meta location is unknown: no registry entry "
                          f"{UPSTREAM_META_KEY!r}; pass upstream_meta= or start the upstream "
                          "with a registry", key=UPSTREAM_META_KEY)
    return json.loads(text)
