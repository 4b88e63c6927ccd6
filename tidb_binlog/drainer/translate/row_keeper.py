"""The MySQL sink's keeper: :class:`RowKeeper` translates merged binlogs into
:class:`~tidb_binlog.drainer.apply.dml.Txn` lists with the schema of their time
(:class:`~tidb_binlog.drainer.translate.schema_at.SchemaAt`), applies loop control
and the task's filters, and hands large transactions out in chunks: routed over the
workers (:meth:`RowKeeper.translate_routed`, exactly-once) or one chunk per call to the
coordinator (:meth:`RowKeeper.translate_more`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from tidb_binlog.drainer.apply.causality import row_keys, stable_hash
from tidb_binlog.drainer.apply.dml import DML, Txn
from tidb_binlog.drainer.apply.routing import FLUSH, ROWS, BatchPlanner, FlushStep, RowsStep
from tidb_binlog.drainer.loopback import MARK_DATABASE, MARK_TABLE, LoopbackFilter
from tidb_binlog.drainer.pipeline.merge_loop import keeper_items
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.translate.payload_read import translate_or_chunk
from tidb_binlog.drainer.translate.schema_at import Chunks, SchemaAt
from tidb_binlog.drainer.translate.wire import WirePrewrite
from tidb_binlog.errors import SchemaError
from tidb_binlog.packed import pack

__all__ = ["RowKeeper"]

# the keepers' logger, named as before they were split out of keeper.py
log = logging.getLogger("tidb_binlog.drainer.translate.keeper")


@dataclass
class _Chunked:
    """A large transaction being handed out chunk by chunk (:meth:`RowKeeper.translate_routed`)."""

    commit_ts: int
    chunks: Iterator[tuple[tuple[DML, ...], bool]]
    first: tuple[DML, ...] | None  # the first chunk, decoded to tell it was not the last
    worker: int = -1  # the one worker of the whole transaction, from its first row
    rows: int = 0
    chunk: int = 0  # chunks handed out


class RowKeeper(SchemaAt):
    """Decodes merged binlogs into :class:`Txn` lists (the MySQL sink's keeper)."""

    def __init__(self, settings: TaskSettings, meta, schema_version: int = 0, **kw):
        super().__init__(settings, meta, schema_version, **kw)
        self._planner: BatchPlanner | None = None  # exactly-once routing and flush points
        self._loopback = LoopbackFilter.from_settings(settings)  # None: keeps everything
        # the large transaction being handed out by translate_routed (its queue and
        # translate_more's: SchemaAt's)
        self._chunked: _Chunked | None = None

    def reset(self, schema_version: int) -> int:
        """:meth:`SchemaAt.reset`; the routing window starts empty (the sink was reset),
        and a large transaction half handed out is dropped (the replay brings it again)."""
        version = super().reset(schema_version)
        self._planner = None
        self._chunked = None
        return version

    def chunk_rows(self) -> int:
        """Row changes per chunk of a large transaction (``txn-chunk-rows``); 0: every
        transaction whole. Every path of the MySQL sink chunks:

        - Routed (exactly-once into MySQL without a relay log, :meth:`translate_routed`):
          the chunks are one downstream transaction on one worker, committed with the
          last one.
        - Otherwise :meth:`translate_more` hands the coordinator one chunk per call, and
          the coordinator applies them (``Dispatcher.atomic_chunks``):
          with exactly-once (a relay log turns routing off) or ``txn-atomic``, as the
          routed path does: a flush first, every chunk to one worker in one open
          downstream transaction that the last chunk commits (with the worker's
          progress row under exactly-once), a flush after; with both off (the
          causality mode), each chunk like a batch of its rows, committed on its own
          (TiDB Binlog's non-atomic apply; a replay re-applies it in safe mode).
          A relay log writes each chunk as its own record before it is applied
          (:mod:`tidb_binlog.drainer.relay`).

        Loop control chunks as well: the loop verdict is decided from the mark table's
        rows alone before the first chunk (:meth:`_mark_rows`)."""
        return super().chunk_rows()

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
        ..., payload_{W-1}, more)``, the plan and payloads packed. ``more``: this keeper
        still holds work (a large transaction's next chunks, or items queued behind
        it): the merger calls again, with no new items if none are ready.

        **Large transactions** (more than :meth:`chunk_rows` row changes): translated
        and handed out one chunk per call (:meth:`Translator.translate_chunks
        <tidb_binlog.drainer.translate.txn.Translator.translate_chunks>`), so neither
        this keeper nor a worker ever holds the transaction decoded whole, and the
        worker starts on the first chunk while the next one is decoded. Items arriving
        meanwhile wait in this keeper's queue, undecoded. The plan of such a transaction:

        - ``FLUSH`` first (every earlier transaction committed: the window is empty);
        - the whole transaction on one worker (its first row's, a function of the
          transaction alone, as exactly-once requires), each chunk but the last a part
          ``(commit_ts, dmls, chunk)`` (chunk 1, 2, ...) that the worker runs without
          COMMIT (a chunk 1 it meets with another chunk open: a replay, it rolls that
          one back first), the last
          one ``(commit_ts, dmls)``, committed with the worker's progress row: one
          downstream transaction, so a crash anywhere before that COMMIT rolls all of it
          back and the replay applies it once;
        - each chunk but the last a ``ROWS`` step with ``end_ts = 0`` (nothing for the
          checkpoint: it must not pass ``commit_ts`` before the COMMIT), the last one
          with ``end_ts = commit_ts`` and the transaction's row count;
        - ``FLUSH`` after it (its keys were never held in the window; later
          transactions on other workers wait for its COMMIT instead).
        """
        planner = self._planner
        if planner is None or planner.worker_count != worker_count:
            planner = self._planner = BatchPlanner(worker_count,
                                                   txn_atomic=self.settings.txn_atomic)
        max_rows = self.chunk_rows()
        if not max_rows:
            plan, payloads = planner.plan(self.translate(items))
            return (pack(plan), *[pack(p) for p in payloads], False)
        self._refuse_unplaced("schema keeper")
        self._queue.extend(keeper_items(items))  # a large payload: a view, not a copy
        steps: list = []
        payloads: list[list] = [[] for _ in range(worker_count)]
        if self._chunked is None:
            plan, routed = planner.plan(self._translate_queue(max_rows))
            steps.extend(plan)
            for out, parts in zip(payloads, routed, strict=True):
                out.extend(parts)
        if self._chunked is not None:
            self._next_chunk(planner, steps, payloads)
        more = self._chunked is not None or bool(self._queue)
        return (pack(steps), *[pack(p) for p in payloads], more)

    def _translate_queue(self, max_rows: int) -> list[tuple[int, Txn | None, int]]:
        """:meth:`translate` of the queued items, up to the first large transaction
        (then :attr:`_chunked` is set and the items after it stay queued)."""
        out = []
        queue, translator = self._queue, self.translator
        while queue:
            commit_ts, payload = self._next_queued(out)
            if payload is None:  # skipped (ignore-txn-commit-ts)
                continue
            txn, chunks = self._open(commit_ts, payload, max_rows)
            del payload  # a chunked one's payload is held by its chunks only
            if chunks is not None:
                dmls, last = next(chunks)
                if not last:
                    self._chunked = _Chunked(commit_ts, chunks, dmls)
                    log.info("transaction at commit_ts %s has more than %d row changes: "
                             "applying it in chunks", commit_ts, max_rows)
                    break
                txn = Txn.of_dmls(commit_ts, dmls)
            out.append((commit_ts, self._filter(txn), translator.keeper.schema_version))
        return out

    def _next_chunk(self, planner: BatchPlanner, steps: list, payloads: list[list]) -> None:
        """Plan the large transaction's next chunk (see :meth:`translate_routed`)."""
        c = self._chunked
        if c.first is not None:
            dmls, last, c.first = c.first, False, None
        else:
            dmls, last = next(c.chunks)
        txn = self._filter(Txn.of_dmls(c.commit_ts, dmls))
        dmls = txn.dmls if txn is not None else ()
        del txn
        workers = planner.worker_count
        if c.worker < 0:  # the first chunk: every earlier transaction commits first
            steps.append(FlushStep(FLUSH))
            planner.reset()
            c.worker = stable_hash(row_keys(dmls[0])[0]) % workers if dmls else 0
        c.rows += len(dmls)
        counts = [0] * workers
        if last:  # always sent, even empty: its part commits the transaction
            payloads[c.worker].append((c.commit_ts, dmls))
            counts[c.worker] = 1
        elif dmls:
            c.chunk += 1
            payloads[c.worker].append((c.commit_ts, dmls, c.chunk))
            counts[c.worker] = 1
        steps.append(RowsStep(ROWS, c.commit_ts if last else 0,
                              self.translator.keeper.schema_version, tuple(counts),
                              c.rows if last else 0))
        if last:
            steps.append(FlushStep(FLUSH))
            planner.reset()
            self._chunked = None

    def translate_more(self, items) -> tuple[list, bool]:
        """:meth:`translate` with large transactions in chunks (the causality mode; the
        merger calls it through ``translate_more`` when the keeper has one): ``(out,
        more)``; ``more``: this keeper still holds work (a large transaction's next
        chunks, or items queued behind it), so the merger calls again, with no new items
        if none are ready, exactly as for :meth:`translate_routed`.

        A transaction of more than :meth:`chunk_rows` row changes is decoded one chunk
        per call (never whole). Each chunk but the last is an item ``(commit_ts, txn,
        schema_version, chunk)`` (chunk 1, 2, ...; a chunk whose rows were all filtered
        out is not sent); the last one is the usual ``(commit_ts, txn | None,
        schema_version)``, always sent: the coordinator
        (:meth:`~tidb_binlog.drainer.sinks.mysql.coordinator.Coordinator.apply`) lets
        the checkpoint pass ``commit_ts`` only once it and every chunk before it were
        applied. Items arriving meanwhile wait in this keeper's queue, undecoded
        (:meth:`SchemaAt._translate_more`)."""
        return self._translate_more(items, "schema keeper")

    def _whole(self, txn: Txn | None) -> Txn | None:
        return self._filter(txn)

    def _chunk_item(self, c: Chunks, dmls: tuple[DML, ...], last: bool) -> tuple | None:
        """A chunk's item (see :meth:`translate_more`)."""
        txn = self._filter(Txn.of_dmls(c.commit_ts, dmls))
        version = self.translator.keeper.schema_version
        if last:
            return c.commit_ts, txn, version
        if txn is not None and txn.dmls:
            c.chunk += 1
            return c.commit_ts, txn, version, c.chunk
        return None

    def _chunking_note(self) -> str:
        s = self.settings
        return "applying it in chunks, " + (
            "in one downstream transaction" if s.exactly_once or s.txn_atomic
            else "each committed on its own: exactly-once and txn-atomic are off")

    def _open(self, commit_ts: int, payload, max_rows: int
              ) -> tuple[Txn | None, Iterator | None]:
        """:func:`translate_or_chunk`, with loop control's verdict on a large transaction
        taken before its first chunk: one carrying our channel's mark is dropped here,
        ``(None, None)``, its other rows never decoded. The payload may be a source (a
        binlog served by reference): the verdict reads the mark rows by range from the
        prewrite value's one walk, which the chunks then reuse."""
        loopback = self._loopback
        if loopback is None or not loopback.loopback_control:
            return translate_or_chunk(self.translator, payload, max_rows)

        def drop(prewrite: WirePrewrite) -> bool:
            return loopback.drops(commit_ts, self._mark_rows(commit_ts, prewrite))

        return translate_or_chunk(self.translator, payload, max_rows, drop=drop)

    def _mark_rows(self, commit_ts: int, prewrite: WirePrewrite) -> list[DML]:
        """The mark table's row changes (``retl._drainer_repl_mark``) of a large DML
        binlog, decoded alone from its walked prewrite value (translate/wire.py knows
        each mutation's table id before any row is read: only the mark table's rows are
        read, from the payload's bytes or by range from its source; the other tables'
        rows are never read here)."""
        translator = self.translator
        version = prewrite.schema_version
        translator._schema_at(version)  # the schema the chunks will be decoded with
        keeper = translator.keeper
        rows: list[DML] = []
        for mut in prewrite.mutations:
            try:
                database, table = keeper.names(mut.table_id)
            except SchemaError:
                continue  # an unknown table is never the mark table (its chunk will say so)
            if table.lower() != MARK_TABLE or database.lower() != MARK_DATABASE:
                continue
            # the translator's own row walk (same package), for this one mutation only
            for part in translator._mutation_slices(commit_ts, version, mut,
                                                    len(mut.sequence) + 1):
                rows.extend(part)
        return rows

    def _filter(self, txn: Txn | None) -> Txn | None:
        """A DDL of an ignored database is dropped (its rows never left the translator);
        loopback-control / sync-ddl (:mod:`tidb_binlog.drainer.loopback`)."""
        if self._loopback is not None:
            txn = self._loopback.apply(txn)
        txn = self.filters.apply(txn, rows_prefiltered=True)
        if txn is None or txn.ddl is None or not self._ignored_dbs:
            return txn
        return None if txn.ddl.database.lower() in self._ignored_dbs else txn
