"""Per-process settings of the pipeline's actor processes.

:func:`tune_gc`: CPython's cyclic GC runs a young collection every 700 net
allocations; the drainer's actors allocate a few objects per row (row dicts, DMLs,
tuples) that live for one batch, so with the default thresholds a batch of 1,500
rows triggers dozens of collections, each walking the batch's still-live objects.
Raising the thresholds (young: 20,000 allocations) and freezing what the process
holds after start-up (imports, Ray's own state) out of the collector's sight cut
the keeper's CPU per row by ~6 % in ``bench/drainer_kernels.py``-shaped runs.
Cycles are still collected, just less often; set ``TIDB_BINLOG_GC_TUNING=0`` to
keep CPython's defaults.

:func:`setup_actor_logging`: the actor's log lines (info and up) on its stderr, which
Ray keeps as the worker's log, each stamped with the actor's name as its node id.
"""

from __future__ import annotations

import gc
import os

from actors.ray_calls import RayCalls
from tidb_binlog.logs import setup_logging

__all__ = ["tune_gc", "GC_THRESHOLDS", "setup_actor_logging"]

GC_THRESHOLDS = (20_000, 50, 100)


def tune_gc() -> bool:
    """Apply :data:`GC_THRESHOLDS` and freeze the objects alive now; call at the end of
    an actor's ``__init__``. Only in a Ray worker process (``RAY_RAYLET_PID`` set by the
    raylet): the same class used as a plain object in a test or a driver leaves its
    process alone. Returns whether it did."""
    if os.environ.get("TIDB_BINLOG_GC_TUNING", "1") == "0" or not os.environ.get("RAY_RAYLET_PID"):
        return False
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return True


def setup_actor_logging() -> bool:
    """Log this actor process's records (info and up) to its stderr, which Ray keeps in
    the session's ``logs/worker-*.err``, each stamped with the actor's name as
    ``node_id``: ``pump-<node>`` for a pump, ``<task>-<role>`` for a replication task's
    actors (:mod:`tidb_binlog.logs`; ``$TIDB_BINLOG_LOG_FORMAT=json`` for JSON lines).
    Without it Ray's workers drop everything below WARNING and name no node. Only in a
    Ray worker process (as :func:`tune_gc`); returns whether it did."""
    if not os.environ.get("RAY_RAYLET_PID"):
        return False
    setup_logging(RayCalls.current_actor_name)
    return True
