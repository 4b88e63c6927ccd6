"""What the task driver makes of an error: replay from the checkpoint, or stop the task.

- A :class:`~.gate.PipelineReset` (a pipeline actor restarted, a sink refused a batch)
  or a pipeline actor that died: replay from the durable checkpoint.
- A pipeline actor whose *constructor* raised: Ray never restarts it, so replaying
  would loop forever; :func:`init_failure` turns it into the error that stops the task.
- Anything else (a downstream refusing a statement, an unsupported DDL, undecodable
  rows): the task stops; its status names the error in one line (:func:`one_line`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.errors import BinlogError, TransientDownstreamError, UnavailableError

__all__ = ["one_line", "init_failure", "decide", "task_error", "REPLAY", "STOP"]

REPLAY = "replay"
STOP = "stop"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CREATION = re.compile(r"ray::(\w+)\.__init__")


def one_line(exc: BaseException) -> str:
    """The error for a log line or ``status()``: a Ray error carries the remote traceback
    with terminal colour codes; keep its first and last lines, uncoloured."""
    text = _ANSI.sub("", str(exc)).strip()
    if "\n" not in text or isinstance(exc, BinlogError) and type(exc) is not PipelineReset:
        return text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{lines[0]} ... {lines[-1]}" if len(lines) > 1 else lines[0]


def init_failure(exc: BaseException) -> UnavailableError | None:
    """When ``exc`` says a pipeline actor's constructor raised (Ray does not restart such
    an actor, so replaying would loop forever), the error that stops the task."""
    seen = exc
    while seen is not None:
        if getattr(seen, "actor_init_failed", False):
            text = _ANSI.sub("", str(seen))
            actor = _CREATION.search(text)
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            return UnavailableError(
                f"the pipeline actor {actor.group(1) if actor else '(unknown)'} could not "
                f"start: {lines[-1] if lines else type(seen).__name__}; fix the cause and "
                "start the drainer again")
        seen = seen.__cause__ or seen.__context__
    return None


def decide(exc: BaseException, actor_died: Callable[[BaseException], bool]
           ) -> tuple[str, BaseException]:
    """``(REPLAY, exc)`` or ``(STOP, the error that stops the task)``."""
    if (failed := init_failure(exc)) is not None:
        return STOP, failed
    if isinstance(exc, PipelineReset) or actor_died(exc):
        return REPLAY, exc
    return STOP, exc


def task_error(exc: BaseException) -> str:
    """The task's ``error`` in its status: ``<type>: <one line>``; a transient error that
    stops the task says its retries are over instead of "will retry"."""
    text = one_line(exc)
    if isinstance(exc, TransientDownstreamError):
        text = text.removesuffix("; will retry") + " (retried until the retry budget ran out)"
    return f"{type(exc).__name__}: {text}"
