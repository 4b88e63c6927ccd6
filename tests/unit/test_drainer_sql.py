"""DML model validation and SQL rendering (text and arguments)."""

from __future__ import annotations

import pickle

import pytest

from tidb_binlog.drainer.apply.dml import DDL, DML, PRIMARY, DMLType, TableSchema, Txn, UniqueKey
from tidb_binlog.drainer.apply.sql import (
    Statement,
    ddl_statements,
    delete_statement,
    dml_statements,
    insert_statement,
    is_create_database,
    quote_name,
    quote_table,
    update_statement,
    where_clause,
)
from tidb_binlog.errors import SchemaError

USERS = TableSchema.build("shop", "users", ["id", "email", "name", "age"], ["id"],
                          {"uk_email": ("email",), "uk_name_age": ("name", "age")})
NOKEY = TableSchema.build("shop", "log", ["a", "b"])


def ins(values, schema=USERS):
    return DML(schema.database, schema.table, DMLType.INSERT, values, None, schema)


def upd(old, new, schema=USERS):
    return DML(schema.database, schema.table, DMLType.UPDATE, new, old, schema)


def dele(values, schema=USERS):
    return DML(schema.database, schema.table, DMLType.DELETE, values, None, schema)


ROW = {"id": 1, "email": "a@x", "name": "ann", "age": 30}


def test_quote_name_doubles_backquotes():
    assert quote_name("select") == "`select`"
    assert quote_name("we`ird") == "`we``ird`"
    assert quote_table("d`b", "t") == "`d``b`.`t`"
    assert quote_table("", "t") == "`t`"


def test_insert_and_replace():
    assert insert_statement(ins(ROW)) == Statement(
        "INSERT INTO `shop`.`users` (`id`,`email`,`name`,`age`) VALUES (%s,%s,%s,%s)",
        (1, "a@x", "ann", 30))
    assert dml_statements(ins(ROW), safe_mode=True) == [Statement(
        "REPLACE INTO `shop`.`users` (`id`,`email`,`name`,`age`) VALUES (%s,%s,%s,%s)",
        (1, "a@x", "ann", 30))]


def test_columns_follow_table_order_not_dict_order():
    values = {"age": 3, "id": 2, "name": None, "email": "e"}
    stmt = insert_statement(ins(values))
    assert stmt.sql.startswith("INSERT INTO `shop`.`users` (`id`,`email`,`name`,`age`)")
    assert stmt.args == (2, "e", None, 3)


def test_partial_image_renders_only_its_columns():
    stmt = insert_statement(ins({"age": 3, "id": 2}))
    assert stmt == Statement("INSERT INTO `shop`.`users` (`id`,`age`) VALUES (%s,%s)", (2, 3))


def test_update_sets_every_column_and_keys_on_old_pk():
    new = {**ROW, "id": 2, "email": "b@x"}
    assert update_statement(upd(ROW, new)) == Statement(
        "UPDATE `shop`.`users` SET `id` = %s,`email` = %s,`name` = %s,`age` = %s "
        "WHERE `id` = %s LIMIT 1", (2, "b@x", "ann", 30, 1))


def test_update_safe_mode_is_delete_then_replace():
    new = {**ROW, "age": 31}
    assert dml_statements(upd(ROW, new), safe_mode=True) == [
        Statement("DELETE FROM `shop`.`users` WHERE `id` = %s LIMIT 1", (1,)),
        Statement("REPLACE INTO `shop`.`users` (`id`,`email`,`name`,`age`) VALUES "
                  "(%s,%s,%s,%s)", (1, "a@x", "ann", 31)),
    ]


def test_delete():
    assert dml_statements(dele(ROW)) == [
        Statement("DELETE FROM `shop`.`users` WHERE `id` = %s LIMIT 1", (1,))]
    assert dml_statements(dele(ROW), safe_mode=True) == dml_statements(dele(ROW))


def test_where_takes_first_key_whose_values_are_all_non_null():
    # PK NULL (a table whose "PK" is really a nullable UK list): next key wins
    schema = TableSchema("d", "t", ("id", "email", "name", "age"),
                         (UniqueKey("uk_id", ("id",)), UniqueKey("uk_email", ("email",)),
                          UniqueKey("uk_na", ("name", "age"))))
    assert where_clause(schema, {**ROW, "id": None}) == ("`email` = %s", ["a@x"])
    assert where_clause(schema, {**ROW, "id": None, "email": None}) == (
        "`name` = %s AND `age` = %s", ["ann", 30])


def test_where_falls_back_to_every_column_with_is_null():
    schema = TableSchema("d", "t", ("id", "email", "name", "age"),
                         (UniqueKey("uk_na", ("name", "age")),))
    image = {"id": 1, "email": None, "name": "ann", "age": None}
    assert where_clause(schema, image) == (
        "`id` = %s AND `email` IS NULL AND `name` = %s AND `age` IS NULL", [1, "ann"])
    stmt = delete_statement(dele({"a": None, "b": b"\x00"}, NOKEY))
    assert stmt == Statement("DELETE FROM `shop`.`log` WHERE `a` IS NULL AND `b` = %s LIMIT 1",
                             (b"\x00",))


def test_where_skips_a_key_whose_column_the_image_lacks():
    assert where_clause(USERS, {"email": "e", "name": "n"}) == ("`email` = %s", ["e"])


def test_update_where_uses_old_image_even_when_new_pk_is_null_free():
    schema = TableSchema("d", "t", ("u", "v"), (UniqueKey("uk", ("u",)),))
    dml = DML("d", "t", DMLType.UPDATE, {"u": 5, "v": 1}, {"u": None, "v": 1}, schema)
    assert update_statement(dml) == Statement(
        "UPDATE `d`.`t` SET `u` = %s,`v` = %s WHERE `u` IS NULL AND `v` = %s LIMIT 1",
        (5, 1, 1))


def test_weird_names_are_escaped_everywhere():
    schema = TableSchema.build("my`db", "order", ["select", "a`b"], ["select"])
    dml = DML("my`db", "order", DMLType.UPDATE, {"select": 1, "a`b": "x"},
              {"select": 2, "a`b": "y"}, schema)
    assert update_statement(dml).sql == (
        "UPDATE `my``db`.`order` SET `select` = %s,`a``b` = %s WHERE `select` = %s LIMIT 1")


def test_ddl_rendering():
    assert ddl_statements(DDL("shop", "t", "ALTER TABLE t ADD c INT", 7)) == [
        Statement("USE `shop`", None), Statement("ALTER TABLE t ADD c INT", None)]
    assert ddl_statements(DDL("shop", "", "CREATE DATABASE shop", 7)) == [
        Statement("CREATE DATABASE shop", None)]
    assert ddl_statements(DDL("", "", "DROP TABLE a.b", 7)) == [
        Statement("DROP TABLE a.b", None)]
    with pytest.raises(SchemaError, match=r"empty query.*ignore-txn-commit-ts = \[7\]"):
        ddl_statements(DDL("shop", "t", "  ", 7))


@pytest.mark.parametrize("sql,expected", [
    ("CREATE DATABASE x", True),
    ("  create   schema IF NOT EXISTS `x`", True),
    ("/* comment */ CREATE DATABASE x", True),
    ("/*!40101 x */\nCREATE SCHEMA x", True),
    ("-- note\nCREATE DATABASE x", True),
    ("CREATE TABLE databases (a int)", False),
    ("CREATE DATABASEx", False),
    ("DROP DATABASE x", False),
])
def test_is_create_database(sql, expected):
    assert is_create_database(sql) is expected


def test_dml_validation_errors():
    with pytest.raises(SchemaError, match="UPDATE on `shop`.`users` has no old image"):
        DML("shop", "users", DMLType.UPDATE, ROW, None, USERS)
    with pytest.raises(SchemaError, match="only UPDATE carries old_values"):
        DML("shop", "users", DMLType.INSERT, ROW, ROW, USERS)
    with pytest.raises(SchemaError, match=r"columns \['zzz'\].*refresh the table schema"):
        ins({**ROW, "zzz": 1})
    with pytest.raises(SchemaError, match="no column values"):
        ins({})
    with pytest.raises(SchemaError, match="carries no TableSchema"):
        insert_statement(DML("d", "t", DMLType.INSERT, {"a": 1}))
    with pytest.raises(SchemaError, match="needs an UPDATE, got INSERT"):
        update_statement(ins(ROW))


def test_schema_validation_errors():
    with pytest.raises(SchemaError, match=r"unique key 'uk' names unknown columns \['x'\]"):
        TableSchema.build("d", "t", ["a"], unique_keys={"uk": ("x",)})
    with pytest.raises(SchemaError, match="primary key must be the first"):
        TableSchema("d", "t", ("a", "b"), (UniqueKey("uk", ("a",)),
                                           UniqueKey(PRIMARY, ("b",), True)))
    with pytest.raises(SchemaError, match="lists a column twice"):
        TableSchema("d", "t", ("a", "a"))
    with pytest.raises(SchemaError, match="has no columns"):
        TableSchema("d", "t", ())
    with pytest.raises(SchemaError, match="has no columns"):
        UniqueKey("k", ())


def test_schema_properties_and_txn():
    assert USERS.primary_key == UniqueKey(PRIMARY, ("id",), True)
    assert NOKEY.primary_key is None
    assert TableSchema.build("d", "t", ["a"], unique_keys={"u": ("a",)}).primary_key is None
    txn = Txn(5, [ins(ROW)])
    assert not txn.is_ddl and len(txn.dmls) == 1
    assert Txn(6, ddl=DDL("d", "t", "DROP TABLE t", 6)).is_ddl
    with pytest.raises(SchemaError, match="both a DDL and 1 DMLs"):
        Txn(7, [ins(ROW)], DDL("d", "t", "DROP TABLE t", 7))


def test_model_pickles_for_ray():
    txn = Txn(5, [upd(ROW, {**ROW, "age": 1})])
    back = pickle.loads(pickle.dumps(txn))
    assert back == txn
    assert back.dmls[0].schema == USERS


class StandInConnection:
    """pymysql's own ``Connection.escape`` on a connection-less object; ``old_bytes``
    renders bytes as older pymysql releases did (``_binary'...'``)."""

    encoding = "utf8mb4"

    def __init__(self, no_backslash=False, old_bytes=False):
        import pymysql.converters
        from pymysql.constants import SERVER_STATUS

        self.encoders = pymysql.converters.encoders
        self.server_status = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES if no_backslash \
            else 0
        self.old_bytes = old_bytes

    def escape(self, obj, mapping=None):
        from pymysql.connections import Connection

        if self.old_bytes and isinstance(obj, bytes):
            return "_binary'" + obj.decode("latin-1").replace("'", "\\'") + "'"
        return Connection.escape(self, obj, mapping)

    def _escape_string(self, s):
        from pymysql.connections import Connection

        return Connection._escape_string(self, s)


@pytest.mark.parametrize("no_backslash", [False, True])
def test_literals_equal_pymysql_and_fall_back_where_it_differs(no_backslash, caplog):
    import datetime
    from decimal import Decimal

    from tidb_binlog.drainer.apply.sql import LiteralRenderer

    args = (1, -2**63, "a'b\\c", "中文", None, True, 1.5, b"\x00'", Decimal("1.50"),
            datetime.datetime(2020, 1, 2, 3, 4, 5, 6), datetime.timedelta(hours=-1))
    stmt = Statement("X " + ",".join(["%s"] * len(args)), args)
    conn = StandInConnection(no_backslash)
    renderer = LiteralRenderer(conn)
    assert renderer.render(stmt) == stmt.sql % tuple(conn.escape(a) for a in args)
    assert renderer.fast_types() == {int, bool, float, type(None), bytes, str}
    assert renderer.literal("it's") == ("'it''s'" if no_backslash else "'it\\'s'")

    old = StandInConnection(no_backslash, old_bytes=True)
    renderer = LiteralRenderer(old)
    assert renderer.render(stmt) == stmt.sql % tuple(old.escape(a) for a in args)
    assert bytes not in renderer.fast_types() and str in renderer.fast_types()
    assert "['bytes']" in caplog.text
