"""MergerActor: the replication task's driver as a Ray actor.

A shell around :class:`~tidb_binlog.drainer.pipeline.driver.TaskDriver` (the run loop
and its reset policy, pump discovery, the drainer node, status and metrics; see its
module doc), whose calls to the keeper, the sink and the SQL workers are made over Ray
by :class:`~actors.ray_calls.PipelineCalls`. It pulls every pump, merges by commit_ts,
and hands each ready batch to the schema keeper; the keeper's result refs go straight
to the sink (the coordinator or the file sink), so translated rows never pass through
the merger. The pipeline's mode comes from the settings (``TaskSettings.routed``).

The merge runs on a thread started by the constructor; the actor's other methods
(``status``, ``notify``, ``stop``, ...) answer from Ray's call threads
(``max_concurrency=8``).
"""

from __future__ import annotations

from actors.coordinator import lookup_workers
from actors.process import setup_actor_logging
from actors.ray_calls import PipelineCalls, RayCalls, mirror_metrics
from tidb_binlog.drainer.pipeline.driver import TaskDriver
from tidb_binlog.drainer.pipeline.names import sink_role, task_actor_name
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.service.node import ServiceSettings
from tidb_binlog.node import PAUSED

__all__ = ["MergerActor"]


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
                workers = lookup_workers(settings) if settings.sink == "mysql" else []
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
