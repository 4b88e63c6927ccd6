"""Reading where a running task stands: its status (merger + sink, merged), the merger's
state alone, the wait for a checkpoint, and, while Ray restarts one of its actors, a
``restarting`` status instead of an error.

Why the restart case is a status: a status call to an actor Ray is restarting fails
(Ray's "the actor is restarting", :class:`PipelineReset` here) or waits until the timeout.
A dashboard or CLI polling the status would see an error for every poll of the restart,
though nothing is wrong: the actor comes back and the pipeline replays from its
checkpoint. So a read first asks Ray's control store for the state of the two actors it
calls, and a failed read for every actor's (the actors are not asked: they are the ones
not answering), and, when one is ``RESTARTING``, reports
``state = "restarting"`` with an :class:`~tidb_binlog.drainer.pipeline.task_status.ActorRestart`
naming it. Ray's actor table has no time for the restart, so ``since_s`` is when the
reading handle first saw it restarting (``seen`` keeps that across reads).
"""

from __future__ import annotations

import logging
import time

from actors.ray_calls import PipelineReset, RayCalls
from cluster.task_actors import TaskActors, answer
from tidb_binlog.drainer.pipeline.task_status import RESTARTING, ActorRestart
from tidb_binlog.errors import UnavailableError

__all__ = ["read_status", "read_task_state", "wait_for_checkpoint", "restarting_actor",
           "restarting_report"]

log = logging.getLogger(__name__)

RAY_RESTARTING = "RESTARTING"
"""Ray's actor state while it recreates a dead actor (``max_restarts`` left)."""


def read_status(actors: TaskActors, timeout: float, seen: dict[str, float] | None = None,
                ) -> dict:
    """Merger state and error, pump positions, checkpoint and apply counters; each actor
    has ``timeout`` seconds to answer. While Ray restarts the merger or the sink actor
    (checked before the calls), or any of the task's actors when a call fails: the
    :func:`restarting_report`. Otherwise a read that fails raises: UnavailableError names
    the actor that did not answer (busy, or its node is gone), PipelineReset one that
    died."""
    deadline = time.monotonic() + timeout
    # A call to an actor Ray is restarting may wait until it is back: look first at the
    # two the read calls (two control-store reads), at every actor when a call fails.
    restart = restarting_actor([r for r in actors.roles()
                                if r[2] is actors.merger or r[2] is actors.coordinator], seen)
    if restart is not None:
        return restarting_report(restart)
    retried = False
    while True:
        try:
            report = _read(actors, timeout, deadline)
        except (PipelineReset, UnavailableError) as exc:
            restart = restarting_actor(actors.roles(), seen)
            if restart is not None:
                return restarting_report(restart)
            # it came back between the failed call and the check: read it once more
            if isinstance(exc, PipelineReset) and not retried \
                    and time.monotonic() < deadline:
                retried = True
                continue
            raise
        if seen is not None:
            seen.clear()  # the next restart is a new one
        return report


def _read(actors: TaskActors, timeout: float, deadline: float) -> dict:
    merger = answer(RayCalls.call(actors.merger, "status"), "merger", "status()",
                    max(deadline - time.monotonic(), 0.0), budget=timeout)
    coord = answer(RayCalls.call_group(actors.coordinator, "status", "status"),
                   "coordinator", "status()", max(deadline - time.monotonic(), 0.0),
                   budget=timeout)
    return {**merger, **{f"checkpoint_{k}" if k == "commit_ts" else k: v
                         for k, v in coord.items()}}


def read_task_state(actors: TaskActors, timeout: float) -> dict:
    """The merger's status alone (cheap): ``state``, ``error``, ``node_state``, ..."""
    return answer(RayCalls.call(actors.merger, "status"), "merger", "status()", timeout)


def restarting_actor(roles: list[tuple[str, str, object]],
                     seen: dict[str, float] | None = None) -> ActorRestart | None:
    """The first of ``roles`` (``(role, Ray name, handle)``, the merger first) that Ray
    is restarting, or None. ``seen`` maps a role to when it was first seen restarting
    (filled here)."""
    for role, name, actor in roles:
        try:
            state, _pid = RayCalls.actor_process(actor)
        except Exception as exc:  # noqa: BLE001 - a private Ray API: unknown, not restarting
            log.debug("cannot read the Ray state of the task's %s actor: %s", role, exc)
            continue
        if state == RAY_RESTARTING:
            since = time.time() if seen is None else seen.setdefault(role, time.time())
            return ActorRestart(role, name, since)
    return None


def restarting_report(restart: ActorRestart) -> dict:
    """The status report while Ray restarts ``restart``'s actor: ``state`` ``restarting``,
    ``restarting`` the :class:`ActorRestart`, and the counters callers read (the
    checkpoint, applied rows, pump positions) at 0 / empty: unknown until it is back (a
    checkpoint of 0 keeps every wait waiting)."""
    return {"state": RESTARTING, "error": None, "restarting": restart,
            "checkpoint_commit_ts": 0, "applied_rows": 0, "ddl_jobs": 0, "resets": 0,
            "pumps": [], "pump_positions": {}, "pending": 0, "outstanding": 0}


def wait_for_checkpoint(read, commit_ts: int, timeout_s: float, poll_s: float) -> dict:
    """Call ``read(timeout)`` (a status read) until the checkpoint reaches ``commit_ts``,
    at most ``timeout_s`` in all (reads included); UnavailableError on failure or
    timeout, saying what it waited for and where the task stands. A restarting actor is
    waited for (its report's checkpoint is 0)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            st = read(max(deadline - time.monotonic(), 0.1))
        except UnavailableError as exc:
            raise UnavailableError(f"waited {timeout_s:g} s for the checkpoint to reach "
                                   f"{commit_ts}: {exc}") from exc
        if st["state"] == "failed":
            raise UnavailableError(f"replication task failed: {st['error']}")
        if st["checkpoint_commit_ts"] >= commit_ts:
            return st
        if time.monotonic() > deadline:
            restart = st.get("restarting")
            raise UnavailableError(
                f"waited {timeout_s:g} s for the checkpoint to reach {commit_ts}: "
                + (f"Ray is still restarting the task's {restart.actor} actor"
                   if restart is not None else
                   f"it is at {st['checkpoint_commit_ts']} (task {st['state']}, "
                   f"{st.get('pending', 0)} item(s) pending in the coordinator, "
                   f"{st.get('outstanding', 0)} worker call(s) outstanding, pump positions "
                   f"{st.get('pump_positions')})"))
        time.sleep(poll_s)
