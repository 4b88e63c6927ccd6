"""SQL for one row change or one DDL, as TiDB Binlog's loader writes it.

Every statement is a :class:`Statement` ``(sql, args)`` in pymysql's ``%s``
paramstyle: run it with ``cursor.execute(stmt.sql, stmt.args)``.  ``args`` is a
tuple for row changes and None for DDL (pymysql then does no ``%`` interpolation,
so a DDL containing ``%`` runs verbatim).

Identifiers are backquoted, a backquote inside a name doubled
(:func:`quote_name`); values are never spliced into the text here.  Columns are
named explicitly, in the order of ``TableSchema.columns`` restricted to the
columns the image carries (TiDB sorts them by name; any fixed order works, and
table order reads better).  A statement's SQL text is built once per shape
(table, columns, key) and cached.

Row changes (:func:`dml_statements`):

=========  ===========================================================================
INSERT     ``INSERT INTO `db`.`t` (`a`,`b`) VALUES (%s,%s)``
UPDATE     ``UPDATE `db`.`t` SET `a` = %s,`b` = %s WHERE <where(old image)> LIMIT 1``
           (SET lists every column of the new image)
DELETE     ``DELETE FROM `db`.`t` WHERE <where> LIMIT 1``
=========  ===========================================================================

Safe mode (idempotent replay): INSERT becomes ``REPLACE INTO``; UPDATE becomes
``DELETE ... WHERE <where(old)> LIMIT 1`` followed by ``REPLACE INTO`` of the new
image; DELETE is unchanged.

WHERE (:func:`where_clause`): the first unique key of the schema (the primary key
first) whose columns are all present and non-NULL in the image, as
```k1` = %s AND `k2` = %s``; when no key qualifies, every column of the image, with
```c` IS NULL`` for the NULL ones (the table-without-key case; ``LIMIT 1`` then
touches one of several identical rows, which is what the upstream did).

DDL (:func:`ddl_statements`): ``USE `db``` and then the query verbatim, except for
``CREATE DATABASE``/``CREATE SCHEMA`` (the database may not exist yet) or when the
DDL names no database.

**Literals** (:class:`LiteralRenderer`, used by the downstream connection): the
``%s`` arguments become SQL literals exactly as pymysql's ``Connection.escape``
renders them (the text is byte-identical to ``cursor.execute(sql, args)``), but
without its per-value dispatch: ``int``, ``str``, ``None``, ``float``, ``bool``
and ``bytes`` use one precomputed function per type, chosen by the session's
``NO_BACKSLASH_ESCAPES`` status (a string with no character to escape is only
quoted); every other type (``Decimal``, ``datetime``, ``date``, ``time``,
``timedelta``, ``bytearray``, subclasses) goes to ``Connection.escape`` itself.
For each connection and mode, each fast function is first checked against
``Connection.escape`` on probe values (quotes, backslashes, NUL, CJK, extremes)
and dropped if they differ: a pymysql upgrade can make it slower, never different.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

import pymysql
from pymysql import converters
from pymysql.constants import SERVER_STATUS

from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema
from tidb_binlog.errors import InvalidArgument, SchemaError

__all__ = [
    "Statement",
    "LiteralRenderer",
    "quote_name",
    "quote_table",
    "image_columns",
    "where_clause",
    "insert_statement",
    "update_statement",
    "delete_statement",
    "dml_statements",
    "ddl_statements",
    "is_create_database",
]

log = logging.getLogger(__name__)


class Statement(NamedTuple):
    """One SQL statement and its ``%s`` arguments (None: no interpolation)."""

    sql: str
    args: tuple[Any, ...] | None


def quote_name(name: str) -> str:
    """``name`` as a MySQL identifier: backquoted, inner backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"


def quote_table(database: str, table: str) -> str:
    """```db`.`t``` (or just ```t``` when ``database`` is empty)."""
    if not database:
        return quote_name(table)
    return quote_name(database) + "." + quote_name(table)


def image_columns(schema: TableSchema, image: Mapping[str, Any]) -> list[str]:
    """The columns ``image`` carries, in table order (DML validated it has no others)."""
    if image.keys() == schema.column_set:
        return list(schema.columns)
    return [c for c in schema.columns if c in image]


@lru_cache(maxsize=4096)
def _equals(columns: tuple[str, ...]) -> str:
    return " AND ".join(f"{quote_name(c)} = %s" for c in columns)


def where_clause(schema: TableSchema, image: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """The WHERE condition (without ``WHERE``) identifying ``image``'s row, and its args."""
    for key in schema.unique_keys:
        values = [image.get(c) for c in key.columns]
        if None not in values and all(c in image for c in key.columns):
            return _equals(key.columns), values
    parts: list[str] = []
    args: list[Any] = []
    for name in image_columns(schema, image):
        value = image[name]
        if value is None:
            parts.append(f"{quote_name(name)} IS NULL")
        else:
            parts.append(f"{quote_name(name)} = %s")
            args.append(value)
    return " AND ".join(parts), args


def _placeholders(n: int) -> str:
    return "(" + ",".join(["%s"] * n) + ")"


def _column_list(names: Iterable[str]) -> str:
    return "(" + ",".join(quote_name(n) for n in names) + ")"


# SQL texts are built once per (table, columns[, key]) and reused: a worker renders the
# same few shapes for every row.
@lru_cache(maxsize=4096)
def _insert_sql(verb: str, database: str, table: str, names: tuple[str, ...]) -> str:
    return (f"{verb} INTO {quote_table(database, table)} {_column_list(names)} "
            f"VALUES {_placeholders(len(names))}")


@lru_cache(maxsize=4096)
def _update_sql(database: str, table: str, names: tuple[str, ...], where: str) -> str:
    sets = ",".join(f"{quote_name(n)} = %s" for n in names)
    return f"UPDATE {quote_table(database, table)} SET {sets} WHERE {where} LIMIT 1"


@lru_cache(maxsize=4096)
def _delete_sql(database: str, table: str, where: str) -> str:
    return f"DELETE FROM {quote_table(database, table)} WHERE {where} LIMIT 1"


def insert_statement(dml: DML, *, replace: bool = False) -> Statement:
    """``INSERT INTO`` (or ``REPLACE INTO``) of ``dml.values``."""
    schema = dml.require_schema()
    values = dml.values
    names = tuple(image_columns(schema, values))
    sql = _insert_sql("REPLACE" if replace else "INSERT", dml.database, dml.table, names)
    return Statement(sql, tuple([values[n] for n in names]))


def update_statement(dml: DML) -> Statement:
    """``UPDATE ... SET <every new column> WHERE <where(old)> LIMIT 1``."""
    if dml.tp is not DMLType.UPDATE:
        raise SchemaError(f"update_statement needs an UPDATE, got {dml.tp.name} on "
                          f"`{dml.database}`.`{dml.table}`")
    schema = dml.require_schema()
    values = dml.values
    names = tuple(image_columns(schema, values))
    where, where_args = where_clause(schema, dml.old_values)
    return Statement(_update_sql(dml.database, dml.table, names, where),
                     (*[values[n] for n in names], *where_args))


def delete_statement(dml: DML) -> Statement:
    """``DELETE FROM ... WHERE <where> LIMIT 1`` (the old image for an UPDATE)."""
    schema = dml.require_schema()
    where, args = where_clause(schema, dml.where_image)
    return Statement(_delete_sql(dml.database, dml.table, where), tuple(args))


def dml_statements(dml: DML, *, safe_mode: bool = False) -> list[Statement]:
    """The statements that apply ``dml`` (two for an UPDATE in safe mode, else one)."""
    if dml.tp is DMLType.INSERT:
        return [insert_statement(dml, replace=safe_mode)]
    if dml.tp is DMLType.UPDATE:
        if safe_mode:
            return [delete_statement(dml), insert_statement(dml, replace=True)]
        return [update_statement(dml)]
    return [delete_statement(dml)]


_CREATE_DATABASE = re.compile(
    r"^\s*(?:(?:/\*.*?\*/|--[^\n]*\n|#[^\n]*\n)\s*)*CREATE\s+(?:DATABASE|SCHEMA)\b",
    re.IGNORECASE | re.DOTALL)


def is_create_database(sql: str) -> bool:
    """True for ``CREATE DATABASE``/``CREATE SCHEMA`` (leading comments allowed)."""
    return _CREATE_DATABASE.match(sql) is not None


def ddl_statements(ddl: DDL) -> list[Statement]:
    """``USE `db``` (unless CREATE DATABASE or no database) and the query verbatim."""
    if not ddl.sql.strip():
        raise SchemaError(f"DDL at commit_ts {ddl.commit_ts} on `{ddl.database}`."
                          f"`{ddl.table}` has an empty query; skip it with "
                          f"ignore-txn-commit-ts = [{ddl.commit_ts}]")
    query = Statement(ddl.sql, None)
    if not ddl.database or is_create_database(ddl.sql):
        return [query]
    return [Statement(f"USE {quote_name(ddl.database)}", None), query]


# ---- literals ----------------------------------------------------------------

_NO_BACKSLASH_ESCAPES = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES
_TO_ESCAPE = re.compile("[\\x00\\n\\r\\x1a\"'\\\\]")  # pymysql's escape table's keys
_ESCAPE_TABLE = converters._escape_table
_PROBES: dict[type, tuple] = {
    int: (0, -1, 7, 2**64 - 1, -2**63),
    bool: (True, False),
    float: (0.0, 1.5, -3.25e-300, 1e300, 0.1, -0.0),
    type(None): (None,),
    bytes: (b"", b"\x00'\"\\\n\r\x1a\xff", bytes(range(256))),
    str: ("", "plain", "a'b\"c\\d\x00e\nf\rg\x1ah", "中文'日本語\\", "%s%%", "'';--"),
}


def _str_backslash(value: str) -> str:
    if _TO_ESCAPE.search(value) is None:
        return "'" + value + "'"
    return "'" + value.translate(_ESCAPE_TABLE) + "'"


def _str_no_backslash(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


_FAST: dict[type, Any] = {
    int: str,
    bool: lambda v: "1" if v else "0",
    float: converters.escape_float,
    type(None): lambda v: "NULL",
    bytes: lambda v: "X'" + v.hex() + "'",
}


class LiteralRenderer:
    """``sql % literals`` exactly as pymysql renders it, cheaper (see the module doc)."""

    def __init__(self, conn: pymysql.connections.Connection):
        self._conn = conn
        self._tables: dict[bool, dict[type, Any]] = {}

    def _table(self, no_backslash: bool) -> dict[type, Any]:
        table = self._tables.get(no_backslash)
        if table is None:
            fast = {**_FAST, str: _str_no_backslash if no_backslash else _str_backslash}
            escape = self._conn.escape
            table = {tp: fn for tp, fn in fast.items()
                     if all(fn(v) == escape(v) for v in _PROBES[tp])}
            if len(table) < len(fast):
                log.warning("pymysql renders %s differently from the fast path; those types "
                            "go through Connection.escape",
                            sorted(tp.__name__ for tp in fast.keys() - table.keys()))
            self._tables[no_backslash] = table
        return table

    def fast_types(self) -> frozenset[type]:
        """The types rendered without ``Connection.escape`` in the session's mode now."""
        return frozenset(self._table(bool(self._conn.server_status & _NO_BACKSLASH_ESCAPES)))

    def literal(self, value: Any) -> str:
        """One value as pymysql's ``Connection.escape`` renders it now."""
        no_backslash = bool(self._conn.server_status & _NO_BACKSLASH_ESCAPES)
        fn = self._table(no_backslash).get(type(value))
        return fn(value) if fn is not None else self._conn.escape(value)

    def render(self, stmt: Statement) -> str:
        """The text ``cursor.execute(stmt.sql, stmt.args)`` would send."""
        if stmt.args is None:
            return stmt.sql
        table = self._table(bool(self._conn.server_status & _NO_BACKSLASH_ESCAPES))
        get, escape = table.get, self._conn.escape
        try:
            if table.get(str) is _str_backslash and table.get(int) is str:
                # the common case inline: ints, and strings with nothing to escape
                search = _TO_ESCAPE.search
                return stmt.sql % tuple([
                    str(a) if type(a) is int else "'" + a + "'"
                    if type(a) is str and search(a) is None else get(type(a), escape)(a)
                    for a in stmt.args])
            return stmt.sql % tuple([get(type(a), escape)(a) for a in stmt.args])
        except TypeError as exc:  # what % raises for a placeholder/argument mismatch
            raise InvalidArgument(f"the statement's placeholders and its {len(stmt.args)} "
                                  f"arguments do not match ({exc})") from exc
