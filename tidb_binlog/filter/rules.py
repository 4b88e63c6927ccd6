"""A task's filters and routes as plain data (:class:`FilterSettings`) and the object the
keepers call (:class:`TxnFilter`).

:class:`FilterSettings` is derived once from ``[syncer]`` (``replicate-do-db``,
``replicate-do-table``, ``ignore-table``, ``table-migrate-rule``,
``binlog-filter-rule``) and travels inside
:class:`~tidb_binlog.drainer.pipeline.settings.TaskSettings` (it pickles: tuples of
strings and frozen dataclasses). :meth:`FilterSettings.problems` validates it (the
config loader turns the first problem into a ConfigError naming the key).

:class:`TxnFilter` applies, in TiDB Binlog's order:

1. the table filter (:class:`~.tables.TableFilter`: do-db / do-table, then ignore-table
   and ``ignore-schemas``): :meth:`TxnFilter.skip_table` is what the translators ask
   before decoding a table's rows, so filtered rows are never decoded; a DDL of a
   filtered table (or database) is dropped;
2. the event filter (:class:`~.events.EventFilter`): rows by type, DDLs by type or SQL;
3. the router (:class:`~.router.Router`): names of what is left.

A DDL dropped here has already changed the keeper's schema history (the translator
applied its job first), so later rows of the table still decode.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from tidb_binlog import binlog as bl
from tidb_binlog.drainer.apply.dml import DMLType, Txn
from tidb_binlog.errors import ConfigError
from tidb_binlog.filter.events import EventFilter, EventRule, normalize_event
from tidb_binlog.filter.router import Router, RouteRule
from tidb_binlog.filter.selector import compile_glob
from tidb_binlog.filter.tables import TableFilter, TableRule, compile_pattern

__all__ = ["FilterSettings", "TxnFilter", "config_problems"]

log = logging.getLogger(__name__)

_EVENT_OF = {DMLType.INSERT: "insert", DMLType.UPDATE: "update", DMLType.DELETE: "delete"}
_MUTATION_EVENT = {bl.MutationType.INSERT: "insert", bl.MutationType.UPDATE: "update",
                   bl.MutationType.DELETE_ROW: "delete"}


@dataclass(frozen=True)
class FilterSettings:
    """The filter and routing rules of a task (see the module doc); empty = none."""

    do_dbs: tuple[str, ...] = ()
    do_tables: tuple[TableRule, ...] = ()
    ignore_tables: tuple[TableRule, ...] = ()
    event_rules: tuple[EventRule, ...] = ()
    route_rules: tuple[RouteRule, ...] = ()
    case_sensitive: bool = False  # [syncer] case-sensitive: source patterns only

    @classmethod
    def from_syncer(cls, s) -> FilterSettings:
        """From a :class:`~tidb_binlog.config.drainer.SyncerConfig`. A table-migrate-rule
        binds each binlog-filter-rule it names to its source; a rule with a ``target``
        routes. A rule naming an undefined binlog-filter-rule raises ConfigError."""
        events, routes = [], []
        for i, rule in enumerate(s.table_migrate_rule):
            source = rule.source
            for name in rule.binlog_filter_rule:
                if name not in s.binlog_filter_rule:
                    raise ConfigError(f"table-migrate-rule[{i}] names binlog-filter-rule "
                                      f"{name!r}, which no [syncer.binlog-filter-rule.{name}] "
                                      "defines", key=f"syncer.table-migrate-rule[{i}]")
                f = s.binlog_filter_rule[name]
                events.append(EventRule(source.schema, source.table, tuple(f.ignore_event),
                                        tuple(f.ignore_sql), name, i))
            if rule.target is not None:
                routes.append(RouteRule(source.schema, source.table, rule.target.schema,
                                        rule.target.table, i))
        return cls(do_dbs=tuple(s.replicate_do_db),
                   do_tables=tuple(TableRule(t.db_name, t.tbl_name)
                                   for t in s.replicate_do_table),
                   ignore_tables=tuple(TableRule(t.db_name, t.tbl_name)
                                       for t in s.ignore_table),
                   event_rules=tuple(events), route_rules=tuple(routes),
                   case_sensitive=bool(s.case_sensitive))

    @property
    def empty(self) -> bool:
        return not (self.do_dbs or self.do_tables or self.ignore_tables or self.event_rules
                    or self.route_rules)

    def problems(self) -> list[tuple[str, str]]:
        """``(config key, what is wrong)`` for every rule that cannot be used."""
        out: list[tuple[str, str]] = []

        def check(key: str, fn, value: str) -> None:
            try:
                fn(value)
            except ConfigError as exc:
                out.append((key, str(exc)))

        for i, p in enumerate(self.do_dbs):
            check(f"syncer.replicate-do-db[{i}]", compile_pattern, p)
        for key, rules in (("replicate-do-table", self.do_tables),
                           ("ignore-table", self.ignore_tables)):
            for i, r in enumerate(rules):
                check(f"syncer.{key}[{i}].db-name", compile_pattern, r.schema)
                check(f"syncer.{key}[{i}].tbl-name", compile_pattern, r.table)
        for r in self.event_rules:
            key = f"syncer.binlog-filter-rule.{r.name}"
            for e in r.ignore_event:
                check(f"{key}.ignore-event", normalize_event, e)
            for p in r.ignore_sql:
                check(f"{key}.ignore-sql", lambda x: EventFilter([EventRule("", "", (), (x,))]),
                      p)
        sources = {r.index: (r.schema, r.table) for r in (*self.event_rules, *self.route_rules)}
        for index, (schema, table) in sorted(sources.items()):
            key = f"syncer.table-migrate-rule[{index}]"
            check(f"{key}.source.schema", compile_glob, schema)
            if table:
                check(f"{key}.source.table", compile_glob, table)
        return out


def config_problems(syncer) -> list[tuple[str, str]]:
    """``(config key, what is wrong)`` for ``[syncer]``'s filter and routing keys: every
    defined binlog-filter-rule (bound or not), then the rules as
    :meth:`FilterSettings.problems` sees them."""
    out: list[tuple[str, str]] = []
    for name, rule in syncer.binlog_filter_rule.items():
        key = f"syncer.binlog-filter-rule.{name}"
        for e in rule.ignore_event:
            try:
                normalize_event(e)
            except ConfigError as exc:
                out.append((f"{key}.ignore-event", str(exc)))
        for p in rule.ignore_sql:
            try:
                EventFilter([EventRule("", "", (), (p,))])
            except ConfigError as exc:
                out.append((f"{key}.ignore-sql", str(exc)))
    try:
        settings = FilterSettings.from_syncer(syncer)
    except ConfigError as exc:
        return out + [("syncer.table-migrate-rule", str(exc))]
    return out + [p for p in settings.problems() if p not in out]


class TxnFilter:
    """The compiled filters of a task (see the module doc)."""

    def __init__(self, settings: FilterSettings | None = None,
                 ignore_schemas: Iterable[str] = (), *,
                 always_keep: Iterable[tuple[str, str]] = ()):
        """``always_keep``: ``(schema, table)`` pairs the table filter never drops (the
        loopback mark table, whose rows loop detection reads after translation)."""
        settings = settings or FilterSettings()
        self._keep = frozenset((s.lower(), t.lower()) for s, t in always_keep)
        self.tables = TableFilter(settings.do_dbs, settings.do_tables, ignore_schemas,
                                  settings.ignore_tables)
        self.events = EventFilter(settings.event_rules, settings.case_sensitive)
        self.router = Router(settings.route_rules, settings.case_sensitive)
        self.empty = self.tables.empty and not self.events and not self.router

    @classmethod
    def of_settings(cls, settings) -> TxnFilter:
        """From :class:`~tidb_binlog.drainer.pipeline.settings.TaskSettings`: its filters
        and ``ignore-schemas``; with loopback-control the mark table is never dropped
        here (the loopback filter reads its rows, then drops them)."""
        # here, not at the top: loopback pulls in the SQL layer (pymysql), and the config
        # loader imports this module to validate drainer.toml
        from tidb_binlog.drainer.loopback import MARK_DATABASE, MARK_TABLE

        keep = [(MARK_DATABASE, MARK_TABLE)] if settings.loopback_control else []
        return cls(settings.filters, settings.ignore_schemas, always_keep=keep)

    def skip_table(self, schema: str, table: str) -> bool:
        """Whether rows of ``schema``.``table`` are dropped (before decoding them)."""
        return self.tables.skip(schema, table) and (
            not self._keep or (schema.lower(), table.lower()) not in self._keep)

    def skip_row(self, schema: str, table: str, tp: DMLType) -> bool:
        """Whether one row change of a kept table is dropped by its event type."""
        return bool(self.events) and self.events.skip_dml(schema, table, _EVENT_OF[tp])

    def filter(self, txn: Txn | None, *, rows_prefiltered: bool = False) -> Txn | None:
        """``txn`` without what the table and event filters drop, names unchanged; None
        when nothing is left. ``rows_prefiltered``: the translator already dropped the
        rows of filtered tables (:meth:`skip_table` before decoding), only the event
        filter is left to apply to rows."""
        if txn is None or self.empty:
            return txn
        ddl = txn.ddl
        if ddl is not None:
            schema, table = self.tables.ddl_object(ddl)
            if self.skip_table(schema, table):
                log.info("skipping the DDL at commit_ts %s of filtered `%s`.`%s`: %s",
                         txn.commit_ts, schema, table, ddl.sql)
                return None
            if self.events and self.events.skip_ddl(schema, table, ddl.sql):
                log.info("skipping the DDL at commit_ts %s by binlog-filter-rule: %s",
                         txn.commit_ts, ddl.sql)
                return None
            return txn
        dmls = txn.dmls
        if rows_prefiltered and not self.events:
            return txn
        skip = self.skip_table
        kept = list(dmls) if rows_prefiltered else [
            d for d in dmls if not skip(d.database, d.table)]
        if self.events:
            kept = [d for d in kept
                    if not self.events.skip_dml(d.database, d.table, _EVENT_OF[d.tp])]
        if not kept:
            return None
        return txn if len(kept) == len(dmls) else Txn.of_dmls(txn.commit_ts, tuple(kept))

    def apply(self, txn: Txn | None, *, rows_prefiltered: bool = False) -> Txn | None:
        """:meth:`filter`, then the routed names: what a SQL sink applies."""
        return self.router.route_txn(self.filter(txn, rows_prefiltered=rows_prefiltered))

    def skip_mutation(self, schema: str, table: str, tp: int) -> bool:
        """:meth:`skip_row` for a binlog ``MutationType`` (the pb translator's rows)."""
        return bool(self.events) and self.events.skip_dml(schema, table, _MUTATION_EVENT[tp])

    def route(self, schema: str, table: str) -> tuple[str, str]:
        """The downstream names of ``schema``.``table`` (unchanged when not routed)."""
        return self.router.route(schema, table) if self.router else (schema, table)
