"""Compare the tables of two MySQL-compatible databases: ordered full rows and a checksum.

The check the demo and the end-to-end tests end with, and the small-scale
sibling of the Spark consistency diff. For each table of the given schemas on
the upstream:

1. the table must exist downstream with the same column names;
2. ``COUNT(*)`` and a checksum over every row must match: the checksum is
   ``BIT_XOR(CRC32(CONCAT_WS(',', col..., ISNULL(col)...)))`` (sync-diff-inspector's
   shape), computed by each server;
3. when ``full_rows`` is set (default) the rows are also read in primary-key
   order (all columns when there is no key) and matched by key, so a difference
   says **which side is wrong**: rows missing downstream, rows extra downstream,
   rows whose values differ (same key), each counted with up to ``SAMPLES`` sample
   rows. A replication bug and a lost write look different here, which is what an
   operator needs to know first.

Columns are compared by name, so the downstream may order them differently.
Invisible columns (the upstream's hidden ``_tidb_rowid``) are not compared.

Rows are matched by key value rather than by position: both sides stream in key
order and unmatched rows wait in a dict until their partner arrives, so one
missing row does not make every later row "differ", and a collation that orders
keys differently downstream costs memory, never a wrong verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest

__all__ = ["TableDiff", "CompareResult", "compare_databases", "SAMPLES", "TABLE_MISSING",
           "TABLE_EXTRA", "COLUMNS_DIFFER", "ROWS_DIFFER", "CHECKSUM_DIFFERS"]

_SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


SAMPLES = 5
"""Sample rows kept per kind of difference and table."""

# TableDiff.kind values: which side is wrong.
TABLE_MISSING = "table missing downstream"
TABLE_EXTRA = "table exists only downstream"
COLUMNS_DIFFER = "columns differ"
ROWS_DIFFER = "rows differ"
CHECKSUM_DIFFERS = "checksum differs"


@dataclass
class TableDiff:
    """One table that differs, and how.

    ``kind`` is one of the module constants (a whole table missing or extra, columns
    differ, rows differ, or only the checksum differs). For ``rows differ``,
    ``missing`` / ``extra`` / ``changed`` count the rows missing downstream, extra
    downstream and present on both sides with different values, and
    ``samples`` holds up to :data:`SAMPLES` of each as ``(what, upstream row,
    downstream row)`` with None for the side that has no row.
    """

    database: str
    table: str
    reason: str
    kind: str = ROWS_DIFFER
    missing: int = 0
    extra: int = 0
    changed: int = 0
    samples: list[tuple[str, tuple | None, tuple | None]] = field(default_factory=list)

    def __str__(self) -> str:
        return f"`{self.database}`.`{self.table}`: {self.reason}"

    def details(self) -> list[str]:
        """The reason, then one line per sample row (what the demo prints)."""
        lines = [str(self)]
        for what, up_row, down_row in self.samples:
            if what == "missing downstream":
                lines.append(f"  missing downstream: {up_row!r}")
            elif what == "extra downstream":
                lines.append(f"  extra downstream:   {down_row!r}")
            else:
                lines.append(f"  values differ:      upstream {up_row!r}")
                lines.append(f"                      downstream {down_row!r}")
        return lines


@dataclass
class CompareResult:
    tables: int = 0
    rows: int = 0
    diffs: list[TableDiff] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.diffs

    @property
    def rows_missing(self) -> int:
        """Rows missing downstream, over every table (a whole missing table counts
        its upstream rows)."""
        return sum(d.missing for d in self.diffs)

    @property
    def rows_extra(self) -> int:
        return sum(d.extra for d in self.diffs)

    @property
    def rows_changed(self) -> int:
        return sum(d.changed for d in self.diffs)


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
            count = _summary(down, database, table, _columns(down, database, table))[0]
            result.diffs.append(TableDiff(database, table, f"exists only downstream ({count} "
                                          "rows)", TABLE_EXTRA, extra=count))
        down_set = set(down_tables)
        for database, table in up_tables:
            result.tables += 1
            if (database, table) not in down_set:
                count = _summary(up, database, table, _columns(up, database, table))[0]
                result.rows += count
                result.diffs.append(TableDiff(database, table, f"missing downstream ({count} "
                                              "rows upstream)", TABLE_MISSING, missing=count))
                continue
            diff = _compare_table(up, down, database, table, full_rows, result)
            if diff is not None:
                result.diffs.append(diff)
    return result


def _compare_table(up, down, database, table, full_rows, result) -> TableDiff | None:
    columns = _columns(up, database, table)
    down_columns = _columns(down, database, table)
    if sorted(columns) != sorted(down_columns):
        only_up = [c for c in columns if c not in down_columns]
        only_down = [c for c in down_columns if c not in columns]
        return TableDiff(database, table, f"columns differ: upstream only {only_up}, "
                                          f"downstream only {only_down} (upstream {columns}, "
                                          f"downstream {down_columns})", COLUMNS_DIFFER)
    up_sum, down_sum = _summary(up, database, table, columns), _summary(down, database, table,
                                                                         columns)
    result.rows += up_sum[0]
    if up_sum == down_sum and not full_rows:
        return None
    if full_rows:
        order = _key_columns(up, database, table, columns)
        diff = _match_rows(database, table, columns, order,
                           _rows(up, database, table, columns, order),
                           _rows(down, database, table, columns, order))
        if diff is not None:
            return diff
    if up_sum[0] != down_sum[0]:  # only reachable without full_rows
        return TableDiff(database, table, f"{up_sum[0]} rows upstream, {down_sum[0]} "
                                          "downstream")
    if up_sum[1] != down_sum[1]:
        return TableDiff(database, table, f"checksum {up_sum[1]} upstream, {down_sum[1]} "
                                          "downstream (the rows read back equal: a value "
                                          "the client library maps to the same Python "
                                          "value differs on the servers)", CHECKSUM_DIFFERS)
    return None


def _match_rows(database: str, table: str, columns: list[str], key: list[str],
                up_rows, down_rows) -> TableDiff | None:
    """Match two row streams by key (the whole row without a key); see the module doc.

    Without a key the table is a multiset, so each pending key holds a list of rows.
    """
    idx = [columns.index(c) for c in key] if key else None
    pending: tuple[dict, dict] = ({}, {})  # rows waiting for a partner: upstream, downstream
    diff = TableDiff(database, table, "")
    keep: dict[str, int] = {}

    def sample(what: str, up_row, down_row) -> None:
        if keep.get(what, 0) < SAMPLES:
            keep[what] = keep.get(what, 0) + 1
            diff.samples.append((what, up_row, down_row))

    def take(side: int, row: tuple) -> None:
        k = tuple(row[i] for i in idx) if idx is not None else row
        other = pending[1 - side].get(k)
        if not other:
            pending[side].setdefault(k, []).append(row)
            return
        partner = other.pop()
        if not other:
            del pending[1 - side][k]
        up_row, down_row = (row, partner) if side == 0 else (partner, row)
        if up_row != down_row:
            diff.changed += 1
            sample("values differ", up_row, down_row)

    for up_row, down_row in zip_longest(up_rows, down_rows):
        if up_row is not None:
            take(0, tuple(up_row))
        if down_row is not None:
            take(1, tuple(down_row))
    for rows in pending[0].values():
        for row in rows:
            diff.missing += 1
            sample("missing downstream", row, None)
    for rows in pending[1].values():
        for row in rows:
            diff.extra += 1
            sample("extra downstream", None, row)
    if not (diff.missing or diff.extra or diff.changed):
        return None
    parts = [f"{n} {what}" for n, what in ((diff.missing, "rows missing downstream"),
                                           (diff.extra, "rows extra downstream"),
                                           (diff.changed, "rows with different values"))
             if n]
    keyed = f"matched by key ({', '.join(key)})" if key else "no key: whole rows matched"
    diff.reason = f"{', '.join(parts)}; {keyed}"
    diff.samples.sort(key=lambda s: ("missing downstream", "extra downstream",
                                     "values differ").index(s[0]))
    return diff
