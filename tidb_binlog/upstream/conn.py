"""Connections to the upstream MariaDB, and its errors in our tree.

Every module of the upstream that talks to MariaDB (the facade ``core.py``, sessions
in ``txn.py``, DDL in ``ddl.py``, the catalog reader ``meta.py``) opens connections with
:func:`connect` and turns pymysql's errors into ours with :func:`translate`. They live
here, below all of them, so none of those modules imports another just for these: the
facade imports its parts, and no part imports the facade.

``translate`` converts *pymysql errors* (not binlogs): a lost lock conflict is a
retryable :class:`~tidb_binlog.errors.TxnConflict`, a gone or unreachable server is
:class:`~tidb_binlog.errors.UpstreamUnreachable`, anything else
:class:`~tidb_binlog.errors.UpstreamError`, each with the statement (cut short) and
the server's error code.
"""

from __future__ import annotations

import pymysql
from pymysql.constants import CLIENT

from tidb_binlog.errors import TxnConflict, UpstreamError, UpstreamUnreachable
from tidb_binlog.mysql_errors import CONFLICT_CODES, CONNECTION_LOST_CODES, error_code, error_text

__all__ = ["CONFLICT_CODES", "CONNECTION_LOST_CODES", "connect", "translate"]



def translate(exc: pymysql.err.MySQLError, sql: str = "") -> UpstreamError:
    """pymysql's error → our tree (the one boundary where MariaDB errors cross): a
    deadlock or lock wait timeout is a :class:`TxnConflict` (retryable)."""
    code, msg = error_code(exc), error_text(exc)
    if code in CONFLICT_CODES:
        cls = TxnConflict
    elif code in CONNECTION_LOST_CODES or isinstance(exc, pymysql.err.InterfaceError):
        cls = UpstreamUnreachable
    else:
        cls = UpstreamError
    return cls(f"upstream MariaDB error {code}: {msg} (statement: {sql[:300]!r})",
               sql=sql[:2000], code=code)


def connect(params: dict, *, autocommit: bool = False, database: str | None = None,
            multi_statements: bool = False):
    """A pymysql connection in UTC, as every upstream connection is. Sessions enable
    multi-statements to save round trips in the commit protocol (only SQL we
    generate, with escaped literals, is ever sent that way)."""
    kw = dict(params)
    kw.pop("database", None)
    kw.pop("db", None)
    kw.setdefault("charset", "utf8mb4")
    try:
        conn = pymysql.connect(**kw, database=database, autocommit=autocommit,
                               init_command="SET time_zone='+00:00'",
                               client_flag=CLIENT.MULTI_STATEMENTS if multi_statements else 0)
    except pymysql.err.MySQLError as exc:
        raise translate(exc, "connect") from exc
    return conn
