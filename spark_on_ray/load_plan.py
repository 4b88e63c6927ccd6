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

__all__ = ["ROWID", "CopyUnit", "unit_rows", "downstream_ddl", "schedule", "select_sql", "insert_sql"]

ROWID = "_tidb_rowid"
_ROWID_LINE = re.compile(r"^\s*(`_tidb_rowid`|UNIQUE KEY `[^`]*` \(`_tidb_rowid`\)).*$", re.M)
_AUTO_INC_OPT = re.compile(r"\s+AUTO_INCREMENT=\d+")


def downstream_ddl(create_table: str) -> str:
    """``SHOW CREATE TABLE`` of the upstream without the emulator's hidden ``_tidb_rowid``
    column and its key (TiDB's row id is not a column downstream: the drainer's replicated
    DDL never has it) and without the ``AUTO_INCREMENT=`` counter option."""
    lines = [ln for ln in create_table.split("\n") if not _ROWID_LINE.match(ln)]
    # The definition before ")" must not end with a comma once a following one is gone.
    for i, ln in enumerate(lines):
        if ln.startswith(")") and i > 0:
            lines[i - 1] = lines[i - 1].rstrip().rstrip(",")
    return _AUTO_INC_OPT.sub("", "\n".join(lines))


def unit_rows(estimated_rows: int, chunk_size: int, tasks: int) -> int:
    """Rows per copy unit: ``chunk_size``, but small enough that a table gives every task
    about four units (so the last units even out the tasks), and at least 1000 rows (or
    ``chunk_size`` when that is smaller)."""
    return max(min(1000, chunk_size), min(chunk_size, estimated_rows // max(4 * tasks, 1)))


@dataclass(frozen=True)
class CopyUnit:
    """Rows of ``database.table`` in ``range`` of ``key`` (``key == ()``: every row)."""

    database: str
    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    range: KeyRange
    estimated_rows: int

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
    cols = ", ".join(quote_ident(c) for c in unit.columns)
    where = range_predicate(unit.key, unit.range, literal) if unit.key else "TRUE"
    return f"SELECT {cols} FROM {unit.qualified} WHERE {where}"


def insert_sql(unit: CopyUnit) -> str:
    """The ``executemany`` template: pymysql folds the rows into multi-row INSERTs."""
    cols = ", ".join(quote_ident(c) for c in unit.columns)
    marks = ", ".join(["%s"] * len(unit.columns))
    return f"INSERT INTO {unit.qualified} ({cols}) VALUES ({marks})"
