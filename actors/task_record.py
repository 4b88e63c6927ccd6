"""TaskRecordActor: what a named replication task *is*, kept while its actors come and go.

A detached, named actor (``<task>-task`` in the task's namespace) holding the resolved
drainer config, the start options and the task's wanted state (``running``,
``paused``, ``stopped``). ``pause()`` / ``stop()`` end the pipeline actors (after the
final checkpoint); ``resume()`` and ``update(worker_count=...)`` start them again
from this record, from any driver: nothing the submitting driver held is needed.
It holds no connection and does no work, so it costs nothing while the task runs.
"""

from __future__ import annotations

__all__ = ["TaskRecordActor", "record_actor_name", "start_task_record"]

from actors.ray_calls import RayCalls


def record_actor_name(task: str) -> str:
    return f"{task}-task"


class TaskRecordActor:
    """The config, start options and wanted state of one named task."""

    def __init__(self, name: str, cfg, options: dict):
        self.name = name
        self.cfg = cfg
        self.options = dict(options)
        self.state = "running"
        self.last_checkpoint_ts = 0

    def get(self) -> dict:
        return {"name": self.name, "cfg": self.cfg, "options": dict(self.options),
                "state": self.state, "last_checkpoint_ts": self.last_checkpoint_ts}

    def set_state(self, state: str, checkpoint_ts: int | None = None) -> None:
        self.state = state
        if checkpoint_ts is not None:
            self.last_checkpoint_ts = checkpoint_ts

    def set_config(self, cfg) -> None:
        self.cfg = cfg


def start_task_record(name: str, cfg, options: dict, namespace: str):
    """The detached record actor of task ``name`` (no CPU, restartable)."""
    return RayCalls.start_actor(TaskRecordActor, name, cfg, options, options=dict(
        name=record_actor_name(name), namespace=namespace, lifetime="detached",
        max_restarts=-1, num_cpus=0))
