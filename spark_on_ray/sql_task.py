"""SQL run inside Spark tasks: one short pymysql session per task (no Spark import here).

The diff's chunk checksums are pushed down: a task sends one aggregate query to one
server and returns its few rows, so Spark's task slots only schedule the queries in
parallel and nothing but the answers crosses the network. Sessions use UTC
(``time_zone = '+00:00'``) and utf8mb4, so raw TIMESTAMP values read for the fix SQL are
the same whatever the server's default zone.
"""

from __future__ import annotations

import pymysql
from pymysql.converters import conversions

from tidb_binlog.config.spark import DatabaseConfig
from tidb_binlog.security import mysql_ssl

__all__ = ["connect", "run_query", "run_task", "run_tasks"]


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


def run_query(conn, sql: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]


def run_task(task: tuple[DatabaseConfig, str]) -> list[tuple]:
    """``(server, sql)`` → its rows; one connection per task."""
    db, sql = task
    conn = connect(db)
    try:
        return run_query(conn, sql)
    finally:
        conn.close()


def run_tasks(tasks: list[tuple[DatabaseConfig, str]]) -> list[list[tuple]]:
    """Run tasks one after the other, one connection per server, in task order: a Spark
    partition's share of the work, or the whole of it when it is too small to be worth
    Spark's per-task overhead."""
    conns: dict[DatabaseConfig, object] = {}
    try:
        out = []
        for db, sql in tasks:
            if db not in conns:
                conns[db] = connect(db)
            out.append(run_query(conns[db], sql))
        return out
    finally:
        for conn in conns.values():
            conn.close()
