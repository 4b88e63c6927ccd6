"""The pure half of the Spark initial load (spark_on_ray.load_plan)."""

from __future__ import annotations

from spark_on_ray.diff_plan import KeyRange
from spark_on_ray.load_plan import (
    CopyUnit,
    downstream_ddl,
    insert_sql,
    schedule,
    select_sql,
    unit_rows,
)

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
