"""The schema keepers' logic: merged binlogs decoded with the schema of their time.

:class:`RowKeeper` (the MySQL sink's) and :class:`PbKeeper` (the file sink's) share
:class:`SchemaAt`: the :class:`~tidb_binlog.drainer.translate.schema.SchemaKeeper` rebuilt from
the upstream's DDL history at a schema version, the
:class:`~tidb_binlog.drainer.translate.txn.Translator` over it, ``ignore-txn-commit-ts``,
and the rule that a fresh keeper (first start, or restarted by Ray mid-pipeline) holds
the schema at the version it was built with, not where the stream is: it translates
only after :meth:`SchemaAt.reset` placed it at the checkpoint
(:class:`~tidb_binlog.drainer.pipeline.gate.PipelineReset` until then).

- :meth:`RowKeeper.translate` → ``(commit_ts, Txn | None, schema_version)``;
  :meth:`RowKeeper.translate_more` (not routed) the same with large transactions
  in chunks (a non-last chunk is ``(commit_ts, Txn, schema_version, chunk)``);
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

Where each part lives (every name is importable from here as well):

- :mod:`.schema_at`: :class:`SchemaAt` (schema rebuilt from the DDL history, the job
  wait, placement, references opened), ``JOB_WAIT_S``, ``JOB_WAIT_WARN_S``;
- :mod:`.payload_read`: :func:`translate_or_chunk`, :func:`whole_payload`, the window a
  referenced binlog is read through (``REF_WINDOW_BYTES``, read from that module at each
  call);
- :mod:`.row_keeper`: :class:`RowKeeper`;
- :mod:`.pb_keeper`: :class:`PbKeeper`.
"""

from __future__ import annotations

from tidb_binlog.drainer.translate.payload_read import (
    REF_WINDOW_BYTES,
    translate_or_chunk,
    whole_payload,
)
from tidb_binlog.drainer.translate.pb_keeper import PbKeeper
from tidb_binlog.drainer.translate.row_keeper import RowKeeper
from tidb_binlog.drainer.translate.schema_at import JOB_WAIT_S, JOB_WAIT_WARN_S, SchemaAt

__all__ = ["SchemaAt", "RowKeeper", "PbKeeper", "JOB_WAIT_S", "JOB_WAIT_WARN_S",
           "REF_WINDOW_BYTES", "translate_or_chunk", "whole_payload"]
