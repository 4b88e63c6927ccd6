"""Recognise the DDL statements the upstream emulator turns into TiDB DDL jobs.

:func:`parse_ddl` normalises the SQL (comments dropped, whitespace collapsed, a
trailing ``;`` removed) and matches it against one regular expression per kind.
It only needs to know *what kind* of DDL a statement is and *which objects* it
names; MariaDB executes the statement and the resulting TableInfo is re-read from
information_schema. Supported (one object, one ALTER specification per statement):

=======================  ====================================================
kind (ActionType)        statements
=======================  ====================================================
create_schema (1)        CREATE DATABASE|SCHEMA [IF NOT EXISTS] d
drop_schema (2)          DROP DATABASE|SCHEMA [IF EXISTS] d
create_table (3)         CREATE TABLE [IF NOT EXISTS] [d.]t (...) | LIKE ...
drop_table (4)           DROP TABLE [IF EXISTS] [d.]t
truncate_table (11)      TRUNCATE [TABLE] [d.]t
rename_table (14)        RENAME TABLE a TO b; ALTER TABLE a RENAME [TO|AS] b
add_column (5)           ALTER TABLE t ADD [COLUMN] c <definition>
drop_column (6)          ALTER TABLE t DROP [COLUMN] c
modify_column (12)       ALTER TABLE t MODIFY [COLUMN] c ... | CHANGE [COLUMN] old new ...
add_index (7)            ALTER TABLE t ADD [UNIQUE] INDEX|KEY i (...); CREATE [UNIQUE] INDEX i ON t
drop_index (8)           ALTER TABLE t DROP INDEX|KEY i; DROP INDEX i ON t
add_partition (19)       ALTER TABLE t ADD PARTITION (...)
drop_partition (20)      ALTER TABLE t DROP PARTITION p[, q]
truncate_partition (23)  ALTER TABLE t TRUNCATE PARTITION p[, q]
=======================  ====================================================

Anything else raises :class:`~tidb_binlog.errors.UpstreamUnsupportedDDL` (an
UnsupportedDDL) before MariaDB is touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidb_binlog.errors import UpstreamUnsupportedDDL
from tidb_binlog.model import ActionType

__all__ = ["DDLStatement", "parse_ddl", "normalise_sql", "ACTIONS"]

ACTIONS = {
    "create_schema": ActionType.CREATE_SCHEMA, "drop_schema": ActionType.DROP_SCHEMA,
    "create_table": ActionType.CREATE_TABLE, "drop_table": ActionType.DROP_TABLE,
    "truncate_table": ActionType.TRUNCATE_TABLE, "rename_table": ActionType.RENAME_TABLE,
    "add_column": ActionType.ADD_COLUMN, "drop_column": ActionType.DROP_COLUMN,
    "modify_column": ActionType.MODIFY_COLUMN, "add_index": ActionType.ADD_INDEX,
    "drop_index": ActionType.DROP_INDEX, "add_partition": ActionType.ADD_TABLE_PARTITION,
    "drop_partition": ActionType.DROP_TABLE_PARTITION,
    "truncate_partition": ActionType.TRUNCATE_TABLE_PARTITION,
}

_ID = r"(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_QID = rf"(?:{_ID}\.)?{_ID}"
_RESERVED_AFTER_ADD = {"index", "key", "unique", "primary", "constraint", "fulltext", "spatial",
                       "partition", "foreign", "check", "period", "system"}
_RESERVED_AFTER_DROP = {"index", "key", "primary", "partition", "foreign", "constraint",
                        "check", "period", "system"}


@dataclass(frozen=True)
class DDLStatement:
    kind: str
    query: str
    schema: str | None = None
    table: str | None = None
    if_exists: bool = False  # IF EXISTS / IF NOT EXISTS
    new_schema: str | None = None
    new_table: str | None = None
    column: str | None = None
    new_column: str | None = None  # CHANGE old new
    index: str | None = None
    partitions: tuple[str, ...] = ()

    @property
    def action(self) -> int:
        return ACTIONS[self.kind]


def normalise_sql(sql: str) -> str:
    out, i, n = [], 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" and ch != "`" else 1
            out.append(sql[i:j + 1])
            i = j + 1
        elif sql.startswith("--", i) or ch == "#":
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i) and not sql.startswith("/*!", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        else:
            out.append(ch)
            i += 1
    return re.sub(r"\s+", " ", "".join(out)).strip().rstrip(";").strip()


def _unq(name: str | None) -> str | None:
    if name and name.startswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def _top_level_commas(s: str) -> int:
    depth, count, quote = 0, 0, None
    for ch in s:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
    return count


def _unsupported(sql: str, why: str) -> UpstreamUnsupportedDDL:
    return UpstreamUnsupportedDDL(
        f"unsupported DDL {sql[:200]!r}: {why}. Supported: CREATE/DROP DATABASE, CREATE/DROP/"
        "TRUNCATE/RENAME TABLE, ALTER TABLE with one ADD/DROP/MODIFY/CHANGE COLUMN, ADD/DROP "
        "INDEX, ADD/DROP/TRUNCATE PARTITION, CREATE/DROP INDEX", query=sql)


def _m(pattern: str, s: str):
    return re.fullmatch(pattern, s, re.IGNORECASE)


def parse_ddl(sql: str) -> DDLStatement:
    """Classify one DDL statement; raise UnsupportedDDL for anything not listed above."""
    s = normalise_sql(sql)
    if m := _m(rf"CREATE (?:DATABASE|SCHEMA) (IF NOT EXISTS )?{_ID}(?: .*)?", s):
        return DDLStatement("create_schema", sql, schema=_unq(m[2]), if_exists=bool(m[1]))
    if m := _m(rf"DROP (?:DATABASE|SCHEMA) (IF EXISTS )?{_ID}", s):
        return DDLStatement("drop_schema", sql, schema=_unq(m[2]), if_exists=bool(m[1]))
    if m := _m(rf"CREATE TABLE (IF NOT EXISTS )?{_QID}\s*(\(.*|LIKE .*)", s):
        if re.search(r"\bSELECT\b", m[4], re.IGNORECASE):
            raise _unsupported(sql, "CREATE TABLE ... SELECT writes rows inside DDL")
        return DDLStatement("create_table", sql, schema=_unq(m[2]), table=_unq(m[3]),
                            if_exists=bool(m[1]))
    if m := _m(rf"DROP TABLE (IF EXISTS )?{_QID}", s):
        return DDLStatement("drop_table", sql, schema=_unq(m[2]), table=_unq(m[3]),
                            if_exists=bool(m[1]))
    if m := _m(rf"TRUNCATE (?:TABLE )?{_QID}", s):
        return DDLStatement("truncate_table", sql, schema=_unq(m[1]), table=_unq(m[2]))
    if m := _m(rf"RENAME TABLE {_QID} TO {_QID}", s):
        return DDLStatement("rename_table", sql, schema=_unq(m[1]), table=_unq(m[2]),
                            new_schema=_unq(m[3]), new_table=_unq(m[4]))
    if m := _m(rf"CREATE (UNIQUE )?INDEX {_ID} ON {_QID}\s*\(.*\).*", s):
        return DDLStatement("add_index", sql, schema=_unq(m[3]), table=_unq(m[4]),
                            index=_unq(m[2]))
    if m := _m(rf"DROP INDEX {_ID} ON {_QID}", s):
        return DDLStatement("drop_index", sql, schema=_unq(m[2]), table=_unq(m[3]),
                            index=_unq(m[1]))
    if m := _m(rf"ALTER TABLE {_QID} (.+)", s):
        return _parse_alter(sql, _unq(m[1]), _unq(m[2]), m[3])
    raise _unsupported(sql, "not a recognised DDL statement")


def _parse_alter(sql: str, schema: str | None, table: str | None, spec: str) -> DDLStatement:
    base = {"schema": schema, "table": table}
    if m := _m(r"(?:ADD|DROP|TRUNCATE) PARTITION (.+)", spec):
        kind = spec.split(" ", 1)[0].lower() + "_partition"
        names = () if kind == "add_partition" else tuple(
            _unq(p.strip()) for p in m[1].split(","))
        if kind == "add_partition" and not m[1].startswith("("):
            raise _unsupported(sql, "ADD PARTITION needs a parenthesised partition list")
        return DDLStatement(kind, sql, partitions=names, **base)
    if _top_level_commas(spec):
        raise _unsupported(sql, "ALTER TABLE with several specifications (split it into one "
                                "statement per change)")
    if m := _m(rf"RENAME (?:TO |AS )?{_QID}", spec):
        return DDLStatement("rename_table", sql, new_schema=_unq(m[1]), new_table=_unq(m[2]),
                            **base)
    if m := _m(rf"ADD (UNIQUE )?(?:INDEX|KEY) {_ID}\s*\(.*\).*", spec):
        return DDLStatement("add_index", sql, index=_unq(m[2]), **base)
    if m := _m(rf"DROP (?:INDEX|KEY) {_ID}", spec):
        return DDLStatement("drop_index", sql, index=_unq(m[1]), **base)
    if _m(r"ADD (?:COLUMN )?\(.*", spec):
        raise _unsupported(sql, "ADD COLUMN (a ..., b ...) adds several columns")
    if m := _m(rf"ADD (?:COLUMN )?{_ID} .+", spec):
        if m[1].lower() in _RESERVED_AFTER_ADD or m[1].startswith("("):
            raise _unsupported(sql, f"ALTER TABLE ADD {m[1].upper()} is not modelled")
        return DDLStatement("add_column", sql, column=_unq(m[1]), **base)
    if m := _m(rf"DROP (?:COLUMN )?(?:IF EXISTS )?{_ID}", spec):
        if m[1].lower() in _RESERVED_AFTER_DROP:
            raise _unsupported(sql, f"ALTER TABLE DROP {m[1].upper()} is not modelled")
        return DDLStatement("drop_column", sql, column=_unq(m[1]), **base)
    if m := _m(rf"MODIFY (?:COLUMN )?{_ID} .+", spec):
        return DDLStatement("modify_column", sql, column=_unq(m[1]), **base)
    if m := _m(rf"CHANGE (?:COLUMN )?{_ID} {_ID} .+", spec):
        return DDLStatement("modify_column", sql, column=_unq(m[1]), new_column=_unq(m[2]),
                            **base)
    raise _unsupported(sql, f"ALTER TABLE specification {spec[:80]!r} is not modelled")
