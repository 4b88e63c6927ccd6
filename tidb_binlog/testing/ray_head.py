"""Stopping a throwaway Ray head that a test started with ``ray start --head --block``.

Tests that need a Ray cluster of their own (``ray job submit``, token authentication)
start ``ray start --head --block`` as a subprocess in a new session
(``start_new_session=True``), so every process of that cluster can be found afterwards.

:func:`stop_ray_head` stops it the quick way. SIGTERM goes to the ``ray start`` process
alone: it drains the node through the GCS and stops the processes it started, in about
2 seconds. Sending SIGTERM to the whole process group instead kills the GCS together with
everything else, and the drain then waits ~30 seconds for a GCS that is gone. Whatever is
still alive afterwards in the head's session (Ray's workers may leave its process group)
is killed with SIGKILL, and the head's temp directory is removed.

Start the head with :data:`HEAD_ENV` in its environment: on SIGTERM, Ray 2.60 first
drains the node for up to ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` (30 s), waiting for
every worker lease to come back, and a test's cluster still holds actors then (a
replication task's, the registry). A throwaway cluster has nothing to hand over, so the
drain is turned off.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

__all__ = ["HEAD_ENV", "session_members", "stop_ray_head"]

#: environment for a test's ``ray start --head --block``: no drain before its shutdown
HEAD_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


def session_members(sid: int) -> list[int]:
    """The pids of the processes in session ``sid`` (read from ``/proc``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process exited meanwhile
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            out.append(int(entry.name))
    return out


def stop_ray_head(proc: subprocess.Popen, temp_dir: str | Path | None = None, *,
                  grace_s: float = 30.0) -> None:
    """Stop the head ``proc`` (``ray start --head --block`` in a session of its own): an
    orderly stop of up to ``grace_s`` seconds, then SIGKILL for every process left in its
    session; ``temp_dir`` (its ``--temp-dir``) is removed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    for pid in session_members(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    if temp_dir is not None:
        shutil.rmtree(temp_dir, ignore_errors=True)
