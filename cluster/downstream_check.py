"""The downstream check a task's start makes before any actor starts (every mode): the
downstream takes the drainer, or the start fails with what to fix."""

from __future__ import annotations

import logging
import time

from tidb_binlog.drainer.checkpoint.store import task_checkpoint_store
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.errors import DownstreamError, TransientDownstreamError, UnavailableError

__all__ = ["check_downstream", "DOWNSTREAM_WAIT_S", "DOWNSTREAM_RETRY_S"]

log = logging.getLogger(__name__)

DOWNSTREAM_WAIT_S = 30.0
"""How long the start waits for a downstream that does not answer (connection refused,
timeout, too many connections...) before it gives up; tried every
:data:`DOWNSTREAM_RETRY_S`. A downstream that *refuses* the drainer (access denied, a
missing privilege) fails the start at once: waiting cannot fix it."""
DOWNSTREAM_RETRY_S = 1.0

# Server error codes -> what the user should check (the rest: the generic hint).
_REFUSAL_HINTS = {
    1045: "check [syncer.to] user and password (empty ones come from $MYSQL_USER / "
          "$MYSQL_PSWD)",
    1044: "grant the [syncer.to] user CREATE, SELECT, INSERT, UPDATE and DELETE on the "
          "checkpoint schema ([syncer.to.checkpoint] schema) and the replicated schemas",
    1142: "grant the [syncer.to] user CREATE, SELECT, INSERT, UPDATE and DELETE on the "
          "checkpoint schema ([syncer.to.checkpoint] schema) and the replicated schemas",
    1049: "create the database or fix [syncer.to] / [syncer.to.checkpoint] schema",
}


def check_downstream(settings: TaskSettings, *, wait_s: float | None = None,
                     sleep=time.sleep, clock=time.monotonic):
    """Check at start, in every mode, that the downstream takes the drainer: connect as
    ``[syncer.to]``, set the session up, create the checkpoint table if missing and read
    the checkpoint row; in exactly-once mode also reconcile the SQL workers' progress
    rows with ``worker-count`` (``check_workers`` of
    :mod:`tidb_binlog.drainer.checkpoint.store`; its decision is returned, else None).

    TiDB's drainer also exits when its downstream cannot be used at start, while an
    outage *after* the start is ridden out (the pipeline retries). Here:

    - a refusal (access denied, a missing privilege, a bad session parameter): raises
      :class:`~tidb_binlog.errors.DownstreamError` at once, with what to check;
    - no answer (refused connection, timeout, a server shutting down): retried every
      :data:`DOWNSTREAM_RETRY_S` for ``wait_s`` (default :data:`DOWNSTREAM_WAIT_S`),
      then raises :class:`~tidb_binlog.errors.UnavailableError` naming the wait.
    """
    wait_s = DOWNSTREAM_WAIT_S if wait_s is None else wait_s
    address = settings.downstream.address
    deadline = clock() + wait_s
    attempts = 0
    while True:
        attempts += 1
        store = task_checkpoint_store(settings, attempts=1)
        # which server the failing call went to, and its config section (the messages)
        section, what = "syncer.to", f"downstream {address}"
        try:
            if settings.checkpoint_db is not None:  # the data side first, then the checkpoint's
                store.ping_downstream()
                section = "syncer.to.checkpoint"
                what = f"checkpoint database {store.address} ([syncer.to.checkpoint])"
            store.load()
            if not settings.exactly_once:
                return None
            section, what = "syncer.to", f"downstream {address}"
            return store.check_workers(settings.worker_count,
                                       progress_schema=settings.checkpoint_schema)
        except TransientDownstreamError as exc:
            detail = exc.message.removesuffix("; will retry")
            if clock() >= deadline:
                raise UnavailableError(
                    f"cannot start: the {what} did not answer within "
                    f"{wait_s:g} s ({attempts} attempt(s), {DOWNSTREAM_RETRY_S:g} s apart); "
                    f"last error: {detail}; check [{section}] host and port and that the "
                    "server runs, then start the drainer again") from exc
            if attempts == 1:
                log.warning("the %s does not answer yet (%s); retrying every "
                            "%g s for up to %g s", what, detail, DOWNSTREAM_RETRY_S, wait_s)
            sleep(DOWNSTREAM_RETRY_S)
        except DownstreamError as exc:
            hint = _REFUSAL_HINTS.get(exc.code, "check [syncer.to] and the downstream server")
            hint = hint.replace("[syncer.to]", f"[{section}]")
            raise DownstreamError(f"cannot start: the {what} refused the "
                                  f"drainer: {exc.message}; {hint}", sql=exc.sql,
                                  code=exc.code) from exc
        finally:
            store.close()
