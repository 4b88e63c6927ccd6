"""The DDL classifier and the DDL binlog's prewrite key."""

from __future__ import annotations

import pytest

from tidb_binlog.errors import UnsupportedDDL
from tidb_binlog.upstream.ddl import history_job_key
from tidb_binlog.upstream.ddl_parse import normalise_sql, parse_ddl


@pytest.mark.parametrize("sql, kind, fields", [
    ("create database if not exists `a b`", "create_schema", {"schema": "a b", "if_exists": True}),
    ("DROP SCHEMA d", "drop_schema", {"schema": "d"}),
    ("CREATE TABLE d.t (id INT PRIMARY KEY, c DECIMAL(10,2))", "create_table",
     {"schema": "d", "table": "t"}),
    ("create table if not exists t like u", "create_table", {"table": "t", "if_exists": True}),
    ("DROP TABLE IF EXISTS `t`;", "drop_table", {"table": "t", "if_exists": True}),
    ("truncate t", "truncate_table", {"table": "t"}),
    ("RENAME TABLE a.t TO b.u", "rename_table",
     {"schema": "a", "table": "t", "new_schema": "b", "new_table": "u"}),
    ("ALTER TABLE t RENAME TO u", "rename_table", {"table": "t", "new_table": "u"}),
    ("alter table t add column c enum('a','b') default 'a'", "add_column", {"column": "c"}),
    ("ALTER TABLE t ADD c INT", "add_column", {"column": "c"}),
    ("ALTER TABLE t DROP COLUMN c", "drop_column", {"column": "c"}),
    ("ALTER TABLE t MODIFY c BIGINT NOT NULL", "modify_column", {"column": "c"}),
    ("ALTER TABLE t CHANGE COLUMN c d INT", "modify_column", {"column": "c", "new_column": "d"}),
    ("ALTER TABLE t ADD UNIQUE INDEX u (a, b)", "add_index", {"index": "u"}),
    ("CREATE UNIQUE INDEX u ON d.t (a)", "add_index", {"index": "u", "schema": "d"}),
    ("ALTER TABLE t DROP KEY u", "drop_index", {"index": "u"}),
    ("DROP INDEX u ON t", "drop_index", {"index": "u", "table": "t"}),
    ("ALTER TABLE t ADD PARTITION (PARTITION p9 VALUES LESS THAN (90))", "add_partition", {}),
    ("ALTER TABLE t DROP PARTITION p0, p1", "drop_partition", {"partitions": ("p0", "p1")}),
    ("ALTER TABLE t TRUNCATE PARTITION p0", "truncate_partition", {"partitions": ("p0",)}),
    ("/* hi */ ALTER  TABLE t -- c\n DROP c", "drop_column", {"column": "c"}),
])
def test_recognised(sql, kind, fields):
    stmt = parse_ddl(sql)
    assert stmt.kind == kind and stmt.query == sql
    for k, v in fields.items():
        assert getattr(stmt, k) == v


@pytest.mark.parametrize("sql", [
    "CREATE TABLE t SELECT 1", "ALTER TABLE t ADD COLUMN a INT, ADD COLUMN b INT",
    "ALTER TABLE t ADD PRIMARY KEY (a)", "ALTER TABLE t DROP PRIMARY KEY", "CREATE VIEW v AS SELECT 1",
    "GRANT ALL ON *.* TO x", "ALTER TABLE t ADD COLUMN (a INT, b INT)", "ALTER TABLE t ENGINE=InnoDB",
])
def test_unsupported(sql):
    with pytest.raises(UnsupportedDDL, match="unsupported DDL") as info:
        parse_ddl(sql)
    assert info.value.query == sql


def test_normalise_keeps_quoted_text():
    assert normalise_sql("a  'x  -- y' /* z */ b;") == "a 'x -- y' b"


def test_history_job_key_matches_reference_vector():
    assert history_job_key(42).hex() == (
        "6d44444c4a6f624869ff73746f7279000000fc0000000000000068000000000000002aff00000000000000"
        "00f7")
