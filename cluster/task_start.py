"""Starting a replication task's actors: the checks first (config, name, downstream),
then the sink side, the SQL workers and the merger, then the wait until the task merges.

:meth:`cluster.drainer.Drainer.start` is the public entry (its docstring says what every
argument does); this module holds the work so the handle stays about observing and
stopping a task.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging

from actors.drainer import MergerActor
from actors.ray_calls import RayCalls
from cluster.downstream_check import check_downstream
from cluster.task_actors import TaskActors, answer
from tidb_binlog.config import DrainerConfig
from tidb_binlog.drainer.pipeline.names import (
    DEFAULT_NAMESPACE,
    UPSTREAM_META_KEY,
    check_task_name,
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
        check_task_name(name)
    if registry is None and pumps is None:
        raise ConfigError("no registry and no pumps given: the drainer cannot find its "
                          "pumps", key="registry")
    if upstream_meta is None:
        upstream_meta = _upstream_meta_from(registry)
    if registry is not None:  # the registry's cluster id is the one pumps use (PD's)
        cfg = dataclasses.replace(cfg, cluster_id=registry.cluster_id())
    settings = TaskSettings.from_config(cfg, upstream_meta=upstream_meta,
                                        **settings_overrides)
    kind = settings.kind  # the sink table's row: what to check, which shell starts it
    layout = None
    if kind.needs_downstream:  # a downstream we cannot use fails the start here
        layout = check_downstream(settings, wait_s=downstream_wait_s)
    if addr is None and cfg.addr == _default_addr():
        addr = "127.0.0.1:0"  # see cluster.drainer's doc: tasks and tests share hosts
    if namespace is None:
        namespace = getattr(registry, "namespace", None) or DEFAULT_NAMESPACE
    # where the PumpActors are named, for an unnamed task too: its keeper reads large
    # binlogs from them by name there ([syncer] large-binlog-bytes)
    settings = dataclasses.replace(settings, namespace=namespace)
    names: dict[str, str | None] = {"merger": None, "keeper": None, "sink": None,
                                    "task": None}
    if name is not None:
        settings = dataclasses.replace(settings, task=name, namespace=namespace)
        if RayCalls.find_actor(task_actor_name(name, "merger"), namespace) is not None:
            raise ConfigError(f"a replication task named {name!r} already runs in Ray "
                              f"namespace {namespace!r}; stop or remove it first, or pick "
                              "another name", key="name")
        names = {"merger": task_actor_name(name, "merger"),
                 "keeper": task_actor_name(name, "keeper"),
                 "sink": task_actor_name(name, kind.role), "task": name}
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
        # the sink's shell (actors/<kind>_sink.py) starts its keeper, its sink actor and
        # (MySQL) the SQL workers; actors started before a failure are killed below
        shell = importlib.import_module(kind.shell)
        keeper, coordinator, sink_workers = shell.start_sink_actors(
            cfg, settings, names=names, opts=opts, resources=resources, layout=layout)
        workers.extend(sink_workers)
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
