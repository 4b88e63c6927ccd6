"""Compare the tables of two MySQL-compatible databases: ordered full rows and a checksum.

The check the demo and the end-to-end tests end with, and the small-scale
sibling of the Spark consistency diff. For each table of the given schemas on
the upstream:

1. the table must exist downstream with the same column names;
2. ``COUNT(*)`` and a checksum over every row must match: the checksum is
   ``BIT_XOR(CRC32(CONCAT_WS(',', col..., ISNULL(col)...)))`` (sync-diff-inspector's
   shape), computed by each server;
3. when ``full_rows`` is set (default) the rows are also read in primary-key
   order (all columns when there is no key) and compared one by one, so a
   mismatch names the first differing row.

Columns are compared by name, so the downstream may order them differently.
Invisible columns (the upstream's hidden ``_tidb_rowid``) are not compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TableDiff", "CompareResult", "compare_databases"]

_SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


@dataclass
class TableDiff:
    """One table that differs, and how."""

    database: str
    table: str
    reason: str

    def __str__(self) -> str:
        return f"`{self.database}`.`{self.table}`: {self.reason}"


@dataclass
class CompareResult:
    tables: int = 0
    rows: int = 0
    diffs: list[TableDiff] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.diffs


def _columns(cur, database: str, table: str) -> list[str]:
    cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                "AND TABLE_NAME=%s AND EXTRA NOT LIKE %s ORDER BY ORDINAL_POSITION",
                (database, table, "%INVISIBLE%"))
    return [r[0] for r in cur.fetchall()]


def _key_columns(cur, database: str, table: str, visible: list[str]) -> list[str]:
    cur.execute("SELECT INDEX_NAME, COLUMN_NAME, NULLABLE FROM information_schema.STATISTICS "
                "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s AND NON_UNIQUE=0 "
                "ORDER BY INDEX_NAME='PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX", (database, table))
    keys: dict[str, list[tuple[str, str]]] = {}
    for index, column, nullable in cur.fetchall():
        keys.setdefault(index, []).append((column, nullable))
    for cols in keys.values():
        if all(nullable != "YES" and c in visible for c, nullable in cols):
            return [c for c, _ in cols]
    return []


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _summary(cur, database: str, table: str, columns: list[str]) -> tuple[int, int]:
    parts = ", ".join([f"{_q(c)}" for c in columns] + [f"ISNULL({_q(c)})" for c in columns])
    cur.execute(f"SELECT COUNT(*), COALESCE(BIT_XOR(CAST(CRC32(CONCAT_WS(',', {parts})) "
                f"AS UNSIGNED)), 0) FROM {_q(database)}.{_q(table)}")
    count, checksum = cur.fetchone()
    return int(count), int(checksum)


def _rows(cur, database: str, table: str, columns: list[str], order: list[str]):
    cols = ", ".join(_q(c) for c in columns)
    order_by = ", ".join(_q(c) for c in (order or columns))
    cur.execute(f"SELECT {cols} FROM {_q(database)}.{_q(table)} ORDER BY {order_by}")
    while True:
        chunk = cur.fetchmany(5000)
        if not chunk:
            return
        yield from chunk


def _tables(cur, schemas) -> list[tuple[str, str]]:
    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE='BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")
    return [(d, t) for d, t in cur.fetchall()
            if d.lower() not in _SYSTEM_SCHEMAS and (schemas is None or d in schemas)]


def compare_databases(upstream_conn, downstream_conn, schemas=None, *,
                      full_rows: bool = True) -> CompareResult:
    """Compare every table of ``schemas`` (default: every non-system schema upstream).

    The connections are pymysql connections; only reads are issued. Tables that
    exist only downstream are reported as well.
    """
    result = CompareResult()
    with upstream_conn.cursor() as up, downstream_conn.cursor() as down:
        up_tables = _tables(up, schemas)
        wanted = {d for d, _ in up_tables} if schemas is None else set(schemas)
        down_tables = [x for x in _tables(down, None) if x[0] in wanted]
        for database, table in sorted(set(down_tables) - set(up_tables)):
            result.diffs.append(TableDiff(database, table, "exists only downstream"))
        down_set = set(down_tables)
        for database, table in up_tables:
            result.tables += 1
            if (database, table) not in down_set:
                result.diffs.append(TableDiff(database, table, "missing downstream"))
                continue
            diff = _compare_table(up, down, database, table, full_rows, result)
            if diff is not None:
                result.diffs.append(diff)
    return result


def _compare_table(up, down, database, table, full_rows, result) -> TableDiff | None:
    columns = _columns(up, database, table)
    down_columns = _columns(down, database, table)
    if sorted(columns) != sorted(down_columns):
        return TableDiff(database, table, f"columns differ: upstream {columns}, downstream "
                                          f"{down_columns}")
    up_sum, down_sum = _summary(up, database, table, columns), _summary(down, database, table,
                                                                         columns)
    result.rows += up_sum[0]
    if up_sum[0] != down_sum[0]:
        return TableDiff(database, table, f"{up_sum[0]} rows upstream, {down_sum[0]} downstream")
    if full_rows:
        order = _key_columns(up, database, table, columns)
        for i, (a, b) in enumerate(zip(_rows(up, database, table, columns, order),
                                       _rows(down, database, table, columns, order),
                                       strict=False)):
            if a != b:
                return TableDiff(database, table, f"row {i} differs: upstream {a!r}, "
                                                  f"downstream {b!r}")
    if up_sum[1] != down_sum[1]:
        return TableDiff(database, table, f"checksum {up_sum[1]} upstream, {down_sum[1]} "
                                          "downstream")
    return None
