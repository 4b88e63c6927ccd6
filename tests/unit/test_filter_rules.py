"""The drainer's filters and routing (tidb_binlog/filter): the pure matchers, the DDL
name reader and rewriter, and the config keys' validation."""

from __future__ import annotations

import datetime
import pickle
from types import SimpleNamespace

import pytest

from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.parquet.keeper import ParquetKeeper
from tidb_binlog.errors import ConfigError, SchemaError, UnsupportedDDL
from tidb_binlog.filter.ddl_names import parse_ddl
from tidb_binlog.filter.events import EventFilter, EventRule, normalize_event
from tidb_binlog.filter.router import Router, RouteRule
from tidb_binlog.filter.rules import FilterSettings, TxnFilter
from tidb_binlog.filter.selector import Selector
from tidb_binlog.filter.tables import TableRule
from tidb_binlog.model.consts import TypeCode
from tidb_binlog.model.schema import CIStr, ColumnInfo, TableInfo
from tidb_binlog.model.schema import FieldType as ModelFieldType  # the model's, as TiDB's JSON

SCHEMA = TableSchema.build("shop", "orders", ("id", "v"), ("id",))


def dml(db="shop", table="orders", tp=DMLType.INSERT, schema=SCHEMA):
    old = {"id": 1, "v": "a"} if tp is DMLType.UPDATE else None
    return DML(db, table, tp, {"id": 1, "v": "b"}, old, schema)


# -- selector -------------------------------------------------------------------------
def test_selector_schema_level_covers_the_schema_table_level_needs_a_table():
    sel = Selector([("shop*", "", "s"), ("shop", "ord?rs", "t"), ("shop", "[a-c]*", "r")])
    assert sel.match("SHOP", "orders") == ("s", "t")
    assert sel.match("shop2", "x") == ("s",)
    assert sel.match("shop", "") == ("s",)  # a database object: schema-level rules only
    assert sel.match("shop", "books") == ("s", "r")
    assert sel.match("other", "orders") == ()


# -- event filter ---------------------------------------------------------------------
def test_event_names_are_tidbs_and_unknown_ones_are_refused():
    assert normalize_event("Create  Schema") == "create database"
    assert normalize_event("all dml") == "all dml"
    assert normalize_event("add column") == "add column"  # accepted, never produced
    with pytest.raises(ConfigError, match="'upsert' is not an event type"):
        normalize_event("upsert")


def test_event_filter_rows_by_type_and_groups():
    f = EventFilter([EventRule("shop", "orders", ("delete",)),
                     EventRule("shop", "", ("update",)),
                     EventRule("logs", "*", ("all dml",)),
                     EventRule("odd", "", ("none", "insert"))])
    assert f.skip_dml("shop", "orders", "delete") and f.skip_dml("shop", "orders", "update")
    assert not f.skip_dml("shop", "orders", "insert")
    assert f.skip_dml("shop", "other", "update") and not f.skip_dml("shop", "other", "delete")
    assert all(f.skip_dml("logs", "x", e) for e in ("insert", "update", "delete"))
    assert not f.skip_dml("odd", "t", "insert")  # "none" stops the search (TiDB's order)
    assert not f.skip_dml("else", "t", "insert")


def test_event_filter_ddls_by_type_or_sql():
    f = EventFilter([EventRule("shop", "", ("truncate table", "drop database")),
                     EventRule("shop", "orders", (), (r"ADD\s+COLUMN\s+aaa",)),
                     EventRule("arch", "*", ("all ddl",))])
    assert f.skip_ddl("shop", "t", "TRUNCATE TABLE t")
    assert f.skip_ddl("shop", "", "DROP DATABASE shop")
    assert not f.skip_ddl("shop", "", "CREATE DATABASE shop")
    assert f.skip_ddl("shop", "orders", "alter table orders add column aaa int")
    assert not f.skip_ddl("shop", "orders", "alter table orders add column bbb int")
    assert f.skip_ddl("arch", "t", "CREATE TABLE t (a INT)")
    assert not f.skip_ddl("arch", "", "CREATE DATABASE arch")  # "*" needs a table
    # an unknown statement is matched by ignore-sql only
    assert parse_ddl("GRANT ALL ON x TO y").event == ""
    assert not f.skip_ddl("shop", "t", "GRANT ALL ON x TO y")


def test_ignore_sql_patterns_are_compiled_one_by_one():
    f = EventFilter([EventRule("a", "", (), ("(?s)DROP.*x", "^truncate"))])
    assert f.skip_ddl("a", "t", "drop\n table x") and f.skip_ddl("a", "t", "TRUNCATE t")


def test_bad_ignore_sql_names_the_pattern():
    with pytest.raises(ConfigError, match="ignore-sql '\\(' is not a valid regular"):
        EventFilter([EventRule("a", "", (), ("(",))])


# -- DDL reader -----------------------------------------------------------------------
@pytest.mark.parametrize(("sql", "event", "names", "complete"), [
    ("CREATE DATABASE IF NOT EXISTS `s`", "create database", ["s"], True),
    ("DROP SCHEMA s", "drop database", ["s"], True),
    ("ALTER DATABASE CHARACTER SET utf8mb4", "alter database", [], True),
    ("create table if not exists a.t (id int, b int references u(id))", "create table",
     ["a.t", "u"], True),
    ("CREATE TABLE t (LIKE s.u)", "create table", ["t", "s.u"], True),
    ("CREATE TABLE t SELECT * FROM u", "create table", ["t"], False),
    ("DROP TABLE IF EXISTS a, b.c;", "drop table", ["a", "b.c"], True),
    ("TRUNCATE t", "truncate table", ["t"], True),
    ("RENAME TABLE a TO b, x.y TO z", "rename table", ["a", "b", "x.y", "z"], True),
    ("ALTER TABLE t ADD c INT, RENAME COLUMN a TO b", "alter table", ["t"], True),
    ("ALTER TABLE t RENAME TO u", "alter table", ["t", "u"], True),
    ("ALTER TABLE t EXCHANGE PARTITION p WITH TABLE x.y", "alter table", ["t", "x.y"], True),
    ("/* c */ CREATE UNIQUE INDEX i ON `t` (a)", "create index", ["t"], True),
    ("DROP INDEX i ON s.t", "drop index", ["s.t"], True),
    ("CREATE OR REPLACE VIEW v AS SELECT 1", "create view", [], False),
    ("ALTER TABLE `we``ird` ADD x INT COMMENT 'rename to z'", "alter table", ["we`ird"], True),
])  # fmt: skip
def test_parse_ddl_event_and_names(sql, event, names, complete):
    shape = parse_ddl(sql)
    assert shape.event == event and shape.complete is complete
    assert [f"{n.schema}.{n.name}" if n.schema else n.name for n in shape.names] == names


# -- router ---------------------------------------------------------------------------
ROUTER_RULES = [RouteRule("shop", "orders", "archive", "orders_v2", 0),
                RouteRule("src*", "", "dst", "", 1)]


def test_router_table_level_wins_empty_target_keeps_the_name():
    r = Router(ROUTER_RULES + [RouteRule("shop", "", "", "", 2)])
    assert r.route("shop", "orders") == ("archive", "orders_v2")
    assert r.route("src_1", "t") == ("dst", "t")
    assert r.route("src_1", "") == ("dst", "")
    assert r.route("shop", "books") == ("shop", "books")
    assert r.route("other", "t") == ("other", "t")


def test_router_two_rules_of_a_level_is_an_error_naming_both():
    r = Router([RouteRule("a", "t*", "x", "", 0), RouteRule("a", "*", "y", "", 3)])
    with pytest.raises(SchemaError, match=r"table-migrate-rule\[0\].*table-migrate-rule\[3\]"):
        r.route("a", "t1")


def test_router_routes_dmls_with_their_schema():
    r = Router(ROUTER_RULES)
    kept = dml(table="books", schema=TableSchema.build("shop", "books", ("id", "v"), ("id",)))
    txn = Txn(7, (dml(tp=DMLType.UPDATE), kept))
    out = r.route_txn(txn)
    moved = out.dmls[0]
    assert (moved.database, moved.table) == ("archive", "orders_v2")
    assert moved.schema.qualified_name == "`archive`.`orders_v2`"
    assert moved.schema.unique_keys == SCHEMA.unique_keys and moved.old_values == {"id": 1,
                                                                                    "v": "a"}
    assert out.dmls[1] is kept
    assert r.route_txn(Txn(8, (kept,))).dmls[0] is kept
    assert Router().route_txn(txn) is txn


@pytest.mark.parametrize(("db", "table", "sql", "database", "routed"), [
    ("shop", "orders", "CREATE TABLE orders (id INT)", "shop",
     "CREATE TABLE `archive`.`orders_v2` (id INT)"),
    ("shop", "orders", "alter table shop.orders add c int", "shop",
     "alter table `archive`.`orders_v2` add c int"),
    ("shop", "orders", "DROP TABLE IF EXISTS orders, books", "shop",
     "DROP TABLE IF EXISTS `archive`.`orders_v2`, `shop`.`books`"),
    ("shop", "orders", "TRUNCATE TABLE orders", "shop", "TRUNCATE TABLE `archive`.`orders_v2`"),
    ("shop", "o2", "RENAME TABLE orders TO o2", "shop",
     "RENAME TABLE `archive`.`orders_v2` TO `shop`.`o2`"),
    ("shop", "copy", "CREATE TABLE copy LIKE orders", "shop",
     "CREATE TABLE `shop`.`copy` LIKE `archive`.`orders_v2`"),
    ("shop", "orders", "CREATE INDEX i ON orders (id)", "shop",
     "CREATE INDEX i ON `archive`.`orders_v2` (id)"),
    ("src1", "", "CREATE DATABASE src1", "dst", "CREATE DATABASE `dst`"),
    ("src1", "", "DROP DATABASE IF EXISTS src1", "dst", "DROP DATABASE IF EXISTS `dst`"),
    ("src1", "t", "ALTER TABLE t ADD c INT", "dst", "ALTER TABLE `dst`.`t` ADD c INT"),
    ("shop", "books", "ALTER TABLE books ADD c INT", "shop", "ALTER TABLE books ADD c INT"),
])  # fmt: skip
def test_router_rewrites_ddl_names(db, table, sql, database, routed):
    out = Router(ROUTER_RULES).route_ddl(DDL(db, table, sql, 9))
    assert (out.database, out.sql) == (database, routed)


def test_router_refuses_a_ddl_it_cannot_rewrite_naming_it_and_the_rule():
    r = Router(ROUTER_RULES)
    with pytest.raises(UnsupportedDDL) as info:
        r.route_ddl(DDL("src1", "v", "CREATE VIEW v AS SELECT * FROM t", 11))
    msg = str(info.value)
    assert "commit_ts 11" in msg and "CREATE VIEW v" in msg
    assert "table-migrate-rule[1] (src* -> dst.*)" in msg and "ignore-txn-commit-ts" in msg
    # a DDL that touches nothing routed passes as it is
    ddl = DDL("shop", "v", "CREATE VIEW v AS SELECT 1", 12)
    assert r.route_ddl(ddl) is ddl


# -- TxnFilter ------------------------------------------------------------------------
def test_txn_filter_order_tables_then_events_then_routes():
    settings = FilterSettings(
        do_dbs=("shop", "~^src"), ignore_tables=(TableRule("shop", "log"),),
        event_rules=(EventRule("shop", "orders", ("delete", "truncate table")),),
        route_rules=tuple(ROUTER_RULES))
    f = TxnFilter(settings, ignore_schemas=("src_tmp",))
    assert f.skip_table("other", "t") and f.skip_table("shop", "log")
    assert f.skip_table("src_tmp", "t") and not f.skip_table("src_1", "t")
    txn = Txn(3, (dml(), dml(tp=DMLType.DELETE), dml(table="log")))
    out = f.apply(txn)
    assert [(d.database, d.table, d.tp) for d in out.dmls] == [
        ("archive", "orders_v2", DMLType.INSERT)]
    assert f.apply(Txn(4, (dml(tp=DMLType.DELETE),))) is None
    assert f.apply(Txn(5, ddl=DDL("shop", "orders", "TRUNCATE orders", 5))) is None
    assert f.apply(Txn(6, ddl=DDL("shop", "log", "ALTER TABLE log ADD c INT", 6))) is None
    assert f.apply(Txn(7, ddl=DDL("other", "", "CREATE DATABASE other", 7))) is None
    kept = f.apply(Txn(8, ddl=DDL("shop", "orders", "ALTER TABLE orders ADD c INT", 8)))
    assert kept.ddl.sql == "ALTER TABLE `archive`.`orders_v2` ADD c INT"
    # rows_prefiltered: the translator dropped filtered tables' rows already
    assert f.filter(Txn(9, (dml(table="log"),)), rows_prefiltered=True).dmls[0].table == "log"


def test_txn_filter_keeps_the_loopback_mark_table_when_asked():
    f = TxnFilter(FilterSettings(do_dbs=("shop",)), always_keep=[("retl", "_drainer_repl_mark")])
    assert not f.skip_table("RETL", "_drainer_repl_mark") and f.skip_table("retl", "other")


# -- config -----------------------------------------------------------------------------
CONFIG = """
[syncer]
replicate-do-db = ["shop", "~^src"]
[[syncer.replicate-do-table]]
db-name = "bank"
tbl-name = "~^acc"
[[syncer.ignore-table]]
db-name = "shop"
tbl-name = "log"
[syncer.binlog-filter-rule.no-delete]
ignore-event = ["delete", "Truncate Table"]
ignore-sql = ["^ALTER .* ADD COLUMN aaa"]
[[syncer.table-migrate-rule]]
binlog-filter-rule = ["no-delete"]
source = { schema = "shop", table = "orders" }
target = { schema = "archive", table = "orders_v2" }
[[syncer.table-migrate-rule]]
source = { schema = "src*" }
target = { schema = "dst" }
"""


def test_settings_from_config_are_plain_data_that_pickle(tmp_path):
    path = tmp_path / "drainer.toml"
    path.write_text(CONFIG)
    cfg = load_drainer_config(path, {"syncer.db-type": "file"})
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    filters = pickle.loads(pickle.dumps(settings)).filters
    assert filters.do_dbs == ("shop", "~^src")
    assert filters.do_tables == (TableRule("bank", "~^acc"),)
    assert filters.ignore_tables == (TableRule("shop", "log"),)
    assert filters.event_rules == (EventRule("shop", "orders", ("delete", "Truncate Table"),
                                             ("^ALTER .* ADD COLUMN aaa",), "no-delete", 0),)
    assert [r.describe() for r in filters.route_rules] == [
        "table-migrate-rule[0] (shop.orders -> archive.orders_v2)",
        "table-migrate-rule[1] (src* -> dst.*)"]
    f = TxnFilter.of_settings(settings)
    assert f.skip_row("shop", "orders", DMLType.DELETE) and f.route("src9", "t") == ("dst", "t")


@pytest.mark.parametrize(("text", "key", "message"), [
    ('[syncer]\nreplicate-do-db = ["~("]\n', "syncer.replicate-do-db[0]",
     "not a valid regular expression"),
    ('[[syncer.ignore-table]]\ndb-name = "a"\ntbl-name = "~[x"\n',
     "syncer.ignore-table[0].tbl-name", "not a valid regular expression"),
    ('[[syncer.replicate-do-table]]\ndb-name = "~*"\ntbl-name = "t"\n',
     "syncer.replicate-do-table[0].db-name", "not a valid regular expression"),
    ('[syncer.binlog-filter-rule.r]\nignore-event = ["upsert"]\n',
     "syncer.binlog-filter-rule.r.ignore-event", "'upsert' is not an event type"),
    ('[syncer.binlog-filter-rule.r]\nignore-sql = ["("]\n',
     "syncer.binlog-filter-rule.r.ignore-sql", "not a valid regular expression"),
    ('[[syncer.table-migrate-rule]]\nbinlog-filter-rule = ["nope"]\nsource = {schema = "a"}\n',
     "syncer.table-migrate-rule[0].binlog-filter-rule", "nope"),
    ('[[syncer.table-migrate-rule]]\nsource = {schema = "a[b"}\ntarget = {schema = "c"}\n',
     "syncer.table-migrate-rule[0].source.schema", "unclosed"),
])  # fmt: skip
def test_bad_filter_config_is_a_config_error_naming_the_key(tmp_path, text, key, message):
    path = tmp_path / "drainer.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_drainer_config(path)
    assert info.value.key == key


# -- the Parquet keeper ---------------------------------------------------------------
def test_parquet_keeper_filters_then_routes_rows_and_ddls():
    cols = [ColumnInfo(i, CIStr(n), type=ModelFieldType(tp=TypeCode.LONG))
            for i, n in enumerate(("id", "v"), 1)]
    keeper = object.__new__(ParquetKeeper)
    keeper.translator = SimpleNamespace(tz=datetime.UTC, _views={1: SimpleNamespace(
        schema=SCHEMA, writable=cols, info=TableInfo(1, CIStr("orders"), pk_is_handle=True))})
    keeper._ignored_dbs = frozenset()
    keeper.filters = TxnFilter(FilterSettings(
        event_rules=(EventRule("shop", "orders", ("delete", "drop table")),),
        route_rules=tuple(ROUTER_RULES)))
    changes = keeper._changes(Txn(5, (dml(), dml(tp=DMLType.DELETE))))
    assert [(spec.database, spec.table, op) for spec, op, _, _ in changes.rows] == [
        ("archive", "orders_v2", "insert")]
    assert keeper._changes(Txn(6, (dml(tp=DMLType.DELETE),))) is None
    assert keeper._changes(Txn(7, ddl=DDL("shop", "orders", "DROP TABLE orders", 7))) is None
    assert keeper._changes(Txn(8, ddl=DDL("shop", "orders", "ALTER TABLE orders ADD c INT",
                                          8))).ddl == (
        "shop", "orders_v2", "ALTER TABLE `archive`.`orders_v2` ADD c INT")


def test_case_sensitive_source_patterns():
    assert Selector([("Shop", "", 1)]).match("SHOP", "t") == (1,)
    assert Selector([("Shop", "", 1)], case_sensitive=True).match("SHOP", "t") == ()
    f = TxnFilter(FilterSettings(route_rules=(RouteRule("Shop", "", "x", "", 0),),
                                 case_sensitive=True))
    assert f.route("Shop", "t") == ("x", "t") and f.route("shop", "t") == ("shop", "t")
