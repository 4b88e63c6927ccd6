"""``diff``: the consistency check between the upstream and the downstream, on Spark.

    from spark_on_ray import diff
    result = diff.run(cfg)                 # cfg: tidb_binlog.config.spark.SparkJobConfig
    result.equal, result.tables, result.fix_sql_file

Steps (the SQL comes from :mod:`spark_on_ray.diff_plan`, which says why it is shaped so):

1. Check both servers answer and every table exists on both sides with the same columns
   (names and types); a problem is a :class:`~spark_on_ray.errors.SparkJobError` naming the
   server (``user@host:port``, never the password), the table and what to do, raised
   before Spark starts and before anything is written.
2. Plan chunks on the upstream: key-range boundaries from its key index, or for a table
   without a key a number of hash buckets from its row count.
3. Checksum every chunk on both sides in parallel as Spark tasks, one aggregate query per
   task (``COUNT(*)`` and the sums of the two MD5 halves, computed by the server).
4. Cut mismatching key ranges into ~8 pieces at keys read from the servers, round by
   round (each round checksums all pieces still mismatching in parallel), until a range
   holds at most ``leaf-size`` rows; then read both sides' rows of the leaves and compare them by key
   (keyless tables: the rows of the mismatching buckets, as multisets).
5. Write the fix SQL (every ``DELETE`` first, then ``REPLACE`` / ``INSERT``; binary values
   as hex literals) to ``fix-sql-file``: written to a temporary file and renamed, so it is
   never half-written; running it on the downstream makes the tables equal.

A table whose queries fail from step 2 on (a server error, a lost connection, a value the
driver cannot read; see :class:`~spark_on_ray.sql_task.QueryFailed`) is *not compared*:
its :attr:`TableResult.error` says at which step, on which server and why, it gets no fix
SQL (the file names it in a comment), and every other table keeps its verdict. The run
is not equal then.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql
from pymysql.converters import escape_item

from spark_on_ray import diff_plan as plan
from spark_on_ray.diff_settle import UpstreamAt, settle
from spark_on_ray.errors import SparkJobError
from spark_on_ray.session import start_spark_soon
from spark_on_ray.sql_task import QueryFailed, connect, run_query, run_task, run_tasks
from tidb_binlog.config.spark import DatabaseConfig, SparkJobConfig

__all__ = ["TableResult", "DiffResult", "run", "introspect", "literal", "open_checked"]

log = logging.getLogger("spark_on_ray.diff")

_MAX_DEPTH = 20
_FANOUT = 8
Progress = Callable[[str, int, int], None]  # (stage, done, total)


def literal(value) -> str:
    """A Python value as a SQL literal (pymysql's escaping); bytes (binary strings, BLOBs,
    BIT) as a hex literal ``X'..'``: every byte exactly, whatever the charset or sql_mode."""
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex().upper()}'"
    return escape_item(value, "utf8mb4")


@dataclass
class TableResult:
    """The verdict for one table."""

    name: str
    chunks: int = 0
    upstream_rows: int = 0
    downstream_rows: int = 0
    missing: int = 0
    extra: int = 0
    changed: int = 0
    diffs: list = field(default_factory=list)  # plan.RowDiff
    error: str | None = None  # not compared: at which step, where and why

    @property
    def equal(self) -> bool:
        return not self.diffs and self.error is None


@dataclass
class DiffResult:
    tables: list[TableResult]
    fix_sql_file: str
    fix_statements: int
    seconds: float
    spark_start_s: float = 0.0
    bisect_rounds: int = 0
    recheck_rounds: int = 0  # [diff] checkpoint-table: re-check rounds run
    unsettled: int = 0  # chunks still being written after the last re-check round

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)

    @property
    def not_compared(self) -> list[TableResult]:
        """Tables whose queries failed (each one's ``error`` says why)."""
        return [t for t in self.tables if t.error is not None]


# ------------------------------------------------------------------ step 1

def open_checked(db: DatabaseConfig, side: str, timeout_s: float):
    try:
        return connect(db, timeout_s)
    except pymysql.err.OperationalError as exc:
        raise SparkJobError(f"cannot connect to the {side} {db.where()}: {exc.args[-1]}; check "
                            f"[{side}] host/port/user/password in the config and that the "
                            "server is running", where=db.where()) from exc  # fmt: skip


def _expand(conn, entries: tuple[str, ...], where: str) -> list[tuple[str, str]]:
    out = []
    for entry in entries:
        if "." in entry:
            db, table = entry.split(".", 1)
            out.append((db, table))
            continue
        rows = run_query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE "
                         f"TABLE_SCHEMA = {literal(entry)} AND TABLE_TYPE = 'BASE TABLE' "
                         "ORDER BY TABLE_NAME")  # fmt: skip
        if not rows:
            raise SparkJobError(f"database `{entry}` has no tables on the upstream {where} "
                                "(or does not exist); check [diff] tables", where=where)
        out.extend((entry, r[0]) for r in rows)
    return out


def introspect(conn, database: str, table: str, side: str, where: str) -> plan.TableInfo:
    """Columns (visible ones, in order) and the key: the primary key, else the first unique
    key whose columns are all NOT NULL, else none."""
    cols = run_query(conn, "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME FROM "
                     "information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                     f"{literal(database)} AND TABLE_NAME = {literal(table)} AND EXTRA NOT "
                     "LIKE '%INVISIBLE%' ORDER BY ORDINAL_POSITION")  # fmt: skip
    if not cols:
        raise SparkJobError(f"table `{database}`.`{table}` does not exist on the {side} {where};"
                            " create it (e.g. with `tidb-binlog spark load`) or remove it from "
                            "[diff] tables", where=where)  # fmt: skip
    keys = run_query(conn, "SELECT INDEX_NAME, COLUMN_NAME, NULLABLE FROM "
                     "information_schema.STATISTICS WHERE TABLE_SCHEMA = "
                     f"{literal(database)} AND TABLE_NAME = {literal(table)} AND NON_UNIQUE = 0 "
                     "ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX")  # fmt: skip
    visible = {c[0] for c in cols}
    by_index: dict[str, list] = {}
    for index, column, nullable in keys:
        by_index.setdefault(index, []).append((column, nullable))
    key: tuple[str, ...] = ()
    for parts in by_index.values():
        if all(c in visible and n != "YES" for c, n in parts):
            key = tuple(c for c, _ in parts)
            break
    columns = tuple(plan.Column(n, t.lower(), coll) for n, t, coll in cols)
    return plan.TableInfo(database, table, columns, key)


def _same_columns(up: plan.TableInfo, down: plan.TableInfo, where: str) -> None:
    a = [(c.name, c.data_type) for c in up.columns]
    b = [(c.name, c.data_type) for c in down.columns]
    if sorted(a) != sorted(b):
        only_up = sorted(set(a) - set(b))
        only_down = sorted(set(b) - set(a))
        raise SparkJobError(f"`{up.name}` has different columns on the two sides (upstream "
                            f"only: {only_up}, downstream {where} only: {only_down}); the diff "
                            "compares equal schemas: align them (or drop the table from "
                            "[diff] tables) and rerun", where=where)  # fmt: skip


# ------------------------------------------------------------------ the job

def run(cfg: SparkJobConfig, *, tables: tuple[str, ...] | None = None, handle=None,
        progress: Progress | None = None, ray_address: str | None = None) -> DiffResult:
    """Diff ``tables`` (default ``[diff] tables``); uses ``handle`` (a running
    :class:`~spark_on_ray.session.SparkHandle`) or starts and stops its own Spark."""
    t0 = time.monotonic()
    d = cfg.diff
    fd, dd = d.float_digits, d.double_digits
    entries = tuple(tables) if tables else d.tables
    if not entries:
        raise SparkJobError("no tables to diff: set [diff] tables = [\"db\", \"db.table\"] or "
                            "pass --tables")  # fmt: skip
    report = progress or (lambda stage, done, total: None)
    up_conn = open_checked(cfg.upstream, "upstream", d.timeout_s)
    down_conn = open_checked(cfg.downstream, "downstream", d.timeout_s)
    own = handle is None
    try:
        infos, by_bucket = [], set()
        for db, table in _expand(up_conn, entries, cfg.upstream.where()):
            up = introspect(up_conn, db, table, "upstream", cfg.upstream.where())
            down = introspect(down_conn, db, table, "downstream", cfg.downstream.where())
            _same_columns(up, down, cfg.downstream.where())
            infos.append(up)
            if any(up.column(k).collation != down.column(k).collation for k in up.key):
                by_bucket.add(up.name)
        # Spark starts while the driver scans the keys for chunk boundaries (both take
        # seconds); every check above has passed, so a bad config never starts it.
        pending = start_spark_soon(cfg.spark, ray_address=ray_address) if own else None
        failed: dict[str, str] = {}  # table name -> why it could not be compared
        try:
            chunks = _plan(cfg, infos, d, by_bucket, failed)
        except BaseException:
            if pending is not None:
                pending.discard()
            raise
        if pending is not None:
            handle = pending.handle()
        result = _diff(handle, cfg, infos, chunks, fd, dd, report, failed)
        result.spark_start_s = handle.started_s if own else 0.0
        result.seconds = time.monotonic() - t0
        return result
    finally:
        up_conn.close()
        down_conn.close()
        if own and handle is not None:
            handle.stop()


def _plan(cfg, infos: list[plan.TableInfo], d, by_bucket: set[str],
          failed: dict[str, str]) -> list[plan.Chunk]:
    """Key ranges, or hash buckets for tables without a key and for those whose key
    collations differ between the sides (``by_bucket``: ranges would not hold the same
    rows on both sides). A table whose query fails goes to ``failed``."""
    tasks = [(cfg.upstream, plan.boundaries_sql(info, d.chunk_size)
              if info.key and info.name not in by_bucket
              else f"SELECT COUNT(*) FROM {info.qualified}") for info in infos]
    chunks = []
    for info, answer in zip(infos, run_tasks(tasks), strict=True):
        if isinstance(answer, QueryFailed):
            _fail(failed, info.name, f"reading its chunk boundaries failed on the upstream "
                                     f"{answer}")  # fmt: skip
        elif info.key and info.name not in by_bucket:
            chunks += [plan.Chunk(info, r)
                       for r in plan.chunk_ranges([tuple(b) for b in answer])]
        else:
            (rows,), = answer
            chunks.append(plan.Chunk(info, None, buckets=plan.bucket_count(rows, d.leaf_size)))
    return chunks


def _fail(failed: dict[str, str], table: str, why: str) -> None:
    """Mark ``table`` not compared (the first reason counts); the others go on."""
    if table not in failed:
        failed[table] = (f"{why}; not compared (the other tables' verdicts stand): fix the "
                         f"cause and diff it again with --tables {table}")
        log.error("%s: %s", table, failed[table])


@dataclass(frozen=True)
class Unread:
    """A chunk whose checksum query failed on one side: ``why`` (side, server, error)."""

    why: str


def _failure(answers: list, i: int) -> str | None:
    """Task pair ``i`` (upstream ``2i``, downstream ``2i + 1``): why it failed, or None."""
    for side, answer in (("upstream", answers[2 * i]), ("downstream", answers[2 * i + 1])):
        if isinstance(answer, QueryFailed):
            return f"on the {side} {answer}"
    return None


def _drop_failed(stage: str, chunks: list[plan.Chunk], sums: list,
                 failed: dict[str, str]) -> tuple[list[plan.Chunk], list]:
    """Note the tables of :class:`Unread` chunks in ``failed``; the chunks and sums of the
    tables still being compared."""
    for chunk, pair in zip(chunks, sums, strict=True):
        if isinstance(pair, Unread):
            _fail(failed, chunk.table.name, f"{stage} failed {pair.why}")
    kept = [(c, p) for c, p in zip(chunks, sums, strict=True) if c.table.name not in failed]
    return [c for c, _ in kept], [p for _, p in kept]


def _checksum_tasks(cfg, chunks, fd, dd):
    tasks = []
    for chunk in chunks:
        sql = chunk_checksum_sql(chunk, fd, dd)
        tasks += [(cfg.upstream, sql), (cfg.downstream, sql)]
    return tasks


def checksum_all(runner, cfg, chunks, fd=6, dd=15):
    """Checksums of ``chunks`` on both sides: per chunk ``(up, down)`` where each side is
    ``{bucket: (cnt, s1, s2)}`` (key ranges use bucket 0), or :class:`Unread` when a side's
    query failed. ``runner`` runs a task list (Spark's :meth:`run_sql_tasks`, or a
    sequential loop for the baseline)."""
    answers = runner(_checksum_tasks(cfg, chunks, fd, dd))
    out: list = []
    for i, chunk in enumerate(chunks):
        why = _failure(answers, i)
        out.append(Unread(why) if why else (parse_sums(chunk, answers[2 * i]),
                                            parse_sums(chunk, answers[2 * i + 1])))
    return out


def chunk_checksum_sql(chunk: plan.Chunk, fd: int = 6, dd: int = 15) -> str:
    return (plan.checksum_sql(chunk, literal, fd, dd) if chunk.range is not None
            else plan.bucket_checksum_sql(chunk.table, chunk.buckets, fd, dd))


def parse_sums(chunk: plan.Chunk, rows: list) -> dict:
    """One side's checksum answer as ``{bucket: (cnt, s1, s2)}`` (key ranges: bucket 0)."""
    if chunk.range is not None:
        return {0: (int(rows[0][0]), str(rows[0][1]), str(rows[0][2]))}
    return {int(b): (int(c), str(s1), str(s2)) for b, c, s1, s2 in rows}


def sequential_runner(tasks):
    """Runs tasks one after the other in this process (the baseline of bench/spark.py)."""
    return [run_task(t) for t in tasks]


def _diff(handle, cfg, infos, chunks, fd, dd, report, failed: dict[str, str]) -> DiffResult:
    d = cfg.diff
    results = {info.name: TableResult(info.name) for info in infos}
    report("checksum chunks", 0, len(chunks))
    sums = checksum_all(handle.run_sql_tasks, cfg, chunks, fd, dd)
    report("checksum chunks", len(chunks), len(chunks))
    chunks, sums = _drop_failed("checksumming a chunk", chunks, sums, failed)
    recheck_rounds = unsettled = 0
    if d.checkpoint_table:
        sums, recheck_rounds, unsettled = _at_checkpoint(cfg, chunks, sums, fd, dd, report)
    pending: list[tuple[plan.Chunk, int]] = []  # key ranges to bisect, with their max count
    leaves: list[plan.Chunk] = []
    for chunk, (up, down) in zip(chunks, sums, strict=True):
        res = results[chunk.table.name]
        res.chunks += 1
        res.upstream_rows += sum(v[0] for v in up.values())
        res.downstream_rows += sum(v[0] for v in down.values())
        if chunk.range is None:
            bad = sorted(b for b in up.keys() | down.keys() if up.get(b) != down.get(b))
            if bad:
                leaves.append(plan.Chunk(chunk.table, None, buckets=chunk.buckets,
                                         wanted=tuple(bad)))  # fmt: skip
        elif up != down:
            pending.append((chunk, max(up[0][0], down[0][0])))
    rounds = 0
    while True:
        # A range that does not shrink below leaf-size within _MAX_DEPTH halvings (both
        # sides disagree wildly on its rows) is compared row by row as it is.
        leaves += [c for c, n in pending if n <= d.leaf_size or c.depth >= _MAX_DEPTH]
        big = [(c, n) for c, n in pending if n > d.leaf_size and c.depth < _MAX_DEPTH]
        if not big:
            break
        rounds += 1
        report(f"bisect round {rounds}", 0, len(big))
        halves = _bisect(handle, cfg, big, failed)
        sums = checksum_all(handle.run_sql_tasks, cfg, halves, fd, dd)
        halves, sums = _drop_failed("checksumming a piece of a differing range", halves,
                                    sums, failed)  # fmt: skip
        pending = [(c, max(up[0][0], down[0][0])) for c, (up, down) in zip(halves, sums,
                                                                              strict=True)
                   if up != down]  # fmt: skip
        report(f"bisect round {rounds}", len(big), len(big))
    # a table that failed in a later round may have leaves from an earlier one
    leaves = [c for c in leaves if c.table.name not in failed]
    report("compare rows", 0, len(leaves))
    diffs = _compare_leaves(handle, cfg, leaves, fd, dd, failed)
    report("compare rows", len(leaves), len(leaves))
    for diff in diffs:
        res = results[diff.table.name]
        res.diffs.append(diff)
        setattr(res, diff.kind, getattr(res, diff.kind) + diff.count)
    for name, why in failed.items():
        results[name].error = why
    statements = plan.render_fix_sql(diffs, literal, fd, dd)
    _write_fix_sql(d.fix_sql_file, statements, cfg.downstream, failed)
    return DiffResult(list(results.values()), d.fix_sql_file, len(statements), 0.0,
                      bisect_rounds=rounds, recheck_rounds=recheck_rounds, unsettled=unsettled)


def _at_checkpoint(cfg, chunks, sums, fd, dd, report):
    """``[diff] checkpoint-table``: re-check the differing chunks at the drainer's
    checkpoint (spark_on_ray.diff_settle) so replication in flight is not reported."""
    if all(u == w for u, w in sums):
        return sums, 0, 0
    up = UpstreamAt(cfg.upstream, cfg.diff.timeout_s)
    down = open_checked(cfg.downstream, "downstream", cfg.diff.timeout_s)
    try:
        return settle(up, down, cfg, chunks, sums,
                      lambda c: chunk_checksum_sql(c, fd, dd), parse_sums, report)
    finally:
        up.close()
        down.close()


def _bisect(handle, cfg, big: list[tuple[plan.Chunk, int]],
            failed: dict[str, str]) -> list[plan.Chunk]:
    """Cut each range into ~_FANOUT pieces at keys read from both sides (a key present on
    one side only is a cut point like any other); a table whose keys cannot be read goes
    to ``failed``."""
    tasks = []
    for chunk, n in big:
        sql = plan.split_points_sql(chunk.table, chunk.range, plan.split_step(n, _FANOUT),
                                    literal)  # fmt: skip
        tasks += [(cfg.upstream, sql), (cfg.downstream, sql)]
    answers = handle.run_sql_tasks(tasks)
    out = []
    for i, (chunk, _n) in enumerate(big):
        why = _failure(answers, i)
        if why:
            _fail(failed, chunk.table.name, f"reading the keys of a differing range failed {why}")
        if chunk.table.name in failed:
            continue
        up, down = answers[2 * i], answers[2 * i + 1]
        points = [tuple(r) for r in (up if len(up) >= len(down) else down)]
        parts = plan.split_range(chunk.range, points)
        out += [plan.Chunk(chunk.table, p, depth=chunk.depth + 1) for p in parts]
    return out


def _compare_leaves(handle, cfg, leaves, fd, dd, failed: dict[str, str]) -> list[plan.RowDiff]:
    tasks = []
    for leaf in leaves:
        if leaf.range is not None:
            where = plan.range_predicate(leaf.table.key, leaf.range, literal)
            sql = plan.rows_sql(leaf.table, where, fd, dd)
        else:
            sql = plan.bucket_rows_sql(leaf.table, leaf.buckets, list(leaf.wanted), fd, dd)
        tasks += [(cfg.upstream, sql), (cfg.downstream, sql)]
    answers = handle.run_sql_tasks(tasks)
    # Compare each table's leaves together, not leaf by leaf: when a key column's collation
    # differs between the sides, the same key range holds different rows on each (a row
    # sorting between 'B' and 'a' differs under a _ci and a _bin collation), so a row may
    # sit in one leaf upstream and another downstream; per leaf it would be reported (and
    # "fixed") as missing plus extra.
    by_table: dict[str, tuple[plan.TableInfo, list, list]] = {}
    for i, leaf in enumerate(leaves):
        why = _failure(answers, i)
        if why:
            _fail(failed, leaf.table.name, f"reading the rows of a differing range failed {why}")
            continue
        _, up, down = by_table.setdefault(leaf.table.name, (leaf.table, [], []))
        up += answers[2 * i]
        down += answers[2 * i + 1]
    diffs = []
    for info, up, down in by_table.values():
        if info.name in failed:
            continue
        compare = plan.compare_keyed if info.key else plan.compare_multiset
        diffs += compare(info, up, down)
    return diffs


def _write_fix_sql(path: str, statements: list[str], downstream: DatabaseConfig,
                   failed: dict[str, str]) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    head = (f"-- fix SQL written by `tidb-binlog spark diff` at {stamp}\n"
            f"-- run it on the downstream {downstream.where()}, e.g.\n"
            f"--   mariadb -h {downstream.host} -P {downstream.port} -u {downstream.user} -p "
            f"< {os.path.basename(path)}\n"
            f"-- {len(statements)} statement(s)\n"
            + "".join("-- not compared: " + f"{name}: {why}".replace("\n", " ") + "\n"
                      for name, why in sorted(failed.items()))
            + "SET NAMES utf8mb4;\nSET time_zone = '+00:00';\n")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(head + "".join(s + ";\n" for s in statements))
    os.replace(tmp, path)
