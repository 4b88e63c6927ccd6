"""One SQL worker's executor: batches of transaction parts → downstream transactions.

A **batch** is the list of *parts* one worker received: for each upstream
transaction, the rows routed to this worker (or one DDL), in strictly ascending
commit_ts.  A part is a :class:`~tidb_binlog.drainer.apply.dml.Txn`, a dispatcher part
``(commit_ts, dmls)`` or a :class:`~tidb_binlog.drainer.apply.dml.DDL` (:func:`as_part`).
:meth:`Loader.execute_batch` applies the whole batch and returns an :class:`Ack`,
or raises; nothing is applied twice and nothing is left half-done on success.
Planning and rendering are pure and live in :mod:`tidb_binlog.drainer.sinks.mysql.plan`.

**Downstream transactions** (:func:`plan_units`).  Consecutive DML parts share one
downstream transaction while it holds at most ``txn_batch`` row changes.  A part
is never split when exactly-once or txn-atomic is on (a part bigger than ``txn_batch`` gets a
transaction of its own); otherwise it is cut into ``txn_batch`` pieces, as TiDB
Binlog does.  A DDL part runs alone: ``USE db`` (unless CREATE DATABASE) and the
query (:func:`~tidb_binlog.drainer.apply.sql.ddl_statements`).

**Statements** (:func:`render_unit`).  With ``merge`` on, each table that has a
primary key is applied with merge-by-key bulk statements
(:func:`~tidb_binlog.drainer.apply.merge_by_key.merge_statements`: batched DELETE, multi
row REPLACE, at most ``rows_per_statement`` rows each); other tables, and every
table with ``merge`` off, get one statement per row change
(:func:`~tidb_binlog.drainer.apply.sql.dml_statements`, REPLACE-based in safe mode),
where a run of consecutive single-row INSERTs (or REPLACEs) of the same table and
columns is sent as one multi-row statement of at most ``rows_per_statement`` rows
(the same effect, row by row in order).  A downstream transaction (its statements,
the progress upsert and ``COMMIT``) is one round trip
(:meth:`~tidb_binlog.drainer.sinks.mysql.downstream.Downstream.execute_script`); a DDL's
progress upsert and ``COMMIT`` are one more after the DDL.

**Exactly-once** (:mod:`tidb_binlog.drainer.sinks.mysql.progress`): each DML transaction also
upserts this worker's progress row; parts at or below the progress are skipped,
both after a restart and after an ambiguous failure (the connection lost during
COMMIT: the progress row is re-read before the retry).

**Loop control** (``loopback-control``, :mod:`tidb_binlog.drainer.loopback`): the
worker creates the mark table and writes its own mark row once (when it starts,
:meth:`Loader.reload_marks`, else before its first batch), and every DML transaction also updates that row (after its statements,
before the progress upsert), so the downstream cluster's binlog of the transaction
carries this channel's mark.

**Epochs** (the drainer's SQL workers, :class:`~tidb_binlog.drainer.pipeline.gate.EpochFence`):
:meth:`Loader.begin_epoch` is the coordinator's reset reaching this worker, and a batch
given with the ``epoch`` it was sent in runs only in that epoch, so a restarted worker,
or a call from before a reset, is refused before it touches the downstream.

**Failures.**  A :class:`~tidb_binlog.errors.TransientDownstreamError` rolls back,
waits (exponential backoff, :class:`~tidb_binlog.drainer.sinks.mysql.downstream.RetryPolicy`),
reconnects and retries the transaction; once ``max_elapsed_s`` pass without
success the last error is raised.  A permanent
:class:`~tidb_binlog.errors.DownstreamError` rolls back and is raised naming the
statement, the upstream commit_ts and the way out (fix the downstream, or skip
the transaction with ``ignore-txn-commit-ts``).  A DDL failing with one of TiDB's
ignorable codes (:data:`IGNORABLE_DDL_CODES`: database/table/column/index already
exists or does not exist, cannot drop key, duplicate key name) is logged and
counted as applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tidb_binlog.drainer.apply.dml import DMLType
from tidb_binlog.drainer.apply.merge_by_key import DEFAULT_BATCH_SIZE
from tidb_binlog.drainer.apply.sql import Statement, ddl_statements
from tidb_binlog.drainer.checkpoint.checkpoint import CHECKPOINT_SCHEMA
from tidb_binlog.drainer.loopback import (
    mark_create_statements,
    mark_init_statement,
    mark_update_statement,
)
from tidb_binlog.drainer.pipeline.gate import EpochFence, PipelineReset
from tidb_binlog.drainer.sinks.mysql.downstream import (
    Downstream,
    RetryPolicy,
    backoff_delays,
    shorten_sql,
)
from tidb_binlog.drainer.sinks.mysql.metrics import NullMetrics
from tidb_binlog.drainer.sinks.mysql.plan import (
    Part,
    Unit,
    as_part,
    check_batch,
    plan_units,
    render_unit,
)
from tidb_binlog.drainer.sinks.mysql.progress import (
    PROGRESS_TABLE,
    SAFE_MODE_WINDOW_S,
    ReplayGuard,
    progress_create_statements,
    progress_load_statement,
    progress_upsert_statement,
)
from tidb_binlog.errors import DownstreamError, InvalidArgument, TransientDownstreamError
from tidb_binlog.logs import txn

__all__ = [
    "LoaderConfig",
    "Loader",
    "Ack",
    "Part",
    "Unit",
    "plan_units",
    "as_part",
    "render_unit",
    "IGNORABLE_DDL_CODES",
]

log = logging.getLogger(__name__)

IGNORABLE_DDL_CODES = frozenset({
    1007,  # database exists
    1008,  # can't drop database; it doesn't exist
    1049,  # unknown database
    1050,  # table exists
    1051,  # unknown table (drop)
    1054,  # unknown column
    1060,  # duplicate column name
    1061,  # duplicate key name
    1091,  # can't drop field or key; check that it exists
    1146,  # table doesn't exist
})
"""TiDB Binlog's IgnoreDDLError list: the DDL's effect is already there (replay)."""

_EVENT_KINDS = {DMLType.INSERT: "Insert", DMLType.UPDATE: "Update", DMLType.DELETE: "Delete"}


@dataclass(frozen=True)
class LoaderConfig:
    """How one worker applies its batches (``[syncer]`` and ``[syncer.to]`` options)."""

    worker: int = 0
    cluster_id: int = 1
    txn_batch: int = 20
    merge: bool = True
    safe_mode: bool = False
    exactly_once: bool = True
    txn_atomic: bool = False  # never split a part (one upstream txn) over downstream txns
    rows_per_statement: int = DEFAULT_BATCH_SIZE
    progress_schema: str = CHECKPOINT_SCHEMA
    progress_table: str = PROGRESS_TABLE
    safe_mode_window_s: float = SAFE_MODE_WINDOW_S
    # rows at or below this commit_ts run in safe mode (0: none): the replay window of a
    # worker-count change after a crash (checkpoint_store.decide_worker_layout)
    safe_mode_until_ts: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # [syncer] loopback-control / channel-id: every DML transaction carries the mark
    loopback_control: bool = False
    channel_id: int = 0

    def __post_init__(self) -> None:
        if self.txn_batch < 1 or self.rows_per_statement < 1:
            raise InvalidArgument(f"txn_batch ({self.txn_batch}) and rows_per_statement "
                                  f"({self.rows_per_statement}) must be >= 1")

    @classmethod
    def from_settings(cls, settings, worker: int, **overrides) -> LoaderConfig:
        """Worker ``worker``'s part of a task's
        :class:`~tidb_binlog.drainer.pipeline.settings.TaskSettings`: the one place the
        config is derived, so the workers always agree with the coordinator and keeper."""
        values = dict(worker=worker, cluster_id=settings.cluster_id,
                      txn_batch=settings.txn_batch, merge=settings.merge,
                      safe_mode=settings.safe_mode, exactly_once=settings.exactly_once,
                      txn_atomic=settings.txn_atomic,
                      progress_schema=settings.checkpoint_schema or CHECKPOINT_SCHEMA,
                      loopback_control=settings.loopback_control,
                      channel_id=settings.channel_id)
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class Ack:
    """What :meth:`Loader.execute_batch` did: every part of the batch is done."""

    worker: int
    max_commit_ts: int
    commit_ts: tuple[int, ...]
    parts: int
    skipped: int
    rows: int
    seconds: float
    finished_at_s: float = 0.0  # wall clock (time.time()) when the batch was done: lag


def _ts_text(lo: int, hi: int) -> tuple[str, str]:
    """("commit_ts X" or "commit_ts X..Y", the ignore-txn-commit-ts list to suggest)."""
    if lo == hi:
        return f"commit_ts {lo}", f"[{lo}]"
    return f"commit_ts {lo}..{hi}", f"[<the failing ts among {lo}..{hi}>]"


class Loader:
    """Applies batches for one worker over one :class:`Downstream` connection."""

    def __init__(self, downstream: Downstream, config: LoaderConfig, *, metrics=None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.downstream = downstream
        self.config = config
        self.metrics = metrics if metrics is not None else NullMetrics()
        self._clock = clock
        self._sleep = sleep
        self.guard = ReplayGuard(exactly_once=config.exactly_once, safe_mode=config.safe_mode,
                                 started_at_s=clock(),
                                 safe_mode_window_s=config.safe_mode_window_s,
                                 safe_mode_until_ts=config.safe_mode_until_ts)
        self._progress_stale = config.exactly_once
        self._retrying = False  # the next transaction retries one that failed transiently
        # commit_ts of a large transaction whose chunks ran without COMMIT (0: none open)
        self._open_ts = 0
        self._open_chunk = 0  # the number of its last chunk run
        # commit_ts of a large transaction whose chunks arrived out of order here (0: none):
        # every part of it is refused until its chunk 1 comes again (the replay)
        self._broken_ts = 0
        self._marks_ready = not config.loopback_control  # mark table and row written
        self.fence = EpochFence(f"worker {config.worker}")
        self.retries = 0

    # -- progress ---------------------------------------------------------

    def load_progress(self) -> int:
        """Create the progress table if needed and read this worker's row (0 if none)."""
        c = self.config
        if not c.exactly_once:
            return self.guard.applied_ts
        ds = self.downstream
        for stmt in progress_create_statements(c.progress_schema, c.progress_table):
            ds.execute(stmt)
        rows = ds.query(progress_load_statement(c.cluster_id, c.worker, c.progress_schema,
                                                c.progress_table))
        ds.commit()  # end the read snapshot
        self.guard.loaded(int(rows[0][0]) if rows else 0)
        self._progress_stale = False
        return self.guard.applied_ts

    def reload_progress(self) -> int:
        """:meth:`load_progress`, retried on transient errors like any downstream call."""
        return self._with_retry(self.load_progress, "reading worker progress", reload=False)

    def prepare_marks(self) -> None:
        """loopback-control: create the mark table if missing and (re)write this worker's
        row of the channel, so the UPDATE every transaction carries finds it."""
        c = self.config
        ds = self.downstream
        for stmt in mark_create_statements():
            ds.execute(stmt)
        ds.execute_script([mark_init_statement(c.worker, c.channel_id)], commit=True)
        self._marks_ready = True

    def reload_marks(self) -> None:
        """:meth:`prepare_marks`, retried on transient errors like any downstream call: the
        worker's start step with loopback-control, so the mark table exists downstream
        from the start, before any transaction."""
        self._with_retry(self.prepare_marks, "writing the loopback mark row", reload=False)

    @property
    def applied_ts(self) -> int:
        return self.guard.applied_ts

    def set_safe_mode(self, on: bool) -> None:
        self.guard.set_safe_mode(on)

    def begin_epoch(self, epoch: int) -> int:
        """The pipeline was reset and runs in ``epoch`` from now on: only batches sent in
        it run here. Chunks of a large transaction held open are rolled back now (it never
        committed, so the replay brings it again from chunk 1) rather than when that
        chunk 1 comes: their row locks would hold up a replay that routes elsewhere.
        This worker's applied commit_ts."""
        if self._open_ts:
            log.warning("worker %d: the pipeline was reset; rolling back the open chunks "
                        "1..%d of the transaction at commit_ts %d (the replay brings it "
                        "again)", self.config.worker, self._open_chunk, self._open_ts)
            self.downstream.rollback()
            self._open_ts = self._open_chunk = 0
        self.fence.open(epoch)
        return self.guard.applied_ts

    # -- batches ----------------------------------------------------------

    def execute_batch(self, batch: Sequence, epoch: int | None = None) -> Ack:
        """Apply every part (see the module docstring); an Ack, or a DownstreamError.
        ``epoch``: the pipeline epoch the batch was sent in (a drainer's SQL worker: a
        PipelineReset unless it is the one :meth:`begin_epoch` started); None for a
        caller without a pipeline (reparo, benchmarks)."""
        if epoch is not None:
            try:
                self.fence.check(epoch)
            except PipelineReset as exc:
                log.warning("%s", exc)
                raise
        c = self.config
        start_s = time.perf_counter()
        parts = [as_part(item) for item in batch]
        check_batch(parts, c.worker)
        if self._open_ts and parts and not self._continues(parts[0]):
            # the pipeline was reset while this worker held chunks of a large transaction
            # open: the replay brings them again from chunk 1, so drop the open ones
            log.warning("worker %d: rolling back the open chunks 1..%d of the transaction at "
                        "commit_ts %d (the pipeline replays it)", c.worker, self._open_chunk,
                        self._open_ts)
            self.downstream.rollback()
            self._open_ts = self._open_chunk = 0
        if self._progress_stale:
            self._with_retry(self.load_progress, "reading worker progress", reload=False)
        if not self._marks_ready:
            self._with_retry(self.prepare_marks, "writing the loopback mark row", reload=False)
        skipped = 0
        if c.exactly_once:  # parts ascend: the skipped ones are a prefix
            applied = self.guard.applied_ts
            while skipped < len(parts) and parts[skipped].commit_ts <= applied:
                skipped += 1
        if skipped < len(parts):
            self._check_chunk_order(parts[skipped])
        rows = 0
        split = not (c.exactly_once or c.txn_atomic)
        for unit in plan_units(parts, c.txn_batch, split_parts=split):
            if unit.ddl is not None:
                self._with_retry(lambda u=unit: self._apply_ddl(u.ddl), "applying a DDL")
            else:
                rows += self._with_retry(lambda u=unit: self._apply_rows(u), "applying rows")
        if self._open_ts and any(not p.partial and p.commit_ts == self._open_ts
                                 for p in parts[skipped:]):
            # the last chunk of the open transaction had no rows left (filtered):
            # commit the rows of its earlier chunks with the progress row
            self._with_retry(lambda: self._run_transaction([], self._open_ts),
                             "committing a large transaction")
        seconds = time.perf_counter() - start_s
        self.metrics.observe_execute(seconds)
        max_ts = next((p.commit_ts for p in reversed(parts) if not p.partial), 0)
        self.guard.committed(max_ts)
        return Ack(c.worker, max_ts, tuple(p.commit_ts for p in parts), len(parts), skipped,
                   rows, seconds, time.time())

    def _with_retry(self, fn, what: str, *, reload: bool = True):
        policy = self.config.retry
        delays = backoff_delays(policy)
        first_failure_s = None
        while True:
            try:
                if reload and self._progress_stale:
                    self.load_progress()
                return fn()
            except TransientDownstreamError as exc:
                self.downstream.rollback()
                self.metrics.count_error("transient")
                if self._open_ts:
                    # the rollback took the earlier chunks of a large transaction with
                    # it: only a replay from the checkpoint brings them back
                    open_ts, self._open_ts = self._open_ts, 0
                    self._progress_stale = self.config.exactly_once
                    raise PipelineReset(
                        f"worker {self.config.worker}: {what} failed ({exc.message}) while "
                        f"the transaction at commit_ts {open_ts} was applied in chunks; "
                        "its uncommitted chunks were rolled back and the pipeline replays "
                        "it from the checkpoint") from exc
                now = self._clock()
                if first_failure_s is None:
                    first_failure_s = now
                if now - first_failure_s >= policy.max_elapsed_s:
                    raise TransientDownstreamError(
                        f"worker {self.config.worker}: gave up {what} after retrying for "
                        f"{now - first_failure_s:.1f} s (retry.max_elapsed_s = "
                        f"{policy.max_elapsed_s}); last error: {exc.message}; check that the "
                        f"downstream {self.downstream.config.address} is up and restart",
                        sql=exc.sql, code=exc.code) from exc
                delay = next(delays)
                log.warning("worker %d: %s failed (%s); retrying in %.2f s",
                            self.config.worker, what, exc.message, delay)
                self.retries += 1
                self._progress_stale = self.config.exactly_once
                self._retrying = True
                self._sleep(delay)

    def _timed_execute(self, stmt: Statement) -> int:
        t0 = time.perf_counter()
        n = self.downstream.execute(stmt)
        self.metrics.observe_query("exec", time.perf_counter() - t0)
        return n

    def _apply_rows(self, unit: Unit) -> int:
        c = self.config
        rows = unit.rows
        if self.guard.should_skip(rows[0][0]):  # rows ascend: skip the applied prefix
            rows = [(ts, dml) for ts, dml in rows if not self.guard.should_skip(ts)]
        if not rows:
            return 0
        safe = self.guard.safe_mode(self._clock(), retry=self._retrying, first_ts=rows[0][0])
        statements = render_unit(rows, merge=c.merge, safe_mode=safe,
                                 rows_per_statement=c.rows_per_statement)
        max_ts = rows[-1][0]
        try:
            if unit.partial:  # a chunk of a large transaction: COMMIT comes with its last
                self._execute_open(statements, max_ts, unit.partial)
            else:
                self._run_transaction(statements, max_ts)
        except TransientDownstreamError:
            raise
        except DownstreamError as exc:
            failed = self._failed_statement(exc, statements)
            if self._open_ts or unit.partial:  # no row-by-row re-run: earlier chunks
                self.downstream.rollback()     # of the transaction are gone with it
                self._open_ts = 0
                self._fail(exc, *failed)
            if all(lo == hi for _, lo, hi in statements) and not c.merge:
                self._fail(exc, *failed)
            # Bulk statements cover several row changes: run the transaction again one
            # row change per statement, so the error names the exact one (or, if that
            # succeeds, the per-row result stands).
            self.downstream.rollback()
            log.warning("worker %d: a bulk statement failed (%s); re-running the transaction "
                        "row by row to find the failing change", c.worker, exc.message)
            precise = render_unit(rows, merge=False, safe_mode=safe, coalesce=False)
            try:
                self._run_transaction(precise, max_ts)
            except TransientDownstreamError:
                raise
            except DownstreamError as exc2:
                self._fail(exc2, *self._failed_statement(exc2, precise))
        self._retrying = False
        if not unit.partial:
            self.guard.committed(max_ts)
        counts = dict.fromkeys(_EVENT_KINDS, 0)
        for _, dml in rows:
            counts[dml.tp] += 1
        for tp, kind in _EVENT_KINDS.items():
            self.metrics.count_event(kind, counts[tp])
        return len(rows)

    def _run_transaction(self, statements: list[tuple[Statement, int, int]],
                         max_ts: int) -> None:
        """The statements, this worker's progress upsert and COMMIT: one round trip
        (:meth:`Downstream.execute_script`) unless the statements are very large."""
        c = self.config
        script = [stmt for stmt, _, _ in statements]
        if c.loopback_control:  # after the statements: their indexes stay the error's
            script.append(mark_update_statement(c.worker, c.channel_id))
        if c.exactly_once:
            script.append(progress_upsert_statement(
                c.cluster_id, c.worker, max_ts, c.progress_schema, c.progress_table))
        t0 = time.perf_counter()
        self.downstream.execute_script(script, commit=True)
        self.metrics.observe_query("exec", time.perf_counter() - t0)
        self._open_ts = 0

    def _check_chunk_order(self, part) -> None:
        """A chunk of a large transaction runs only right after the chunk before it (chunk
        1 starts one). A chunk ``k > 1`` that does not continue the open transaction here
        means this worker lost chunks ``1..k-1`` (a restart, or a call from before a
        pipeline reset meeting the replay's; the epochs refuse those first, this is the
        second line): running it, or later the transaction's last part, would commit the
        transaction without those rows. So the open chunks are
        rolled back and every part of that transaction is refused, as a pipeline reset,
        until its chunk 1 comes again with the replay."""
        if part.ddl is not None:
            return
        if part.partial == 1:
            self._broken_ts = 0
            return
        if self._broken_ts and part.commit_ts == self._broken_ts:
            raise PipelineReset(
                f"worker {self.config.worker}: a part of the transaction at commit_ts "
                f"{part.commit_ts} arrived after its chunks went out of order here; waiting "
                "for the replay to bring it again from chunk 1")
        if part.partial and not (part.commit_ts == self._open_ts
                                 and part.partial == self._open_chunk + 1):
            open_ts, open_chunk = self._open_ts, self._open_chunk
            if open_ts:
                self.downstream.rollback()
                self._open_ts = self._open_chunk = 0
            self._broken_ts = part.commit_ts
            log.warning("worker %d: chunk %d of the transaction at commit_ts %d arrived "
                        "with %s open; refused (the pipeline replays it from chunk 1)",
                        self.config.worker, part.partial, part.commit_ts,
                        f"chunk {open_chunk} of commit_ts {open_ts}" if open_ts else "none")
            raise PipelineReset(
                f"worker {self.config.worker}: chunk {part.partial} of the transaction at "
                f"commit_ts {part.commit_ts} arrived without chunks 1..{part.partial - 1} "
                f"open here; the pipeline replays it from the checkpoint")

    def _continues(self, part) -> bool:
        """Whether ``part`` is the next chunk (or the last part) of the open transaction."""
        if part.commit_ts != self._open_ts or part.ddl is not None:
            return False
        return not part.partial or part.partial == self._open_chunk + 1

    def _execute_open(self, statements: list[tuple[Statement, int, int]], ts: int,
                      chunk: int) -> None:
        """A partial chunk's statements, without COMMIT: the downstream transaction stays
        open until the transaction's last chunk commits it with the progress row, so a
        crash before then rolls every chunk back (exactly-once holds)."""
        t0 = time.perf_counter()
        self.downstream.execute_script([stmt for stmt, _, _ in statements], commit=False)
        self.metrics.observe_query("exec", time.perf_counter() - t0)
        self._open_ts, self._open_chunk = ts, chunk

    def _failed_statement(self, exc: DownstreamError,
                          statements: list[tuple[Statement, int, int]]
                          ) -> tuple[Statement, int, int]:
        """The ``(statement, lo_ts, hi_ts)`` a permanent error belongs to; an error of
        the progress upsert or the COMMIT is raised as it is."""
        index = getattr(exc, "statement_index", None)
        if index is None or index >= len(statements):
            self.downstream.rollback()
            self.metrics.count_error("permanent")
            raise exc
        return statements[index]

    def _fail(self, exc: DownstreamError, stmt: Statement, lo: int, hi: int):
        self.downstream.rollback()
        self.metrics.count_error("permanent")
        which, skip = _ts_text(lo, hi)
        raise DownstreamError(
            f"worker {self.config.worker}: the downstream refused a statement of the upstream "
            f"txn at {which}: error {exc.code}: {exc.message}; statement: "
            f"{shorten_sql(stmt.sql)}. Fix the downstream (schema, data, permissions) and "
            f"restart the drainer, or skip the txn with ignore-txn-commit-ts = {skip}",
            sql=shorten_sql(stmt.sql), code=exc.code) from exc

    def _apply_ddl(self, part: Part) -> None:
        c = self.config
        ddl = part.ddl
        if self.guard.should_skip(part.commit_ts):
            return
        self.downstream.rollback()  # nothing may be pending before an implicit commit
        for stmt in ddl_statements(ddl):
            try:
                self._timed_execute(stmt)
            except TransientDownstreamError:
                raise
            except DownstreamError as exc:
                if exc.code in IGNORABLE_DDL_CODES:
                    log.warning("worker %d: ignoring DDL error %s at commit_ts %d (%s): %s",
                                c.worker, exc.code, part.commit_ts, shorten_sql(ddl.sql),
                                exc.message, extra=txn(part.commit_ts))
                    self.metrics.count_error("ddl_ignored")
                    break
                self.downstream.rollback()
                self.metrics.count_error("permanent")
                raise DownstreamError(
                    f"worker {c.worker}: the downstream refused the DDL at commit_ts "
                    f"{part.commit_ts} on `{ddl.database}`.`{ddl.table}`: error {exc.code}: "
                    f"{exc.message}; DDL: {shorten_sql(ddl.sql)}. Apply an equivalent change "
                    f"downstream by hand and skip it with ignore-txn-commit-ts = "
                    f"[{part.commit_ts}], then restart the drainer",
                    sql=shorten_sql(ddl.sql), code=exc.code) from exc
        progress = [progress_upsert_statement(c.cluster_id, c.worker, part.commit_ts,
                                              c.progress_schema, c.progress_table)
                    ] if c.exactly_once else []
        t0 = time.perf_counter()
        self.downstream.execute_script(progress, commit=True)  # one round trip
        self.metrics.observe_query("commit", time.perf_counter() - t0)
        self._retrying = False
        self.guard.committed(part.commit_ts)
        self.metrics.count_event("DDL")
        log.info("worker %d: DDL applied at commit_ts %d: %s", c.worker, part.commit_ts,
                 shorten_sql(ddl.sql), extra=txn(part.commit_ts))

    def close(self) -> None:
        self.downstream.close()
