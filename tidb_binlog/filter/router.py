"""Table routing: ``[[syncer.table-migrate-rule]]`` ``source`` → ``target`` names, for every sink.

TiDB Binlog reads a rule's ``target`` only for its Oracle sink; here every sink routes:
a row change of a routed table is written under the target names, and so is a DDL.

**Which rule** (TiDB's table router): a rule whose source has a table pattern
(table-level) wins over one without (schema-level, :mod:`.selector`); a database
object (table ``""``: ``CREATE DATABASE``) takes only schema-level rules. An empty
``target.schema`` keeps the schema, an empty ``target.table`` keeps the table name
(``source = {schema = "shop"}``, ``target = {schema = "shop_copy"}`` moves every table
of ``shop``). A table covered by two rules of the same level is an error
(:class:`~tidb_binlog.errors.SchemaError` naming both): make the patterns disjoint.

**DDL**: the statement's names are read by :func:`~.ddl_names.parse_ddl` and, when any
of them (or the DDL's own table) is routed, every table name is rewritten to its routed
and qualified form (```target_db`.`target_t```; unqualified names are taken in the DDL's
database first) and database names to their routed schema; the DDL then runs in the
schema-level route of its database. So ``CREATE``/``ALTER``/``DROP``/``TRUNCATE``/
``RENAME TABLE``, ``CREATE``/``DROP INDEX`` (with ``LIKE``, ``REFERENCES``,
``RENAME TO`` and ``EXCHANGE PARTITION ... WITH TABLE`` names) and ``CREATE``/``DROP``/
``ALTER DATABASE`` are routed; a routed database DDL creates (drops, alters) the target
schema. Any other statement whose own table or names are routed (a routed view,
``CREATE TABLE ... SELECT``, forms the reader does not know) raises
:class:`~tidb_binlog.errors.UnsupportedDDL` naming the DDL and the rule rather than
running it against the wrong table. The body of a view is not read: a view that is not
routed itself keeps naming the source tables. A target schema named only by table-level
rules must exist downstream (create it, or route the schema with a schema-level rule).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidb_binlog.drainer.apply.dml import DDL, DML, TableSchema, Txn, _dml_unchecked
from tidb_binlog.errors import SchemaError, UnsupportedDDL
from tidb_binlog.filter.ddl_names import NameRef, parse_ddl, rewrite_names
from tidb_binlog.filter.selector import Selector

__all__ = ["RouteRule", "Router"]


@dataclass(frozen=True)
class RouteRule:
    """One table-migrate-rule with a target: source patterns → target names."""

    schema: str
    table: str  # "" = schema-level
    target_schema: str = ""
    target_table: str = ""
    index: int = 0  # its position among the table-migrate-rules, for messages

    def describe(self) -> str:
        source = f"{self.schema}.{self.table}" if self.table else self.schema
        target = ".".join(x or "*" for x in (self.target_schema, self.target_table))
        return f"table-migrate-rule[{self.index}] ({source} -> {target})"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Router:
    """Routes names, DMLs and DDLs (see the module doc); an empty router changes nothing."""

    def __init__(self, rules: Iterable[RouteRule] = (), case_sensitive: bool = False):
        self._selector: Selector[RouteRule] = Selector(
            ((r.schema, r.table, r) for r in rules), case_sensitive)
        self._names: dict[tuple[str, str], tuple[str, str, RouteRule | None]] = {}
        self._schemas: dict[int, tuple[TableSchema, TableSchema]] = {}

    def __bool__(self) -> bool:
        return bool(self._selector)

    def _resolve(self, schema: str, table: str) -> tuple[str, str, RouteRule | None]:
        key = (schema, table)
        hit = self._names.get(key)
        if hit is not None:
            return hit
        by_schema, by_table = self._selector.match_levels(schema, table)
        candidates = by_table if table and by_table else by_schema
        if len(candidates) > 1:
            raise SchemaError(
                f"`{schema}`.`{table}` matches {len(candidates)} table-migrate-rule targets: "
                + ", ".join(r.describe() for r in candidates)
                + "; make their source patterns disjoint so one rule routes each table")
        if not candidates:
            hit = (schema, table, None)
        else:
            rule = candidates[0]
            hit = (rule.target_schema or schema,
                   (rule.target_table or table) if table else "", rule)
        if len(self._names) > 65536:
            self._names.clear()
        self._names[key] = hit
        return hit

    def route(self, schema: str, table: str) -> tuple[str, str]:
        """The downstream ``(schema, table)`` of ``schema``.``table`` (table may be "")."""
        s, t, _ = self._resolve(schema, table)
        return s, t

    # -- row changes ------------------------------------------------------------------
    def route_txn(self, txn: Txn | None) -> Txn | None:
        """``txn`` with routed names (the same object when nothing is routed)."""
        if txn is None or not self._selector:
            return txn
        if txn.ddl is not None:
            ddl = self.route_ddl(txn.ddl)
            return txn if ddl is txn.ddl else Txn(txn.commit_ts, ddl=ddl)
        out = None
        for i, dml in enumerate(txn.dmls):
            routed = self.route_dml(dml)
            if routed is not dml and out is None:
                out = list(txn.dmls[:i])
            if out is not None:
                out.append(routed)
        return txn if out is None else Txn.of_dmls(txn.commit_ts, tuple(out))

    def route_dml(self, dml: DML) -> DML:
        schema = dml.schema
        # the translator's DMLs share one TableSchema per table version: route it once
        if schema is None:
            s, t = self.route(dml.database, dml.table)
            if (s, t) == (dml.database, dml.table):
                return dml
            return _dml_unchecked(s, t, dml.tp, dml.values, dml.old_values, None)
        hit = self._schemas.get(id(schema))
        if hit is None or hit[0] is not schema:
            s, t = self.route(dml.database, dml.table)
            routed = None if (s, t) == (dml.database, dml.table) else TableSchema(
                s, t, schema.columns, schema.unique_keys)
            if len(self._schemas) > 4096:
                self._schemas.clear()
            hit = self._schemas[id(schema)] = (schema, routed)
        routed = hit[1]
        if routed is None:
            return dml
        return _dml_unchecked(routed.database, routed.table, dml.tp, dml.values,
                              dml.old_values, routed)

    # -- DDL ----------------------------------------------------------------------------
    def route_ddl(self, ddl: DDL) -> DDL:
        """``ddl`` with routed names, or UnsupportedDDL when it cannot be rewritten."""
        if not self._selector:
            return ddl
        own_schema, own_table, own_rule = self._resolve(ddl.database, ddl.table)
        shape = parse_ddl(ddl.sql)
        targets: dict[NameRef, tuple[str, str, RouteRule | None]] = {}
        for ref in shape.names:
            if ref.kind == "db":
                targets[ref] = self._resolve(ref.name, "")
            else:
                source = ref.schema if ref.schema is not None else ddl.database
                targets[ref] = self._resolve(source, ref.name)
        moved = [(ref, hit) for ref, hit in targets.items()
                 if (hit[0], hit[1]) != ((ref.name, "") if ref.kind == "db" else
                                         (ref.schema or ddl.database, ref.name))]
        if (own_schema, own_table) == (ddl.database, ddl.table) and not moved:
            return ddl
        if not shape.complete:
            rule = own_rule or moved[0][1][2]
            raise UnsupportedDDL(
                f"cannot route the DDL at commit_ts {ddl.commit_ts} ({ddl.sql!r}): "
                f"{rule.describe()} routes `{ddl.database}`.`{ddl.table}` and the table names "
                "of this statement cannot be rewritten safely (routed: CREATE/ALTER/DROP/"
                "TRUNCATE/RENAME TABLE, CREATE/DROP INDEX, CREATE/DROP/ALTER DATABASE); "
                f"apply it downstream by hand and skip it with ignore-txn-commit-ts = "
                f"[{ddl.commit_ts}], or change the rule", commit_ts=ddl.commit_ts,
                query=ddl.sql)

        def new_text(ref: NameRef) -> str:
            s, t, _ = targets[ref]
            return _quote(s) if ref.kind == "db" else f"{_quote(s)}.{_quote(t)}"

        sql = rewrite_names(ddl.sql, shape, new_text)
        database = self._resolve(ddl.database, "")[0] if ddl.database else ""
        return DDL(database, own_table, sql, ddl.commit_ts)
