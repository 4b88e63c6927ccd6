"""The schema a keeper translates with: :class:`SchemaAt`, the
:class:`~tidb_binlog.drainer.translate.schema.SchemaKeeper` rebuilt from the upstream's
DDL history at a schema version, the :class:`~tidb_binlog.drainer.translate.txn.Translator`
over it, the wait for a history job, ``ignore-txn-commit-ts``, the task's filters, and
the rule that a fresh keeper translates only once :meth:`SchemaAt.reset` placed it at
the checkpoint (:class:`~tidb_binlog.drainer.pipeline.gate.PipelineReset` until then).
The base of every keeper (:mod:`.row_keeper`, :mod:`.pb_keeper`, the Parquet sink's).

A DDL binlog waits for its job like TiDB's drainer (up to ``JOB_WAIT_S``, warning every
``JOB_WAIT_WARN_S``): the binlog of a job's intermediate state (DROP COLUMN's
DeleteOnly) can arrive before the upstream has written the job to its history, and a
job whose final round failed stays queued upstream until the next DDL owner finishes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef, ByteSource, is_ref
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.merge_loop import keeper_items
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.translate.payload_read import RefSource
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.filter.rules import TxnFilter
from tidb_binlog.logs import txn as txn_fields

__all__ = ["SchemaAt", "JOB_WAIT_S", "JOB_WAIT_WARN_S"]

# the keepers' logger, named as before they were split out of keeper.py
log = logging.getLogger("tidb_binlog.drainer.translate.keeper")

# How long a DDL binlog waits for its job in the upstream's history. A job is never lost
# upstream: one whose final round failed stays queued until the next DDL owner finishes
# it (a restarted upstream, the next DDL), so wait as TiDB's drainer does, warning
# every JOB_WAIT_WARN_S.
JOB_WAIT_S = 600.0
JOB_WAIT_WARN_S = 30.0


class SchemaAt:
    """The schema at a version, and whether it was placed at the stream's position.

    ``meta``: the upstream meta (``history_jobs()``, ``job(id)``). ``open_ref``: how
    to read a :class:`~tidb_binlog.binlog_ref.BinlogRef` (a large Commit binlog the pump
    serves by reference): a :class:`~tidb_binlog.binlog_ref.ByteSource` over the pump
    that holds it (``actors.ray_calls.PumpPayloadSource`` over Ray); None: a reference
    handed to this keeper is an error (only the pipelines of
    :attr:`TaskSettings.ref_above <tidb_binlog.drainer.pipeline.settings.TaskSettings.ref_above>`
    ask for references)."""

    def __init__(self, settings: TaskSettings, meta, schema_version: int = 0, *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 open_ref: Callable[[BinlogRef], ByteSource] | None = None):
        self.settings = settings
        self.meta = meta
        self._open_ref = open_ref
        # references read (their count, the range reads and bytes; `whole`: those read
        # whole because the path that met them cannot stream)
        self.ref_stats = {"refs": 0, "reads": 0, "bytes": 0, "whole": 0}
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

    def open_payload(self, ref: BinlogRef) -> ByteSource:
        """The source to read a referenced binlog from (see ``open_ref``); nothing is
        read yet."""
        if self._open_ref is None:
            raise TypeError(f"this keeper was handed a reference ({ref}) but has no way to "
                            "read it (no open_ref): a bug in the pipeline's wiring; set "
                            "[syncer] large-binlog-bytes = 0 to pull every binlog whole")
        self.ref_stats["refs"] += 1
        return RefSource(self._open_ref(ref), ref, self.ref_stats)

    def _decoded(self, items, who: str):
        """``(commit_ts, binlog | None)`` of the items; None for ``ignore-txn-commit-ts``.

        A reference met here is read whole from the pump and parsed as before (the same
        memory as a payload pulled whole): this path takes every transaction whole
        anyway (no chunks: ``txn-chunk-rows = 0``, the pb and Parquet keepers' whole
        paths), and the pipelines that take it do not ask for references
        (:attr:`TaskSettings.ref_above`); it is here so that every keeper handles a
        reference it is handed, not as a way to save memory."""
        if not self._placed:
            raise PipelineReset(f"the {who} restarted: its schema must be rebuilt at the "
                                "checkpoint before it translates")
        for commit_ts, payload in keeper_items(items):
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts, extra=txn_fields(commit_ts))
                yield commit_ts, None
                continue
            if is_ref(payload):
                source = self.open_payload(payload)
                self.ref_stats["whole"] += 1
                payload = source.read(0, source.size)
                del source
            yield commit_ts, bl.decode(payload)
