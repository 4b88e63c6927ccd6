"""Per-table event filters: ``[syncer.binlog-filter-rule.<name>]`` bound by ``table-migrate-rule``.

TiDB Binlog's binlog event filter (its ``binlog-filter`` package), as the drainer uses
it:

- a ``binlog-filter-rule`` names ``ignore-event`` types and ``ignore-sql`` regular
  expressions; a ``[[syncer.table-migrate-rule]]`` applies the rules it names to its
  ``source`` (schema pattern, optional table pattern: :mod:`.selector`); the rules of
  every ``table-migrate-rule`` covering a table all apply;
- a **row change** is dropped when a covering rule ignores its event type (``insert``,
  ``update``, ``delete``; ``all dml``, ``all``). ``ignore-sql`` never matches a row
  change (TiDB gives the filter no SQL for one);
- a **DDL** is dropped when a covering rule ignores its event type (read from the SQL:
  :func:`~.ddl_names.parse_ddl`: ``create database``, ``create table``, ``alter table``,
  ``truncate table``, ...; ``all ddl``, ``all``) or one of its ``ignore-sql`` regexes
  (case-insensitive, searched anywhere in the statement) matches the statement. A DDL
  whose type is not known (TiDB's "null event") is dropped only by ``ignore-sql``;
- ``none``, ``none ddl``, ``none dml`` in a rule's list stop the search in that list
  (TiDB's order-sensitive behaviour: ``["none", "insert"]`` ignores nothing).

Event names are TiDB's, lower-cased on reading; ``create schema`` / ``drop schema`` /
``alter schema`` mean the ``database`` ones. TiDB also accepts the names of its finer
DDL kinds (``add column``, ``drop column``, ...) and ``incompatible ddl changes``; its
drainer never produces those for a statement, and neither do we: they are accepted and
never match (``alter table`` covers every ALTER TABLE). An unknown name, or an
``ignore-sql`` that is not a regular expression, raises :class:`~tidb_binlog.errors.ConfigError` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tidb_binlog.errors import ConfigError
from tidb_binlog.filter.ddl_names import parse_ddl
from tidb_binlog.filter.selector import Selector

__all__ = ["EventRule", "EventFilter", "DML_EVENTS", "DDL_EVENTS", "EVENT_NAMES",
           "normalize_event"]

DML_EVENTS = frozenset({"insert", "update", "delete"})
# the DDL types a statement can have (ddl_names.parse_ddl's events)
DDL_EVENTS = frozenset({
    "create database", "drop database", "alter database", "create table", "drop table",
    "truncate table", "rename table", "create index", "drop index", "create view",
    "drop view", "alter table"})
_GROUPS = frozenset({"all", "all ddl", "all dml", "none", "none ddl", "none dml"})
_ALIASES = {"create schema": "create database", "drop schema": "drop database",
            "alter schema": "alter database"}
# accepted for compatibility with TiDB's configs; never produced (see the module doc)
_NEVER_PRODUCED = frozenset({
    "add table partition", "drop table partition", "truncate table partition",
    "incompatible ddl changes", "value range decrease", "precision decrease",
    "modify column", "rename column", "rename index", "drop column", "drop primary key",
    "drop unique key", "modify default value", "modify constraint", "modify columns order",
    "modify charset", "modify collation", "remove auto increment", "modify storage engine",
    "reorganize table partition", "rebuild table partition", "coalesce table partition",
    "split table partition", "exchange table partition",
    "modify schema charset and collate", "modify table charset and collate",
    "modify table comment", "recover table", "alter table partitioning",
    "remove table partitioning", "add column", "set default value", "rebase auto id",
    "add primary key", "alter index visibility", "alter ttl info", "alter ttl remove",
    "multi schema change"})
EVENT_NAMES = DML_EVENTS | DDL_EVENTS | _GROUPS | frozenset(_ALIASES) | _NEVER_PRODUCED
"""Every ``ignore-event`` name a config may use."""


def normalize_event(name: str) -> str:
    """The canonical name of an ``ignore-event`` entry; ConfigError for an unknown one."""
    key = " ".join(name.lower().split())
    if key not in EVENT_NAMES:
        raise ConfigError(f"{name!r} is not an event type; use one of: insert, update, "
                          "delete, all dml, create database, drop database, create table, "
                          "drop table, alter table, truncate table, rename table, create "
                          "index, drop index, all ddl, all (or another TiDB event name)")
    return _ALIASES.get(key, key)


@dataclass(frozen=True)
class EventRule:
    """One binlog-filter-rule bound to one source: what it ignores there."""

    schema: str  # source schema pattern (wildcards)
    table: str  # source table pattern; "" = the whole schema
    ignore_event: tuple[str, ...] = ()
    ignore_sql: tuple[str, ...] = ()
    name: str = ""  # the binlog-filter-rule's name, for messages
    index: int = 0  # the table-migrate-rule's position, for messages


class _Compiled:
    def __init__(self, rule: EventRule):
        self.rule = rule
        self.events = tuple(normalize_event(e) for e in rule.ignore_event)
        self.sql: list[re.Pattern] = []
        for pattern in rule.ignore_sql:
            try:
                self.sql.append(re.compile(pattern, re.IGNORECASE))
            except re.error as exc:
                raise ConfigError(f"ignore-sql {pattern!r} is not a valid regular "
                                  f"expression: {exc}") from None

    def ignores_event(self, event: str) -> bool:
        dml = event in DML_EVENTS
        for name in self.events:
            if name == "all":
                return True
            if name == "none":
                return False
            if dml:
                if name == "all dml":
                    return True
                if name == "none dml":
                    return False
            else:
                if name == "all ddl":
                    return True
                if name == "none ddl":
                    return False
            if name == event:
                return True
        return False


class EventFilter:
    """The event rules of a task (see the module doc); an empty filter drops nothing."""

    def __init__(self, rules: Iterable[EventRule] = (), case_sensitive: bool = False):
        compiled = [_Compiled(r) for r in rules]
        self._selector = Selector(((c.rule.schema, c.rule.table, c) for c in compiled),
                                  case_sensitive)
        self._dml_cache: dict[tuple[str, str, str], bool] = {}

    def __bool__(self) -> bool:
        return bool(self._selector)

    def skip_dml(self, schema: str, table: str, event: str) -> bool:
        """Whether a row change (``event`` insert/update/delete) of the table is dropped."""
        key = (schema, table, event)
        hit = self._dml_cache.get(key)
        if hit is None:
            hit = any(c.ignores_event(event) for c in self._selector.match(schema, table))
            if len(self._dml_cache) > 65536:
                self._dml_cache.clear()
            self._dml_cache[key] = hit
        return hit

    def skip_ddl(self, schema: str, table: str, sql: str) -> bool:
        """Whether a DDL changing ``schema``.``table`` (table "" for a database DDL) is
        dropped, by its event type or its SQL."""
        rules = self._selector.match(schema, table)
        if not rules:
            return False
        event = parse_ddl(sql).event
        for c in rules:
            if event and c.ignores_event(event):
                return True
            if any(p.search(sql) for p in c.sql):
                return True
        return False
