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
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef, ByteSource, is_ref
from tidb_binlog.drainer.apply.causality import row_keys, stable_hash
from tidb_binlog.drainer.apply.dml import DML, Txn
from tidb_binlog.drainer.apply.routing import FLUSH, ROWS, BatchPlanner, FlushStep, RowsStep
from tidb_binlog.drainer.loopback import MARK_DATABASE, MARK_TABLE, LoopbackFilter
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.merge_loop import keeper_items
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.translate import wire as _wire
from tidb_binlog.drainer.translate.pb import PbTranslator, RecordPart, record_head
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.drainer.translate.wire import WirePrewrite
from tidb_binlog.errors import SchemaError, UnavailableError
from tidb_binlog.filter.rules import TxnFilter
from tidb_binlog.logs import txn as txn_fields
from tidb_binlog.packed import pack

__all__ = ["SchemaAt", "RowKeeper", "PbKeeper", "JOB_WAIT_S", "JOB_WAIT_WARN_S",
           "REF_WINDOW_BYTES", "translate_or_chunk", "whole_payload"]

log = logging.getLogger(__name__)

# How long a DDL binlog waits for its job in the upstream's history. A job is never lost
# upstream: one whose final round failed stays queued until the next DDL owner finishes
# it (a restarted upstream, the next DDL), so wait as TiDB's drainer does, warning
# every JOB_WAIT_WARN_S.
JOB_WAIT_S = 600.0
JOB_WAIT_WARN_S = 30.0

# The window a keeper reads a referenced binlog through (pump -> keeper, one Ray call a
# window while it walks the prewrite value; a chunk's rows are read by span)
REF_WINDOW_BYTES = 8 << 20


def translate_or_chunk(translator: Translator, payload, max_rows: int, *,
                       drop: Callable[[WirePrewrite], bool] | None = None
                       ) -> tuple[Txn | None, Iterator | None]:
    """One Commit binlog's payload as ``(txn, None)``, or, when it may hold more than
    ``max_rows`` row changes, ``(None, chunks)``: :meth:`Translator.translate_chunks`
    over the payload read in place (translate/wire.py: no Binlog or PrewriteValue
    message, no copy of its prewrite_value; the chunks hold the payload and the rows'
    offsets only). What every keeper that streams large transactions does first.

    ``payload``: the bytes (or a view of them), or a
    :class:`~tidb_binlog.binlog_ref.ByteSource` over them (a referenced binlog the
    keeper opened, :meth:`SchemaAt.open_payload`): then the binlog is walked through a
    window of :data:`REF_WINDOW_BYTES` and each chunk's rows read by range, so the
    chunks hold the source, the rows' offsets and one window, never the payload. One
    that does not chunk (small for a reference, a DDL) is read whole from the source.

    ``drop``: asked about a transaction that chunks, with its prewrite value walked
    (loop control's verdict, :meth:`RowKeeper._open`); True: ``(None, None)``, none of
    its rows decoded. The chunks then reuse that walk."""
    if is_ref(payload):
        raise TypeError(f"a BinlogRef ({payload}) reached translate_or_chunk unopened: "
                        "the keeper opens it first (SchemaAt.open_payload)")
    # None from the reader: small, or not a well-formed binlog, which the protobuf parse
    # of the whole payload reports as it always did
    wire = _wire.read_large(payload, 4 * max_rows, REF_WINDOW_BYTES)
    if wire is not None and translator.may_exceed(wire, max_rows):
        if drop is None:
            return None, translator.translate_chunks(wire, max_rows)
        prewrite = WirePrewrite(wire.prewrite_value)  # the structure checked here
        if drop(prewrite):
            return None, None
        return None, translator.translate_chunks(wire, max_rows, prewrite=prewrite)
    del wire
    return translator.translate(bl.decode(whole_payload(payload))), None


def whole_payload(payload):
    """The payload's bytes: itself, or all of a :class:`~tidb_binlog.binlog_ref.ByteSource`
    read at once (a binlog that does not chunk: small, a DDL, malformed)."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return payload
    return payload.read(0, payload.size)


class _RefSource:
    """A referenced binlog's :class:`~tidb_binlog.binlog_ref.ByteSource` as the keeper
    reads it: counted in :attr:`SchemaAt.ref_stats`, and a pump that went away while
    it is read (:class:`~tidb_binlog.errors.UnavailableError`) is a
    :class:`PipelineReset`: the pipeline replays from its checkpoint, and pulls (and
    references) the transaction again once the pump is back."""

    __slots__ = ("_source", "_ref", "_stats", "size")

    def __init__(self, source: ByteSource, ref: BinlogRef, stats: dict):
        self._source, self._ref, self._stats = source, ref, stats
        self.size = ref.size

    def read(self, offset: int, n: int):
        try:
            data = self._source.read(offset, n)
        except UnavailableError as exc:
            raise PipelineReset(f"pump {self._ref.node_id} went away while the keeper read "
                                f"the transaction at commit_ts {self._ref.commit_ts} from it "
                                f"({exc}); replaying from the checkpoint") from exc
        stats = self._stats
        stats["reads"] += 1
        stats["bytes"] += len(data)
        return data


@dataclass
class _Chunked:
    """A large transaction being handed out chunk by chunk (:meth:`RowKeeper.translate_routed`)."""

    commit_ts: int
    chunks: Iterator[tuple[tuple[DML, ...], bool]]
    first: tuple[DML, ...] | None  # the first chunk, decoded to tell it was not the last
    worker: int = -1  # the one worker of the whole transaction, from its first row
    rows: int = 0
    chunk: int = 0  # chunks handed out


@dataclass
class _Chunks:
    """A large transaction handed to the coordinator chunk by chunk
    (:meth:`RowKeeper.translate_more`, the causality mode)."""

    commit_ts: int
    chunks: Iterator[tuple[tuple[DML, ...], bool]]
    chunk: int = 0  # non-last chunks handed out


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
        return _RefSource(self._open_ref(ref), ref, self.ref_stats)

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


class RowKeeper(SchemaAt):
    """Decodes merged binlogs into :class:`Txn` lists (the MySQL sink's keeper)."""

    def __init__(self, settings: TaskSettings, meta, schema_version: int = 0, **kw):
        super().__init__(settings, meta, schema_version, **kw)
        self._planner: BatchPlanner | None = None  # exactly-once routing and flush points
        self._loopback = LoopbackFilter.from_settings(settings)  # None: keeps everything
        # large transactions in chunks (translate_routed): the items not translated yet
        # and the transaction being handed out
        self._queue: deque = deque()
        self._chunked: _Chunked | None = None
        self._chunks: _Chunks | None = None  # the same for translate_more

    def reset(self, schema_version: int) -> int:
        """:meth:`SchemaAt.reset`; the routing window starts empty (the sink was reset),
        and a large transaction half handed out is dropped (the replay brings it again)."""
        version = super().reset(schema_version)
        self._planner = None
        self._queue.clear()
        self._chunked = None
        self._chunks = None
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
        return max(self.settings.txn_chunk_rows, 0)

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
        if not self._placed:
            raise PipelineReset("the schema keeper restarted: its schema must be rebuilt at "
                                "the checkpoint before it translates")
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
            commit_ts, payload = queue.popleft()
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts, extra=txn_fields(commit_ts))
                out.append((commit_ts, None, 0))
                continue
            if is_ref(payload):  # read in ranges from the pump, chunk by chunk
                payload = self.open_payload(payload)
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
        applied. Items arriving meanwhile wait in this keeper's queue, undecoded."""
        max_rows = self.chunk_rows()
        if not max_rows:
            return self.translate(items), False
        if not self._placed:
            raise PipelineReset("the schema keeper restarted: its schema must be rebuilt at "
                                "the checkpoint before it translates")
        queue = self._queue
        queue.extend(keeper_items(items))  # a large payload: a view, not a copy
        out: list = []
        if self._chunks is not None:
            self._next_unrouted_chunk(out)
        translator = self.translator
        while self._chunks is None and queue:
            commit_ts, payload = queue.popleft()
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts, extra=txn_fields(commit_ts))
                out.append((commit_ts, None, 0))
                continue
            if is_ref(payload):  # read in ranges from the pump, chunk by chunk
                payload = self.open_payload(payload)
            txn, chunks = self._open(commit_ts, payload, max_rows)
            del payload  # a chunked one's payload is held by its chunks only
            if chunks is not None:
                self._chunks = _Chunks(commit_ts, chunks)
                self._next_unrouted_chunk(out)
                if self._chunks is not None:
                    s = self.settings
                    how = ("in one downstream transaction" if s.exactly_once or s.txn_atomic
                           else "each committed on its own: exactly-once and txn-atomic "
                                "are off")
                    log.info("transaction at commit_ts %s has more than %d row changes: "
                             "applying it in chunks, %s", commit_ts, max_rows, how,
                             extra=txn_fields(commit_ts))
                continue
            out.append((commit_ts, self._filter(txn), translator.keeper.schema_version))
        return out, self._chunks is not None or bool(queue)

    def _next_unrouted_chunk(self, out: list) -> None:
        """The large transaction's next chunk into ``out`` (see :meth:`translate_more`)."""
        c = self._chunks
        dmls, last = next(c.chunks)
        txn = self._filter(Txn.of_dmls(c.commit_ts, dmls))
        del dmls
        version = self.translator.keeper.schema_version
        if last:
            self._chunks = None
            out.append((c.commit_ts, txn, version))
        elif txn is not None and txn.dmls:
            c.chunk += 1
            out.append((c.commit_ts, txn, version, c.chunk))

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


class PbKeeper(SchemaAt):
    """Translates merged binlogs into pb records (the file sink's keeper).

    **Large transactions** (more than ``[syncer] txn-chunk-rows`` row changes):
    :meth:`translate_more` hands such a transaction out one part per call
    (:meth:`PbTranslator.chunks <tidb_binlog.drainer.translate.pb.PbTranslator.chunks>`,
    the binlog read in place), each ``(commit_ts, RecordPart, schema_version)``, and
    answers ``more`` so the merger calls again; the file sink spills the parts and
    appends the record at the last one. Neither holds the decoded rows nor the record
    whole. Items arriving meanwhile wait here, undecoded. A binlog served by reference
    (``[syncer] large-binlog-bytes``) is read from its pump the same way, through a
    window, each event's row read by range: this keeper never holds its payload."""

    _pb: PbTranslator | None = None
    _pb_queue: deque | None = None
    # the transaction being handed out: [commit_ts, its parts, parts handed out]
    _pb_chunked: list | None = None

    def reset(self, schema_version: int) -> int:
        """:meth:`SchemaAt.reset`; a transaction half handed out is dropped with the items
        queued behind it (the sink was reset too: the replay brings them again)."""
        version = super().reset(schema_version)
        self._pb_queue = deque()
        self._pb_chunked = None
        return version

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

    def translate_more(self, items) -> tuple[list, bool]:
        """:meth:`translate` with large transactions in parts (class doc): ``(out,
        more)``; a part is ``(commit_ts, RecordPart, schema_version)``."""
        max_rows = max(self.settings.txn_chunk_rows, 0)
        if not max_rows:
            return self.translate(items), False
        if not self._placed:
            raise PipelineReset("the pb keeper restarted: its schema must be rebuilt at the "
                                "checkpoint before it translates")
        queue = self._pb_queue
        queue.extend(keeper_items(items))  # a large payload: a view, not a copy
        out: list = []
        if self._pb_chunked is not None:
            self._next_part(out)
        pb = self._pb_translator()
        while self._pb_chunked is None and queue:
            commit_ts, payload = queue.popleft()
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts, extra=txn_fields(commit_ts))
                out.append((commit_ts, None, 0))
                continue
            if is_ref(payload):  # read in ranges from the pump, part by part
                payload = self.open_payload(payload)
            parts = pb.chunks(payload, max_rows, REF_WINDOW_BYTES)
            if parts is None:
                record = pb.translate(bl.decode(whole_payload(payload)))
                out.append((commit_ts, record, self.translator.keeper.schema_version))
                continue
            del payload  # held by its parts only
            self._pb_chunked = [commit_ts, parts, 0]
            self._next_part(out)
            if self._pb_chunked is not None:
                log.info("transaction at commit_ts %s has more than %d row changes: writing "
                         "its record in parts", commit_ts, max_rows,
                         extra=txn_fields(commit_ts))
        return out, self._pb_chunked is not None or bool(queue)

    def _next_part(self, out: list) -> None:
        """The large transaction's next part into ``out``: nothing for an empty one but
        the last; a last one with no part before it is the whole record (or None)."""
        c = self._pb_chunked
        commit_ts, parts, handed = c
        events, last = next(parts)
        version = self.translator.keeper.schema_version
        if not last:
            if events:
                c[2] = handed + 1
                out.append((commit_ts, RecordPart(events, handed + 1, False), version))
            return
        self._pb_chunked = None
        if handed:
            out.append((commit_ts, RecordPart(events, handed + 1, True), version))
        else:
            out.append((commit_ts, record_head(commit_ts, len(events)) + events
                        if events else None, version))

    def _pb_translator(self) -> PbTranslator:
        if self._pb is None or self._pb.translator is not self.translator:
            self._pb = PbTranslator(self.translator, ignore_schemas=self.settings.ignore_schemas,
                                    tz=self.settings.tzinfo())
        return self._pb
