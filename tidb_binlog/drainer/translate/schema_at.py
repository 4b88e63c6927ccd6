"""The schema a keeper translates with: :class:`SchemaAt`, the
:class:`~tidb_binlog.drainer.translate.schema.SchemaKeeper` rebuilt from the upstream's
DDL history at a schema version, the :class:`~tidb_binlog.drainer.translate.txn.Translator`
over it, the wait for a history job, ``ignore-txn-commit-ts``, the task's filters, the
rule that a fresh keeper translates only once :meth:`SchemaAt.reset` placed it at the
checkpoint (:class:`~tidb_binlog.drainer.pipeline.gate.PipelineReset` until then), and
the keepers' ``translate_more`` (:meth:`SchemaAt._translate_more`: large transactions
handed out one chunk per call). The base of every keeper (:mod:`.row_keeper`,
:mod:`.pb_keeper`, the Parquet sink's).

A DDL binlog waits for its job like TiDB's drainer (up to ``JOB_WAIT_S``, warning every
``JOB_WAIT_WARN_S``): the binlog of a job's intermediate state (DROP COLUMN's
DeleteOnly) can arrive before the upstream has written the job to its history, and a
job whose final round failed stays queued upstream until the next DDL owner finishes it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef, ByteSource, is_ref
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.merge_loop import keeper_items
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.translate.payload_read import RefSource, translate_or_chunk
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.errors import InvalidArgument
from tidb_binlog.filter.rules import TxnFilter
from tidb_binlog.logs import txn as txn_fields

__all__ = ["Chunks", "SchemaAt", "JOB_WAIT_S", "JOB_WAIT_WARN_S"]

# the keepers' logger, named as before they were split out of keeper.py
log = logging.getLogger("tidb_binlog.drainer.translate.keeper")

# How long a DDL binlog waits for its job in the upstream's history. A job is never lost
# upstream: one whose final round failed stays queued until the next DDL owner finishes
# it (a restarted upstream, the next DDL), so wait as TiDB's drainer does, warning
# every JOB_WAIT_WARN_S.
JOB_WAIT_S = 600.0
JOB_WAIT_WARN_S = 30.0


@dataclass
class Chunks:
    """A large transaction handed out chunk by chunk (:meth:`SchemaAt._translate_more`)."""

    commit_ts: int
    chunks: Iterator[tuple[Any, bool]]  # the keeper's chunks: (chunk, last)
    chunk: int = 0  # non-last chunks handed out (the keeper counts them)


class SchemaAt:
    """The schema at a version, and whether it was placed at the stream's position.

    ``meta``: the upstream meta (``history_jobs()``, ``job(id)``). ``open_ref``: how
    to read a :class:`~tidb_binlog.binlog_ref.BinlogRef` (a large Commit binlog the pump
    serves by reference): a :class:`~tidb_binlog.binlog_ref.ByteSource` over the pump
    that holds it (``actors.ray_calls.PumpPayloadSource`` over Ray); None: a reference
    handed to this keeper is an error (only the pipelines of
    :attr:`TaskSettings.ref_above <tidb_binlog.drainer.pipeline.settings.TaskSettings.ref_above>`
    ask for references)."""

    # the logger of _translate_more's messages (ignore-txn-commit-ts, chunks)
    _log: logging.Logger = log

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
        # large transactions in chunks (_translate_more): the items not translated yet,
        # and the transaction being handed out
        self._queue: deque = deque()
        self._chunks: Chunks | None = None

    def reset(self, schema_version: int) -> int:
        """Rebuild the schema from the upstream's DDL history at ``schema_version``; a
        large transaction half handed out is dropped with the items queued behind it
        (the sink was reset too: the replay after its checkpoint brings them again)."""
        version = self._rebuild(schema_version)
        self._placed = True
        self._queue.clear()
        self._chunks = None
        return version

    def chunk_rows(self) -> int:
        """Row changes per chunk of a large transaction (``txn-chunk-rows``; 0: whole)."""
        return max(self.settings.txn_chunk_rows, 0)

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
            raise InvalidArgument(f"this keeper was handed a reference ({ref}) but has no way to "
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
        self._refuse_unplaced(who)
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

    def _refuse_unplaced(self, who: str) -> None:
        """:class:`PipelineReset` if this keeper was not placed at the checkpoint yet."""
        if not self._placed:
            raise PipelineReset(f"the {who} restarted: its schema must be rebuilt at the "
                                "checkpoint before it translates")

    def _translate_more(self, items, who: str) -> tuple[list, bool]:
        """``translate_more``: ``translate`` with large transactions (more than
        :meth:`chunk_rows` row changes) handed out one chunk per call, never decoded
        whole: ``(out, more)``; ``more``: this keeper still holds work (a large
        transaction's next chunks, or items queued behind it), so the merger calls
        again, with no new items if none are ready. Items arriving meanwhile wait in
        the queue, undecoded. The keeper's own steps: :meth:`_open` (a transaction
        whole, or its chunks), :meth:`_whole` (a whole one's item), :meth:`_chunk_item`
        (a chunk's item, if any) and :meth:`_chunking_note` (what it does with one)."""
        max_rows = self.chunk_rows()
        if not max_rows:
            return self.translate(items), False
        self._refuse_unplaced(who)
        queue = self._queue
        queue.extend(keeper_items(items))  # a large payload: a view, not a copy
        out: list = []
        if self._chunks is not None:
            self._next_chunk_item(out)
        translator = self.translator
        while self._chunks is None and queue:
            commit_ts, payload = self._next_queued(out)
            if payload is None:  # skipped (ignore-txn-commit-ts)
                continue
            txn, chunks = self._open(commit_ts, payload, max_rows)
            del payload  # a chunked one's payload is held by its chunks only
            if chunks is None:
                out.append((commit_ts, self._whole(txn), translator.keeper.schema_version))
                continue
            self._chunks = Chunks(commit_ts, chunks)
            self._next_chunk_item(out)
            if self._chunks is not None:
                self._log.info("transaction at commit_ts %s has more than %d row changes: %s",
                               commit_ts, max_rows, self._chunking_note(),
                               extra=txn_fields(commit_ts))
        return out, self._chunks is not None or bool(queue)

    def _next_queued(self, out: list) -> tuple[int, Any]:
        """The next queued ``(commit_ts, payload)``, a reference opened (read in ranges
        from the pump, chunk by chunk); the payload None: an ``ignore-txn-commit-ts``
        one, skipped (its ``(commit_ts, None, 0)`` is in ``out``)."""
        commit_ts, payload = self._queue.popleft()
        if commit_ts in self._ignored_ts:
            self._log.warning("skipping the transaction at commit_ts %s "
                              "(ignore-txn-commit-ts)", commit_ts, extra=txn_fields(commit_ts))
            out.append((commit_ts, None, 0))
            return commit_ts, None
        if is_ref(payload):
            payload = self.open_payload(payload)
        return commit_ts, payload

    def _next_chunk_item(self, out: list) -> None:
        """The open large transaction's next chunk into ``out`` (:meth:`_chunk_item`);
        after its last one, none is open."""
        c = self._chunks
        chunk, last = next(c.chunks)
        item = self._chunk_item(c, chunk, last)
        del chunk  # the chunk's undecoded or unfiltered rows
        if last:
            self._chunks = None
        if item is not None:
            out.append(item)

    def _open(self, commit_ts: int, payload, max_rows: int) -> tuple[Any, Iterator | None]:
        """A transaction's payload as ``(txn, None)`` (:meth:`_whole` makes its item) or
        ``(None, chunks)``: :func:`translate_or_chunk`."""
        return translate_or_chunk(self.translator, payload, max_rows)

    def _whole(self, txn) -> Any:
        """The item of a transaction :meth:`_open` returned whole (the keeper's)."""
        raise NotImplementedError

    def _chunk_item(self, c: Chunks, chunk, last: bool) -> tuple | None:
        """The item of a large transaction's chunk (``last``: its last one, which is
        always sent); None: nothing to send (the keeper's)."""
        raise NotImplementedError

    def _chunking_note(self) -> str:
        """What the keeper does with a large transaction (its log message's end)."""
        return "writing it in chunks"
