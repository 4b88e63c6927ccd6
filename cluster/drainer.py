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

import logging

from actors.ray_calls import RayCalls
from cluster.downstream_check import DOWNSTREAM_RETRY_S, DOWNSTREAM_WAIT_S, check_downstream
from cluster.ray_join import choose_ray_address, join_cluster
from cluster.relay_recovery import recover_from_relay_log
from cluster.task_actors import STATUS_TIMEOUT_S, STOP_TIMEOUT_S, TaskActors, answer
from cluster.task_attach import attach_task_actors
from cluster.task_reads import read_status, read_task_state, wait_for_checkpoint
from cluster.task_start import start_task_actors
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.errors import UnavailableError
from tidb_binlog.node import PAUSED

# The handle lives here; the work is in one module per responsibility (cluster/README.md,
# "Replication task modules"). Callers import these names from cluster.drainer.
__all__ = ["Drainer", "join_cluster", "choose_ray_address", "check_downstream",
           "recover_from_relay_log", "DOWNSTREAM_WAIT_S", "DOWNSTREAM_RETRY_S",
           "STATUS_TIMEOUT_S", "STOP_TIMEOUT_S"]

log = logging.getLogger(__name__)


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
        self._restart_seen: dict[str, float] = {}  # role -> first seen restarting (status)

    @classmethod
    def _of(cls, actors: TaskActors) -> Drainer:
        return cls(actors.settings, actors.merger, actors.keeper, actors.coordinator,
                   actors.workers, actors.addresses)

    def _actors(self) -> TaskActors:
        return TaskActors(self.settings, self.merger, self.keeper, self.coordinator,
                          self.workers)

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
        return cls._of(start_task_actors(
            cfg, registry=registry, upstream_meta=upstream_meta, pumps=pumps,
            namespace=namespace, addr=addr, status_addr=status_addr, node_id=node_id,
            serve=serve, start_timeout_s=start_timeout_s,
            downstream_wait_s=downstream_wait_s, name=name, detached=detached,
            resources=resources, **settings_overrides))

    @classmethod
    def attach(cls, name: str, namespace: str = DEFAULT_NAMESPACE,
               timeout: float = STATUS_TIMEOUT_S) -> Drainer:
        """The running named task ``name`` in ``namespace`` (started by any driver), found
        by its actors' names. UnavailableError when it does not run there, or when its
        merger does not answer within ``timeout``."""
        return cls._of(attach_task_actors(name, namespace, timeout))

    # -- observing ------------------------------------------------------------------------
    def status(self, timeout: float = STATUS_TIMEOUT_S) -> dict:
        """Merger state and error, pump positions, checkpoint and apply counters. Each
        actor has ``timeout`` seconds to answer (UnavailableError names the one that
        did not: busy, or its node is gone). While Ray restarts one of the task's actors
        the answer is ``state`` ``restarting``, with ``restarting`` an
        :class:`~tidb_binlog.drainer.pipeline.task_status.ActorRestart` naming it and the
        checkpoint and counters at 0 (unknown meanwhile; see :mod:`cluster.task_reads`)."""
        return read_status(self._actors(), timeout, self._restart_seen)

    def task_state(self, timeout: float = STATUS_TIMEOUT_S) -> dict:
        """The merger's status alone (cheap): ``state``, ``error``, ``node_state``, ..."""
        return read_task_state(self._actors(), timeout)

    def checkpoint_ts(self, timeout: float = STATUS_TIMEOUT_S) -> int:
        return self.status(timeout)["checkpoint_commit_ts"]

    def wait_for_checkpoint(self, commit_ts: int, timeout_s: float = 60.0,
                            poll_s: float = 0.2) -> dict:
        """Block until the checkpoint reaches ``commit_ts``, at most ``timeout_s`` in all
        (status calls included); raise UnavailableError on failure or timeout, saying
        what it waited for and where the task stands. A restarting actor is waited for."""
        return wait_for_checkpoint(self.status, commit_ts, timeout_s, poll_s)

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
            self._stopped = answer(ref, "merger", f"stop({final_state!r})", timeout)
        except UnavailableError as exc:
            stage = "unknown (the merger does not answer status() either)"
            try:
                stage = answer(RayCalls.call(self.merger, "status"), "merger", "status()",
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
        self._actors().kill()
