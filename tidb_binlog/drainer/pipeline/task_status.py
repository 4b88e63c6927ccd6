"""TaskStatus: a replication task's status as one typed value (the task API's answer).

Built from what the actors report (the merger's ``status()`` and the sink's, merged by
``Drainer.status``) plus the task's own record (paused, stopped): a user reads fields,
not a dict of internals whose keys change with the pipeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tidb_binlog.tso import extract_physical

__all__ = ["TaskStatus", "ActorRestart", "RUNNING", "STARTING", "FAILED", "PAUSED", "STOPPED",
           "UNREACHABLE", "RESTARTING"]

STARTING = "starting"
RUNNING = "running"
FAILED = "failed"
PAUSED = "paused"
STOPPED = "stopped"
UNREACHABLE = "unreachable"
"""The task should run but its merger did not answer (restarting, or its node is gone)."""
RESTARTING = "restarting"
"""Ray is restarting one of the task's actors (``TaskStatus.restarting`` says which): the
pipeline replays from its checkpoint once the actor is back."""


@dataclass(frozen=True)
class ActorRestart:
    """Which of a task's actors Ray is restarting, for a status read made meanwhile.

    ``actor``: its role (``merger``, ``keeper``, ``coordinator``, ``file-sink``,
    ``worker-<i>``); ``name``: its Ray actor name (``<task>-<role>``; "" for an anonymous
    task's actor); ``since_s``: Unix time the handle that read the status first saw it
    restarting (Ray's actor table has no time for the restart itself), None if unknown.
    """

    actor: str
    name: str = ""
    since_s: float | None = None


@dataclass(frozen=True)
class TaskStatus:
    """Where a replication task stands.

    ``state``: ``starting`` (reading the checkpoint), ``running``, ``failed`` (``error``
    says why; the actors are still there for ``status`` and ``stop``), ``paused`` (by
    ``pause()``: resumable), ``stopped`` (by ``stop()``), ``unreachable``, ``restarting``
    (Ray restarts the actor ``restarting`` names; the other fields are unknown meanwhile).
    ``checkpoint_ts``: everything at or below this commit_ts is in the downstream.
    ``lag_s``: wall-clock seconds between now and the checkpoint's physical time (the
    pumps write fake binlogs when idle, so an idle, caught-up task stays near 0); None
    when there is no checkpoint yet.
    """

    name: str
    state: str
    error: str | None = None
    checkpoint_ts: int = 0
    lag_s: float | None = None
    pumps: tuple[str, ...] = ()
    pump_positions: dict[str, int] = field(default_factory=dict)
    applied_rows: int = 0
    ddl_jobs: int = 0
    resets: int = 0
    worker_count: int = 0
    node_id: str = ""
    sink: str = "mysql"
    restarting: ActorRestart | None = None

    @property
    def ok(self) -> bool:
        """Running or starting, with no error."""
        return self.state in (RUNNING, STARTING) and self.error is None

    @classmethod
    def from_report(cls, name: str, report: dict, *, worker_count: int = 0,
                    sink: str = "mysql", now_s: float | None = None) -> TaskStatus:
        """From ``Drainer.status()``'s dict (merger keys + the sink's, the checkpoint as
        ``checkpoint_commit_ts``; ``restarting``: an :class:`ActorRestart` while Ray restarts
        one of the actors). The merger's ``merging`` state reads ``running``."""
        checkpoint = int(report.get("checkpoint_commit_ts") or 0)
        state = report.get("state") or UNREACHABLE
        if state not in (STARTING, FAILED, STOPPED, UNREACHABLE, RESTARTING):
            state = RUNNING
        return cls(name=name, state=state, error=report.get("error"),
                   checkpoint_ts=checkpoint, lag_s=lag_seconds(checkpoint, now_s),
                   pumps=tuple(report.get("pumps") or ()),
                   pump_positions=dict(report.get("pump_positions") or {}),
                   applied_rows=int(report.get("applied_rows") or 0),
                   ddl_jobs=int(report.get("ddl_jobs") or 0),
                   resets=int(report.get("resets") or 0), worker_count=worker_count,
                   node_id=report.get("node_id") or "", sink=sink,
                   restarting=report.get("restarting"))

    @classmethod
    def not_running(cls, name: str, state: str, *, checkpoint_ts: int = 0,
                    error: str | None = None, worker_count: int = 0,
                    sink: str = "mysql", restarting: ActorRestart | None = None,
                    ) -> TaskStatus:
        """A task whose actors are not running (paused, stopped), do not answer, or one
        of which Ray is restarting (``restarting``)."""
        return cls(name=name, state=state, error=error, checkpoint_ts=checkpoint_ts,
                   worker_count=worker_count, sink=sink, restarting=restarting)


def lag_seconds(checkpoint_ts: int, now_s: float | None = None) -> float | None:
    """Seconds from the checkpoint's physical time to ``now_s`` (default: now), never
    negative (clocks of hosts differ a little); None for no checkpoint."""
    if checkpoint_ts <= 0:
        return None
    now_s = time.time() if now_s is None else now_s
    return max(now_s - extract_physical(checkpoint_ts) / 1000.0, 0.0)
