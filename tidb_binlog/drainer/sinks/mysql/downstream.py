"""The downstream MySQL/TiDB connection: the one boundary that talks to pymysql.

**Connection** (:class:`Downstream`, configured by :class:`DownstreamConfig` from
``[syncer.to]`` and ``[syncer] sql-mode``): pymysql over TCP, ``utf8mb4``,
autocommit off, ``read-timeout`` as the socket read timeout.  After connecting,
the session's ``sql_mode`` is set when ``sql-mode`` is configured, then every
``[syncer.to.params]`` entry as ``SET SESSION <name> = <value>``: the name must be
an identifier (letters, digits, ``_``, ``.``), the value is sent as an argument,
an integer or decimal number as a number, anything else as a string (one pair of
surrounding quotes is removed, so both ``time_zone = "+08:00"`` and TiDB-style
``time_zone = "'+08:00'"`` work).  The connection is opened lazily and reopened
after :meth:`Downstream.reset`.  TLS: ``DownstreamConfig.ssl`` is pymysql's ``ssl``
argument made from ``[syncer.to.security]`` (:func:`tidb_binlog.security.mysql_ssl`);
a failed connection names what to set when TLS may be the cause.

**Errors** (:func:`translate_error`).  Every pymysql or socket error raised by a
call is translated here, and only here, into the project's tree with the
original as ``__cause__``, the SQL (truncated to :data:`SQL_SHOWN_CHARS`) and the
server's error code:

- :class:`~tidb_binlog.errors.TransientDownstreamError`: retrying on a new
  connection may succeed: the client-side codes 2002/2003/2006/2013/2055 (cannot
  connect, gone away, lost during query), a pymysql ``InterfaceError`` (the
  connection is closed) or any ``OSError``, and the server codes in
  :data:`TRANSIENT_CODES` (deadlock 1213, lock wait timeout 1205, shutdown in
  progress 1053, too many connections 1040, killed 1927/1317, read-only
  1290/1836, TiDB's retryable 8022/8028/9001-9007, ...);
- :class:`~tidb_binlog.errors.DownstreamError`: everything else (syntax, unknown
  column or table, duplicate key, data too long...), which retrying cannot fix.

**Values** are rendered into the text by
:class:`~tidb_binlog.drainer.apply.sql.LiteralRenderer` (byte-identical to pymysql's own
interpolation, cheaper).

**Scripts** (:meth:`Downstream.execute_script`).  The connection is opened with
``CLIENT.MULTI_STATEMENTS``, so one downstream transaction (its statements,
the progress upsert and ``COMMIT``) travels in one round trip: the rendered
statements joined by ``;``, in pieces of at most :data:`SCRIPT_CHARS`
characters.  The server runs them in order and stops at the first error; every
result is read, and a failure names the statement (its index) it belongs to.
Values are always rendered as escaped literals, never spliced unescaped, so
the extra statements can only be the ones we wrote.  A DDL is sent alone and
all its results are read (TiDB records one statement per DDL job; a DDL text
holding several would run them all, as the upstream did).
``DownstreamConfig(multi_statements=False)`` sends one statement per round trip.

**Retries** (:class:`RetryPolicy`, :func:`backoff_delays`): exponential backoff
from ``initial_backoff_s`` doubling up to ``max_backoff_s`` (1 s, TiDB's loader's
fixed interval: a restarted downstream is written to within a second), giving up
once ``max_elapsed_s`` have passed since the first failure.  The default rides out a
downstream that is down for minutes (10 minutes in all).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from tidb_binlog.drainer.apply.sql import LiteralRenderer, Statement
from tidb_binlog.errors import (
    ConfigError,
    DownstreamError,
    InvalidArgument,
    TransientDownstreamError,
)
from tidb_binlog.mysql_errors import CONNECTION_LOST_CODES, TRANSIENT_CODES, error_code, error_text
from tidb_binlog.security import mysql_ssl, mysql_tls_hint

__all__ = [
    "DownstreamConfig",
    "Downstream",
    "SCRIPT_CHARS",
    "RetryPolicy",
    "backoff_delays",
    "translate_error",
    "shorten_sql",
    "TRANSIENT_CODES",
    "CONNECTION_CODES",
    "SQL_SHOWN_CHARS",
]

log = logging.getLogger(__name__)

SQL_SHOWN_CHARS = 300
"""How much of a statement an error message quotes."""

CONNECTION_CODES = CONNECTION_LOST_CODES
"""The connection is gone; reconnect before anything else (tidb_binlog/mysql_errors.py)."""

SCRIPT_CHARS = 1 << 20
"""Characters per multi-statement round trip (a bigger statement is sent alone): at
most 4 MiB of UTF-8, below every server's default ``max_allowed_packet`` (16-64 MiB),
and far more than a round trip needs to be worth it (1000 sysbench rows ~ 200 KB)."""

_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


def shorten_sql(sql: str, limit: int = SQL_SHOWN_CHARS) -> str:
    """``sql`` on one line, cut to ``limit`` characters with a note of the full length."""
    one_line = " ".join(sql.split())
    if len(one_line) <= limit:
        return one_line
    return f"{one_line[:limit]}... ({len(one_line)} chars)"


def translate_error(exc: BaseException, sql: str | None, where: str) -> DownstreamError:
    """The project error for a pymysql/socket failure of ``sql`` (see the module doc)."""
    code = error_code(exc) if isinstance(exc, pymysql.err.MySQLError) else None
    shown = shorten_sql(sql) if sql else None
    detail = error_text(exc)
    text = f"{where}: error {code}: {detail}" if code else f"{where}: {detail}"
    if shown:
        text += f" (statement: {shown})"
    transient = (isinstance(exc, pymysql.err.InterfaceError | OSError)
                 or code in TRANSIENT_CODES
                 or (isinstance(exc, pymysql.err.OperationalError) and code is None))
    if transient:
        return TransientDownstreamError(text + "; will retry", sql=shown, code=code)
    return DownstreamError(text, sql=shown, code=code)


def _param_value(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if _NUMBER.match(text):
        try:
            return int(text) if "." not in text else Decimal(text)
        except (ValueError, InvalidOperation):  # pragma: no cover - the regex guards
            return text
    return text


@dataclass(frozen=True)
class DownstreamConfig:
    """Where and how to connect (``[syncer.to]`` plus ``[syncer] sql-mode``)."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)  # never in a log, status or error
    params: Mapping[str, Any] = field(default_factory=dict)
    sql_mode: str | None = None
    read_timeout_s: float = 60.0
    write_timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    multi_statements: bool = True  # one round trip per transaction (execute_script)
    # [syncer.to] emulated-tidb-registry: write through the emulated TiDB of the cluster
    # whose registry this names ("" = a real MySQL/TiDB); see emulated.py
    emulated_tidb_registry: str = ""
    # TLS: pymysql's ``ssl`` dict (tidb_binlog.security.mysql_ssl), None = no TLS asked
    # for; ``tls_section`` is the config section errors tell the user to set.
    ssl: Mapping[str, str] | None = None
    tls_section: str = "syncer.to.security"

    def __post_init__(self) -> None:
        for name in self.params:
            if not _VARIABLE_NAME.match(name):
                raise ConfigError(f"[syncer.to.params] key {name!r} is not a session variable "
                                  "name (letters, digits, '_' and '.' only)",
                                  key=f"syncer.to.params.{name}")
        object.__setattr__(self, "params", dict(self.params))

    @classmethod
    def from_drainer_config(cls, cfg) -> DownstreamConfig:
        """From a resolved :class:`~tidb_binlog.config.DrainerConfig` (its ``syncer.to``)."""
        to = cfg.syncer.to
        return cls(host=to.host, port=to.port, user=to.user, password=to.password,
                   params=dict(to.params), sql_mode=cfg.syncer.sql_mode,
                   read_timeout_s=to.read_timeout_s,
                   emulated_tidb_registry=to.emulated_tidb_registry, ssl=mysql_ssl(to.security))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def session_statements(self) -> list[Statement]:
        """What runs on every new connection before any work."""
        out = []
        if self.sql_mode is not None:
            out.append(Statement("SET SESSION sql_mode = %s", (self.sql_mode,)))
        for name, value in self.params.items():
            out.append(Statement(f"SET SESSION {name} = %s", (_param_value(value),)))
        return out


class Downstream:
    """One lazily opened connection; every failure leaves as a DownstreamError."""

    def __init__(self, config: DownstreamConfig, *, database: str | None = None):
        self.config = config
        self._database = database
        self._conn: pymysql.connections.Connection | None = None
        self._literals: LiteralRenderer | None = None
        self.round_trips = 0  # statements (or multi-statement scripts) sent

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def connection(self) -> pymysql.connections.Connection:
        """The open connection, connecting (and setting the session up) if needed."""
        if self._conn is not None:
            return self._conn
        c = self.config
        where = f"connecting to the downstream {c.address} as {c.user!r}"
        try:
            conn = pymysql.connect(host=c.host, port=c.port, user=c.user, password=c.password,
                                   database=self._database, charset="utf8mb4",
                                   autocommit=False, connect_timeout=c.connect_timeout_s,
                                   read_timeout=c.read_timeout_s,
                                   write_timeout=c.write_timeout_s,
                                   client_flag=CLIENT.MULTI_STATEMENTS
                                   if c.multi_statements else 0, ssl=c.ssl)
        except (pymysql.err.MySQLError, OSError) as exc:
            code = error_code(exc) if isinstance(exc, pymysql.err.MySQLError) else None
            hint = mysql_tls_hint(c.address, code, str(exc), ssl=c.ssl, section=c.tls_section)
            raise translate_error(exc, None, where + hint) from exc
        try:
            with conn.cursor() as cur:
                for stmt in c.session_statements():
                    try:
                        cur.execute(stmt.sql, stmt.args)
                    except (pymysql.err.MySQLError, OSError) as exc:
                        raise translate_error(
                            exc, f"{stmt.sql} -- {stmt.args!r}",
                            f"setting up the session on {c.address} (check [syncer.to.params] "
                            "and [syncer] sql-mode)") from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._literals = LiteralRenderer(conn)
        return conn

    @property
    def thread_id(self) -> int:
        """The server's id of this connection (what ``KILL <id>`` takes)."""
        return self.connection().thread_id()

    def render(self, stmt: Statement) -> str:
        """The SQL text :meth:`execute` sends for ``stmt`` (literals in place)."""
        self.connection()
        try:
            return self._literals.render(stmt)
        except (pymysql.err.MySQLError, InvalidArgument) as exc:  # inf, nan; args not matching
            raise translate_error(exc, stmt.sql, f"rendering for {self.config.address}") from exc

    def execute(self, stmt: Statement) -> int:
        """Run one statement (every result read); the number of affected rows."""
        conn = self.connection()
        try:
            text = self._literals.render(stmt)
            with conn.cursor() as cur:
                self.round_trips += 1
                return cur.execute(text)
        except (pymysql.err.MySQLError, InvalidArgument, OSError) as exc:
            err = translate_error(exc, stmt.sql, f"downstream {self.config.address}")
            if isinstance(err, TransientDownstreamError):
                self.reset()
            raise err from exc

    def execute_script(self, statements: list[Statement], *, commit: bool = False) -> int:
        """Run ``statements`` in order, then COMMIT when ``commit``, in as few round trips
        as :data:`SCRIPT_CHARS` allows; the total of affected rows.

        A failure is raised as from :meth:`execute`, with ``statement_index`` set to
        the index of the statement it belongs to (``len(statements)`` = the COMMIT);
        nothing after it ran.
        """
        conn = self.connection()
        if not self.config.multi_statements:
            total = 0
            for i, stmt in enumerate(statements):
                total += self._indexed(i, self.execute, stmt)
            if commit:
                self._indexed(len(statements), self.commit)
            return total
        scripts: list[tuple[int, list[str]]] = []  # (index of the first statement, texts)
        size = SCRIPT_CHARS
        for i, stmt in enumerate(statements):
            text = self._indexed(i, self.render, stmt)
            if size + len(text) > SCRIPT_CHARS:
                scripts.append((i, []))
                size = 0
            scripts[-1][1].append(text)
            size += len(text) + 1
        if commit:
            if not scripts:
                scripts.append((0, []))
            scripts[-1][1].append("COMMIT")
        total = 0
        for first, texts in scripts:
            index = first
            try:
                with conn.cursor() as cur:
                    self.round_trips += 1
                    total += cur.execute(";".join(texts))
                    index += 1
                    while cur.nextset():
                        total += cur.rowcount
                        index += 1
            except (pymysql.err.MySQLError, OSError) as exc:
                sql = statements[index].sql if index < len(statements) else "COMMIT"
                err = translate_error(exc, sql, f"downstream {self.config.address}")
                if isinstance(err, TransientDownstreamError):
                    self.reset()
                err.statement_index = index
                raise err from exc
        return total

    @staticmethod
    def _indexed(index: int, fn, *args):
        try:
            return fn(*args)
        except DownstreamError as exc:
            exc.statement_index = index
            raise

    def query(self, stmt: Statement) -> list[tuple]:
        """Run a SELECT; all its rows."""
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                cur.execute(stmt.sql, stmt.args)
                return list(cur.fetchall())
        except (pymysql.err.MySQLError, OSError) as exc:
            err = translate_error(exc, stmt.sql, f"downstream {self.config.address}")
            if isinstance(err, TransientDownstreamError):
                self.reset()
            raise err from exc

    def commit(self) -> None:
        conn = self.connection()
        try:
            self.round_trips += 1
            conn.commit()
        except (pymysql.err.MySQLError, OSError) as exc:
            err = translate_error(exc, "COMMIT", f"downstream {self.config.address}")
            if isinstance(err, TransientDownstreamError):
                self.reset()
            raise err from exc

    def rollback(self) -> None:
        """Roll back the open transaction; a dead connection is simply dropped."""
        if self._conn is None:
            return
        try:
            self._conn.rollback()
        except (pymysql.err.MySQLError, OSError) as exc:
            # The server rolls back a transaction whose connection is gone.
            log.warning("rollback on %s failed (%s); dropping the connection",
                        self.config.address, exc)
            self.reset()

    def reset(self) -> None:
        """Drop the connection (the next call reconnects)."""
        conn, self._conn = self._conn, None
        self._literals = None
        if conn is not None:
            try:
                conn.close()
            except (pymysql.err.MySQLError, OSError) as exc:
                log.debug("closing a broken downstream connection: %s", exc)

    def close(self) -> None:
        self.reset()


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for transient downstream errors, bounded in total time."""

    initial_backoff_s: float = 0.05
    # TiDB's loader retries every 1 s (RetryContext, backoff 1 s, factor 1); a 2 s cap
    # added up to 2 s to every recovery from a downstream restart (chaos soak)
    max_backoff_s: float = 1.0
    max_elapsed_s: float = 600.0

    def __post_init__(self) -> None:
        if self.initial_backoff_s <= 0 or self.max_backoff_s < self.initial_backoff_s:
            raise ConfigError(f"retry backoff must satisfy 0 < initial ({self.initial_backoff_s}"
                              f" s) <= max ({self.max_backoff_s} s)")
        if self.max_elapsed_s < 0:
            raise ConfigError(f"retry max_elapsed_s must be >= 0, got {self.max_elapsed_s}")


def backoff_delays(policy: RetryPolicy) -> Iterator[float]:
    """The successive sleeps: initial, doubled each time, capped at ``max_backoff_s``."""
    delay = policy.initial_backoff_s
    while True:
        yield delay
        delay = min(delay * 2, policy.max_backoff_s)
