"""Per-worker progress for exactly-once apply, and the replay rules (pure part).

**Exactly-once** (our addition; the default for MySQL/TiDB downstreams).  Every
SQL worker owns one row of the downstream table::

    CREATE TABLE IF NOT EXISTS `tidb_binlog`.`worker_progress` (
        clusterID BIGINT UNSIGNED NOT NULL, worker INT NOT NULL,
        commitTS BIGINT NOT NULL, PRIMARY KEY (clusterID, worker))

and every downstream transaction of that worker upserts its row to the highest
commit_ts of the upstream transaction parts it holds, *inside the same
transaction* (:func:`progress_upsert_statement`; ``GREATEST`` keeps the row from
ever moving back).  So the row and the data commit or vanish together, and

    a part at ``commit_ts <= progress[worker]`` is committed downstream; every
    part above it is not.

This holds because a worker applies its parts in ascending commit_ts and never
splits one part across two downstream transactions.  After any crash (drainer,
worker, downstream connection lost during COMMIT) the worker reloads its row
(:meth:`ReplayGuard.loaded`) and skips what it already committed
(:meth:`ReplayGuard.should_skip`); the replay from the global checkpoint, which is
never ahead of what every worker committed, then needs no safe mode.  Routing
must give a replayed row the same worker as before
(:mod:`tidb_binlog.drainer.apply.routing`), and ``worker-count`` must not change
between a crash and its replay: before the workers start, the task checks the
count the rows were written with and, when it changed after a crash, drops the
rows and replays that window in safe mode
(:meth:`~tidb_binlog.drainer.checkpoint.store.MySQLCheckpointStore.check_workers`).

A DDL cannot share a transaction (MySQL commits implicitly around it), so the row
is upserted in its own transaction right after the DDL; a crash between the two
replays the DDL, whose "already exists / does not exist" error the loader ignores
(TiDB's ignore list), which is what TiDB Binlog does on every replay.

**Safe mode** (:meth:`ReplayGuard.safe_mode`): the configured ``safe-mode``; when
exactly-once is off it is also forced

- for ``safe_mode_window_s`` (300 s) after the worker starts, as TiDB Binlog
  does (``enableSafeModeInitializationPhase``): the replay window after a crash
  lies at the start of a run, and without progress rows nothing tells which
  replayed transactions were already applied;
- for every retry of a downstream transaction after a transient error: the
  failure may have hit after the server committed (lost connection during
  COMMIT), so the retry must be idempotent.
"""

from __future__ import annotations

from tidb_binlog.drainer.apply.sql import Statement, quote_table
from tidb_binlog.drainer.checkpoint.checkpoint import CHECKPOINT_SCHEMA
from tidb_binlog.errors import InvalidArgument

__all__ = [
    "PROGRESS_TABLE",
    "SAFE_MODE_WINDOW_S",
    "progress_create_statements",
    "progress_upsert_statement",
    "progress_load_statement",
    "ReplayGuard",
]

# One row per (upstream cluster, worker); commitTS only grows and is committed in
# the same downstream transaction as the rows it covers.
PROGRESS_TABLE = "worker_progress"
SAFE_MODE_WINDOW_S = 300.0
"""TiDB Binlog forces safe mode for the first 5 minutes after start."""


def progress_create_statements(schema: str = CHECKPOINT_SCHEMA,
                               table: str = PROGRESS_TABLE) -> list[Statement]:
    """Create the progress schema and table if missing."""
    return [Statement(f"CREATE SCHEMA IF NOT EXISTS {quote_table('', schema)}", None),
            Statement(f"CREATE TABLE IF NOT EXISTS {quote_table(schema, table)} "
                      "(clusterID BIGINT UNSIGNED NOT NULL, worker INT NOT NULL, "
                      "commitTS BIGINT NOT NULL, PRIMARY KEY (clusterID, worker))", None)]


def progress_upsert_statement(cluster_id: int, worker: int, commit_ts: int,
                              schema: str = CHECKPOINT_SCHEMA,
                              table: str = PROGRESS_TABLE) -> Statement:
    """Move ``worker``'s row up to ``commit_ts`` (never down)."""
    return Statement(f"INSERT INTO {quote_table(schema, table)} (clusterID, worker, commitTS) "
                     "VALUES (%s,%s,%s) ON DUPLICATE KEY UPDATE "
                     "commitTS = GREATEST(commitTS, VALUES(commitTS))",
                     (cluster_id, worker, commit_ts))


def progress_load_statement(cluster_id: int, worker: int, schema: str = CHECKPOINT_SCHEMA,
                            table: str = PROGRESS_TABLE) -> Statement:
    return Statement(f"SELECT commitTS FROM {quote_table(schema, table)} "
                     "WHERE clusterID = %s AND worker = %s", (cluster_id, worker))


class ReplayGuard:
    """Which parts to skip and when safe mode is on; see the module docstring."""

    def __init__(self, *, exactly_once: bool, safe_mode: bool = False, started_at_s: float = 0.0,
                 safe_mode_window_s: float = SAFE_MODE_WINDOW_S, safe_mode_until_ts: int = 0):
        if safe_mode_window_s < 0:
            raise InvalidArgument(f"safe_mode_window_s must be >= 0, got {safe_mode_window_s}")
        self.exactly_once = exactly_once
        self.configured_safe_mode = safe_mode
        # A replay window by commit_ts (the worker-count change after a crash): rows
        # starting at or below it run in safe mode, whatever the other settings say.
        self.safe_mode_until_ts = safe_mode_until_ts
        self._forced_until_s = started_at_s + (0.0 if exactly_once else safe_mode_window_s)
        self._applied_ts = 0
        self._loaded = False

    @property
    def loaded_progress(self) -> bool:
        """Whether the worker's progress row was read since start."""
        return self._loaded

    @property
    def applied_ts(self) -> int:
        """Every part of this worker at or below this commit_ts is committed downstream
        (exactly-once), or was acknowledged by this process (otherwise)."""
        return self._applied_ts

    def loaded(self, applied_ts: int) -> None:
        """The worker's progress row as read from the downstream (0 when absent)."""
        self._loaded = True
        self._applied_ts = max(self._applied_ts, applied_ts)

    def committed(self, commit_ts: int) -> None:
        """A downstream transaction holding parts up to ``commit_ts`` committed."""
        self._applied_ts = max(self._applied_ts, commit_ts)

    def should_skip(self, commit_ts: int) -> bool:
        """Exactly-once: the part is already committed downstream."""
        return self.exactly_once and commit_ts <= self._applied_ts

    def safe_mode(self, now_s: float, *, retry: bool = False, first_ts: int = 0) -> bool:
        """Whether statements run in safe mode now (for a retry when ``retry``), for rows
        whose lowest commit_ts is ``first_ts``."""
        if self.configured_safe_mode or 0 < first_ts <= self.safe_mode_until_ts:
            return True
        if self.exactly_once:
            return False
        return retry or now_s < self._forced_until_s

    def set_safe_mode(self, on: bool) -> None:
        """Change the configured safe mode (the forced window still applies)."""
        self.configured_safe_mode = on
