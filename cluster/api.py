"""The Python API to submit and supervise replication tasks on a Ray cluster.

::

    from cluster.api import connect

    cluster = connect(address="auto", namespace="tidb-binlog")    # a Ray cluster + registry
    task = cluster.submit("orders", config="config/drainer.toml",
                          to={"host": "10.0.0.5", "port": 3306, "user": "root"},
                          worker_count=4, initial_commit_ts=0)
    task.wait_synced(timeout=120)        # the checkpoint reached "now" (a fresh TSO)
    print(task.status())                 # TaskStatus(name='orders', state='running', ...)
    task.pause(); task.resume()          # final checkpoint, actors ended; started again
    task.update(worker_count=2)          # stop + restart with 2 SQL workers (see update)
    task.remove()                        # stopped, its record gone

    connect(namespace="tidb-binlog").task("orders")   # from any other driver

A submitted task is *detached* and *named*: its actors (``<task>-merger``,
``<task>-keeper``, ``<task>-coordinator``, ``<task>-worker-<i>``) outlive the driver
that submitted it, restart under Ray's fault tolerance from their settings alone
(they look their peers up by name), and show under these names on the Ray
dashboard. A detached record actor ``<task>-task`` keeps the task's config and
wanted state, so ``pause``/``resume``/``update`` work from any driver; it writes each
change to the registry's KV first (``task-record/<task>``), so a restart of the record
actor (killed, its node lost) comes back paused or with the updated worker count. Several
tasks to several downstreams run side by side in one namespace. Every call that
waits takes a ``timeout`` and raises :class:`~tidb_binlog.errors.UnavailableError`
past it, naming what it waited for.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from actors.ray_calls import RayCalls
from actors.task_record import record_actor_name, start_task_record
from cluster.drainer import STATUS_TIMEOUT_S, STOP_TIMEOUT_S, Drainer
from cluster.launch import LocalCluster, PumpOptions
from cluster.ray_join import first_line, is_auth_failure, token_hint
from cluster.registry import REGISTRY_NAME, connect_registry, get_or_create_registry
from cluster.task_attach import named_task_roles
from cluster.task_reads import restarting_actor
from tidb_binlog.config import DrainerConfig, load_drainer_config
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.names import (
    DEFAULT_NAMESPACE,
    check_task_name,
    pump_actor_name,
)
from tidb_binlog.drainer.pipeline.settings import check_worker_count_update, sink_of_db_type
from tidb_binlog.drainer.pipeline.task_status import (
    PAUSED,
    RESTARTING,
    STOPPED,
    UNREACHABLE,
    TaskStatus,
)
from tidb_binlog.errors import ConfigError, UnavailableError
from tidb_binlog.node import OFFLINE, PUMP, NodeStatus
from tidb_binlog.node import PAUSED as NODE_PAUSED
from tidb_binlog.pump_client import PumpClient
from tidb_binlog.upstream.tso_batch import TsoBatcher

__all__ = ["connect", "Cluster", "ReplicationTask", "TaskStatus"]

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""Default bound of ``submit`` / ``resume`` / ``update`` (the downstream check and the
actors' start)."""


def connect(address: str | None = "auto", namespace: str = DEFAULT_NAMESPACE, *,
            registry_dir: str | Path | None = None) -> Cluster:
    """Join a Ray cluster and its registry: the handle to submit and find tasks with.

    ``address``: as ``ray.init`` takes it (``"auto"``: the cluster ``ray start`` runs on
    this host; ``None``: a new local Ray); ignored when this process already called
    ``ray.init`` (its namespace need not be ``namespace``: every actor here is named in
    ``namespace`` explicitly). ``registry_dir``: start the registry actor (PD's role)
    with its data there if none runs yet; else one must run in ``namespace``.
    """
    if not RayCalls.is_initialized():
        _join_ray(address, namespace)
    if registry_dir is not None:
        registry = get_or_create_registry(registry_dir, namespace=namespace)
    else:
        registry = connect_registry(namespace=namespace, name=REGISTRY_NAME)
    return Cluster(registry, namespace)


def _join_ray(address: str | None, namespace: str) -> None:
    """``ray.init``; a cluster refusing us for want of its auth token (Ray's token
    authentication) is an UnavailableError saying what to set, as for the drainer CLI.
    Ray 2.60 often reports it only as "Failed to connect to Ray cluster" (the refusal is
    in its C++ log lines), so a connection failure without a token carries the hint."""
    try:
        RayCalls.init(address=address, namespace=namespace, log_to_driver=False)
    except Exception as exc:
        if is_auth_failure(exc):
            raise UnavailableError(
                f"the Ray cluster at {address!r} refused us: it requires token "
                "authentication; set RAY_AUTH_MODE=token and the cluster's token in "
                "RAY_AUTH_TOKEN (or a file named by RAY_AUTH_TOKEN_PATH, or "
                "~/.ray/auth_token)") from exc
        if isinstance(exc, ConnectionError):
            raise UnavailableError(f"cannot join the Ray cluster at {address!r}: "
                                   f"{first_line(exc)}{token_hint()}") from exc
        raise


class Cluster:
    """A Ray cluster's registry, pumps and replication tasks in one namespace."""

    def __init__(self, registry, namespace: str = DEFAULT_NAMESPACE):
        self.registry = registry
        self.namespace = namespace
        self._local = None  # the LocalCluster that start_pumps used
        self._tso = None

    # -- pumps --------------------------------------------------------------------------
    def start_pumps(self, n: int, work_dir: str | Path, *, upstream: dict | None = None,
                    config: dict | None = None,
                    resources: dict[str, float] | list[dict[str, float]] | None = None,
                    ) -> list[str]:
        """Start ``n`` detached PumpActors (``pump-<node>``), data under
        ``work_dir/pump-<i>``; ``upstream``: the upstream's connection parameters (the
        DDL history drainers read, published in the registry); ``config``: pump.toml
        overrides. Placement: this node, or by ``resources``, custom Ray resources every
        pump asks for (a dict) or one dict per pump (a list of ``n``), e.g.
        ``[{"pump-a": 1}, {"pump-b": 1}]`` (see :meth:`start_pump`). Returns their node
        ids."""
        placements = resources if isinstance(resources, list) else [resources] * n
        if len(placements) != n:
            raise ConfigError(f"resources lists {len(placements)} placements for {n} pumps; "
                              "give one dict per pump, or one dict for all", key="resources")
        first = len(self.pumps())
        return [self.start_pump(f"pump-{first + i}", work_dir, upstream=upstream,
                                config=config, resources=placements[i])
                for i in range(n)]

    def start_pump(self, node_id: str, work_dir: str | Path, *, upstream: dict | None = None,
                   config: dict | None = None,
                   resources: dict[str, float] | None = None) -> str:
        """Start the detached PumpActor ``pump-<node_id>`` with its data in
        ``work_dir/<node_id>`` (``upstream``, ``config``: as :meth:`start_pumps`; the
        config may set this pump's own keys, e.g. ``addr`` on its host's IP).

        ``resources``: custom Ray resources only the pump's machine offers (``ray start
        --resources='{"pump-host-1": 1}'``): the pump runs there, and ``work_dir`` is a
        path on that machine's disk (a relative one is made absolute against this
        driver's current directory, as everywhere here). When that node dies Ray keeps the pump's restart
        pending until a node offering the resource joins (the machine coming back), and
        the pump reopens the same data dir there: nothing it acknowledged is lost.
        Without ``resources`` the pump is pinned to this driver's node. ConfigError when
        the pump runs already or no alive node offers ``resources``."""
        if RayCalls.find_actor(pump_actor_name(node_id), self.namespace) is not None:
            raise ConfigError(f"pump {node_id!r} runs already in namespace "
                              f"{self.namespace!r} (actor {pump_actor_name(node_id)!r})",
                              key="node-id")
        local = LocalCluster(work_dir, pumps=0, upstream_params=upstream,
                             namespace=self.namespace, detached=True,
                             pump_options=PumpOptions(extra=dict(config or {})))
        local.start(registry=self.registry)
        local.start_pump(node_id, resources=resources)
        self._local = local
        return node_id

    def pumps(self) -> list[NodeStatus]:
        """The registry's pump records (node id, address, state)."""
        return self.registry.nodes(PUMP)

    def pump_client(self, **kw):
        """A pump client following the registry: what the upstream (TiDB's role) writes
        its binlogs through. Close it when done."""
        return PumpClient(self.registry, **kw)

    def get_ts(self) -> int:
        """A timestamp from the registry's TSO (PD's role), batched like PD's client."""
        if self._tso is None:
            self._tso = TsoBatcher(self.registry.get_ts)
        return self._tso.get_ts()

    # -- tasks ---------------------------------------------------------------------------
    def submit(self, name: str, config: str | Path | dict | DrainerConfig | None = None, *,
               to: dict | None = None, filters: dict | None = None,
               worker_count: int | None = None, initial_commit_ts: int | None = None,
               overrides: dict | None = None, resources: dict[str, float] | None = None,
               timeout: float = START_TIMEOUT_S) -> ReplicationTask:
        """Start the detached replication task ``name``.

        ``config``: a drainer.toml path, a dict of drainer.toml keys (dotted, as the
        command line's overrides: ``{"syncer.db-type": "mysql"}``), or a loaded config.
        ``to``: ``[syncer.to]`` keys (host, port, user, password, ...); ``filters``:
        ``[syncer]`` filter keys (``ignore-schemas``, ``ignore-txn-commit-ts``, ...);
        ``worker_count``, ``initial_commit_ts``; ``overrides``: any other keys.
        ``resources``: custom Ray resources each of the task's keeper, coordinator and SQL
        workers asks for (e.g. ``{"drainer": 0.01}``), to keep them off the pumps'
        machines; the merger stays on this driver's node (see ``Drainer.start``); kept
        in the task's record, so ``resume``/``update`` place them the same way.
        ConfigError when a task of that name exists or the config is wrong;
        DownstreamError / UnavailableError when the downstream cannot be used.
        """
        check_task_name(name)
        if RayCalls.find_actor(record_actor_name(name), self.namespace) is not None:
            raise ConfigError(f"a replication task named {name!r} exists in namespace "
                              f"{self.namespace!r}; remove it first or pick another name",
                              key="name")
        cfg = _load_config(config, to=to, filters=filters, worker_count=worker_count,
                           initial_commit_ts=initial_commit_ts, overrides=overrides)
        options = {"resources": dict(resources)} if resources else {}
        record = start_task_record(name, cfg, options, self.namespace, registry=self.registry)
        try:
            _start(self, name, cfg, timeout, options)
        except BaseException:
            RayCalls.kill(record)
            raise
        return ReplicationTask(self, name)

    def task(self, name: str) -> ReplicationTask:
        """The task ``name`` submitted by any driver; UnavailableError if there is none."""
        if RayCalls.find_actor(record_actor_name(name), self.namespace) is None:
            raise UnavailableError(f"no replication task named {name!r} in namespace "
                                   f"{self.namespace!r}; known: {self.task_names()}")
        return ReplicationTask(self, name)

    def task_names(self) -> list[str]:
        return sorted(n.removesuffix("-task") for n in RayCalls.named_actors(self.namespace)
                      if n.endswith("-task"))

    def tasks(self) -> list[ReplicationTask]:
        """Every task submitted in this namespace (running, paused or stopped)."""
        return [ReplicationTask(self, n) for n in self.task_names()]


class ReplicationTask:
    """One named task; a light handle (make as many as you like, from any driver)."""

    def __init__(self, cluster: Cluster, name: str):
        self.cluster = cluster
        self.name = name
        self._restart_seen: dict[str, float] = {}  # role -> first seen restarting

    def __repr__(self) -> str:
        return f"ReplicationTask({self.name!r}, namespace={self.cluster.namespace!r})"

    # -- observing ----------------------------------------------------------------------
    def status(self, timeout: float = STATUS_TIMEOUT_S) -> TaskStatus:
        """Where the task stands (:class:`TaskStatus`), each actor answering within
        ``timeout``. While Ray restarts one of its actors: ``restarting``, with
        ``TaskStatus.restarting`` naming it (and since when this handle sees it restart);
        a task that should run but does not answer otherwise is ``unreachable``."""
        rec = self._record(timeout)
        cfg = rec["cfg"]
        sink = _sink_kind(cfg)
        if rec["state"] in (PAUSED, STOPPED):
            return TaskStatus.not_running(self.name, rec["state"],
                                          checkpoint_ts=rec["last_checkpoint_ts"],
                                          worker_count=cfg.syncer.worker_count, sink=sink)
        # the attach asks the merger, and a call to a merger Ray restarts may wait until it
        # is back: look first (the sink's and the others' restarts Drainer.status reports)
        restart = restarting_actor(named_task_roles(
            self.name, self.cluster.namespace, sink, 0, only=("merger",)), self._restart_seen)
        if restart is not None:
            return TaskStatus.not_running(self.name, RESTARTING, restarting=restart,
                                          worker_count=cfg.syncer.worker_count, sink=sink)
        try:
            report = self._drainer(timeout).status(timeout)
        except (UnavailableError, PipelineReset) as exc:  # restarting, or its node is gone
            # the merger restarting fails the attach itself: ask Ray's control store
            restart = restarting_actor(named_task_roles(
                self.name, self.cluster.namespace, sink, cfg.syncer.worker_count),
                self._restart_seen)
            if restart is not None:
                return TaskStatus.not_running(self.name, RESTARTING, restarting=restart,
                                              worker_count=cfg.syncer.worker_count,
                                              sink=sink)
            return TaskStatus.not_running(self.name, UNREACHABLE, error=str(exc),
                                          worker_count=cfg.syncer.worker_count, sink=sink)
        restart = report.get("restarting")
        if restart is not None:  # each call attaches anew: "since" is this handle's
            report = {**report, "restarting": dataclasses.replace(
                restart, since_s=self._restart_seen.setdefault(restart.actor,
                                                               restart.since_s))}
        else:
            self._restart_seen.clear()
        return TaskStatus.from_report(self.name, report, sink=sink,
                                      worker_count=cfg.syncer.worker_count)

    def checkpoint(self, timeout: float = STATUS_TIMEOUT_S) -> int:
        """The commit_ts everything at or below which is in the downstream."""
        return self.status(timeout).checkpoint_ts

    def lag(self, timeout: float = STATUS_TIMEOUT_S) -> float | None:
        """Seconds the downstream is behind (see :class:`TaskStatus`)."""
        return self.status(timeout).lag_s

    def wait_synced(self, timeout: float = 120.0, commit_ts: int | None = None) -> TaskStatus:
        """Block until the checkpoint reaches ``commit_ts`` (default: a fresh timestamp
        from the registry's TSO, i.e. everything committed before this call), at most
        ``timeout`` seconds; UnavailableError says where the task stands."""
        target = commit_ts if commit_ts is not None else self.cluster.registry.get_ts()
        deadline = time.monotonic() + timeout
        st = self.status(timeout)
        while st.checkpoint_ts < target:
            if st.state not in ("running", "starting", UNREACHABLE, RESTARTING):  # Ray restarts
                raise UnavailableError(f"task {self.name!r} is {st.state}, not syncing"
                                       + (f": {st.error}" if st.error else ""))
            if time.monotonic() > deadline:
                raise UnavailableError(f"waited {timeout:g} s for task {self.name!r} to "
                                       f"reach {target}: its checkpoint is at "
                                       f"{st.checkpoint_ts} ({st.state}, lag {st.lag_s} s)")
            time.sleep(0.2)
            st = self.status(max(deadline - time.monotonic(), 1.0))
        return st

    # -- controlling --------------------------------------------------------------------
    def pause(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Stop with a final checkpoint (returned); the registry records it ``paused``,
        so the pumps keep its binlogs; :meth:`resume` starts it again."""
        return self._end(PAUSED, NODE_PAUSED, timeout)

    def resume(self, timeout: float = START_TIMEOUT_S) -> TaskStatus:
        """Start a paused or stopped task again from its saved checkpoint."""
        rec = self._record(timeout)
        if rec["state"] not in (PAUSED, STOPPED):
            raise ConfigError(f"task {self.name!r} is {rec['state']}, not paused or stopped",
                              key="name")
        _start(self.cluster, self.name, rec["cfg"], timeout, rec.get("options"))
        return self.status()

    def update(self, *, worker_count: int, timeout: float = STOP_TIMEOUT_S) -> TaskStatus:
        """Change the number of SQL workers: stop with the final checkpoint, start again
        with ``worker_count``. Only a MySQL/TiDB task has SQL workers: on a file or
        Parquet task it is a ConfigError and nothing changes. Safe in exactly-once mode: the start reconciles the
        workers' progress rows with the new count (rows of the old layout are dropped
        and the new workers run in safe mode up to the highest old progress, so nothing
        is applied twice in effect and nothing is skipped)."""
        check_worker_count_update(self.name, "mysql", worker_count)
        rec = self._record(timeout)
        cfg = rec["cfg"]
        check_worker_count_update(self.name, cfg.syncer.db_type, worker_count)
        was_running = rec["state"] not in (PAUSED, STOPPED)
        if was_running:
            self._end(PAUSED, NODE_PAUSED, timeout)
        # persisted by the record (registry KV) before it answers: a restart keeps it
        self._record_call("set_worker_count", worker_count, timeout=timeout)
        if was_running:
            rec = self._record(timeout)
            _start(self.cluster, self.name, rec["cfg"], timeout, rec.get("options"))
        return self.status()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Stop with a final checkpoint (returned); the registry records the drainer
        ``offline`` (pumps stop keeping binlogs for it). The task's record stays:
        :meth:`resume` starts it again, :meth:`remove` forgets it."""
        return self._end(STOPPED, OFFLINE, timeout)

    def remove(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the task if it runs (offline in the registry) and forget it."""
        rec = self._record(timeout)
        if rec["state"] not in (PAUSED, STOPPED):
            self._end(STOPPED, OFFLINE, timeout)
        self._record_call("forget", timeout=timeout)
        RayCalls.kill(self._record_actor())

    # -- inside -------------------------------------------------------------------------
    def _record_actor(self):
        actor = RayCalls.find_actor(record_actor_name(self.name), self.cluster.namespace)
        if actor is None:
            raise UnavailableError(f"replication task {self.name!r} was removed (no "
                                   f"{record_actor_name(self.name)!r} actor in namespace "
                                   f"{self.cluster.namespace!r})")
        return actor

    def _record(self, timeout: float) -> dict:
        return self._record_call("get", timeout=timeout)

    def _record_call(self, method: str, *args, timeout: float):
        """``method`` of the task's record actor within ``timeout`` seconds. While Ray
        restarts the record (it reloads its state from the registry), the call is made
        again until the timeout: every record method is idempotent (get, set_state,
        set_worker_count, forget), so one that "may or may not have been executed" is
        safe to repeat."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return RayCalls.get_within(RayCalls.call(self._record_actor(), method, *args),
                                           max(left, 0.0))
            except PipelineReset as exc:  # the record is restarting
                if time.monotonic() + 0.5 >= deadline:
                    raise UnavailableError(
                        f"the record of task {self.name!r} was still restarting after "
                        f"{timeout:g} s: {exc}") from exc
                time.sleep(0.5)
            except UnavailableError:
                raise
            except Exception as exc:
                raise UnavailableError(f"the record of task {self.name!r} did not answer "
                                       f"{method} within {timeout:g} s: {exc}") from exc

    def _drainer(self, timeout: float) -> Drainer:
        return Drainer.attach(self.name, self.cluster.namespace, timeout)

    def _end(self, state: str, node_state: str, timeout: float) -> int:
        rec = self._record(timeout)
        if rec["state"] in (PAUSED, STOPPED):
            self._record_call("set_state", state, timeout=timeout)
            return rec["last_checkpoint_ts"]
        drainer = self._drainer(timeout)
        result = drainer.stop(final_state=node_state, timeout=timeout)
        checkpoint = int(result.get("commit_ts") or 0)
        self._record_call("set_state", state, checkpoint, timeout=timeout)
        log.info("replication task %s %s at checkpoint %d", self.name, state, checkpoint)
        return checkpoint


def _start(cluster: Cluster, name: str, cfg: DrainerConfig, timeout: float,
           options: dict | None = None) -> Drainer:
    """Start the task's actors; ``options``: the record's start options (placement)."""
    drainer = Drainer.start(cfg, registry=cluster.registry, namespace=cluster.namespace,
                            name=name, detached=True, start_timeout_s=timeout,
                            resources=(options or {}).get("resources"))
    record = RayCalls.find_actor(record_actor_name(name), cluster.namespace)
    if record is not None:
        RayCalls.get_within(RayCalls.call(record, "set_state", "running"), timeout)
    return drainer


def _sink_kind(cfg: DrainerConfig) -> str:
    """``TaskSettings.sink`` of a config's ``db-type`` (tidb writes through mysql)."""
    return sink_of_db_type(cfg.syncer.db_type)


def _load_config(config, *, to, filters, worker_count, initial_commit_ts,
                 overrides) -> DrainerConfig:
    if isinstance(config, DrainerConfig):
        if to or filters or worker_count is not None or initial_commit_ts is not None \
                or overrides:
            raise ConfigError("pass a drainer.toml path or a dict of keys to combine with "
                              "to=/filters=/worker_count=/initial_commit_ts=/overrides=, "
                              "not a loaded config", key="config")
        return config
    keys: dict = {}
    path = None
    if isinstance(config, dict):
        keys.update(config)
    elif config is not None:
        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"no drainer config file at {str(path)!r}", key="config")
    keys.update({f"syncer.to.{k}": v for k, v in (to or {}).items()})
    keys.update({f"syncer.{k}": v for k, v in (filters or {}).items()})
    if worker_count is not None:
        keys["syncer.worker-count"] = worker_count
    if initial_commit_ts is not None:
        keys["initial-commit-ts"] = initial_commit_ts
    keys.update(overrides or {})
    return load_drainer_config(path, keys)
