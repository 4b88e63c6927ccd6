"""Where the drainer's checkpoint lives: the downstream table, or a file.

Both stores implement :class:`CheckpointStore` (``load``, ``save``, ``close``) and
hold the formats of :mod:`tidb_binlog.drainer.checkpoint.checkpoint`, so a checkpoint written
by TiDB Binlog's Go drainer loads here and the other way round.

- :class:`MySQLCheckpointStore` (db-type mysql/tidb): the row ``clusterID`` of
  ``<schema>.<table>`` (``tidb_binlog.checkpoint``), created with its schema on
  first use.  ``save`` is one ``REPLACE INTO`` committed on its own connection,
  tried up to 5 times 1 s apart on transient errors (TiDB Binlog's rule); a
  permanent error is raised at once.  ``load`` returns None when there is no row;
  with ``cluster_id`` 0 the single row in the table is used (TiDB's relay
  recovery without PD; later saves update that row), and several rows are an error.
- :class:`FileCheckpointStore` (db-type file): ``<data-dir>/savepoint`` in TOML.
  ``save`` writes a temporary file in the same directory, fsyncs it, renames it
  over ``savepoint`` and fsyncs the directory, so after a crash at any point the
  file holds the old or the new savepoint, whole.

In exactly-once mode the global checkpoint must never be ahead of any worker's
progress row; the :class:`~tidb_binlog.drainer.checkpoint.checkpoint.Advancer` guarantees
it (it passes a commit_ts only once every part at or below it was acknowledged,
and a worker acknowledges only after its transaction, progress row included,
committed).  The stores save what they are given.

**Worker count across a crash** (exactly-once, :meth:`MySQLCheckpointStore.check_workers`,
run before the SQL workers start).  A progress row says "worker *w* committed every
part routed to it up to commit_ts", and routing is ``hash(row) % worker-count``:
the rows mean nothing for another count.  The table ``tidb_binlog.worker_layout``
records the count they were written with, and :func:`decide_worker_layout` decides:

=========================================== ===========================================
no progress rows, or the same count         keep them
count changed, checkpoint ``consistent``    delete them: nothing above the checkpoint
(a clean stop)                              was applied, so the change is free
count changed (or not recorded), checkpoint delete them and replay from the checkpoint
not consistent (a crash)                    in **safe mode** up to the highest old
                                            row (``safeModeUntilTS``): part of that
                                            window was committed under the old routing
=========================================== ===========================================

``safeModeUntilTS`` is saved with the new count, so a second crash before the
checkpoint passes it turns safe mode on again at the next start; once the
checkpoint is past it the run is normal.  Within a run, safe mode covers only the
rows starting at or below ``safeModeUntilTS`` (the workers'
``LoaderConfig.safe_mode_until_ts``); rows above it were never applied under the
old routing and run as usual.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tidb_binlog.drainer.apply.sql import Statement, quote_table
from tidb_binlog.drainer.checkpoint.checkpoint import (
    CHECKPOINT_SCHEMA,
    CHECKPOINT_TABLE,
    SAVEPOINT_FILE,
    Checkpoint,
    create_statements,
    decode_json,
    decode_savepoint,
    encode_savepoint,
    load_statement,
    save_statement,
)
from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.progress import PROGRESS_TABLE, progress_create_statements
from tidb_binlog.errors import (
    InvalidArgument,
    ProtocolError,
    StorageError,
    TransientDownstreamError,
)
from tidb_binlog.security import mysql_ssl

__all__ = [
    "CheckpointStore",
    "MySQLCheckpointStore",
    "FileCheckpointStore",
    "open_checkpoint_store",
    "task_checkpoint_store",
    "SAVE_ATTEMPTS",
    "SAVE_RETRY_INTERVAL_S",
    "WORKER_LAYOUT_TABLE",
    "WorkerLayout",
    "decide_worker_layout",
]

log = logging.getLogger(__name__)

SAVE_ATTEMPTS = 5
SAVE_RETRY_INTERVAL_S = 1.0

# One row per upstream cluster: every progress row of the cluster was written by
# workers routing with ``workerCount``; parts above the checkpoint and at or below
# ``safeModeUntilTS`` may already be applied and replay only in safe mode.
WORKER_LAYOUT_TABLE = "worker_layout"


@dataclass(frozen=True)
class WorkerLayout:
    """What :func:`decide_worker_layout` decided for a task starting with ``worker_count``."""

    worker_count: int
    previous_count: int | None     # as recorded; None when not recorded
    reset_progress: bool           # delete every progress row of the cluster
    safe_mode_until_ts: int        # saved with the layout; 0: no window
    checkpoint_ts: int

    @property
    def safe_mode(self) -> bool:
        """Whether this run replays in safe mode (an open window above the checkpoint)."""
        return self.safe_mode_until_ts > self.checkpoint_ts


def decide_worker_layout(worker_count: int, recorded_count: int | None,
                         recorded_safe_until_ts: int, progress: Mapping[int, int],
                         checkpoint: Checkpoint | None) -> WorkerLayout:
    """The rules of the module docstring (pure). ``progress``: worker → commitTS."""
    cp_ts = checkpoint.commit_ts if checkpoint is not None else 0
    consistent = checkpoint is not None and checkpoint.consistent
    window = recorded_safe_until_ts if recorded_safe_until_ts > cp_ts else 0
    if not progress or recorded_count == worker_count:
        return WorkerLayout(worker_count, recorded_count, False, window, cp_ts)
    if not consistent:
        highest = max(progress.values())
        if highest > cp_ts:
            window = max(window, highest)
    return WorkerLayout(worker_count, recorded_count, True, window, cp_ts)


@runtime_checkable
class CheckpointStore(Protocol):
    """A durable home for one replication task's checkpoint."""

    def load(self) -> Checkpoint | None:
        """The saved checkpoint, or None when nothing was saved yet."""

    def save(self, cp: Checkpoint) -> None:
        """Durably replace the saved checkpoint with ``cp``."""

    def close(self) -> None:
        """Release connections / handles."""


class MySQLCheckpointStore:
    """The ``tidb_binlog.checkpoint`` row of one cluster in a MySQL/TiDB database.

    ``config`` is the downstream; ``checkpoint_config``, when given, another server (or
    user) for the checkpoint row itself (``[syncer.to.checkpoint]`` host/port/user/
    password, as TiDB Binlog's drainer takes them). The worker progress rows and the
    worker layout (:meth:`check_workers`) always stay in the downstream: they are
    committed in the same transactions as the data, which is what exactly-once rests on;
    the checkpoint row is never ahead of them, wherever it lives."""

    def __init__(self, config: DownstreamConfig, cluster_id: int, *,
                 schema: str = CHECKPOINT_SCHEMA, table: str = CHECKPOINT_TABLE,
                 attempts: int = SAVE_ATTEMPTS, retry_interval_s: float = SAVE_RETRY_INTERVAL_S,
                 sleep: Callable[[float], None] = time.sleep,
                 checkpoint_config: DownstreamConfig | None = None):
        if attempts < 1:
            raise InvalidArgument(f"attempts must be >= 1, got {attempts}")
        self.cluster_id = cluster_id
        self.schema = schema
        self.table = table
        self._data_ds = Downstream(config)
        self._ds = Downstream(checkpoint_config) if checkpoint_config is not None \
            else self._data_ds
        self._attempts = attempts
        self._retry_interval_s = retry_interval_s
        self._sleep = sleep
        self._created = False
        self.saves = 0          # saves that succeeded (binlog_drainer_event{type="savepoint"})

    @property
    def address(self) -> str:
        """host:port of the server holding the checkpoint row."""
        return self._ds.config.address

    def ping_downstream(self) -> None:
        """``SELECT 1`` on the downstream (the data side), for the start checks when the
        checkpoint row lives on another server."""
        def run():
            self._data_ds.query(Statement("SELECT 1", None))
            self._data_ds.commit()

        self._retrying(run, self._data_ds)

    def _retrying(self, fn, ds: Downstream | None = None):
        for attempt in range(1, self._attempts + 1):
            try:
                return fn()
            except TransientDownstreamError:
                (ds or self._ds).rollback()
                if attempt == self._attempts:
                    raise
                self._sleep(self._retry_interval_s)

    def _ensure_table(self) -> None:
        if not self._created:
            for stmt in create_statements(self.schema, self.table):
                self._ds.execute(stmt)
            self._created = True

    def load(self) -> Checkpoint | None:
        def run():
            self._ensure_table()
            if self.cluster_id == 0:
                rows = self._ds.query(Statement(
                    f"SELECT clusterID, checkPoint FROM {quote_table(self.schema, self.table)}",
                    None))
                self._ds.commit()
                if len(rows) > 1:
                    raise ProtocolError(
                        f"{quote_table(self.schema, self.table)} holds checkpoints of "
                        f"{len(rows)} clusters ({sorted(r[0] for r in rows)}); give the "
                        "cluster id to choose one")
                if not rows:
                    return None
                self.cluster_id = int(rows[0][0])  # saves update that row, not a new one
                return rows[0][1]
            rows = self._ds.query(load_statement(self.cluster_id, self.schema, self.table))
            self._ds.commit()
            return rows[0][0] if rows else None

        text = self._retrying(run)
        return None if text is None else decode_json(text)

    def save(self, cp: Checkpoint) -> None:
        def run():
            self._ensure_table()
            self._ds.execute(save_statement(self.cluster_id, cp, self.schema, self.table))
            self._ds.commit()

        self._retrying(run)
        self.saves += 1

    def check_workers(self, worker_count: int, *, progress_schema: str | None = None,
                      progress_table: str = PROGRESS_TABLE) -> WorkerLayout:
        """Apply :func:`decide_worker_layout` to the saved checkpoint, the progress rows
        and the recorded layout, in one transaction: delete the progress rows when it
        says so and record ``worker_count`` with the safe-mode window.  Call it before
        the SQL workers read their progress rows."""
        schema = progress_schema or self.schema
        layout = quote_table(schema, WORKER_LAYOUT_TABLE)
        progress = quote_table(schema, progress_table)
        checkpoint = self.load()
        ds = self._data_ds  # the progress rows and the layout live with the data

        def run() -> WorkerLayout:
            for stmt in progress_create_statements(schema, progress_table):
                ds.execute(stmt)
            ds.execute(Statement(
                f"CREATE TABLE IF NOT EXISTS {layout} (clusterID BIGINT UNSIGNED NOT NULL "
                "PRIMARY KEY, workerCount INT NOT NULL, safeModeUntilTS BIGINT NOT NULL)", None))
            rows = ds.query(Statement(
                f"SELECT workerCount, safeModeUntilTS FROM {layout} WHERE clusterID = %s "
                "FOR UPDATE", (self.cluster_id,)))
            recorded, safe_until = (int(rows[0][0]), int(rows[0][1])) if rows else (None, 0)
            done = {int(w): int(ts) for w, ts in ds.query(Statement(
                f"SELECT worker, commitTS FROM {progress} WHERE clusterID = %s",
                (self.cluster_id,)))}
            decision = decide_worker_layout(worker_count, recorded, safe_until, done, checkpoint)
            if decision.reset_progress:
                ds.execute(Statement(f"DELETE FROM {progress} WHERE clusterID = %s",
                                     (self.cluster_id,)))
            ds.execute(Statement(
                f"REPLACE INTO {layout} (clusterID, workerCount, safeModeUntilTS) "
                "VALUES (%s,%s,%s)", (self.cluster_id, worker_count,
                                      decision.safe_mode_until_ts)))
            ds.commit()
            if decision.reset_progress:
                _log_reset(decision, checkpoint, done)
            return decision

        return self._retrying(run, ds)

    def close(self) -> None:
        self._ds.close()
        if self._data_ds is not self._ds:
            self._data_ds.close()


def _log_reset(d: WorkerLayout, checkpoint: Checkpoint | None, progress: Mapping[int, int]):
    before = "an unrecorded worker-count" if d.previous_count is None else \
        f"worker-count {d.previous_count}"
    if d.safe_mode:
        log.warning(
            "the progress rows of %d worker(s) were written with %s and this run has "
            "worker-count %d, after a stop that was not clean (checkpoint %d not consistent): "
            "they do not fit the new routing, so they were dropped and the replay from "
            "commit_ts %d runs in safe mode (up to %d, where the old workers stopped; this "
            "run keeps safe mode on)", len(progress), before, d.worker_count, d.checkpoint_ts,
            d.checkpoint_ts, d.safe_mode_until_ts)
    else:
        log.info("worker-count changed (%s -> %d) from checkpoint %d (%s): the old progress "
                 "rows were dropped", before, d.worker_count, d.checkpoint_ts,
                 "consistent" if checkpoint is not None and checkpoint.consistent else
                 "no row above it")


class FileCheckpointStore:
    """``<data_dir>/savepoint``, replaced atomically on every save."""

    def __init__(self, data_dir: str | os.PathLike):
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / SAVEPOINT_FILE
        self.saves = 0          # saves that succeeded (binlog_drainer_event{type="savepoint"})

    def load(self) -> Checkpoint | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise StorageError(f"cannot read the savepoint file {self.path}: {exc}") from exc
        return decode_savepoint(text, str(self.path))

    def save(self, cp: Checkpoint) -> None:
        data = encode_savepoint(cp).encode()
        tmp = None
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=SAVEPOINT_FILE + ".", suffix=".tmp",
                                       dir=self.data_dir)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            tmp = None
            dir_fd = os.open(self.data_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self.saves += 1
        except OSError as exc:
            raise StorageError(f"cannot save the checkpoint to {self.path}: {exc}; check "
                               "the data-dir's space and permissions") from exc
        finally:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def close(self) -> None:
        pass


def task_checkpoint_store(settings, *, attempts: int = SAVE_ATTEMPTS) -> MySQLCheckpointStore:
    """The MySQL/TiDB sink's store for a task's
    :class:`~tidb_binlog.drainer.pipeline.settings.TaskSettings`: the checkpoint row in
    ``checkpoint_db`` when set, else in the downstream; the progress rows in the
    downstream. The one place the MySQL sink's actors, the driver and the start checks
    build it."""
    return MySQLCheckpointStore(settings.downstream, settings.cluster_id,
                                schema=settings.checkpoint_schema,
                                table=settings.checkpoint_table, attempts=attempts,
                                checkpoint_config=settings.checkpoint_db)


def open_checkpoint_store(cfg) -> CheckpointStore:
    """The store a resolved :class:`~tidb_binlog.config.DrainerConfig` asks for."""
    cp = cfg.syncer.to.checkpoint
    if cp.type in ("mysql", "tidb"):
        to = cfg.syncer.to
        section, security = "syncer.to.checkpoint.security", cp.security
        if not mysql_ssl(security, section) and (cp.host, cp.port) == (to.host, to.port):
            # the checkpoint lives in the downstream itself: the same server wants the same
            # TLS (TiDB Binlog uses [syncer.to]'s for a checkpoint that follows the downstream)
            section, security = "syncer.to.security", to.security
        ds = DownstreamConfig(host=cp.host, port=cp.port, user=cp.user, password=cp.password,
                              read_timeout_s=to.read_timeout_s,
                              ssl=mysql_ssl(security, section), tls_section=section)
        return MySQLCheckpointStore(ds, cfg.cluster_id, schema=cp.schema or CHECKPOINT_SCHEMA,
                                    table=cp.table or CHECKPOINT_TABLE)
    return FileCheckpointStore(cfg.data_dir)
