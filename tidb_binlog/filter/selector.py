"""Which ``table-migrate-rule`` sources a table falls under: wildcard schema/table patterns.

A rule's ``source`` is a schema pattern and an optional table pattern, with the
wildcards of TiDB Binlog's table selector: ``*`` any run of characters, ``?`` exactly
one, ``[a-z]`` / ``[!0-9]`` one character of (not of) a set; anything else is itself.
Matching is case-insensitive unless ``[syncer] case-sensitive = true`` (TiDB Binlog's
switch for these rules; the do/ignore table rules are always case-insensitive).

- A rule **without a table pattern** is a *schema-level* rule: it covers every table of
  a matching schema and the schema itself (the object of ``CREATE DATABASE``, whose
  table is ``""``).
- A rule **with a table pattern** is a *table-level* rule: it covers the tables whose
  schema and name both match; never the schema itself (``*`` needs a table name).

:meth:`Selector.match` returns the matching rules' values, schema-level ones first then
table-level ones, each in config order.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Generic, TypeVar

from tidb_binlog.errors import ConfigError

__all__ = ["Selector", "compile_glob"]

V = TypeVar("V")


def compile_glob(pattern: str, case_sensitive: bool = False) -> re.Pattern:
    """The regular expression of one wildcard pattern (the whole name)."""
    if pattern.count("[") != pattern.count("]"):
        raise ConfigError(f"{pattern!r} has an unclosed [ ] character set")
    flags = re.DOTALL if case_sensitive else re.IGNORECASE | re.DOTALL
    return re.compile(fnmatch.translate(pattern), flags)


class Selector(Generic[V]):
    """``(schema pattern, table pattern or "", value)`` rules → the values covering a
    table (see the module doc). Results are cached per name."""

    def __init__(self, rules: Iterable[tuple[str, str, V]] = (), case_sensitive: bool = False):
        self._schema_rules: list[tuple[re.Pattern, V]] = []
        self._table_rules: list[tuple[re.Pattern, re.Pattern, V]] = []
        for schema, table, value in rules:
            s = compile_glob(schema, case_sensitive)
            if table:
                self._table_rules.append((s, compile_glob(table, case_sensitive), value))
            else:
                self._schema_rules.append((s, value))
        self._cache: dict[tuple[str, str], tuple[tuple[V, ...], tuple[V, ...]]] = {}

    def __bool__(self) -> bool:
        return bool(self._schema_rules or self._table_rules)

    def match_levels(self, schema: str, table: str) -> tuple[tuple[V, ...], tuple[V, ...]]:
        """``(schema-level values, table-level values)`` covering ``schema``.``table``."""
        key = (schema, table)
        hit = self._cache.get(key)
        if hit is None:
            by_schema = tuple(v for s, v in self._schema_rules if s.match(schema))
            by_table = tuple(v for s, t, v in self._table_rules
                             if table and s.match(schema) and t.match(table))
            hit = self._cache[key] = (by_schema, by_table)
            if len(self._cache) > 65536:
                self._cache.clear()
        return hit

    def match(self, schema: str, table: str) -> tuple[V, ...]:
        """Every value covering ``schema``.``table`` (schema-level first)."""
        by_schema, by_table = self.match_levels(schema, table)
        return by_schema + by_table
