"""The pure half of the initial load: downstream DDL, copy units, their schedule, SQL.

No Ray, Spark or driver here (``spark_on_ray.load`` runs it). A table is copied in
*units*: key ranges of about ``chunk-size`` rows on its primary key (or NOT NULL unique
key), on the upstream emulator's hidden ``_tidb_rowid`` for a table without one, or the
whole table when neither exists. Units are scheduled onto the copy tasks largest first
(each to the least loaded task), so one big table does not end up behind a queue of
small ones.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass

from spark_on_ray.diff_plan import KeyRange, quote_ident, range_predicate
from tidb_binlog.errors import InvalidArgument

__all__ = ["ROWID", "CopyUnit", "unit_rows", "downstream_ddl", "defer_indexes", "schedule",
           "select_sql", "insert_sql", "tsv_select_sql", "tsv_group_select_sql", "load_data_sql",
           "line_bound", "group_rows", "GROUP_BYTES", "even_int_bounds", "MIN_KEY_DENSITY", "INTEGER_TYPES"]

ROWID = "_tidb_rowid"
_ROWID_LINE = re.compile(r"^\s*(`_tidb_rowid`|UNIQUE KEY `[^`]*` \(`_tidb_rowid`\)).*$", re.M)
_AUTO_INC_OPT = re.compile(r"\s+AUTO_INCREMENT=\d+")


def downstream_ddl(create_table: str) -> str:
    """``SHOW CREATE TABLE`` of the upstream without the emulator's hidden ``_tidb_rowid``
    column and its key (TiDB's row id is not a column downstream: the drainer's replicated
    DDL never has it) and without the ``AUTO_INCREMENT=`` counter option."""
    lines = [ln for ln in create_table.split("\n") if not _ROWID_LINE.match(ln)]
    return _AUTO_INC_OPT.sub("", _joined(lines))


# A secondary index line of SHOW CREATE TABLE (InnoDB builds these by sorting afterwards).
_SECONDARY = re.compile(r"^\s*(UNIQUE )?KEY `")
_NO_DEFER = re.compile(r"^\s*(CONSTRAINT\b.*\bFOREIGN KEY|FOREIGN KEY|FULLTEXT|SPATIAL)", re.I)
_AUTO_INC_COL = re.compile(r"^\s*`((?:[^`]|``)+)`.*\bAUTO_INCREMENT\b", re.I)
_PRIMARY = re.compile(r"^\s*PRIMARY KEY \(`((?:[^`]|``)+)`")


def defer_indexes(create_table: str) -> tuple[str, list[str]]:
    """``CREATE TABLE`` without its secondary ``KEY`` / ``UNIQUE KEY`` lines, and those
    definitions, to add in one ``ALTER TABLE`` once the rows are in: InnoDB then builds
    each index by one sort instead of a random insert per row (myloader's
    ``--innodb-optimize-keys``). Nothing is deferred from a table with a foreign key,
    a FULLTEXT or SPATIAL index, or an AUTO_INCREMENT column that is not the first column
    of the primary key (MariaDB requires that column to lead some key at CREATE time)."""
    lines = create_table.split("\n")
    auto = {m.group(1) for ln in lines if (m := _AUTO_INC_COL.match(ln))}
    primary = next((m.group(1) for ln in lines if (m := _PRIMARY.match(ln))), None)
    if any(_NO_DEFER.match(ln) for ln in lines) or (auto and auto != {primary}):
        return create_table, []
    kept, deferred = [], []
    for ln in lines:
        if _SECONDARY.match(ln):
            deferred.append(ln.strip().rstrip(","))
        else:
            kept.append(ln)
    if not deferred:
        return create_table, []
    return _joined(kept), deferred


def _joined(lines: list[str]) -> str:
    """CREATE TABLE lines after some definitions were taken out: the definition before
    ")" must not end with a comma once a following one is gone."""
    for i, ln in enumerate(lines):
        if ln.startswith(")") and i > 0:
            lines[i - 1] = lines[i - 1].rstrip().rstrip(",")
    return "\n".join(lines)


def unit_rows(estimated_rows: int, chunk_size: int, tasks: int) -> int:
    """Rows per copy unit: ``chunk_size``, but small enough that a table gives every task
    about four units (so the last units even out the tasks), and at least 1000 rows (or
    ``chunk_size`` when that is smaller)."""
    return max(min(1000, chunk_size), min(chunk_size, estimated_rows // max(4 * tasks, 1)))


# Rows per key value at least, for the cheap split of an integer key (below: dense enough
# that no unit holds more than 1 / density of its share; sparser keys are cut by a scan).
MIN_KEY_DENSITY = 0.5


def even_int_bounds(lo: int | None, hi: int | None, estimated_rows: int,
                    chunk: int) -> list[tuple] | None:
    """Cut points for one integer key from its MIN and MAX alone (dumpling's split of an
    integer primary key): ``ceil(estimated_rows / chunk)`` ranges of equal key width, no
    scan of the keys. Only when the keys are dense (``estimated_rows / (hi - lo + 1) >=``
    :data:`MIN_KEY_DENSITY`): in any key range there are at most as many rows as values,
    so no range then holds more than ``1 / density`` times its share of the rows. None:
    not dense enough (or no estimate), cut by a scan of the keys instead. ``[]``: one
    range (an empty table or one chunk's worth)."""
    if lo is None or hi is None:
        return []
    span = int(hi) - int(lo) + 1
    if estimated_rows <= 0 or estimated_rows / span < MIN_KEY_DENSITY:
        return None
    pieces = -(-estimated_rows // max(chunk, 1))
    if pieces <= 1:
        return []
    step = -(-span // pieces)
    return [(int(lo) + i * step,) for i in range(1, pieces) if int(lo) + i * step <= int(hi)]


@dataclass(frozen=True)
class CopyUnit:
    """Rows of ``database.table`` in ``range`` of ``key`` (``key == ()``: every row)."""

    database: str
    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    range: KeyRange
    estimated_rows: int
    # information_schema DATA_TYPE of each column (lower case); () = unknown (INSERT only)
    types: tuple[str, ...] = ()
    # LOAD DATA: rows per line group the upstream concatenates into one result row (its
    # single integer key DIV this); 0 = one result row per table row.
    group_rows: int = 0

    @property
    def qualified(self) -> str:
        return f"{quote_ident(self.database)}.{quote_ident(self.table)}"


def schedule(units: list[CopyUnit], tasks: int) -> list[list[CopyUnit]]:
    """Longest-processing-time-first: each unit, biggest first, to the task with the
    fewest estimated rows so far (ties: the lower task index)."""
    tasks = max(1, tasks)
    out: list[list[CopyUnit]] = [[] for _ in range(tasks)]
    heap = [(0, i) for i in range(tasks)]
    for unit in sorted(units, key=lambda u: (-u.estimated_rows, u.database, u.table)):
        load, i = heapq.heappop(heap)
        out[i].append(unit)
        heapq.heappush(heap, (load + unit.estimated_rows, i))
    return out


def select_sql(unit: CopyUnit, literal) -> str:
    """The INSERT path's read: the columns as the server's text, but a FLOAT as a DOUBLE
    (FLOAT's own text has 6 significant digits and does not round-trip)."""
    types = unit.types or ("",) * len(unit.columns)
    cols = ", ".join(f"CAST({quote_ident(c)} AS DOUBLE)" if t == "float" else quote_ident(c)
                     for c, t in zip(unit.columns, types, strict=True))
    where = range_predicate(unit.key, unit.range, literal) if unit.key else "TRUE"
    return f"SELECT {cols} FROM {unit.qualified} WHERE {where}"


def insert_sql(unit: CopyUnit) -> str:
    """The ``executemany`` template: pymysql folds the rows into multi-row INSERTs."""
    cols = ", ".join(quote_ident(c) for c in unit.columns)
    marks = ", ".join(["%s"] * len(unit.columns))
    return f"INSERT INTO {unit.qualified} ({cols}) VALUES ({marks})"


# ---------------------------------------------------------------- LOAD DATA LOCAL INFILE
#
# The copy's fast path (``[load] method``). The upstream itself renders each row as one
# tab-separated line in LOAD DATA's default escaping (``\\`` ``\t`` ``\n`` ``\0``
# escaped, NULL as ``\N``), so a copy task only moves bytes: no per-value conversion or
# escaping in Python, and the downstream parses LOAD DATA instead of INSERT statements
# (2.5x the rows/s of one INSERT stream, measured). Every literal is hex (``X'09'``), so
# neither server's ``NO_BACKSLASH_ESCAPES`` changes its meaning.

_NULL = "X'5C4E'"  # \N
_BYTES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
                    "geometry", "point", "linestring", "polygon", "multipoint",
                    "multilinestring", "multipolygon", "geometrycollection"})
# Types whose text never holds a tab, newline, backslash or NUL: not escaped.
_PLAIN = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal",
                    "numeric", "double", "real", "year", "date", "datetime", "timestamp",
                    "time"})


def _escaped(expr: str) -> str:
    """Text in utf8mb4 with LOAD DATA's escapes (backslash first)."""
    out = f"CONVERT({expr} USING utf8mb4)"
    for raw, esc in (("5C", "5C5C"), ("09", "5C74"), ("0A", "5C6E"), ("00", "5C30")):
        out = f"REPLACE({out}, X'{raw}', X'{esc}')"
    return out


def _field(name: str, data_type: str, var: str) -> tuple[str, str, str | None]:
    """``(select expression, load target, SET expression or None)`` of one column."""
    col = quote_ident(name)
    if data_type in _BYTES:  # bytes as hex: no charset conversion can touch them
        return f"HEX({col})", var, f"{col} = UNHEX({var})"
    if data_type == "bit":  # BIT's text is its raw bytes; its number survives LOAD DATA
        return f"CAST({col} AS UNSIGNED)", var, f"{col} = CAST({var} AS UNSIGNED)"
    if data_type == "float":  # FLOAT's text has 6 digits; as a DOUBLE it is exact
        return f"CAST({col} AS DOUBLE)", col, None
    if data_type in _PLAIN:
        return col, col, None
    return _escaped(col), col, None


def _fields(unit: CopyUnit) -> list[tuple[str, str, str | None]]:
    if len(unit.types) != len(unit.columns):
        raise InvalidArgument(f"copy unit {unit.qualified} has no column types; LOAD DATA "
                              "needs them")
    return [_field(c, t, f"@v{i}") for i, (c, t) in
            enumerate(zip(unit.columns, unit.types, strict=True))]


def tsv_select_sql(unit: CopyUnit, literal) -> str:
    """One column per row: the row as a LOAD DATA line (binary, without its newline)."""
    exprs = ", ".join(f"IFNULL({sel}, {_NULL})" for sel, _, _ in _fields(unit))
    where = range_predicate(unit.key, unit.range, literal) if unit.key else "TRUE"
    return f"SELECT CAST(CONCAT_WS(X'09', {exprs}) AS BINARY) FROM {unit.qualified} WHERE {where}"


def tsv_group_select_sql(unit: CopyUnit, literal) -> str:
    """Rows ``(lines, text)``: ``unit.group_rows`` consecutive keys' lines joined by
    newlines in one result row, so the copy task handles a few hundred result rows where
    it would handle 200k (its Python cost per row was a fifth of the copy's CPU). Only for
    a single integer key and rows of bounded size (:func:`group_rows`); ``lines`` is the
    group's row count, which the copy checks against what LOAD DATA loaded."""
    if len(unit.key) != 1 or unit.group_rows < 1:
        raise InvalidArgument(f"copy unit {unit.qualified} cannot be read in line groups")
    exprs = ", ".join(f"IFNULL({sel}, {_NULL})" for sel, _, _ in _fields(unit))
    where = range_predicate(unit.key, unit.range, literal)
    key = quote_ident(unit.key[0])
    return (f"SELECT COUNT(*), CAST(GROUP_CONCAT(CONCAT_WS(X'09', {exprs}) SEPARATOR X'0A') "
            f"AS BINARY) FROM {unit.qualified} WHERE {where} GROUP BY {key} DIV "
            f"{unit.group_rows}")


# Bytes a line group may take at most (group_concat_max_len is set above it).
GROUP_BYTES = 1 << 20
INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_SHORT = {"tinyint": 5, "smallint": 7, "mediumint": 9, "int": 12, "integer": 12, "bigint": 21,
          "decimal": 68, "numeric": 68, "float": 25, "double": 25, "real": 25, "bit": 21,
          "year": 5, "date": 11, "datetime": 27, "timestamp": 27, "time": 18}
_CHARS = frozenset({"char", "varchar", "enum", "set", "tinytext"})
_OCTETS = frozenset({"binary", "varbinary", "tinyblob"})
# A row longer than this is not worth grouping (and would make a group too big).
_MAX_GROUPED_LINE = 64 << 10


def line_bound(types: tuple[str, ...], char_lengths: tuple[int | None, ...],
               octet_lengths: tuple[int | None, ...]) -> int | None:
    """Longest line :func:`tsv_select_sql` can render for a row of these columns (bytes),
    or None when a column is unbounded (TEXT, BLOB, JSON, geometry...). Text counts 4
    bytes a character, doubled for escapes; bytes count 2 hex digits each."""
    total = 0
    for t, chars, octets in zip(types, char_lengths, octet_lengths, strict=True):
        if t in _SHORT:
            total += _SHORT[t]
        elif t in _CHARS and chars is not None:
            total += 8 * int(chars) + 2
        elif t in _OCTETS and octets is not None:
            total += 2 * int(octets) + 2
        else:
            return None
        total += 1  # the tab
    return total


def group_rows(key_types: tuple[str, ...], bound: int | None, wanted: int = 256) -> int:
    """Rows per line group for a table: 0 (one result row per table row) unless its key is
    one integer column and its lines are bounded; then at most ``wanted`` and at most
    :data:`GROUP_BYTES` of lines per group."""
    if len(key_types) != 1 or key_types[0] not in INTEGER_TYPES or bound is None \
            or bound > _MAX_GROUPED_LINE:
        return 0
    return max(1, min(wanted, GROUP_BYTES // max(bound, 1)))


def load_data_sql(unit: CopyUnit, path_literal: str) -> str:
    """``LOAD DATA LOCAL INFILE`` of the lines :func:`tsv_select_sql` produced."""
    fields = _fields(unit)
    targets = ", ".join(t for _, t, _ in fields)
    sets = [s for _, _, s in fields if s]
    tail = f" SET {', '.join(sets)}" if sets else ""
    return (f"LOAD DATA LOCAL INFILE {path_literal} INTO TABLE {unit.qualified} CHARACTER SET "
            "utf8mb4 FIELDS TERMINATED BY X'09' ENCLOSED BY '' ESCAPED BY X'5C' LINES "
            f"TERMINATED BY X'0A' ({targets}){tail}")
