"""SchemaKeeperActor: decodes merged binlogs with the right schema version (see
:mod:`actors.drainer` for the pipeline picture).

It owns the :class:`~tidb_binlog.drainer.schema.SchemaKeeper` and the
:class:`~tidb_binlog.drainer.translate.Translator` (rows decoded, DDL jobs from the
upstream meta, filters). In exactly-once mode it also routes the rows
(:meth:`SchemaKeeperActor.translate_routed`: the worker of a row is a function of its
transaction, :mod:`tidb_binlog.drainer.routing`), keeps the conflict window, and
returns one object per worker plus a plan for the coordinator (runs between flush
points, DDLs).
"""

from __future__ import annotations

import logging
import time

from actors.process import tune_gc
from actors.ray_calls import PipelineReset
from tidb_binlog import binlog as bl
from tidb_binlog.drainer.dml import Txn
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.routing import BatchPlanner
from tidb_binlog.packed import pack, unpack

__all__ = ["SchemaKeeperActor"]

log = logging.getLogger(__name__)


class SchemaKeeperActor:
    """Decodes merged binlogs into :class:`Txn` lists with the right schema version."""

    def __init__(self, settings: TaskSettings, schema_version: int = 0, meta=None):
        from tidb_binlog.upstream.meta import UpstreamMeta

        self.settings = settings
        self.meta = meta if meta is not None else UpstreamMeta(settings.upstream_meta)
        self._ignored_ts = frozenset(settings.ignore_txn_commit_ts)
        self._ignored_dbs = frozenset(s.lower() for s in settings.ignore_schemas)
        self._rebuild(schema_version)
        # A fresh process (first start, or Ray restarted it mid-pipeline) holds the
        # schema at ``schema_version``, not where the stream is: it translates only
        # after the merger's reset() has placed it at the checkpoint.
        self._placed = False
        self._planner: BatchPlanner | None = None  # exactly-once routing and flush points
        tune_gc()

    def reset(self, schema_version: int) -> int:
        """Rebuild the schema from the upstream's DDL history at ``schema_version``; the
        routing window starts empty (the coordinator was reset too)."""
        version = self._rebuild(schema_version)
        self._planner = None
        self._placed = True
        return version

    def _rebuild(self, schema_version: int) -> int:
        from tidb_binlog.drainer.schema import SchemaKeeper
        from tidb_binlog.drainer.translate import Translator

        keeper = SchemaKeeper.from_history(self.meta.history_jobs(), schema_version)
        # ignore-schemas: the translator drops those databases' rows before decoding them;
        # _filter drops their DDLs
        self.translator = Translator(keeper, self._job, tz=self.settings.tzinfo(),
                                     ignore_schemas=self._ignored_dbs)
        return keeper.schema_version

    def _job(self, job_id: int, wait_s: float = 60.0):
        """The history job, waiting for it like TiDB's drainer: the binlog of a job's
        intermediate state (DROP COLUMN's DeleteOnly) can arrive before the upstream
        has finished the job and written it to the history."""
        deadline = time.monotonic() + wait_s
        delay = 0.05
        while True:
            job = self.meta.job(job_id)
            if job is not None or time.monotonic() >= deadline:
                return job
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def translate(self, items) -> list[tuple[int, Txn | None, int]]:
        """``(commit_ts, payload)`` in commit order → ``(commit_ts, txn | None, schema_version)``.
        ``items`` may come packed (:mod:`tidb_binlog.packed`).

        Raises PipelineReset when this keeper was restarted since the merger's
        last reset(): its schema is not at the stream's position.
        """
        if not self._placed:
            raise PipelineReset("the schema keeper restarted: its schema must be rebuilt at "
                                "the checkpoint before it translates")
        out = []
        for commit_ts, payload in unpack(items):
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts)
                out.append((commit_ts, None, 0))
                continue
            binlog = bl.decode(payload)
            txn = self.translator.translate(binlog)
            version = self.translator.keeper.schema_version
            out.append((commit_ts, self._filter(txn), version))
        return out

    def translate_routed(self, items, worker_count: int) -> tuple:
        """:meth:`translate`, routed over ``worker_count`` workers (exactly-once mode):
        ``(plan, payload_0, ..., payload_{W-1})``, each packed
        (:func:`~tidb_binlog.packed.pack`), called with ``num_returns = W + 1``
        so each payload is its own object the coordinator hands to its worker unread;
        the plan says which runs of parts go out between flushes
        (:class:`~tidb_binlog.drainer.routing.BatchPlanner`, whose conflict window
        lives across batches until :meth:`reset`)."""
        translated = self.translate(items)
        planner = self._planner
        if planner is None or planner.worker_count != worker_count:
            planner = self._planner = BatchPlanner(worker_count)
        plan, payloads = planner.plan(translated)
        return (pack(plan), *[pack(p) for p in payloads])

    def _filter(self, txn: Txn | None) -> Txn | None:
        """A DDL of an ignored database is dropped (its rows never left the translator)."""
        if txn is None or txn.ddl is None or not self._ignored_dbs:
            return txn
        return None if txn.ddl.database.lower() in self._ignored_dbs else txn

    def schema_version(self) -> int:
        return self.translator.keeper.schema_version
