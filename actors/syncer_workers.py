"""SqlWorkerActor: one SQL worker of the drainer as a Ray actor.

:class:`SqlWorkerActor` is a plain class owning one
:class:`~tidb_binlog.drainer.sinks.mysql.loader.Loader` and its downstream connection;
:func:`start_sql_worker` is the one factory that makes it remote and
every Ray API call goes through :mod:`actors.ray_calls`, so the class is usable
(and testable) without Ray.

- ``begin(epoch) -> int``: the coordinator's reset: calls of pipeline epoch ``epoch``
  run from now on (open chunks of a large transaction are rolled back); the worker's
  applied commit_ts (``Loader.begin_epoch``).
- ``execute(batch, epoch) -> Ack``: apply one batch (a list of parts in ascending
  commit_ts: ``(commit_ts, dmls)`` tuples, Txns or DDLs).  The coordinator passes
  the batch as an object ref in the argument list, which Ray resolves before the
  call; a ref nested in a list is resolved here.  The call returns once every
  part is committed downstream (or raises the loader's DownstreamError).
- ``execute_slice(parts, lo, hi, epoch) -> Ack``: ``execute(parts[lo:hi])``; ``parts`` is
  this worker's payload of a merged batch the schema keeper routed (exactly-once
  mode), passed by the coordinator as an object ref it never reads; a flush
  inside the batch splits it into several slices.
- ``execute_ddl(ddl, epoch) -> Ack``: one DDL, alone.
- ``epoch`` of each call: the epoch it was sent in. A call of another epoch, or any call
  before this process was told one (a restarted worker), is refused as a PipelineReset
  before it touches the downstream (``tidb_binlog.drainer.pipeline.gate.EpochFence``).
- ``flush() -> int``: ``execute`` commits before it returns, so nothing is ever
  pending: flush returns the commit_ts everything at or below which is applied.
- ``progress() -> int``: the worker's progress row (exactly-once), re-read.
- ``set_safe_mode(on)``, ``metrics() -> bytes`` (Prometheus text of this
  process's registry), ``close()``, ``pid()``.

Crashes: ``max_restarts=-1`` (Ray reruns ``__init__``, which reconnects and
reloads the progress row), ``max_task_retries=0``: a call lost in a crash fails
in the coordinator, which decides what to resend; resent parts at or below the
progress row are skipped (exactly-once), or replayed in safe mode. Ray still hands the
restarted process the calls submitted after the crash was noticed (not retries: they
never reached the old one), with no error; the epoch check refuses them, since running
them without the calls lost before would move the progress row past those.

Metrics (one registry per process, :func:`process_metrics`):
``binlog_drainer_execute_duration_time``, ``binlog_drainer_query_duration_time{type}``,
``binlog_drainer_event{type}``, ``binlog_drainer_error_count{type}``.
"""

from __future__ import annotations

import os
import threading

from actors.emulated_tidb import open_downstream
from actors.process import setup_actor_logging, tune_gc
from actors.ray_calls import RayCalls
from tidb_binlog.drainer.pipeline.names import worker_actor_name
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.loader import Ack, Loader, LoaderConfig
from tidb_binlog.drainer.sinks.mysql.metrics import LoaderMetrics
from tidb_binlog.errors import InvalidArgument
from tidb_binlog.packed import unpack

__all__ = ["SqlWorkerActor", "start_sql_worker", "start_sql_workers", "process_metrics",
           "worker_actor_name"]

_metrics_lock = threading.Lock()
_metrics: LoaderMetrics | None = None


def process_metrics() -> LoaderMetrics:
    """This process's apply metrics (created on first use)."""
    global _metrics
    with _metrics_lock:
        if _metrics is None:
            _metrics = LoaderMetrics()
        return _metrics


class SqlWorkerActor:
    """One worker's loader and connection; see the module docstring."""

    def __init__(self, downstream: DownstreamConfig, config: LoaderConfig, *,
                 load_progress: bool = True):
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        self.config = config
        # a real MySQL/TiDB, or an emulated TiDB ([syncer.to] emulated-tidb-registry)
        self.loader = Loader(open_downstream(downstream), config, metrics=process_metrics())
        if load_progress and config.exactly_once:
            # Read the row now, so a restarted worker knows what it committed; retried
            # on transient errors like any downstream call.
            self.loader.reload_progress()
        if load_progress and config.loopback_control:
            self.loader.reload_marks()  # the mark table and this worker's row, at start
        tune_gc()

    def begin(self, epoch: int) -> int:
        return self.loader.begin_epoch(epoch)

    def execute(self, batch, epoch: int) -> Ack:
        return self.loader.execute_batch(RayCalls.resolve(batch), epoch)

    def execute_slice(self, parts, lo: int, hi: int, epoch: int) -> Ack:
        parts = unpack(RayCalls.resolve(parts))
        return self.loader.execute_batch(parts if lo == 0 and hi == len(parts)
                                         else parts[lo:hi], epoch)

    def execute_ddl(self, ddl, epoch: int) -> Ack:
        return self.loader.execute_batch([RayCalls.resolve(ddl)], epoch)

    def flush(self) -> int:
        return self.loader.applied_ts

    def progress(self) -> int:
        if not self.config.exactly_once:
            return self.loader.applied_ts
        return self.loader.reload_progress()

    def set_safe_mode(self, on: bool) -> None:
        self.loader.set_safe_mode(on)

    def metrics(self) -> bytes:
        return process_metrics().exposition()

    def close(self) -> None:
        self.loader.close()

    def pid(self) -> int:
        return os.getpid()


def start_sql_worker(downstream: DownstreamConfig, config: LoaderConfig, *,
                     name: str | None = None, namespace: str | None = None,
                     max_restarts: int = -1, max_task_retries: int = 0, num_cpus: float = 0,
                     lifetime: str | None = None, resources: dict[str, float] | None = None):
    """Create one SqlWorkerActor (restartable; calls are not retried by Ray); ``resources``:
    custom Ray resources that place it (``Drainer.start(resources=...)``)."""
    return RayCalls.start_actor(SqlWorkerActor, downstream, config, options=dict(
        max_restarts=max_restarts, max_task_retries=max_task_retries, num_cpus=num_cpus,
        name=name, namespace=namespace, lifetime=lifetime, resources=resources or None))


def start_sql_workers(settings: TaskSettings, *, name_prefix: str | None = None,
                      namespace: str | None = None, lifetime: str | None = None,
                      resources: dict[str, float] | None = None,
                      **loader_overrides) -> list:
    """``settings.worker_count`` workers of a task (downstream and loader settings from its
    TaskSettings); with ``name_prefix`` (the task name) they are ``<task>-worker-<i>``."""
    if settings.downstream is None:
        raise InvalidArgument("SQL workers need a downstream; this task has none (a file sink?)")
    workers = []
    for worker in range(settings.worker_count):
        config = LoaderConfig.from_settings(settings, worker, **loader_overrides)
        name = worker_actor_name(name_prefix, worker) if name_prefix else None
        workers.append(start_sql_worker(settings.downstream, config, name=name,
                                        namespace=namespace, lifetime=lifetime,
                                        resources=resources))
    return workers
