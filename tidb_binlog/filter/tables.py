"""Which schemas and tables to keep: TiDB's do/ignore db/table rules as a small pure matcher.

:class:`TableFilter` is TiDB Binlog's ``pkg/filter``: what the drainer's
``replicate-do-db``, ``replicate-do-table``, ``ignore-table`` and ``ignore-schemas``
and reparo's ``replicate-do-db``, ``replicate-do-table``, ``replicate-ignore-db`` and
``replicate-ignore-table`` mean:

- a **pattern** starting with ``~`` is a regular expression searched in the name
  (``~^log_`` = names starting with ``log_``; anchor it yourself); any other pattern is
  the name itself, compared **exactly** (TiDB wraps it in ``^...$`` as a regex, so a
  ``.`` there matches any character; we do not). Both are case-insensitive;
- the **allow list** first: with no do-db and no do-table every table passes; otherwise
  a table passes when a do-table rule matches both its schema and its name, or a do-db
  rule matches its schema;
- then the **block list**: a table that passed is dropped when an ignore-table rule
  matches it or an ignore-db rule (the drainer's ``ignore-schemas``) matches its schema.

So ``replicate-do-db = ["shop"]`` with ``ignore-table = [shop.log]`` keeps every table of
``shop`` but ``log``. A DDL is matched by the object it changes: its schema, and ``""``
as the table for a database DDL (a do-table rule cannot pass ``CREATE DATABASE``, a
do-db rule can; TiDB behaves the same). :meth:`TableFilter.ddl_object` says which object
that is: the drainer's DDL carries it from the DDL job; reparo reads it from the SQL
(:class:`tidb_binlog.reparo.filter.TableFilter`).

A bad regular expression raises :class:`~tidb_binlog.errors.ConfigError` naming the
pattern (the config loaders add the key).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tidb_binlog.drainer.apply.dml import DDL, Txn
from tidb_binlog.errors import ConfigError

__all__ = ["TableFilter", "TableRule", "compile_pattern"]


@dataclass(frozen=True)
class TableRule:
    """One ``[[...-table]]`` entry: a schema pattern and a table pattern."""

    schema: str
    table: str


def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """A matcher ``name -> bool`` for one pattern (``~regex`` or exact, case-insensitive)."""
    if pattern.startswith("~"):
        try:
            regex = re.compile(pattern[1:], re.IGNORECASE)
        except re.error as exc:
            raise ConfigError(f"{pattern!r} is not a valid regular expression: {exc}") from None
        return lambda name: regex.search(name) is not None
    folded = pattern.casefold()
    return lambda name: name.casefold() == folded


class TableFilter:
    """TiDB's do/ignore rules (see the module doc); an empty filter passes everything."""

    def __init__(self, do_dbs: Iterable[str] = (), do_tables: Iterable[TableRule] = (),
                 ignore_dbs: Iterable[str] = (), ignore_tables: Iterable[TableRule] = ()):
        self._do_dbs = [compile_pattern(p) for p in do_dbs]
        self._do_tables = [(compile_pattern(r.schema), compile_pattern(r.table))
                           for r in do_tables]
        self._ignore_dbs = [compile_pattern(p) for p in ignore_dbs]
        self._ignore_tables = [(compile_pattern(r.schema), compile_pattern(r.table))
                               for r in ignore_tables]
        self._cache: dict[tuple[str, str], bool] = {}

    @property
    def empty(self) -> bool:
        return not (self._do_dbs or self._do_tables or self._ignore_dbs or self._ignore_tables)

    def skip(self, schema: str, table: str) -> bool:
        """Whether changes to ``schema``.``table`` are dropped (``table`` may be "")."""
        key = (schema, table)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = not self._allowed(schema, table) or self._blocked(
                schema, table)
            if len(self._cache) > 65536:
                self._cache.clear()
        return hit

    def _allowed(self, schema: str, table: str) -> bool:
        if not (self._do_dbs or self._do_tables):
            return True
        return (any(s(schema) and t(table) for s, t in self._do_tables)
                or any(s(schema) for s in self._do_dbs))

    def _blocked(self, schema: str, table: str) -> bool:
        return (any(s(schema) and t(table) for s, t in self._ignore_tables)
                or any(s(schema) for s in self._ignore_dbs))

    def ddl_object(self, ddl: DDL) -> tuple[str, str]:
        """``(schema, table)`` a DDL changes: the drainer's DDL names it (from its job)."""
        return ddl.database, ddl.table

    def filter_txn(self, txn: Txn) -> Txn | None:
        """``txn`` without the changes the rules drop; None when nothing is left. DMLs of
        skipped tables are dropped (the transaction keeps the rest, as TiDB does); a
        skipped DDL or a transaction left without DMLs gives None."""
        if self.empty:
            return txn
        if txn.ddl is not None:
            return None if self.skip(*self.ddl_object(txn.ddl)) else txn
        kept = tuple(d for d in txn.dmls if not self.skip(d.database, d.table))
        if not kept:
            return None
        return txn if len(kept) == len(txn.dmls) else Txn(txn.commit_ts, kept)
