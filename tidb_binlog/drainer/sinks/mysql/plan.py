"""How one worker's batch becomes downstream transactions and statements (pure).

:func:`as_part` normalises a batch item (a :class:`~tidb_binlog.drainer.apply.dml.Txn`,
a dispatcher part ``(commit_ts, dmls)`` or a :class:`~tidb_binlog.drainer.apply.dml.DDL`)
into a :class:`Part` (a named tuple: one per upstream txn, so it must be cheap);
:func:`check_batch` insists on strictly ascending commit_ts.

:func:`plan_units` groups parts into :class:`Unit` s, one per downstream
transaction: consecutive DML parts while the unit holds at most ``txn_batch`` row
changes; a DDL alone; a part bigger than ``txn_batch`` alone, or, when
``split_parts`` (exactly-once off), cut into ``txn_batch`` pieces.

:func:`render_unit` turns a unit's row changes into ``(statement, lo_ts, hi_ts)``
triples, where ``lo_ts..hi_ts`` is the commit_ts range the statement applies:
merge-by-key bulk statements for tables with a primary key when ``merge`` is on,
per-row statements otherwise, with runs of same-shaped single-row INSERTs or
REPLACEs coalesced into one multi-row statement of at most ``rows_per_statement``
rows (MySQL applies its rows one by one, in order, so the effect is the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tidb_binlog.drainer.apply.dml import DDL, DML, Txn
from tidb_binlog.drainer.apply.merge_by_key import DEFAULT_BATCH_SIZE, merge_statements
from tidb_binlog.drainer.apply.sql import Statement, dml_statements
from tidb_binlog.errors import ProtocolError

__all__ = ["Part", "Unit", "as_part", "check_batch", "plan_units", "render_unit"]


class Part(NamedTuple):
    """One upstream transaction's share of a worker batch: row changes, or one DDL."""

    commit_ts: int
    dmls: tuple[DML, ...] = ()
    ddl: DDL | None = None
    # a chunk of a large transaction that continues in a later part, run without COMMIT:
    # its number (1, 2, ...; the keeper's ``(commit_ts, dmls, chunk)``); 0: a whole part
    partial: int = 0

    @property
    def is_ddl(self) -> bool:
        return self.ddl is not None


@dataclass
class Unit:
    """One downstream transaction: ``(commit_ts, dml)`` row changes, or one DDL part."""

    rows: list[tuple[int, DML]] = field(default_factory=list)
    ddl: Part | None = None
    partial: int = 0  # one partial part's rows (its chunk number): executed, not committed

    @property
    def commit_ts_range(self) -> tuple[int, int]:
        if self.ddl is not None:
            return self.ddl.commit_ts, self.ddl.commit_ts
        return self.rows[0][0], self.rows[-1][0]


def as_part(item) -> Part:
    """A batch item as a Part: a Txn, a ``(commit_ts, dmls)`` part, or a DDL."""
    if type(item) is tuple and len(item) == 2 and type(item[0]) is int:
        dmls = item[1]
        # Part(...) without the NamedTuple's Python-level __new__ (one per row change of
        # a 1-row transaction, the common shape)
        return _new_part(Part, (item[0], dmls if type(dmls) is tuple else tuple(dmls), None,
                                0))
    if type(item) is tuple and len(item) == 3 and type(item[0]) is int:  # a partial chunk
        return Part(item[0], tuple(item[1]), None, int(item[2]))
    if isinstance(item, Part):
        return item
    if isinstance(item, Txn):
        return Part(item.commit_ts, item.dmls, item.ddl)
    if isinstance(item, DDL):
        return Part(item.commit_ts, (), item)
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int):
        return Part(int(item[0]), tuple(item[1]))
    raise ProtocolError(f"a batch item must be a Txn, a (commit_ts, dmls) part or a DDL, "
                        f"got {type(item).__name__}: {item!r:.200}")


_new_part = tuple.__new__


def check_batch(parts: Sequence[Part], worker: int) -> None:
    last = None
    for i, part in enumerate(parts):
        if last is not None and part.commit_ts <= last:
            raise ProtocolError(f"worker {worker}: batch parts must have ascending commit_ts; "
                                f"item {i} has {part.commit_ts} after {last}")
        last = part.commit_ts


def plan_units(parts: Sequence[Part], txn_batch: int, *, split_parts: bool) -> list[Unit]:
    """Group parts into downstream transactions (see the module docstring)."""
    units: list[Unit] = []
    current = Unit()
    for part in parts:
        if part.ddl is not None:
            if current.rows:
                units.append(current)
                current = Unit()
            units.append(Unit(ddl=part))
            continue
        dmls = part.dmls
        n = len(dmls)
        if not n:
            continue
        if getattr(part, "partial", False):  # alone: the loader runs it without COMMIT
            if current.rows:
                units.append(current)
                current = Unit()
            units.append(Unit([(part.commit_ts, dml) for dml in dmls], partial=part.partial))
            continue
        if current.rows and len(current.rows) + n > txn_batch:
            units.append(current)
            current = Unit()
        ts = part.commit_ts
        if n == 1:  # the common shape: one row change per upstream txn
            current.rows.append((ts, dmls[0]))
            continue
        rows = [(ts, dml) for dml in dmls]
        if n <= txn_batch or not split_parts:
            current.rows.extend(rows)
            continue
        for i in range(0, n, txn_batch):
            if current.rows:
                units.append(current)
            current = Unit(rows[i:i + txn_batch])
    if current.rows:
        units.append(current)
    return units


def _coalesce_inserts(statements: list[tuple[Statement, int, int]], max_rows: int
                      ) -> list[tuple[Statement, int, int]]:
    """Runs of identical single-row ``INSERT``/``REPLACE ... VALUES (...)`` as multi-row ones."""
    out: list[tuple[Statement, int, int]] = []
    run: list[tuple[Statement, int, int]] = []

    def flush():
        if len(run) == 1:
            out.append(run[0])
        elif run:
            head, _, row = run[0][0].sql.rpartition(" VALUES ")
            args = tuple(a for stmt, _, _ in run for a in stmt.args)
            out.append((Statement(f"{head} VALUES {','.join([row] * len(run))}", args),
                        run[0][1], run[-1][2]))
        run.clear()

    for item in statements:
        sql = item[0].sql
        if not sql.startswith(("INSERT INTO ", "REPLACE INTO ")) or " VALUES (" not in sql:
            flush()
            out.append(item)
            continue
        if run and (run[0][0].sql != sql or len(run) >= max_rows):
            flush()
        run.append(item)
    flush()
    return out


def render_unit(rows: Sequence[tuple[int, DML]], *, merge: bool, safe_mode: bool,
                rows_per_statement: int = DEFAULT_BATCH_SIZE, coalesce: bool = True
                ) -> list[tuple[Statement, int, int]]:
    """The statements of one DML unit, each with the commit_ts range it applies.

    ``merge=False, coalesce=False`` gives one statement per row change, in order:
    the *precise* rendering the loader falls back to in order to name the exact row
    change a permanent error belongs to.
    """
    out: list[tuple[Statement, int, int]] = []
    if not merge:
        for ts, dml in rows:
            out.extend((s, ts, ts) for s in dml_statements(dml, safe_mode=safe_mode))
        return _coalesce_inserts(out, rows_per_statement) if coalesce else out
    by_table: dict[tuple[str, str], list[tuple[int, DML]]] = {}
    for ts, dml in rows:
        by_table.setdefault((dml.database, dml.table), []).append((ts, dml))
    for items in by_table.values():
        schema = items[0][1].schema
        if schema is not None and schema.primary_key is not None:
            lo, hi = items[0][0], items[-1][0]
            statements = merge_statements([d for _, d in items], batch_size=rows_per_statement)
            out.extend((s, lo, hi) for s in statements)
        else:
            plain = [(s, ts, ts) for ts, dml in items
                     for s in dml_statements(dml, safe_mode=safe_mode)]
            out.extend(_coalesce_inserts(plain, rows_per_statement))
    return out
