"""How many CPUs this process may use, and the SQL worker default sized to them.

TiDB Binlog's drainer starts 16 SQL workers unless told otherwise (``[syncer]
worker-count``). Here every worker is a Ray actor with its own Python process and
downstream connection: 16 of them on a 2-core machine mostly wait for each other. The
default is therefore the CPUs of the machine that loads the config (the driver's; the
affinity mask, so a container's limit counts), at least 1 and at most TiDB Binlog's 16,
which a machine with 16 or more CPUs gets unchanged. An explicit ``worker-count`` is
used as given.
"""

from __future__ import annotations

import os

__all__ = ["TIDB_BINLOG_WORKER_COUNT", "available_cpus", "default_worker_count"]

TIDB_BINLOG_WORKER_COUNT = 16
"""TiDB Binlog's drainer default ``worker-count``: the upper bound of ours."""


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def default_worker_count(cpus: int | None = None) -> int:
    """``[syncer] worker-count``'s default: ``cpus`` (default: :func:`available_cpus`)
    clamped to 1..16."""
    n = available_cpus() if cpus is None else cpus
    return min(max(int(n), 1), TIDB_BINLOG_WORKER_COUNT)
