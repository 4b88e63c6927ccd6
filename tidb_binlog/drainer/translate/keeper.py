"""The schema keeper's logic: merged binlogs decoded with the schema of their time.

:class:`RowKeeper` (the MySQL sink's) and :class:`PbKeeper` (the file sink's) share
:class:`SchemaAt`: the :class:`~tidb_binlog.drainer.translate.schema.SchemaKeeper` rebuilt from
the upstream's DDL history at a schema version, the
:class:`~tidb_binlog.drainer.translate.txn.Translator` over it, ``ignore-txn-commit-ts``,
and the rule that a fresh keeper (first start, or restarted by Ray mid-pipeline) holds
the schema at the version it was built with, not where the stream is: it translates
only after :meth:`SchemaAt.reset` placed it at the checkpoint
(:class:`~tidb_binlog.drainer.pipeline.gate.PipelineReset` until then).

- :meth:`RowKeeper.translate` → ``(commit_ts, Txn | None, schema_version)``;
  :meth:`RowKeeper.translate_routed` (exactly-once) also routes the rows over the
  workers (:class:`~tidb_binlog.drainer.apply.routing.BatchPlanner`, whose conflict window
  lives across batches until a reset) and returns the plan and one payload per worker,
  each packed.
- :meth:`PbKeeper.translate` → ``(commit_ts, pb record bytes | None, schema_version)``
  (:class:`~tidb_binlog.drainer.translate.pb.PbTranslator`).

Both wait for a history job like TiDB's drainer (up to ``JOB_WAIT_S``, warning every
``JOB_WAIT_WARN_S``): the binlog of a job's intermediate state (DROP COLUMN's
DeleteOnly) can arrive before the upstream has written the job to its history, and a
job whose final round failed stays queued upstream until the next DDL owner finishes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tidb_binlog import binlog as bl
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.apply.routing import BatchPlanner
from tidb_binlog.drainer.loopback import LoopbackFilter
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.translate.pb import PbTranslator
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.filter.rules import TxnFilter
from tidb_binlog.packed import pack, unpack

__all__ = ["SchemaAt", "RowKeeper", "PbKeeper", "JOB_WAIT_S", "JOB_WAIT_WARN_S"]

log = logging.getLogger(__name__)

# How long a DDL binlog waits for its job in the upstream's history. A job is never lost
# upstream: one whose final round failed stays queued until the next DDL owner finishes
# it (a restarted upstream, the next DDL), so wait as TiDB's drainer does, warning
# every JOB_WAIT_WARN_S.
JOB_WAIT_S = 600.0
JOB_WAIT_WARN_S = 30.0


class SchemaAt:
    """The schema at a version, and whether it was placed at the stream's position.

    ``meta``: the upstream meta (``history_jobs()``, ``job(id)``)."""

    def __init__(self, settings: TaskSettings, meta, schema_version: int = 0, *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.meta = meta
        self._sleep = sleep
        self._clock = clock
        self._ignored_ts = frozenset(settings.ignore_txn_commit_ts)
        self._ignored_dbs = frozenset(s.lower() for s in settings.ignore_schemas)
        # do/ignore tables, binlog-filter-rule, table-migrate-rule (tidb_binlog/filter)
        self.filters = TxnFilter.of_settings(settings)
        self._rebuild(schema_version)
        self._placed = False

    def reset(self, schema_version: int) -> int:
        """Rebuild the schema from the upstream's DDL history at ``schema_version``."""
        version = self._rebuild(schema_version)
        self._placed = True
        return version

    def schema_version(self) -> int:
        return self.translator.keeper.schema_version

    def _rebuild(self, schema_version: int) -> int:
        keeper = SchemaKeeper.from_history(self.meta.history_jobs(), schema_version)
        # ignore-schemas: the translator drops those databases' rows before decoding them
        self.translator = Translator(keeper, self._job, tz=self.settings.tzinfo(),
                                     ignore_schemas=self._ignored_dbs, filters=self.filters)
        return keeper.schema_version

    def _job(self, job_id: int, wait_s: float = JOB_WAIT_S):
        """The history job, waiting for it (see the module doc)."""
        start = self._clock()
        warned = 0
        delay = 0.05
        while True:
            job = self.meta.job(job_id)
            waited = self._clock() - start
            if job is not None or waited >= wait_s:
                return job
            if waited >= (warned + 1) * JOB_WAIT_WARN_S:
                warned = int(waited // JOB_WAIT_WARN_S)
                log.warning("DDL job %d is not in the upstream's history after %.0f s; waiting "
                            "up to %.0f s for the upstream to finish it (a queued job is "
                            "finished by its next DDL or Upstream.resume_ddl_jobs())",
                            job_id, waited, wait_s)
            self._sleep(delay)
            delay = min(delay * 2, 1.0)

    def _decoded(self, items, who: str):
        """``(commit_ts, binlog | None)`` of the items; None for ``ignore-txn-commit-ts``."""
        if not self._placed:
            raise PipelineReset(f"the {who} restarted: its schema must be rebuilt at the "
                                "checkpoint before it translates")
        for commit_ts, payload in unpack(items):
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts)
                yield commit_ts, None
                continue
            yield commit_ts, bl.decode(payload)


class RowKeeper(SchemaAt):
    """Decodes merged binlogs into :class:`Txn` lists (the MySQL sink's keeper)."""

    def __init__(self, settings: TaskSettings, meta, schema_version: int = 0, **kw):
        super().__init__(settings, meta, schema_version, **kw)
        self._planner: BatchPlanner | None = None  # exactly-once routing and flush points
        self._loopback = LoopbackFilter.from_settings(settings)  # None: keeps everything

    def reset(self, schema_version: int) -> int:
        """:meth:`SchemaAt.reset`; the routing window starts empty (the sink was reset)."""
        version = super().reset(schema_version)
        self._planner = None
        return version

    def translate(self, items) -> list[tuple[int, Txn | None, int]]:
        """``(commit_ts, payload)`` in commit order (possibly packed) →
        ``(commit_ts, txn | None, schema_version)``."""
        out = []
        translator = self.translator
        for commit_ts, binlog in self._decoded(items, "schema keeper"):
            if binlog is None:
                out.append((commit_ts, None, 0))
                continue
            txn = translator.translate(binlog)
            out.append((commit_ts, self._filter(txn), translator.keeper.schema_version))
        return out

    def translate_routed(self, items, worker_count: int) -> tuple:
        """:meth:`translate`, routed over ``worker_count`` workers: ``(plan, payload_0,
        ..., payload_{W-1})``, each packed."""
        translated = self.translate(items)
        planner = self._planner
        if planner is None or planner.worker_count != worker_count:
            planner = self._planner = BatchPlanner(worker_count,
                                                   txn_atomic=self.settings.txn_atomic)
        plan, payloads = planner.plan(translated)
        return (pack(plan), *[pack(p) for p in payloads])

    def _filter(self, txn: Txn | None) -> Txn | None:
        """A DDL of an ignored database is dropped (its rows never left the translator);
        loopback-control / sync-ddl (:mod:`tidb_binlog.drainer.loopback`)."""
        if self._loopback is not None:
            txn = self._loopback.apply(txn)
        txn = self.filters.apply(txn, rows_prefiltered=True)
        if txn is None or txn.ddl is None or not self._ignored_dbs:
            return txn
        return None if txn.ddl.database.lower() in self._ignored_dbs else txn


class PbKeeper(SchemaAt):
    """Translates merged binlogs into pb records (the file sink's keeper)."""

    _pb: PbTranslator | None = None

    def translate(self, items) -> list[tuple[int, bytes | None, int]]:
        """``(commit_ts, payload)`` in commit order (possibly packed) →
        ``(commit_ts, record | None, schema_version)``."""
        pb = self._pb_translator()
        out = []
        for commit_ts, binlog in self._decoded(items, "pb keeper"):
            if binlog is None:
                out.append((commit_ts, None, 0))
                continue
            record = pb.translate(binlog)
            out.append((commit_ts, record, self.translator.keeper.schema_version))
        return out

    def _pb_translator(self) -> PbTranslator:
        if self._pb is None or self._pb.translator is not self.translator:
            self._pb = PbTranslator(self.translator, ignore_schemas=self.settings.ignore_schemas,
                                    tz=self.settings.tzinfo())
        return self._pb
