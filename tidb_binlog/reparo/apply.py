"""``dest-type = "mysql"``: decoded transactions → the downstream, through the drainer's apply path.

The pieces are the drainer's own: the causality :class:`~tidb_binlog.drainer.apply.dispatch.
Dispatcher` splits each transaction's rows over ``worker-count`` workers (rows touching
the same key stay in order on one worker; a conflict or a DDL waits for every worker
first), and each worker is a :class:`~tidb_binlog.drainer.sinks.mysql.loader.Loader` on
its own connection, committing ``txn-batch`` row changes per downstream transaction,
with ``safe-mode`` (REPLACE, DELETE + REPLACE) when asked. No exactly-once progress rows
and no checkpoint table are written: reparo leaves nothing in the downstream but the
data (as TiDB's reparo). Workers run in threads: the time is spent waiting on MySQL.

**Large transactions** (:meth:`MysqlApplier.add_chunks`, a record read in place): the
rows come in chunks and each chunk goes to the workers as it comes (the drainer's
:meth:`~tidb_binlog.drainer.apply.dispatch.Dispatcher.add_chunk`: conflicts flushed, nothing
counted for :attr:`applied_ts`; the causality window, which holds every key since the
last flush, is flushed and emptied every :data:`MAX_WINDOW_KEYS` keys, so it does not grow
with the transaction); before the last chunk every earlier one is committed,
and the last is added as a transaction of its own, so :attr:`applied_ts` passes the
transaction only when all of it is committed. Downstream transactions are still of
``txn-batch`` row changes each, as for any transaction: reparo never applied an upstream
transaction atomically (TiDB's neither).

**Table schemas.** A pb record names columns but not keys, so the target table's
:class:`~tidb_binlog.drainer.apply.dml.TableSchema` (writable columns, primary key and
unique keys) is read from the downstream's information_schema (:func:`read_table_schema`,
what TiDB's loader does), cached, and forgotten after every DDL. Values of generated
columns are dropped (the downstream computes them). A table missing downstream, or a
column the downstream table lacks, is a :class:`~tidb_binlog.errors.SchemaError` naming
the table, the commit_ts and what to do.

**Failures** are the loader's (transient errors retried with backoff, a refused
statement raised naming the commit_ts); :attr:`MysqlApplier.applied_ts` is then the
commit_ts below which everything was applied, which the runner reports so a restart can
use ``start-tso``.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from tidb_binlog.drainer.apply.dispatch import Dispatcher, Flush, RunDDL, Send
from tidb_binlog.drainer.apply.dml import DML, PRIMARY, TableSchema, Txn, UniqueKey
from tidb_binlog.drainer.apply.sql import Statement
from tidb_binlog.drainer.checkpoint.checkpoint import Advancer, Checkpoint
from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
from tidb_binlog.drainer.sinks.mysql.plan import Part
from tidb_binlog.errors import DownstreamError, InvalidArgument, SchemaError

__all__ = ["MysqlApplier", "TableShape", "read_table_schema"]

log = logging.getLogger(__name__)

_MAX_IN_FLIGHT_PER_WORKER = 4  # batches queued per worker before the reader waits
# The causality window (every key of the rows since the last flush, ~100 bytes each) is
# flushed and emptied once it holds this many keys while a large transaction's chunks
# go out: else it grows with the transaction (a flush waits for the workers, once per
# ~64k rows).
MAX_WINDOW_KEYS = 1 << 16


@dataclass(frozen=True)
class TableShape:
    """A downstream table as reparo needs it: the schema and its generated columns."""

    schema: TableSchema
    generated: frozenset[str]


def read_table_schema(ds: Downstream, database: str, table: str) -> TableShape | None:
    """The downstream table's writable columns and unique keys (PRIMARY first); None when
    the table does not exist."""
    rows = ds.query(Statement(
        "SELECT COLUMN_NAME, EXTRA, GENERATION_EXPRESSION FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table)))
    if not rows:
        ds.commit()
        return None
    columns, generated = [], set()
    for name, extra, expression in rows:
        extra = (extra or "").upper()
        if expression or "GENERATED" in extra or "VIRTUAL" in extra or "PERSISTENT" in extra \
                or "STORED" in extra:
            generated.add(name)
        else:
            columns.append(name)
    key_rows = ds.query(Statement(
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE "
        "TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
        "ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX", (database, table)))
    ds.commit()  # end the read snapshot
    keys: dict[str, list[str]] = {}
    for index, column in key_rows:
        keys.setdefault(index, []).append(column)
    unique = [UniqueKey(name, tuple(cols), name == PRIMARY) for name, cols in keys.items()
              if all(c in columns for c in cols)]
    return TableShape(TableSchema(database, table, tuple(columns), tuple(unique)),
                      frozenset(generated))


class MysqlApplier:
    """Apply decoded transactions in commit order (see the module doc)."""

    def __init__(self, config: DownstreamConfig, *, worker_count: int = 16, txn_batch: int = 20,
                 safe_mode: bool = False):
        self.config = config
        self.worker_count = worker_count
        self._schema_conn = Downstream(config)
        self._loaders = [
            Loader(Downstream(config), LoaderConfig(
                worker=w, txn_batch=txn_batch, merge=False, safe_mode=safe_mode,
                exactly_once=False, safe_mode_window_s=0.0))
            for w in range(worker_count)]
        self._advancer = Advancer(Checkpoint(0))
        self._dispatcher = Dispatcher(worker_count, self._advancer, batch_dmls=txn_batch,
                                      exactly_once=False)
        self._pools = [ThreadPoolExecutor(1, thread_name_prefix=f"reparo-worker-{w}")
                       for w in range(worker_count)]
        self._in_flight: list[tuple[Send, Future, bool]] = []  # (send, future, counted)
        self._shapes: dict[tuple[str, str], TableShape] = {}
        self.rows = 0
        self.ddls = 0

    # -- set-up ----------------------------------------------------------------------
    def check(self) -> None:
        """Connect once now, so an unreachable or refusing downstream fails before any
        file is read: DownstreamError naming the address, the user and the server's
        answer (never the password)."""
        try:
            self._schema_conn.connection()
        except DownstreamError as exc:
            raise DownstreamError(
                f"cannot restore into the dest-db {self.config.address} as user "
                f"{self.config.user!r}: {exc.message.removesuffix('; will retry')}. Check "
                "[dest-db] host, port, user and password in reparo.toml, and that the "
                "server is up", code=exc.code) from exc

    @property
    def applied_ts(self) -> int:
        """Every transaction at or below this commit_ts is committed downstream."""
        return self._advancer.commit_ts

    # -- input -----------------------------------------------------------------------
    def add(self, txn: Txn) -> None:
        """Apply one transaction after the ones added before it (asynchronously: a
        failure surfaces on a later call or on :meth:`finish`)."""
        if txn.ddl is None:
            txn = Txn.of_dmls(txn.commit_ts, tuple(self._with_schema(d, txn.commit_ts)
                                                   for d in txn.dmls))
        for action in self._dispatcher.add(txn.commit_ts, txn):
            self._run(action)
        self._reap(block=len(self._in_flight) >= _MAX_IN_FLIGHT_PER_WORKER * self.worker_count)

    def add_chunks(self, commit_ts: int, chunks) -> int:
        """Apply one transaction given as an iterable of DML tuples (module doc: "Large
        transactions"), reading one chunk ahead; the rows added (0: nothing was, the
        chunks were empty)."""
        it = (c for c in chunks if c)
        cur = next(it, None)
        if cur is None:
            return 0
        nxt = next(it, None)
        rows = len(cur)
        if nxt is not None:
            for action in self._dispatcher.drain():  # no Send mixes counted parts with chunks
                self._run(action)
            while nxt is not None:
                dmls = tuple(self._with_schema(d, commit_ts) for d in cur)
                for action in self._dispatcher.add_chunk(commit_ts, dmls):
                    self._run(action, counted=False)
                if self._dispatcher.window_keys >= MAX_WINDOW_KEYS:
                    for action in self._dispatcher.end_chunks():  # a flush; the window empties
                        self._run(action, counted=False)
                self._reap(block=len(self._in_flight)
                           >= _MAX_IN_FLIGHT_PER_WORKER * self.worker_count)
                cur, nxt = nxt, next(it, None)
                rows += len(cur)
            for action in self._dispatcher.end_chunks():
                self._run(action, counted=False)
        self.add(Txn.of_dmls(commit_ts, cur))
        return rows

    def finish(self) -> None:
        """Send what is pending and wait until everything is committed."""
        for send in self._dispatcher.drain():
            self._run(send)
        self._wait_all()

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
        for loader in self._loaders:
            loader.close()
        self._schema_conn.close()

    # -- internals -------------------------------------------------------------------
    def _run(self, action, *, counted: bool = True) -> None:
        """Carry out one dispatcher action; a Send of a chunk (``counted`` False) is not
        acked to the dispatcher (nothing was registered for it)."""
        if isinstance(action, Send):
            loader = self._loaders[action.worker]
            parts = [Part(ts, dmls, None) for ts, dmls in action.parts]
            future = self._pools[action.worker].submit(loader.execute_batch, parts)
            self._in_flight.append((action, future, counted))
            self.rows += action.dml_count
        elif isinstance(action, Flush):
            self._wait_all()
        elif isinstance(action, RunDDL):
            self._wait_all()
            ddl = action.ddl
            self._loaders[0].execute_batch([Part(ddl.commit_ts, (), ddl)])
            self._dispatcher.acked_ddl(ddl)
            self._shapes.clear()  # the DDL may have changed any table's columns or keys
            self.ddls += 1
        else:  # pragma: no cover - the dispatcher emits only these
            raise InvalidArgument(f"unknown dispatcher action {action!r}")

    def _reap(self, *, block: bool) -> None:
        """Ack finished batches (raising the first failure); wait for the oldest when
        ``block`` (back-pressure: the files are read no faster than MySQL applies)."""
        if block and self._in_flight:
            self._in_flight[0][1].result()
        while self._in_flight and self._in_flight[0][1].done():
            self._ack(*self._in_flight.pop(0))

    def _wait_all(self) -> None:
        while self._in_flight:
            self._ack(*self._in_flight.pop(0))

    def _ack(self, send: Send, future: Future, counted: bool) -> None:
        future.result()
        if counted:
            self._dispatcher.acked(send)

    def _shape(self, database: str, table: str, commit_ts: int) -> TableShape:
        key = (database.lower(), table.lower())
        shape = self._shapes.get(key)
        if shape is None:
            self._wait_all()  # a pending DDL batch may be creating the table right now
            shape = read_table_schema(self._schema_conn, database, table)
            if shape is None:
                raise SchemaError(
                    f"table `{database}`.`{table}` (rows at commit_ts {commit_ts}) does not "
                    f"exist in the downstream {self.config.address}. The files hold only the "
                    "DDLs made after the drainer started: create the table downstream first "
                    "(restore the snapshot the files start from), or leave it out with "
                    "replicate-ignore-table / replicate-ignore-db")
            self._shapes[key] = shape
        return shape

    def _with_schema(self, dml: DML, commit_ts: int) -> DML:
        shape = self._shape(dml.database, dml.table, commit_ts)
        values, old = dml.values, dml.old_values
        if shape.generated:
            values = {k: v for k, v in values.items() if k not in shape.generated}
            if old is not None:
                old = {k: v for k, v in old.items() if k not in shape.generated}
        try:
            return DML(dml.database, dml.table, dml.tp, values, old, shape.schema)
        except SchemaError as exc:
            raise SchemaError(f"{exc} (commit_ts {commit_ts}; the downstream table differs "
                              "from the upstream's: apply the missing DDL downstream, or "
                              "leave the table out with replicate-ignore-table)") from exc
