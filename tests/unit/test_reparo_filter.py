"""reparo's table filter: TiDB's replicate-do/ignore db/table semantics (pkg/filter)."""

from __future__ import annotations

import pytest

from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, Txn
from tidb_binlog.errors import ConfigError
from tidb_binlog.reparo.filter import TableFilter, TableRule, compile_pattern


def test_empty_filter_passes_everything():
    f = TableFilter()
    assert f.empty and not f.skip("any", "thing")
    txn = Txn(1, (DML("a", "b", DMLType.INSERT, {"x": 1}),))
    assert f.filter_txn(txn) is txn


def test_patterns_exact_or_regex_case_insensitive():
    assert compile_pattern("Shop")("shop") and compile_pattern("shop")("SHOP")
    assert not compile_pattern("sh.p")("shop")          # exact: a dot is a dot
    assert not compile_pattern("shop")("shop2")
    assert compile_pattern("~^log_")("LOG_2024") and not compile_pattern("~^log_")("blog_x")
    assert compile_pattern("~o")("shop")                  # a search, unanchored
    with pytest.raises(ConfigError, match=r"'~\(' is not a valid regular expression"):
        compile_pattern("~(")


def test_allow_list_do_db_or_do_table():
    f = TableFilter(do_dbs=["shop"], do_tables=[TableRule("bank", "~^acc")])
    assert not f.skip("shop", "anything")
    assert not f.skip("bank", "accounts")
    assert f.skip("bank", "ledger")
    assert f.skip("other", "t")
    # a database DDL has table "": a do-table rule cannot pass it, a do-db rule can
    assert f.skip("bank", "") and not f.skip("shop", "")


def test_block_list_after_allow_list():
    f = TableFilter(do_dbs=["shop"], ignore_tables=[TableRule("shop", "log")])
    assert not f.skip("shop", "orders") and f.skip("shop", "LOG")
    g = TableFilter(ignore_dbs=["~^tmp"], ignore_tables=[TableRule("a", "b")])
    assert g.skip("tmp1", "x") and g.skip("a", "b")
    assert not g.skip("a", "c") and not g.skip("x", "y")


def test_filter_txn_keeps_the_rest_of_a_transaction():
    f = TableFilter(ignore_tables=[TableRule("shop", "log")])
    keep = DML("shop", "orders", DMLType.INSERT, {"id": 1})
    drop = DML("shop", "log", DMLType.INSERT, {"id": 1})
    assert f.filter_txn(Txn(5, (keep, drop))) == Txn(5, (keep,))
    assert f.filter_txn(Txn(6, (drop,))) is None


def test_filter_txn_ddl_by_the_object_it_changes():
    f = TableFilter(ignore_tables=[TableRule("shop", "log")], ignore_dbs=["other"])
    assert f.filter_txn(Txn(1, ddl=DDL("shop", "log", "ALTER TABLE log ADD c INT", 1))) is None
    kept = Txn(2, ddl=DDL("shop", "orders", "ALTER TABLE orders ADD c INT", 2))
    assert f.filter_txn(kept) is kept
    # use shop; CREATE TABLE other.t: the DDL changes `other`
    assert f.filter_txn(Txn(3, ddl=DDL("shop", "t", "CREATE TABLE other.t (a INT)", 3))) is None
