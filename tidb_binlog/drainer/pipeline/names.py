"""Where the drainer's actors and shared records are found: names, one module.

A task's actors find each other (and the pumps) by these names, in the task's Ray
namespace, rather than by handles the driver held: a detached actor that Ray restarts
(or a driver that reconnects) needs nothing but the settings and these names.
"""

from __future__ import annotations

__all__ = ["DEFAULT_NAMESPACE", "UPSTREAM_META_KEY", "pump_actor_name", "task_actor_name",
           "TASK_ROLES"]

DEFAULT_NAMESPACE = "tidb-binlog"
"""The Ray namespace of the registry, the pumps and the drainer tasks when none is given."""

UPSTREAM_META_KEY = "upstream/meta"
"""Registry KV key: JSON connection parameters of the upstream meta (UpstreamMeta)."""

TASK_ROLES = ("merger", "keeper", "sink")
"""The per-task actors besides the SQL workers (``sink``: the coordinator or a file sink)."""


def pump_actor_name(node_id: str) -> str:
    """The Ray actor name a pump with this node id runs under."""
    return f"tidb-binlog-pump-{node_id}"


def task_actor_name(task: str, role: str) -> str:
    """The name of one of task ``task``'s actors (``role`` in :data:`TASK_ROLES`, or
    ``sql-worker-<n>``). Unused by the drainer today (its actors are anonymous, owned
    by the driver); the task API's detached actors are named with it."""
    if role not in TASK_ROLES and not role.startswith("sql-worker-"):
        raise ValueError(f"unknown task actor role {role!r}; expected one of {TASK_ROLES} "
                         "or sql-worker-<n>")
    return f"tidb-binlog-task-{task}-{role}"
