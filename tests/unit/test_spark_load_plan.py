"""The pure half of the Spark initial load (spark_on_ray.load_plan)."""

from __future__ import annotations

import pytest

from spark_on_ray.diff_plan import KeyRange
from spark_on_ray.load_plan import (
    GROUP_BYTES,
    CopyUnit,
    defer_indexes,
    downstream_ddl,
    even_int_bounds,
    group_rows,
    insert_sql,
    line_bound,
    load_data_sql,
    schedule,
    select_sql,
    tsv_group_select_sql,
    tsv_select_sql,
    unit_rows,
)
from tidb_binlog.config.spark import load_spark_config
from tidb_binlog.errors import ConfigError

SHOW_CREATE = """CREATE TABLE `nopk` (
  `a` int(11) DEFAULT NULL,
  `u` varchar(16) DEFAULT NULL,
  `_tidb_rowid` bigint(20) NOT NULL AUTO_INCREMENT INVISIBLE,
  UNIQUE KEY `uu` (`u`),
  UNIQUE KEY `_tidb_rowid` (`_tidb_rowid`)
) ENGINE=InnoDB AUTO_INCREMENT=108 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"""


def test_downstream_ddl_drops_the_hidden_row_id():
    assert downstream_ddl(SHOW_CREATE) == """CREATE TABLE `nopk` (
  `a` int(11) DEFAULT NULL,
  `u` varchar(16) DEFAULT NULL,
  UNIQUE KEY `uu` (`u`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"""
    plain = "CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB"
    assert downstream_ddl(plain) == plain


def _unit(table, rows):
    return CopyUnit("db", table, ("id", "v"), ("id",), KeyRange((1,), (9,)), rows)


def test_schedule_is_longest_first_onto_the_least_loaded_task():
    units = [_unit("a", 10), _unit("b", 50), _unit("c", 30), _unit("d", 20), _unit("e", 5)]
    shares = schedule(units, 2)
    assert [[u.table for u in s] for s in shares] == [["b", "a"], ["c", "d", "e"]]
    assert schedule(units[:1], 4)[1:] == [[], [], []]


def test_unit_rows_gives_every_task_several_units():
    assert unit_rows(200_000, 50_000, 4) == 12_500
    assert unit_rows(10_000_000, 50_000, 4) == 50_000
    assert unit_rows(500, 50_000, 4) == 1000
    assert unit_rows(500, 50, 4) == 50


def test_copy_sql():
    unit = _unit("t", 1)
    lit = str
    assert select_sql(unit, lit) == ("SELECT `id`, `v` FROM `db`.`t` WHERE ((`id` >= 1)) AND "
                                     "((`id` < 9))")
    assert insert_sql(unit) == "INSERT INTO `db`.`t` (`id`, `v`) VALUES (%s, %s)"
    whole = CopyUnit("db", "t", ("a",), (), KeyRange(), 1)
    assert select_sql(whole, lit) == "SELECT `a` FROM `db`.`t` WHERE TRUE"


def _typed_unit() -> CopyUnit:
    return CopyUnit("d", "t", ("id", "txt", "bin", "b", "f"), ("id",), KeyRange(), 10,
                    ("int", "varchar", "blob", "bit", "float"))


def test_load_data_lines_escape_text_hex_bytes_and_keep_floats_exact():
    unit = _typed_unit()
    sql = tsv_select_sql(unit, repr)
    # Only hex literals: the meaning does not depend on NO_BACKSLASH_ESCAPES.
    assert "\\" not in sql and "'\\" not in sql
    assert sql.startswith("SELECT CAST(CONCAT_WS(X'09', IFNULL(`id`, X'5C4E'), ")
    assert ("REPLACE(REPLACE(REPLACE(REPLACE(CONVERT(`txt` USING utf8mb4), X'5C', X'5C5C'), "
            "X'09', X'5C74'), X'0A', X'5C6E'), X'00', X'5C30')") in sql
    assert "IFNULL(HEX(`bin`), X'5C4E')" in sql and "CAST(`b` AS UNSIGNED)" in sql
    assert "CAST(`f` AS DOUBLE)" in sql and sql.endswith("FROM `d`.`t` WHERE TRUE")
    load = load_data_sql(unit, "'/tmp/x.tsv'")
    assert load.startswith("LOAD DATA LOCAL INFILE '/tmp/x.tsv' INTO TABLE `d`.`t` CHARACTER SET "
                           "utf8mb4 FIELDS TERMINATED BY X'09' ENCLOSED BY '' ESCAPED BY X'5C' "
                           "LINES TERMINATED BY X'0A' ")
    assert load.endswith("(`id`, `txt`, @v2, @v3, `f`) SET `bin` = UNHEX(@v2), "
                         "`b` = CAST(@v3 AS UNSIGNED)")
    # The INSERT path reads FLOATs as DOUBLEs too.
    assert select_sql(unit, repr).startswith("SELECT `id`, `txt`, `bin`, `b`, CAST(`f` AS DOUBLE)")


def test_load_data_needs_the_column_types_and_method_is_checked():
    untyped = CopyUnit("d", "t", ("id",), ("id",), KeyRange(), 10)
    with pytest.raises(ValueError, match="has no column types"):
        tsv_select_sql(untyped, repr)
    assert select_sql(untyped, repr).startswith("SELECT `id` FROM")
    assert load_spark_config(None).load.method == "auto"
    assert load_spark_config(None).load.defer_indexes is False
    assert load_spark_config(None, {"load.defer-indexes": True}).load.defer_indexes is True
    assert load_spark_config(None, {"load.method": "insert"}).load.method == "insert"
    with pytest.raises(ConfigError, match="`load.method` .* is 'copy'; expected one of 'auto', "
                                          "'load-data', 'insert'"):
        load_spark_config(None, {"load.method": "copy"})


def test_default_copy_tasks_are_one_per_cluster_cpu_at_most_the_slots():
    from types import SimpleNamespace

    from spark_on_ray.load import default_tasks

    assert default_tasks(SimpleNamespace(slots=4, cluster_cpus=2.0)) == 2
    assert default_tasks(SimpleNamespace(slots=4, cluster_cpus=16.0)) == 4
    assert default_tasks(SimpleNamespace(slots=4, cluster_cpus=0.5)) == 1
    assert default_tasks(SimpleNamespace(slots=4, cluster_cpus=0.0)) == 4  # unknown


SBTEST = """CREATE TABLE `sbtest` (
  `id` int(11) NOT NULL,
  `k` int(11) NOT NULL DEFAULT 0,
  `c` char(120) NOT NULL DEFAULT '',
  PRIMARY KEY (`id`),
  UNIQUE KEY `c_u` (`c`),
  KEY `k_1` (`k`)
) ENGINE=InnoDB DEFAULT CHARSET=latin1"""


def test_secondary_indexes_are_deferred_unless_the_table_needs_them_at_create():
    create, later = defer_indexes(SBTEST)
    assert later == ["UNIQUE KEY `c_u` (`c`)", "KEY `k_1` (`k`)"]
    assert create == """CREATE TABLE `sbtest` (
  `id` int(11) NOT NULL,
  `k` int(11) NOT NULL DEFAULT 0,
  `c` char(120) NOT NULL DEFAULT '',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=latin1"""
    # the hidden row id's table after downstream_ddl: its only key is a secondary one
    create, later = defer_indexes(downstream_ddl(SHOW_CREATE))
    assert later == ["UNIQUE KEY `uu` (`u`)"] and "KEY" not in create
    assert defer_indexes("CREATE TABLE `p` (\n  `id` int(11) NOT NULL,\n  PRIMARY KEY "
                         "(`id`)\n) ENGINE=InnoDB") == ("CREATE TABLE `p` (\n  `id` int(11) NOT "
                                                       "NULL,\n  PRIMARY KEY (`id`)\n) "
                                                       "ENGINE=InnoDB", [])
    # kept whole: an AUTO_INCREMENT column led only by a secondary key, a foreign key,
    # a FULLTEXT index (each needs its index in the CREATE TABLE, or is not worth it)
    auto = SBTEST.replace("`k` int(11) NOT NULL DEFAULT 0",
                          "`k` int(11) NOT NULL AUTO_INCREMENT")
    fk = SBTEST.replace("  KEY `k_1` (`k`)", "  KEY `k_1` (`k`),\n  CONSTRAINT `f` FOREIGN "
                        "KEY (`k`) REFERENCES `o` (`id`)")
    ft = SBTEST.replace("  KEY `k_1` (`k`)", "  KEY `k_1` (`k`),\n  FULLTEXT KEY `x` (`c`)")
    for create in (auto, fk, ft):
        assert defer_indexes(create) == (create, [])
    on_pk = SBTEST.replace("`id` int(11) NOT NULL,", "`id` int(11) NOT NULL AUTO_INCREMENT,")
    assert defer_indexes(on_pk)[1] == ["UNIQUE KEY `c_u` (`c`)", "KEY `k_1` (`k`)"]


def test_line_groups_only_for_one_integer_key_and_bounded_rows():
    bound = line_bound(("int", "int", "char", "char"), (None, None, 120, 60), (None, None, 120, 60))
    assert bound == 12 + 12 + 962 + 482 + 4
    assert group_rows(("int",), bound) == 256
    assert group_rows(("bigint",), 100_000 // 2) == GROUP_BYTES // 50_000
    assert group_rows(("int",), 10 * GROUP_BYTES) == 0  # one line over the group size
    assert line_bound(("int", "text"), (None, 65535), (None, 65535)) is None
    assert line_bound(("int", "varbinary", "json"), (None, 8, None), (None, 8, None)) is None
    assert line_bound(("varbinary",), (8,), (8,)) == 18 + 1
    assert group_rows(("varchar",), 10) == 0  # not an integer key
    assert group_rows(("int", "int"), 10) == 0  # composite key
    assert group_rows(("int",), None) == 0  # unbounded rows
    unit = CopyUnit("db", "t", ("id", "v"), ("id",), KeyRange((1,), (9,)), 8, ("int", "blob"), 5)
    sql = tsv_group_select_sql(unit, str)
    assert sql.startswith("SELECT COUNT(*), CAST(GROUP_CONCAT(CONCAT_WS(X'09', IFNULL(`id`, ")
    assert "HEX(`v`)" in sql and "SEPARATOR X'0A')" in sql
    assert sql.endswith("WHERE ((`id` >= 1)) AND ((`id` < 9)) GROUP BY `id` DIV 5")
    with pytest.raises(ValueError, match="line groups"):
        tsv_group_select_sql(CopyUnit("db", "t", ("id",), (), KeyRange(), 1, ("int",), 5), str)


def test_dense_integer_keys_are_cut_from_min_and_max_alone():
    # 1..1000 with 1000 rows: 4 ranges of 250 key values
    assert even_int_bounds(1, 1000, 1000, 250) == [(251,), (501,), (751,)]
    # half the values used: still cut evenly (no range holds more than 2x its share)
    assert even_int_bounds(-500, 499, 500, 100) == [(-300,), (-100,), (100,), (300,)]
    # sparser than MIN_KEY_DENSITY, or no estimate: cut by a scan of the keys instead
    assert even_int_bounds(1, 10_000, 4_999, 100) is None
    assert even_int_bounds(1, 1000, 0, 100) is None
    # an empty table, one chunk's worth, one key value: one range
    assert even_int_bounds(None, None, 0, 100) == []
    assert even_int_bounds(1, 80, 80, 100) == []
    assert even_int_bounds(7, 7, 1, 1) == []
    # more chunks than key values: cut points never pass MAX
    assert even_int_bounds(1, 3, 3, 1) == [(2,), (3,)]
