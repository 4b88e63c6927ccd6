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

from actors.ray_calls import PipelineCalls
from tidb_binlog.drainer.pipeline.driver import TaskDriver
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.service.node import ServiceSettings
from tidb_binlog.node import PAUSED

__all__ = ["MergerActor"]


class MergerActor:
    """Drives the pipeline: pulls every pump, merges by commit_ts, feeds keeper → sink.

    ``pumps``: a fixed node id → PumpActor handle map, or None to follow ``registry``.
    ``service``: serve as a drainer node (Cistern, HTTP, registry record), or None.
    """

    def __init__(self, settings: TaskSettings, keeper, coordinator, pumps: dict | None = None,
                 *, registry=None, service: ServiceSettings | None = None,
                 workers: list | tuple = (), autostart: bool = True):
        self.driver = TaskDriver(settings, PipelineCalls(keeper, coordinator, workers), pumps,
                                 registry=registry, service=service,
                                 has_workers=bool(workers), autostart=autostart)

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
