"""Where the drainer's actors and shared records are found: names, one module.

A task's actors find each other (and the pumps) by these names, in the task's Ray
namespace, rather than by handles the driver held: a detached actor that Ray restarts
(or a driver that reconnects) needs nothing but the settings and these names.

The names are also what the Ray dashboard's actor list shows, so they read as the
system: ``pump-<node>``, ``<task>-merger``, ``<task>-keeper``, ``<task>-coordinator``
(``<task>-<kind>-sink`` for another sink, e.g. ``<task>-file-sink``), ``<task>-worker-<i>``.
"""

from __future__ import annotations

import re

from tidb_binlog.drainer.sinks.kinds import sink_kind
from tidb_binlog.errors import ConfigError, InvalidArgument

__all__ = ["DEFAULT_NAMESPACE", "UPSTREAM_META_KEY", "pump_actor_name", "task_actor_name",
           "worker_actor_name", "sink_role", "check_task_name", "TASK_ROLES"]

DEFAULT_NAMESPACE = "tidb-binlog"
"""The Ray namespace of the registry, the pumps and the drainer tasks when none is given."""

UPSTREAM_META_KEY = "upstream/meta"
"""Registry KV key: JSON connection parameters of the upstream meta (UpstreamMeta)."""

TASK_ROLES = ("merger", "keeper", "coordinator", "file-sink")
"""The per-task actors besides the SQL workers (``coordinator``: the MySQL sink;
``file-sink``: the file sink, whose keeper is the pb keeper, still ``keeper``)."""

_TASK_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


def pump_actor_name(node_id: str) -> str:
    """The Ray actor name a pump with this node id runs under: ``pump-<node>``, the node
    id alone when it already reads ``pump-...`` (LocalCluster's ``pump-0``). Two pumps
    whose ids are ``x`` and ``pump-x`` would share a name: Ray refuses the second at
    its start, so the clash is loud."""
    return node_id if node_id.startswith("pump-") else f"pump-{node_id}"


def check_task_name(task: str) -> str:
    """``task`` if it can name a task's actors, else ConfigError saying what is allowed.

    Lower-case letters, digits, ``_ . -``, starting with a letter or digit, at most 63
    characters: it prefixes Ray actor names and shows on the dashboard.
    """
    if not isinstance(task, str) or not _TASK_NAME.match(task):
        raise ConfigError(f"invalid replication task name {task!r}: use 1-63 lower-case "
                          "letters, digits, '_', '.' or '-', starting with a letter or digit "
                          "(e.g. 'orders-to-dw')", key="name")
    return task


def task_actor_name(task: str, role: str) -> str:
    """The name of one of task ``task``'s actors (``role`` in :data:`TASK_ROLES`, or
    ``worker-<i>``): ``<task>-<role>``."""
    if role not in TASK_ROLES and not re.fullmatch(r"worker-\d+|[a-z]+-sink", role):
        raise InvalidArgument(f"unknown task actor role {role!r}; expected one of {TASK_ROLES} "
                              ", worker-<i> or <kind>-sink")
    return f"{task}-{role}"


def sink_role(sink: str) -> str:
    """The role of the sink actor of a ``TaskSettings.sink`` kind (the sink table's
    ``role``): ``coordinator`` for MySQL (it coordinates the SQL workers),
    ``<kind>-sink`` for the others."""
    return sink_kind(sink).role


def worker_actor_name(task: str, worker: int) -> str:
    """SQL worker ``worker`` of task ``task``: ``<task>-worker-<i>``."""
    return task_actor_name(task, f"worker-{worker}")
