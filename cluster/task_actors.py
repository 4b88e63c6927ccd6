"""The actors of one replication task as a value, and the bounded wait for their answers.

:class:`TaskActors` is what starting a task (:mod:`cluster.task_start`) and attaching to
a running one (:mod:`cluster.task_attach`) produce, and what the status reads
(:mod:`cluster.task_reads`) and :class:`cluster.drainer.Drainer` work on: the handles by
role, so every part names an actor the same way (``merger``, ``keeper``, ``coordinator``
or ``<kind>-sink``, ``worker-<i>``) in its errors and in a restarting status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors.ray_calls import GetTimeoutError, RayCalls
from tidb_binlog.drainer.pipeline.names import sink_role, task_actor_name
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.errors import UnavailableError

__all__ = ["TaskActors", "answer", "STATUS_TIMEOUT_S", "STOP_TIMEOUT_S"]

STATUS_TIMEOUT_S = 30.0
"""Default bound of :meth:`Drainer.status` / :meth:`Drainer.task_state`."""
STOP_TIMEOUT_S = 180.0
"""Default bound of :meth:`Drainer.stop` (the merger gives its thread 60 s, then waits
for the SQL workers and saves the final checkpoint)."""


@dataclass
class TaskActors:
    """A task's settings, actor handles (None: not started yet) and the merger's
    addresses (``node_id``, ``addr``, ``status_addr``)."""

    settings: TaskSettings
    merger: Any = None
    keeper: Any = None
    coordinator: Any = None
    workers: list = field(default_factory=list)
    addresses: dict = field(default_factory=dict)

    def roles(self) -> list[tuple[str, str, Any]]:
        """``(role, Ray actor name, handle)`` of every started actor; the name is "" for
        an anonymous task (no ``settings.task``)."""
        task = self.settings.task
        pairs = [("merger", self.merger), ("keeper", self.keeper),
                 (sink_role(self.settings.sink), self.coordinator),
                 *((f"worker-{i}", w) for i, w in enumerate(self.workers))]
        return [(role, task_actor_name(task, role) if task else "", actor)
                for role, actor in pairs if actor is not None]

    def kill(self) -> None:
        """End every started actor (no restart)."""
        for _role, _name, actor in self.roles():
            RayCalls.kill(actor)


def answer(ref, actor: str, call: str, timeout: float, *, budget: float | None = None):
    """``ray.get(ref)`` within ``timeout`` seconds; an actor that does not answer is an
    UnavailableError naming it, the call and the wait."""
    try:
        return RayCalls.get_within(ref, timeout)
    except GetTimeoutError:
        raise UnavailableError(
            f"the drainer's {actor} actor did not answer {call} within "
            f"{budget if budget is not None else timeout:.3g} s (busy, restarting, or its node "
            "is gone; see the drainer log and `ray list actors`)") from None
