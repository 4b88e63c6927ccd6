"""What a MySQL/MariaDB/TiDB error means, in one place: its code and text, and the codes
that say "the connection is gone", "this transaction lost a lock conflict" or "the same
statements may succeed again".

pymysql's errors cross into the project's tree at one boundary per role, each giving its
own class (tidb_binlog/errors.py names them): the upstream emulator
(:func:`tidb_binlog.upstream.conn.translate`: ``UpstreamError``), the downstream
(:func:`tidb_binlog.drainer.sinks.mysql.downstream.translate_error`: ``DownstreamError``)
and the Spark jobs (:func:`spark_on_ray.sql_task.translate`: ``SparkJobError``). They all
read an error through :func:`error_code` / :func:`error_text` and classify it with the
code sets here, so a code learnt once counts everywhere.
"""

from __future__ import annotations

__all__ = ["CONFLICT_CODES", "CONNECTION_LOST_CODES", "TRANSIENT_CODES", "error_code",
           "error_text"]

CONFLICT_CODES = frozenset({
    1213,  # deadlock: this transaction was the victim and is rolled back
    1205,  # lock wait timeout (rolled back whole only with innodb_rollback_on_timeout;
           # callers roll back themselves before retrying)
})
"""This transaction lost a lock conflict: run it again from the start."""

CONNECTION_LOST_CODES = frozenset({
    2002,  # can't connect through the socket
    2003,  # can't connect to server (TCP)
    2006,  # server has gone away
    2013,  # lost connection during query
    2055,  # lost connection at '...', system error
    1053,  # server shutdown in progress
    1927,  # connection was killed (MariaDB)
    4031,  # disconnected for inactivity (MariaDB)
})
"""The server is gone or unreachable: reconnect before anything else. (pymysql's
``InterfaceError``, a use of a connection it already closed, counts with them.)"""

TRANSIENT_CODES = CONNECTION_LOST_CODES | CONFLICT_CODES | frozenset({
    1040,  # too many connections
    1152, 1153, 1154, 1155, 1156, 1157, 1158, 1159, 1160, 1161,  # net read/write errors
    1290,  # --read-only (a failover in progress)
    1317,  # query execution was interrupted (KILL QUERY)
    1836,  # read-only mode
    8022,  # TiDB: transaction retry
    8028,  # TiDB: information schema changed
    9001, 9002, 9003, 9004, 9005, 9006, 9007,  # TiDB: PD/TiKV busy, timeout, conflict
})
"""Codes after which the same statements may succeed, on a new connection if need be."""


def error_code(exc: BaseException) -> int | None:
    """The server's (or client library's) error number, None when it has none."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def error_text(exc: BaseException) -> str:
    """The error's message without its number (the class name when it has none)."""
    args = getattr(exc, "args", ())
    if error_code(exc) is not None and len(args) > 1:
        return str(args[1])
    return str(exc) or type(exc).__name__
