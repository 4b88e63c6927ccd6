"""CoordinatorActor: the MySQL sink of a replication task, as a Ray actor.

One replication task is a pipeline of actors passing batches as object refs::

    PumpActor ×N ──pull──▶ MergerActor ──items──▶ SchemaKeeperActor ──plan──▶ CoordinatorActor
                                                        │ rows, one object per worker    │ Flush/DDL,
                                                        ▼                                ▼ slices
                                                  SqlWorkerActor ×W (syncer_workers) ◀───┘

- :class:`~actors.merger.MergerActor` drives the pipeline (pulls, merges by commit_ts,
  hands each batch to the keeper, the keeper's result refs to the coordinator).
- :class:`~actors.schema_keeper.SchemaKeeperActor` decodes rows with the right schema
  version; in exactly-once mode it also routes them and plans the flushes.
- :class:`CoordinatorActor` is this module: a shell around
  :class:`~tidb_binlog.drainer.sinks.mysql.coordinator.Coordinator` (the flushes, DDL,
  back-pressure and the checkpoint; a :class:`~tidb_binlog.drainer.pipeline.sink.Sink`),
  its SQL worker calls made over Ray by :class:`~actors.ray_calls.WorkerCalls`.

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
its status names the error.
"""

from __future__ import annotations

from actors.process import setup_actor_logging, tune_gc
from actors.ray_calls import RayCalls, WorkerCalls
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import CheckpointStore, MySQLCheckpointStore
from tidb_binlog.drainer.pipeline.names import worker_actor_name
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay.log import RelayLog
from tidb_binlog.drainer.sinks.mysql.coordinator import Coordinator

__all__ = ["CoordinatorActor", "lookup_workers"]


def lookup_workers(settings: TaskSettings) -> list:
    """The SQL workers of the named task ``settings.task``, by name."""
    if not settings.task:
        raise ValueError("no worker handles and no task name to look them up by")
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
            store = MySQLCheckpointStore(settings.downstream, settings.cluster_id,
                                         schema=settings.checkpoint_schema,
                                         table=settings.checkpoint_table)
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
