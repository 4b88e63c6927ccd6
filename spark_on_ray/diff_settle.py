"""Comparing at a running drainer's checkpoint: the chunks that differ are re-checked until
only persistent differences remain.

While replication runs, the downstream lags the upstream, so a plain chunk compare reports
every chunk written in the last seconds. TiDB Binlog's answer is to compare *at the
drainer's checkpoint*: the downstream as of its checkpoint ts and the upstream at that same
ts. Neither side can be read exactly so here:

- the upstream MariaDB behind the emulator has no time travel (no ``tidb_snapshot``);
- the downstream is never exactly "as of" its checkpoint: the checkpoint is the ts at or
  below which *everything* is committed, and the SQL workers commit further transactions
  above it before the next save (exactly-once's per-worker progress rows do not make a
  single cut either: each worker is at its own ts).

What *can* be read exactly is the upstream at a ts T (:class:`UpstreamAt`): on the
emulator by freezing commits for an instant (the initial load's lock, see
:mod:`spark_on_ray.load_task`) and opening a consistent snapshot whose
``MAX(commit_ts)`` is then T; on TiDB by a transaction whose snapshot ts
(``@@tidb_current_ts``) is T. And "the downstream holds everything up to T" is exactly
"the checkpoint is >= T". So one round for the chunks that differed is:

1. read their upstream checksums at a ts T;
2. wait until the drainer's checkpoint (:func:`read_checkpoint`) is >= T;
3. read their downstream checksums;
4. read their upstream checksums again, at T2 > T.

:func:`spark_on_ray.diff_plan.settle_verdict` judges each chunk: downstream == upstream
at T means equal; a downstream that differs while the upstream chunk stayed the same from
T to T2 cannot be replication in flight (everything up to T is in, and nothing after T
touched the chunk): a difference, which must show in two rounds before it counts (writes
that cancel out between T and T2 could still leave a half-applied state once); a chunk
written during the round is tried again. A chunk still being written after
``recheck-rounds`` rounds is reported, with a warning that it never settled: the diff errs
on the side of reporting.

The same rounds hold on a real TiDB upstream (only :class:`UpstreamAt` differs); there,
with a stopped drainer, the first round settles everything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from spark_on_ray import diff_plan as plan
from spark_on_ray.errors import SparkJobError
from spark_on_ray.load_task import FREEZE_SQL, SNAPSHOT_TS_SQL
from spark_on_ray.sql_task import connect, run_query
from tidb_binlog.config.spark import DatabaseConfig
from tidb_binlog.drainer.apply.sql import quote_table
from tidb_binlog.drainer.checkpoint.checkpoint import decode_json
from tidb_binlog.errors import ProtocolError
from tidb_binlog.upstream.catalog import CATALOG_DB

__all__ = ["UpstreamAt", "read_checkpoint", "wait_checkpoint", "settle"]

log = logging.getLogger("spark_on_ray.diff")

_POLL_S = 0.5


class UpstreamAt:
    """Reads of the upstream at one exact ts: the emulator (commits frozen for an instant)
    or TiDB (a transaction's snapshot). A plain MySQL server has no commit ts to compare
    with the drainer's checkpoint, which is a clear error."""

    def __init__(self, db: DatabaseConfig, timeout_s: float):
        self.db, self.timeout_s = db, timeout_s
        self.conn = connect(db, timeout_s)
        (version,), = run_query(self.conn, "SELECT VERSION()")
        if "tidb" in str(version).lower():
            self.flavor = "tidb"
        elif run_query(self.conn, "SELECT 1 FROM information_schema.TABLES WHERE "
                       f"TABLE_SCHEMA = '{CATALOG_DB}' AND TABLE_NAME = 'txn_status'"):
            self.flavor = "emulator"
        else:
            self.conn.close()
            raise SparkJobError(
                f"the upstream {db.where()} is neither TiDB nor the emulator (no "
                f"`{CATALOG_DB}` catalog), so it has no commit ts to compare with the "
                "drainer's checkpoint; unset [diff] checkpoint-table (and stop the writes) "
                "to compare the tables as they are", where=db.where())

    def read(self, sqls: list[str]) -> tuple[int, list[list[tuple]]]:
        """``(ts, answers)``: every query answered from the upstream as of commit ts ``ts``."""
        freeze = None
        with self.conn.cursor() as cur:
            try:
                if self.flavor == "emulator":
                    # Held only while the snapshot opens: every transaction that had begun
                    # writing has committed, none can commit until the rollback below, so
                    # the snapshot holds exactly the transactions with commit_ts <= ts.
                    freeze = connect(self.db, self.timeout_s)
                    with freeze.cursor() as fc:
                        fc.execute("BEGIN")
                        fc.execute(FREEZE_SQL)
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute(SNAPSHOT_TS_SQL if freeze else "SELECT @@tidb_current_ts")
                ts = int(cur.fetchone()[0])
            finally:
                if freeze is not None:
                    freeze.rollback()
                    freeze.close()
            try:
                answers = []
                for sql in sqls:
                    cur.execute(sql)
                    answers.append([tuple(r) for r in cur.fetchall()])
            finally:
                cur.execute("COMMIT")
        return ts, answers

    def close(self) -> None:
        self.conn.close()


def read_checkpoint(conn, table: str, cluster_id: int, where: str) -> int:
    """The drainer's checkpoint commit ts from ``table`` ("schema.table") on the downstream;
    ``cluster_id`` 0 takes the only row there is."""
    schema, name = table.split(".", 1)
    qualified = quote_table(schema, name)
    try:
        rows = run_query(conn, f"SELECT clusterID, checkPoint FROM {qualified}"
                         + (f" WHERE clusterID = {int(cluster_id)}" if cluster_id else ""))
    except Exception as exc:  # the driver's error names the table; ours says what to do
        raise SparkJobError(f"cannot read the drainer's checkpoint {qualified} on the "
                            f"downstream {where}: {exc}; check [diff] checkpoint-table (the "
                            "drainer's [syncer.to.checkpoint] schema.table)",
                            where=where) from exc  # fmt: skip
    if len(rows) != 1:
        found = sorted(int(r[0]) for r in rows)
        what = f"cluster id {cluster_id}" if cluster_id else "a single row"
        raise SparkJobError(f"the drainer's checkpoint {qualified} on the downstream {where} "
                            f"has no {what} (cluster ids there: {found}); set [diff] "
                            "checkpoint-cluster-id to the upstream cluster's id",
                            where=where)  # fmt: skip
    try:
        return decode_json(rows[0][1]).commit_ts
    except ProtocolError as exc:
        raise SparkJobError(f"{exc} (read from the downstream {where})", where=where) from exc


def wait_checkpoint(conn, table: str, cluster_id: int, ts: int, wait_s: float,
                    where: str) -> int:
    """Poll the checkpoint until it is >= ``ts``; a clear error after ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        cp = read_checkpoint(conn, table, cluster_id, where)
        if cp >= ts:
            return cp
        if time.monotonic() >= deadline:
            raise SparkJobError(f"the drainer's checkpoint in {table} on the downstream {where}"
                                f" stayed at {cp}, below the upstream's ts {ts}, for "
                                f"{wait_s:g} s: is the drainer running and replicating? "
                                "(raise [diff] checkpoint-wait for a slow one)",
                                where=where)  # fmt: skip
        time.sleep(_POLL_S)


Sums = dict  # {bucket: (cnt, s1, s2)}, as spark_on_ray.diff.checksum_all gives per side


def settle(up: UpstreamAt, down_conn, cfg, chunks: list[plan.Chunk],
           sums: list[tuple[Sums, Sums]], checksum_sql: Callable[[plan.Chunk], str],
           parse: Callable[[plan.Chunk, list], Sums], report) -> tuple[list, int, int]:
    """Re-check the chunks whose ``sums`` differ (see the module docstring). Returns the new
    per-chunk sums (a settled chunk gets its equal pair), the rounds run and how many
    chunks had no verdict after the last round (reported as they were last read)."""
    d, where = cfg.diff, cfg.downstream.where()
    out = list(sums)
    pending = {i: 0 for i, (u, w) in enumerate(sums) if u != w}  # index -> "different" seen
    rounds = 0
    while pending and rounds < d.recheck_rounds:
        rounds += 1
        report(f"re-check at checkpoint {rounds}", 0, len(pending))
        idx = sorted(pending)
        sqls = [checksum_sql(chunks[i]) for i in idx]
        ts, before = up.read(sqls)
        wait_checkpoint(down_conn, d.checkpoint_table, d.checkpoint_cluster_id, ts,
                        d.checkpoint_wait_s, where)
        downs = [run_query(down_conn, sql) for sql in sqls]
        _, after = up.read(sqls)
        for i, b, w, a in zip(idx, before, downs, after, strict=True):
            ub, dw, ua = parse(chunks[i], b), parse(chunks[i], w), parse(chunks[i], a)
            out[i] = (ub, dw)
            verdict = plan.settle_verdict(ub, dw, ua)
            if verdict == "equal":
                del pending[i]
            elif verdict == "different":
                pending[i] += 1
                if pending[i] >= 2:
                    del pending[i]
        report(f"re-check at checkpoint {rounds}", len(idx) - len(pending), len(idx))
    unsettled = len(pending)
    if unsettled:
        log.warning("%d chunk(s) were still being written after %d re-check rounds; they "
                    "are reported as they were last read", unsettled, rounds)
    return out, rounds, unsettled
