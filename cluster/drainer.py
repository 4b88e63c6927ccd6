"""The Python API to run one replication task: :class:`Drainer`.

::

    from cluster.drainer import Drainer
    from tidb_binlog.config import load_drainer_config

    cfg = load_drainer_config("drainer.toml")
    drainer = Drainer.start(cfg, registry=registry_client)   # on the current Ray cluster
    drainer.wait_for_checkpoint(commit_ts, timeout_s=60)      # downstream caught up
    print(drainer.status(timeout=30))
    drainer.stop(timeout=180)                                 # final consistent checkpoint

Every wait is bounded: ``status`` / ``task_state`` (each actor answers within
``timeout``), ``wait_for_checkpoint`` (``timeout_s`` in all, status calls included)
and ``stop`` (past ``timeout`` the actors are killed anyway); on expiry an
UnavailableError names the actor and call that did not answer and, for ``stop``,
the stage the merger was at. Before any actor starts, :func:`check_downstream`
checks the downstream in every mode (see :meth:`Drainer.start`).

The status counters ``applied_rows``, ``ddl_jobs`` and ``resets`` are saved with
the checkpoint (:mod:`tidb_binlog.drainer.checkpoint.checkpoint`), so they survive a restart
of any actor: after one, the counts resume from the saved checkpoint and the replay
above it is counted once.

``start`` creates the pipeline of :mod:`actors` (merger, schema keeper,
coordinator) and ``worker-count`` SQL workers (:mod:`actors.syncer_workers`);
for ``db-type = "file"`` a pb keeper and a file-sink actor (:mod:`actors.file_sink`,
pinned to this node) take the keeper's and coordinator's places, with no SQL workers;
for ``db-type = "parquet"`` a parquet keeper and sink (:mod:`actors.parquet_sink`).
The merger follows the registry's pumps while it runs (every ``detect-interval``
and on ``Cistern.Notify``): each pump that is not offline, as the PumpActor
named :func:`pump_actor_name` of its node id in ``namespace``, or over gRPC at
its registered host for a standalone pump. The upstream meta (the DDL history
the schema keeper reads; TiKV's role in TiDB) is found in the registry KV under
:data:`UPSTREAM_META_KEY` unless given.

The task is also a drainer *node* (:mod:`tidb_binlog.drainer.service.node`): the merger actor
is placed on the caller's Ray node and serves Cistern gRPC on ``addr`` (default
drainer.toml's ``addr``; port 0 picks one) and HTTP status on its port + 1, and
keeps the registry record ``online`` with the saved checkpoint. When drainer.toml
leaves ``addr`` at its default (``127.0.0.1:8249``), this Python API binds free
ports instead (demos, tests and benchmarks start many tasks on one host; the
record carries the real address, so Notify still works); the ``tidb-binlog
drainer`` command always binds ``addr``. ``stop()``
records ``paused``; ``PUT /state/{id}/close`` stops the task and records
``offline``. :attr:`Drainer.addr`, :attr:`Drainer.status_addr` and
:attr:`Drainer.node_id` say where it is.

``start(name=...)`` makes a *named* task (``detached=True``: outliving this driver,
as :mod:`cluster.api` submits them): its actors are ``<name>-merger``, ``-keeper``,
``-coordinator`` (``-file-sink``) and ``-worker-<i>`` in ``namespace``, get only their
settings and look their peers up by these names, so Ray restarts any of them without
anything this driver held; :meth:`Drainer.attach` finds it again from any driver.
Without a name the actors are anonymous, owned by this driver, and handed each
other's handles (Ray then warns that their constructor arguments live in the object
store: a restart works only while this driver lives).

Before the SQL workers start (exactly-once), ``start`` reconciles their progress
rows with ``worker-count``
(:meth:`~tidb_binlog.drainer.checkpoint.store.MySQLCheckpointStore.check_workers`):
after a crash under another worker-count the rows are dropped and the workers run
in safe mode for this run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time

from actors.drainer import CoordinatorActor, MergerActor, SchemaKeeperActor
from actors.file_sink import start_file_sink_actors
from actors.parquet_sink import start_parquet_sink_actors
from actors.ray_calls import GetTimeoutError, RayCalls
from actors.syncer_workers import start_sql_workers
from cluster.registry import REGISTRY_NAME, connect_registry
from tidb_binlog.config import DrainerConfig, split_registry
from tidb_binlog.drainer.checkpoint.store import MySQLCheckpointStore
from tidb_binlog.drainer.pipeline.names import (
    DEFAULT_NAMESPACE,
    UPSTREAM_META_KEY,
    check_task_name,
    sink_role,
    task_actor_name,
)
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay.recover import recover_if_needed
from tidb_binlog.drainer.service.node import ServiceSettings
from tidb_binlog.errors import (
    ConfigError,
    DownstreamError,
    TransientDownstreamError,
    UnavailableError,
)
from tidb_binlog.node import PAUSED

__all__ = ["Drainer", "join_cluster", "choose_ray_address", "check_downstream",
           "recover_from_relay_log", "DOWNSTREAM_WAIT_S"]

log = logging.getLogger(__name__)

STATUS_TIMEOUT_S = 30.0
"""Default bound of :meth:`Drainer.status` / :meth:`Drainer.task_state`."""
STOP_TIMEOUT_S = 180.0
"""Default bound of :meth:`Drainer.stop` (the merger gives its thread 60 s, then waits
for the SQL workers and saves the final checkpoint)."""


class Drainer:
    """A running replication task (see the module docstring)."""

    def __init__(self, settings: TaskSettings, merger, keeper, coordinator, workers,
                 addresses: dict | None = None):
        self.settings = settings
        self.merger = merger
        self.keeper = keeper
        self.coordinator = coordinator
        self.workers = workers
        addresses = addresses or {}
        self.node_id: str = addresses.get("node_id", "")
        self.addr: str = addresses.get("addr", "")            # Cistern gRPC (registry host)
        self.status_addr: str = addresses.get("status_addr", "")  # HTTP status and metrics
        self._stopped: dict | None = None

    @classmethod
    def start(cls, cfg, *, registry=None, upstream_meta: dict | None = None,
              pumps: dict | None = None, namespace: str | None = None,
              addr: str | None = None, status_addr: str = "", node_id: str | None = None,
              serve: bool = True, start_timeout_s: float = 60.0,
              downstream_wait_s: float | None = None, name: str | None = None,
              detached: bool = False, resources: dict[str, float] | None = None,
              **settings_overrides) -> Drainer:
        """Start the actors of one task from a :class:`~tidb_binlog.config.DrainerConfig`.

        ``pumps`` maps node ids to PumpActor handles (a fixed set; default: follow the
        registry). ``namespace``: where the PumpActors are named; None = the registry
        client's namespace (where :class:`cluster.launch.LocalCluster` names them), else
        ``tidb-binlog``. A pump with no PumpActor there is pulled over gRPC (slower).
        ``addr`` / ``status_addr`` / ``node_id`` override drainer.toml's (``status_addr``
        "" = the Cistern port + 1; ``addr`` None = drainer.toml's, or a free port when
        drainer.toml leaves it at the default). ``serve=False`` runs the pipeline
        only: no Cistern, HTTP or registry record (no Notify handshake either).
        Returns once the task merges (its node online), or after ``start_timeout_s``;
        a task that failed meanwhile is returned too: ``status()`` names the error.

        First, in every mode, the downstream is checked (:func:`check_downstream`,
        waiting up to ``downstream_wait_s``, default :data:`DOWNSTREAM_WAIT_S`): a
        refusal raises DownstreamError, no answer UnavailableError, and nothing starts.

        ``name`` makes a *named* task: its actors are ``<name>-merger``, ``<name>-keeper``,
        ``<name>-coordinator`` (``<name>-file-sink``) and ``<name>-worker-<i>`` in
        ``namespace``, take only settings and look their peers up by these names (so a
        restart needs nothing this driver held), and :meth:`attach` finds the task again
        from any driver. ``detached=True`` (with a name) lets the actors outlive this
        driver (``lifetime="detached"``): the task API (:mod:`cluster.api`) uses it.

        ``resources`` (custom Ray resources, e.g. ``{"drainer": 0.01}``: each actor asks
        for them) place a MySQL/TiDB task's keeper, coordinator and SQL workers on the
        nodes offering them (off the pumps' machines, say). The merger, a coordinator
        with a relay log and the file/Parquet sinks stay pinned to this driver's node:
        their address or directories are this host's.
        """
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
            addr = "127.0.0.1:0"  # see the module doc: tasks and tests share hosts
        if namespace is None:
            namespace = getattr(registry, "namespace", None) or DEFAULT_NAMESPACE
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
        drainer = cls(settings, None, None, None, workers)
        try:
            if file_sink:  # pb records in [syncer.to] dir: no SQL workers, no downstream
                settings = dataclasses.replace(settings, downstream=None, exactly_once=False,
                                               worker_count=1, sink="file")
                names["sink"] = task_actor_name(name, "file-sink") if name else None
                drainer.settings = settings
                keeper, coordinator = start_file_sink_actors(
                    cfg, settings, names={"keeper": names["keeper"], "sink": names["sink"]},
                    **opts)
            elif parquet_sink:  # a Parquet lake in [syncer.to] dir: no SQL workers
                settings = dataclasses.replace(settings, downstream=None, exactly_once=False,
                                               worker_count=1, sink="parquet")
                names["sink"] = task_actor_name(name, "parquet-sink") if name else None
                drainer.settings = settings
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
            drainer.keeper, drainer.coordinator = keeper, coordinator
            peers = (None, None, None) if name else (keeper, coordinator, workers)
            merger = RayCalls.start_actor(  # pinned here: addr is this host's
                MergerActor, settings, peers[0], peers[1], pumps, registry=registry,
                service=service, workers=peers[2],
                options={**opts, "max_concurrency": 8, "name": names["merger"],
                         "scheduling_strategy": RayCalls.pinned()})
            drainer.merger = merger
        except BaseException:
            drainer._kill()
            raise
        try:
            addresses = _answer(RayCalls.call(merger, "addresses"), "merger", "addresses()",
                                start_timeout_s)
        except BaseException:
            drainer._kill()
            raise
        drainer.node_id = addresses["node_id"]
        drainer.addr = addresses["addr"]
        drainer.status_addr = addresses["status_addr"]
        # Online (and merging) before returning: a pump started afterwards notifies us.
        state = RayCalls.get(RayCalls.call(merger, "wait_started", start_timeout_s))
        if state == "starting":
            log.warning("the replication task is still starting after %.0f s (reading the "
                        "checkpoint from the downstream?); see status()", start_timeout_s)
        log.info("replication task started: %s, %d SQL worker(s), downstream %s%s",
                 f"pumps {sorted(pumps)}" if pumps is not None else "pumps from the registry",
                 len(workers), settings.downstream.address if settings.downstream else
                 f"files in {cfg.syncer.to.dir}",
                 f"; drainer {drainer.node_id} serving Cistern gRPC on {drainer.addr}, HTTP "
                 f"status on {drainer.status_addr}" if serve else "")
        return drainer

    @classmethod
    def attach(cls, name: str, namespace: str = DEFAULT_NAMESPACE,
               timeout: float = STATUS_TIMEOUT_S) -> Drainer:
        """The running named task ``name`` in ``namespace`` (started by any driver), found
        by its actors' names. UnavailableError when it does not run there, or when its
        merger does not answer within ``timeout``."""
        merger = RayCalls.find_actor(task_actor_name(name, "merger"), namespace)
        if merger is None:
            raise UnavailableError(f"no replication task named {name!r} runs in Ray "
                                   f"namespace {namespace!r} (no actor "
                                   f"{task_actor_name(name, 'merger')!r}); see "
                                   "Cluster.tasks() for the running ones")
        settings = _answer(RayCalls.call(merger, "task_settings"), "merger",
                           "task_settings()", timeout)
        addresses = _answer(RayCalls.call(merger, "addresses"), "merger", "addresses()",
                            timeout)

        def find(role: str):
            return RayCalls.find_actor(task_actor_name(name, role), namespace)

        workers = [find(f"worker-{i}") for i in range(settings.worker_count)
                   ] if settings.sink == "mysql" else []
        return cls(settings, merger, find("keeper"), find(sink_role(settings.sink)),
                   [w for w in workers if w is not None], addresses)

    # -- observing ------------------------------------------------------------------------
    def status(self, timeout: float = STATUS_TIMEOUT_S) -> dict:
        """Merger state and error, pump positions, checkpoint and apply counters. Each
        actor has ``timeout`` seconds to answer (UnavailableError names the one that
        did not: busy, restarting, or its node is gone)."""
        deadline = time.monotonic() + timeout
        merger = _answer(RayCalls.call(self.merger, "status"), "merger", "status()", timeout)
        coord = _answer(RayCalls.call_group(self.coordinator, "status", "status"),
                        "coordinator", "status()", max(deadline - time.monotonic(), 0.0),
                        budget=timeout)
        return {**merger, **{f"checkpoint_{k}" if k == "commit_ts" else k: v
                             for k, v in coord.items()}}

    def task_state(self, timeout: float = STATUS_TIMEOUT_S) -> dict:
        """The merger's status alone (cheap): ``state``, ``error``, ``node_state``, ..."""
        return _answer(RayCalls.call(self.merger, "status"), "merger", "status()", timeout)

    def checkpoint_ts(self, timeout: float = STATUS_TIMEOUT_S) -> int:
        return self.status(timeout)["checkpoint_commit_ts"]

    def wait_for_checkpoint(self, commit_ts: int, timeout_s: float = 60.0,
                            poll_s: float = 0.2) -> dict:
        """Block until the checkpoint reaches ``commit_ts``, at most ``timeout_s`` in all
        (status calls included); raise UnavailableError on failure or timeout, saying
        what it waited for and where the task stands."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                st = self.status(timeout=max(deadline - time.monotonic(), 0.1))
            except UnavailableError as exc:
                raise UnavailableError(f"waited {timeout_s:g} s for the checkpoint to reach "
                                       f"{commit_ts}: {exc}") from exc
            if st["state"] == "failed":
                raise UnavailableError(f"replication task failed: {st['error']}")
            if st["checkpoint_commit_ts"] >= commit_ts:
                return st
            if time.monotonic() > deadline:
                raise UnavailableError(
                    f"waited {timeout_s:g} s for the checkpoint to reach {commit_ts}: it is at "
                    f"{st['checkpoint_commit_ts']} (task {st['state']}, "
                    f"{st.get('pending', 0)} item(s) pending in the coordinator, "
                    f"{st.get('outstanding', 0)} worker call(s) outstanding, pump positions "
                    f"{st.get('pump_positions')})")
            time.sleep(poll_s)

    # -- stopping ---------------------------------------------------------------------------
    def stop(self, final_state: str = PAUSED, timeout: float = STOP_TIMEOUT_S) -> dict:
        """Stop pulling, wait for the workers, save the final checkpoint, record
        ``final_state`` (paused) in the registry, end the actors. Idempotent.

        Bounded by ``timeout``: past it the actors are killed anyway and
        UnavailableError names the stage the merger was at (the next start replays
        from the last saved checkpoint, so nothing is lost)."""
        if self._stopped is not None:
            return self._stopped
        ref = RayCalls.call(self.merger, "stop", final_state)
        try:
            self._stopped = _answer(ref, "merger", f"stop({final_state!r})", timeout)
        except UnavailableError as exc:
            stage = "unknown (the merger does not answer status() either)"
            try:
                stage = _answer(RayCalls.call(self.merger, "status"), "merger", "status()",
                                5.0).get("stop_stage") or "not started"
            except Exception as status_exc:  # noqa: BLE001 - the stage is a best effort
                log.debug("merger status unavailable: %s", status_exc)
            self._stopped = {"error": f"{exc}; it was at: {stage}"}
            raise UnavailableError(f"{exc}; it was at: {stage}; the actors were killed, the "
                                   "next start replays from the last saved checkpoint") from exc
        finally:
            self._kill()
        return self._stopped

    def _kill(self) -> None:
        for actor in [self.merger, self.keeper, self.coordinator, *self.workers]:
            if actor is not None:
                RayCalls.kill(actor)


def _answer(ref, actor: str, call: str, timeout: float, *, budget: float | None = None):
    """``ray.get(ref)`` within ``timeout`` seconds; an actor that does not answer is an
    UnavailableError naming it, the call and the wait."""
    try:
        return RayCalls.get_within(ref, timeout)
    except GetTimeoutError:
        raise UnavailableError(
            f"the drainer's {actor} actor did not answer {call} within "
            f"{budget if budget is not None else timeout:.3g} s (busy, restarting, or its node "
            "is gone; see the drainer log and `ray list actors`)") from None


def _default_addr() -> str:
    return next(f.default for f in dataclasses.fields(DrainerConfig) if f.name == "addr")


def join_cluster(cfg, *, ray_address: str | None = None):
    """``(registry client, namespace)`` for drainer.toml's ``registry``, on Ray.

    Which Ray, as ``ray.init()`` chooses (:func:`choose_ray_address`): ``ray_address``
    (``--ray-address``), else ``$RAY_ADDRESS``, else the cluster ``ray start`` recorded
    on this host, else a new local Ray. ``"auto"`` (join whatever Ray runs on this host)
    only when given explicitly. The log says which cluster was joined and why. A
    host:port where nothing answers, or a cluster asking for an auth token, is an
    :class:`UnavailableError` saying what to set, at once.
    ``registry = "<namespace>[/<actor name>]"`` names the registry actor ("" =
    namespace ``tidb-binlog``, the default actor name).
    """
    namespace, name = split_registry(cfg.registry) or (DEFAULT_NAMESPACE, REGISTRY_NAME)
    if not RayCalls.is_initialized():
        address, why = choose_ray_address(ray_address, os.environ.get("RAY_ADDRESS"),
                                          _recorded_ray_cluster())
        if address is not None and why == _RECORDED and _refused(address) is not None:
            log.warning("the Ray cluster `ray start` recorded on this host (%s) does not "
                        "answer: starting a local Ray instead", address)
            address, why = None, "the recorded `ray start` cluster is gone"
        if address is None:
            log.info("starting a local Ray (%s; set --ray-address or $RAY_ADDRESS to join "
                     "a cluster)", why)
            RayCalls.init(address="local", namespace=namespace, log_to_driver=False,
                          include_dashboard=False)
        else:
            _init_ray(address, why, namespace)
        log.info("joined the Ray cluster at %s (%s), namespace %r",
                 RayCalls.gcs_address(), why, namespace)
    return connect_registry(namespace=namespace, name=name), namespace


_RECORDED = "the cluster `ray start` recorded on this host"


def choose_ray_address(flag: str | None, env_value: str | None,
                       recorded: str | None) -> tuple[str | None, str]:
    """``(address, why)``: the Ray cluster to join and where that choice came from, or
    ``(None, why)`` to start a local Ray: ``ray.init()``'s order, with ``"auto"``
    honoured only when it was given."""
    if flag:
        return flag, "from --ray-address"
    if env_value:
        return env_value, "from $RAY_ADDRESS"
    if recorded:
        return recorded, _RECORDED
    return None, "no --ray-address, no $RAY_ADDRESS, no `ray start` cluster on this host"


def _recorded_ray_cluster() -> str | None:
    return RayCalls.recorded_cluster()


def _refused(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at a ``host:port`` Ray address (None: something does, or the
    address is not host:port). ``ray.init`` itself retries such an address for a long
    time, printing its own warnings, before it gives up."""
    if address == "auto" or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _init_ray(address: str, why: str, namespace: str) -> None:
    fix = ("check --ray-address / $RAY_ADDRESS (the cluster's GCS host:port, as `ray start "
           "--head` prints it), or unset both to start a local Ray")
    reason = _refused(address)
    if reason is not None:
        raise UnavailableError(f"cannot join the Ray cluster at {address!r} ({why}): nothing "
                               f"answers there ({reason}); {fix}")
    try:
        RayCalls.init(address=address, namespace=namespace, log_to_driver=False)
    except Exception as exc:
        if _is_auth_failure(exc):
            raise UnavailableError(
                f"the Ray cluster at {address!r} ({why}) refused us: it requires token "
                "authentication; set RAY_AUTH_MODE=token and the cluster's token in "
                "RAY_AUTH_TOKEN (or a file named by RAY_AUTH_TOKEN_PATH, or "
                "~/.ray/auth_token), then start the drainer again") from exc
        if isinstance(exc, ConnectionError):
            raise UnavailableError(f"cannot join the Ray cluster at {address!r} ({why}): "
                                   f"{_first_line(exc)}; {fix}{_token_hint()}") from exc
        raise


def _is_auth_failure(exc: BaseException) -> bool:
    """Whether ``ray.init`` failed because the cluster wants a token we did not give
    (Ray raises AuthenticationError, or a ConnectionError naming the refusal)."""
    if type(exc).__name__ == "AuthenticationError":
        return True
    text = str(exc).lower()
    return "unauthenticated" in text or "auth token" in text or "authentication" in text


def _token_hint(env=None, home: str | None = None) -> str:
    """What to add when a join failed and this process has no Ray token: a cluster with
    token authentication refuses such a driver, and Ray 2.60's ConnectionError then says
    only "Failed to connect to Ray cluster" (the refusal is in Ray's C++ log lines)."""
    env = os.environ if env is None else env
    token_file = os.path.join(home or os.path.expanduser("~"), ".ray", "auth_token")
    if (env.get("RAY_AUTH_MODE", "").lower() == "token" or env.get("RAY_AUTH_TOKEN")
            or env.get("RAY_AUTH_TOKEN_PATH") or os.path.exists(token_file)):
        return ""
    return ("; if the cluster uses token authentication, set RAY_AUTH_MODE=token and its "
            "token in RAY_AUTH_TOKEN (or a file named by RAY_AUTH_TOKEN_PATH, or "
            "~/.ray/auth_token)")


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__



DOWNSTREAM_WAIT_S = 30.0
"""How long the start waits for a downstream that does not answer (connection refused,
timeout, too many connections...) before it gives up; tried every
:data:`DOWNSTREAM_RETRY_S`. A downstream that *refuses* the drainer (access denied, a
missing privilege) fails the start at once: waiting cannot fix it."""
DOWNSTREAM_RETRY_S = 1.0

# Server error codes -> what the user should check (the rest: the generic hint).
_REFUSAL_HINTS = {
    1045: "check [syncer.to] user and password (empty ones come from $MYSQL_USER / "
          "$MYSQL_PSWD)",
    1044: "grant the [syncer.to] user CREATE, SELECT, INSERT, UPDATE and DELETE on the "
          "checkpoint schema ([syncer.to.checkpoint] schema) and the replicated schemas",
    1142: "grant the [syncer.to] user CREATE, SELECT, INSERT, UPDATE and DELETE on the "
          "checkpoint schema ([syncer.to.checkpoint] schema) and the replicated schemas",
    1049: "create the database or fix [syncer.to] / [syncer.to.checkpoint] schema",
}


def recover_from_relay_log(cfg, *, ray_address: str | None = None):
    """Recovery mode, before a task starts (TiDB's ``feedByRelayLogIfNeed``): the
    :class:`~tidb_binlog.drainer.relay.recover.RecoverySummary` when it ran (then do not
    start the task: the upstream is gone), else None.

    It runs when drainer.toml has ``[syncer.relay] log-dir``, the downstream checkpoint
    is not consistent, and joining Ray (``ray_address``, as :func:`join_cluster`) or
    asking the registry for its pumps fails: the relay log is applied in safe mode and
    the checkpoint saved consistent at the last relayed commit_ts.
    ``tidb-binlog drainer`` calls it first; call it before :meth:`Drainer.start`."""
    settings = TaskSettings.from_config(cfg, upstream_meta={})

    def upstream_error() -> str | None:
        try:
            registry, _ = join_cluster(cfg, ray_address=ray_address)
            registry.nodes("pumps")
        except UnavailableError as exc:
            return exc.message
        return None

    return recover_if_needed(settings, upstream_error)


def check_downstream(settings: TaskSettings, *, wait_s: float | None = None,
                     sleep=time.sleep, clock=time.monotonic):
    """Check at start, in every mode, that the downstream takes the drainer: connect as
    ``[syncer.to]``, set the session up, create the checkpoint table if missing and read
    the checkpoint row; in exactly-once mode also reconcile the SQL workers' progress
    rows with ``worker-count`` (``check_workers`` of
    :mod:`tidb_binlog.drainer.checkpoint.store`; its decision is returned, else None).

    TiDB's drainer also exits when its downstream cannot be used at start, while an
    outage *after* the start is ridden out (the pipeline retries). Here:

    - a refusal (access denied, a missing privilege, a bad session parameter): raises
      :class:`~tidb_binlog.errors.DownstreamError` at once, with what to check;
    - no answer (refused connection, timeout, a server shutting down): retried every
      :data:`DOWNSTREAM_RETRY_S` for ``wait_s`` (default :data:`DOWNSTREAM_WAIT_S`),
      then raises :class:`~tidb_binlog.errors.UnavailableError` naming the wait.
    """
    wait_s = DOWNSTREAM_WAIT_S if wait_s is None else wait_s
    address = settings.downstream.address
    deadline = clock() + wait_s
    attempts = 0
    while True:
        attempts += 1
        store = MySQLCheckpointStore(settings.downstream, settings.cluster_id,
                                     schema=settings.checkpoint_schema,
                                     table=settings.checkpoint_table, attempts=1)
        try:
            store.load()
            if not settings.exactly_once:
                return None
            return store.check_workers(settings.worker_count,
                                       progress_schema=settings.checkpoint_schema)
        except TransientDownstreamError as exc:
            detail = exc.message.removesuffix("; will retry")
            if clock() >= deadline:
                raise UnavailableError(
                    f"cannot start: the downstream {address} did not answer within "
                    f"{wait_s:g} s ({attempts} attempt(s), {DOWNSTREAM_RETRY_S:g} s apart); "
                    f"last error: {detail}; check [syncer.to] host and port and that the "
                    "server runs, then start the drainer again") from exc
            if attempts == 1:
                log.warning("the downstream %s does not answer yet (%s); retrying every "
                            "%g s for up to %g s", address, detail, DOWNSTREAM_RETRY_S, wait_s)
            sleep(DOWNSTREAM_RETRY_S)
        except DownstreamError as exc:
            hint = _REFUSAL_HINTS.get(exc.code, "check [syncer.to] and the downstream server")
            raise DownstreamError(f"cannot start: the downstream {address} refused the "
                                  f"drainer: {exc.message}; {hint}", sql=exc.sql,
                                  code=exc.code) from exc
        finally:
            store.close()


def _upstream_meta_from(registry) -> dict:
    text = registry.kv_get(UPSTREAM_META_KEY) if registry is not None else None
    if not text:
        raise ConfigError("the upstream meta location is unknown: no registry entry "
                          f"{UPSTREAM_META_KEY!r}; pass upstream_meta= or start the upstream "
                          "with a registry", key=UPSTREAM_META_KEY)
    return json.loads(text)
