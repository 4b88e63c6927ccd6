"""The drainer's pipeline actors: MergerActor, SchemaKeeperActor, CoordinatorActor.

One replication task is a pipeline of actors passing batches as object refs::

    PumpActor ×N ──pull──▶ MergerActor ──items──▶ SchemaKeeperActor ──plan──▶ CoordinatorActor
                                                        │ rows, one object per worker    │ Flush/DDL,
                                                        ▼                                ▼ slices
                                                  SqlWorkerActor ×W (syncer_workers) ◀───┘

Each class is a shell of one-line calls around a plain object of ``tidb_binlog/drainer``
(which never imports Ray); every Ray call is made in :mod:`actors.ray_calls`:

- :class:`MergerActor` around :class:`~tidb_binlog.drainer.pipeline.driver.TaskDriver`
  (the run loop and its reset policy, pump discovery, the drainer node, status and
  metrics), whose calls to the keeper, the sink and the SQL workers are made over Ray by
  :class:`~actors.ray_calls.PipelineCalls`. It pulls every pump, merges by commit_ts and
  hands each ready batch to the schema keeper; the keeper's result refs go straight to
  the sink (the coordinator, or the file / Parquet sink actors of ``actors.file_sink``
  and ``actors.parquet_sink``), so translated rows never pass through the merger. The
  merge runs on a thread started by the constructor; the other methods (``status``,
  ``notify``, ``stop``, ...) answer from Ray's call threads (``max_concurrency=8``).
- :class:`SchemaKeeperActor` around
  :class:`~tidb_binlog.drainer.translate.row_keeper.RowKeeper` (the schema rebuilt from the
  upstream's DDL history, rows decoded, filters; in exactly-once mode the rows routed
  over the workers with the flush points planned). Its result refs go to the
  coordinator (``translate``) or, routed, one object per worker plus the plan
  (``translate_routed``, called with ``num_returns = W + 2``: the last is ``more``,
  whether it holds a large transaction's next chunks; see ``RowKeeper.translate_routed``).
- :class:`CoordinatorActor` around
  :class:`~tidb_binlog.drainer.sinks.mysql.coordinator.Coordinator` (the MySQL sink:
  flushes, DDL, back-pressure and the checkpoint; a
  :class:`~tidb_binlog.drainer.pipeline.sink.Sink`), its SQL worker calls made over Ray
  by :class:`~actors.ray_calls.WorkerCalls`.

**Failure model.** Every actor has ``max_restarts=-1``. Durable state is the
downstream checkpoint (and, in exactly-once mode, each worker's progress row);
everything else is rebuilt. When a call to the keeper, coordinator or a worker fails
because the actor died, the merger *resets the pipeline*: the coordinator reloads the
checkpoint, the keeper rebuilds the schema at its schema version, and the merger
restarts every pump from its commit_ts. Workers skip the parts they already committed
(exactly-once) or replay in safe mode. A batch that fails half-dispatched leaves the
coordinator refusing every later batch until that reset
(:mod:`tidb_binlog.drainer.pipeline.gate`). Errors that retrying cannot fix (a
downstream refusing a statement, an unsupported DDL, undecodable rows) stop the task;
its status names the error. A named task's actors find each other by name, so a
restarted actor needs nothing its creator held.
"""

from __future__ import annotations

from actors.process import setup_actor_logging, tune_gc
from actors.ray_calls import (
    PipelineCalls,
    PumpPayloadSource,
    RayCalls,
    WorkerCalls,
    mirror_metrics,
)
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import CheckpointStore, task_checkpoint_store
from tidb_binlog.drainer.pipeline.driver import TaskDriver
from tidb_binlog.drainer.pipeline.names import sink_role, task_actor_name, worker_actor_name
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay.log import RelayLog
from tidb_binlog.drainer.service.node import ServiceSettings
from tidb_binlog.drainer.sinks.mysql.coordinator import Coordinator
from tidb_binlog.drainer.translate.row_keeper import RowKeeper
from tidb_binlog.errors import InvalidArgument
from tidb_binlog.node import PAUSED
from tidb_binlog.upstream.meta import UpstreamMeta

__all__ = ["CoordinatorActor", "KeeperShell", "MergerActor", "SchemaKeeperActor", "lookup_workers"]


def lookup_workers(settings: TaskSettings) -> list:
    """The SQL workers of the named task ``settings.task``, by name."""
    if not settings.task:
        raise InvalidArgument("no worker handles and no task name to look them up by")
    return [RayCalls.lookup(worker_actor_name(settings.task, i), settings.namespace)
            for i in range(settings.worker_count)]


class CoordinatorActor:
    """Causality, dispatch to SQL workers, flush barriers, DDL and the checkpoint."""

    def __init__(self, settings: TaskSettings, workers: list | None = None, *,
                 store: CheckpointStore | None = None, now_ts=None):
        """``workers``: the SQL worker handles, or None for a named task
        (``settings.task``): then they are looked up as ``<task>-worker-<i>``, so a
        restarted coordinator needs nothing its creator held."""
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        if workers is None:
            workers = lookup_workers(settings)
        if store is None:  # no downstream call here: a constructor that raises is final
            store = task_checkpoint_store(settings)
        open_relay = None
        if settings.relay_dir:  # [syncer.relay]: opened (and locked) by the first reset
            def open_relay():
                return RelayLog(settings.relay_dir, settings.relay_max_file_size)
        self.sink = Coordinator(settings, WorkerCalls(workers), store, now_ts=now_ts,
                                open_relay=open_relay)
        tune_gc()

    def reset(self, replay: bool = False) -> Checkpoint:
        return self.sink.reset(replay)

    def start_point(self) -> Checkpoint:
        return self.sink.start_point()

    def apply(self, seq: int, translated) -> int:
        return self.sink.apply(seq, translated)

    def apply_routed(self, seq: int, plan, payloads: list) -> int:
        return self.sink.apply_routed(seq, plan, payloads)

    def idle(self) -> int:
        return self.sink.idle()

    def close(self) -> Checkpoint:
        return self.sink.close()

    def status(self) -> dict:
        return self.sink.status().as_dict()

    def apply_samples(self) -> list[tuple[int, float]]:
        return self.sink.apply_samples()


class KeeperShell:
    """A keeper actor: one plain keeper (``keeper_class``, built from the settings, the
    upstream's DDL history and a schema version) answering reset/translate/schema_version.
    The MySQL sink's keeper adds ``translate_routed``; the file and Parquet sinks' keepers
    (``actors.file_sink``, ``actors.parquet_sink``) are this shell with their own class."""

    keeper_class: type = RowKeeper

    def __init__(self, settings: TaskSettings, schema_version: int = 0, meta=None):
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        namespace = settings.namespace

        def open_ref(ref) -> PumpPayloadSource:  # a large binlog, read from its pump
            return PumpPayloadSource(ref, namespace)

        self.keeper = self.keeper_class(
            settings, meta if meta is not None else UpstreamMeta(settings.upstream_meta),
            schema_version, open_ref=open_ref)
        tune_gc()

    def reset(self, schema_version: int) -> int:
        return self.keeper.reset(schema_version)

    def translate(self, items) -> list:
        return self.keeper.translate(items)

    def translate_more(self, items) -> tuple:
        """``(translate result, more)``: a keeper that hands large transactions out in
        chunks (the Parquet keeper) answers ``more`` while it holds the next ones; the
        others translate everything at once."""
        more_of = getattr(self.keeper, "translate_more", None)
        if more_of is None:
            return self.keeper.translate(items), False
        return more_of(items)

    def schema_version(self) -> int:
        return self.keeper.schema_version()

    def ref_stats(self) -> dict:
        """The references this keeper read (``SchemaAt.ref_stats``): how many, the range
        reads and bytes, and how many it read whole."""
        return dict(self.keeper.ref_stats)


class SchemaKeeperActor(KeeperShell):
    """Decodes merged binlogs into :class:`Txn` lists with the right schema version."""

    keeper_class = RowKeeper

    def translate_routed(self, items, worker_count: int) -> tuple:
        return self.keeper.translate_routed(items, worker_count)


class MergerActor:
    """Drives the pipeline: pulls every pump, merges by commit_ts, feeds keeper → sink.

    ``pumps``: a fixed node id → PumpActor handle map, or None to follow ``registry``.
    ``service``: serve as a drainer node (Cistern, HTTP, registry record), or None.
    """

    def __init__(self, settings: TaskSettings, keeper=None, coordinator=None,
                 pumps: dict | None = None, *, registry=None,
                 service: ServiceSettings | None = None, workers: list | tuple | None = (),
                 autostart: bool = True):
        """For a named task (``settings.task``), ``keeper``, ``coordinator`` and
        ``workers`` are None and looked up by name (``<task>-keeper``,
        ``<task>-coordinator`` or ``<task>-file-sink``, ``<task>-worker-<i>``), so a
        restart needs only the settings. ``registry`` is a client of the detached,
        named registry actor (it pickles as that actor's id)."""
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        if settings.task:
            ns = settings.namespace
            if keeper is None:
                keeper = RayCalls.lookup(task_actor_name(settings.task, "keeper"), ns)
            if coordinator is None:
                coordinator = RayCalls.lookup(
                    task_actor_name(settings.task, sink_role(settings.sink)), ns)
            if workers is None:
                workers = lookup_workers(settings) if settings.kind.sql_workers else []
        self.settings = settings
        workers = workers or []
        self.driver = TaskDriver(settings, PipelineCalls(keeper, coordinator, workers), pumps,
                                 registry=registry, service=service,
                                 has_workers=bool(workers), autostart=autostart)
        # the drainer's metrics (the SQL workers' merged in) on the Ray dashboard too
        self._mirror = mirror_metrics(
            task_actor_name(settings.task, "merger") if settings.task else "merger",
            self.driver._metrics_text) if autostart else None

    def mirrored_metrics(self) -> dict:
        """What was last copied into ``ray.util.metrics``: ``(name, tags) -> value``."""
        return dict(self._mirror.values) if self._mirror is not None else {}

    def task_settings(self) -> TaskSettings:
        """The settings this task runs with (a driver finding the task by name)."""
        return self.settings

    def addresses(self) -> dict:
        return self.driver.addresses()

    def status(self) -> dict:
        return self.driver.status()

    def wait_started(self, timeout_s: float = 60.0) -> str:
        return self.driver.wait_started(timeout_s)

    def notify(self, timeout_s: float = 10.0) -> bool:
        return self.driver.notify(timeout_s)

    def stop(self, final_state: str = PAUSED) -> dict:
        return self.driver.stop(final_state)
