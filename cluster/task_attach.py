"""Attaching to a running named task from any driver: its actors found by their names
(``<task>-merger``, ``-keeper``, ``-coordinator`` / ``-<kind>-sink``, ``-worker-<i>``),
its settings asked of the merger (``MergerActor.task_settings()``)."""

from __future__ import annotations

from actors.ray_calls import RayCalls
from cluster.task_actors import STATUS_TIMEOUT_S, TaskActors, answer
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE, sink_role, task_actor_name
from tidb_binlog.drainer.sinks.kinds import sink_kind
from tidb_binlog.errors import UnavailableError

__all__ = ["attach_task_actors", "named_task_roles"]


def attach_task_actors(name: str, namespace: str = DEFAULT_NAMESPACE,
                       timeout: float = STATUS_TIMEOUT_S) -> TaskActors:
    """The actors of the running named task ``name`` in ``namespace``. UnavailableError
    when it does not run there, or when its merger does not answer within ``timeout``
    (a merger Ray is restarting raises PipelineReset)."""
    merger = RayCalls.find_actor(task_actor_name(name, "merger"), namespace)
    if merger is None:
        raise UnavailableError(f"no replication task named {name!r} runs in Ray "
                               f"namespace {namespace!r} (no actor "
                               f"{task_actor_name(name, 'merger')!r}); see "
                               "Cluster.tasks() for the running ones")
    settings = answer(RayCalls.call(merger, "task_settings"), "merger",
                      "task_settings()", timeout)
    addresses = answer(RayCalls.call(merger, "addresses"), "merger", "addresses()",
                       timeout)

    def find(role: str):
        return RayCalls.find_actor(task_actor_name(name, role), namespace)

    workers = [find(f"worker-{i}") for i in range(settings.worker_count)
               ] if settings.kind.sql_workers else []
    return TaskActors(settings, merger, find("keeper"), find(sink_role(settings.sink)),
                      [w for w in workers if w is not None], addresses)


def named_task_roles(name: str, namespace: str, sink: str, worker_count: int,
                     only: tuple[str, ...] = ()) -> list[tuple[str, str, object]]:
    """``(role, Ray name, handle)`` of the named task's actors that exist, found by name
    alone (no actor is asked): what a status read checks for a restart when the merger
    itself does not answer. ``sink``: ``TaskSettings.sink``; ``only``: just these roles."""
    roles = ["merger", "keeper", sink_role(sink),
             *(f"worker-{i}" for i in range(worker_count if sink_kind(sink).sql_workers
                                            else 0))]
    roles = [r for r in roles if not only or r in only]
    found = [(role, task_actor_name(name, role),
              RayCalls.find_actor(task_actor_name(name, role), namespace)) for role in roles]
    return [(role, actor_name, actor) for role, actor_name, actor in found
            if actor is not None]
