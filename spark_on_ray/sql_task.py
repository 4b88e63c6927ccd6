"""SQL run inside Spark tasks: one short pymysql session per task (no Spark import here).

The diff's chunk checksums are pushed down: a task sends one aggregate query to one
server and returns its few rows, so Spark's task slots only schedule the queries in
parallel and nothing but the answers crosses the network. Sessions use UTC
(``time_zone = '+00:00'``) and utf8mb4, so raw TIMESTAMP values read for the fix SQL are
the same whatever the server's default zone.

A task whose query fails (a server error, a lost connection, a value the driver cannot
decode) does not fail the others: :func:`run_tasks` puts a :class:`QueryFailed` in its
slot, so the diff can name the one table it could not compare and still give every other
table its verdict (a raised error would fail the whole Spark job, after Spark's retries).

This module is the Spark jobs' pymysql boundary, the third beside the upstream
emulator's (``tidb_binlog.upstream.conn.translate``) and the downstream's
(``tidb_binlog.drainer.sinks.mysql.downstream.translate_error``): the jobs open their own
sessions to both sides, on the driver and in executors, and need neither of those
layers. On the driver, :func:`run_query` raises :func:`translate`'s
:class:`~spark_on_ray.errors.SparkJobError` naming the server and the statement (the
diff's ``open_checked`` does so for a connect). In a Spark task a failure is data
(:class:`QueryFailed`), or, for the load's copy tasks (``load_task``), crosses Spark as
the task's failure, which the driver reports as the copy's ``SparkJobError``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql
from pymysql.converters import conversions

from spark_on_ray.errors import SparkJobError
from tidb_binlog.config.spark import DatabaseConfig
from tidb_binlog.mysql_errors import error_code, error_text
from tidb_binlog.security import mysql_ssl

__all__ = ["QueryFailed", "connect", "run_query", "run_task", "run_tasks", "translate"]

# What a task's query may fail with that is about the data or the server, not a bug here:
# the driver's errors, socket errors, and ValueError (UnicodeDecodeError: a text value that
# is not valid UTF-8 to Python, which MariaDB's utf8mb4 lets through, e.g. a surrogate).
_QUERY_ERRORS = (pymysql.err.Error, OSError, ValueError)


@dataclass(frozen=True)
class QueryFailed:
    """A task whose query failed: the server (``user@host:port``) and the error."""

    where: str
    error: str

    def __str__(self) -> str:
        return f"{self.where}: {self.error}"


def connect(db: DatabaseConfig, timeout_s: float = 10.0, database: str | None = None, *,
            raw: bool = False, local_infile: bool = False):
    """A pymysql session in UTC, over TLS when ``db.security`` sets ``ssl-ca``. ``raw``: values come back as the server's text (bytes for
    binary columns) instead of Python types: a copy writes them back as they came, and
    skips the type conversions that dominate pymysql's per-row cost. ``local_infile``: the
    session may send files for ``LOAD DATA LOCAL INFILE`` (the load's fast path)."""
    extra = {"conv": {k: v for k, v in conversions.items() if not isinstance(k, int)}} \
        if raw else {}
    ssl = mysql_ssl(db.security, "upstream/downstream.security")
    if ssl is not None:
        extra["ssl"] = ssl
    conn = pymysql.connect(host=db.host, port=db.port, user=db.user, password=db.password,
                           database=database, charset="utf8mb4", autocommit=True,
                           connect_timeout=max(1, int(timeout_s)), local_infile=local_infile,
                           **extra)  # fmt: skip
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    return conn


def translate(exc: BaseException, where: str, sql: str = "") -> SparkJobError:
    """A failed query of a job (``exc``: pymysql's error, a socket's, a value Python
    cannot decode) on the server ``where`` (``user@host:port``) as the job's error."""
    code = error_code(exc) if isinstance(exc, pymysql.err.MySQLError) else None
    text = error_text(exc) if code is not None else str(exc)
    statement = f" (statement: {sql[:300]!r})" if sql else ""
    return SparkJobError(f"{where}: {type(exc).__name__}"
                         f"{f' {code}' if code is not None else ''}: {text}{statement}",
                         where=where)


def run_query(conn, sql: str) -> list[tuple]:
    """``sql``'s rows, on the driver: a failure is :func:`translate`'s SparkJobError."""
    try:
        return _rows(conn, sql)
    except _QUERY_ERRORS as exc:
        raise translate(exc, _where(conn), sql) from exc


def _rows(conn, sql: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def _where(conn) -> str:
    """``user@host:port`` of a pymysql connection (as ``DatabaseConfig.where()``)."""
    user = conn.user.decode() if isinstance(conn.user, bytes) else conn.user
    return f"{user}@{conn.host}:{conn.port}"


def run_task(task: tuple[DatabaseConfig, str]) -> list[tuple]:
    """``(server, sql)`` → its rows; one connection per task."""
    db, sql = task
    conn = connect(db)
    try:
        return _rows(conn, sql)
    finally:
        conn.close()


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, UnicodeDecodeError):
        text += (" (a text value the server holds as utf8mb4 is not valid UTF-8 to Python, "
                 "e.g. an encoded UTF-16 surrogate: find it with a query on HEX() of the "
                 "column and correct it)")
    return text


def _drop(conn) -> None:
    """Close a connection a failed query left behind (the driver may have closed it)."""
    if conn is None or not conn.open:
        return
    try:
        conn.close()
    except (pymysql.err.Error, OSError):
        pass  # the socket is gone already; the query's own error is what gets reported


def run_tasks(tasks: list[tuple[DatabaseConfig, str]]) -> list[list[tuple] | QueryFailed]:
    """Run tasks one after the other, one connection per server, in task order: a Spark
    partition's share of the work, or the whole of it when it is too small to be worth
    Spark's per-task overhead. A task whose query fails gets a :class:`QueryFailed`
    instead of rows (its connection is dropped: a result read half-way leaves it out of
    step) and the next tasks run on; a server that refuses the connection fails its
    remaining tasks at once."""
    conns: dict[DatabaseConfig, object] = {}
    unreachable: dict[DatabaseConfig, QueryFailed] = {}  # no reconnect per task
    try:
        out: list = []
        for db, sql in tasks:
            if db in unreachable:
                out.append(unreachable[db])
                continue
            if db not in conns:
                try:
                    conns[db] = connect(db)
                except _QUERY_ERRORS as exc:
                    unreachable[db] = QueryFailed(db.where(), _describe(exc))
                    out.append(unreachable[db])
                    continue
            try:
                out.append(_rows(conns[db], sql))
            except _QUERY_ERRORS as exc:
                out.append(QueryFailed(db.where(), _describe(exc)))
                _drop(conns.pop(db))
        return out
    finally:
        for conn in conns.values():
            conn.close()
