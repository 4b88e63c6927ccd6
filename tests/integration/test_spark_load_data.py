"""The initial load copies every value exactly (real MariaDB on both sides), both ways.

LOAD DATA (``[load] method``'s fast path): the upstream renders each row as a LOAD DATA line (``load_plan.tsv_select_sql``) and the
downstream loads it (``load_plan.load_data_sql``) through the copy task's own
``load_unit``. Checked on the all-types table plus the values that break a naive
tab-separated copy: tabs, newlines, backslashes, NUL bytes, the text ``\\N`` beside a
real NULL and an empty string, bytes that are not UTF-8, latin1 and ``utf8mb4_bin``
columns side by side (an "illegal mix of collations" for a careless CONCAT), BIT, a
POINT, and FLOATs whose 6-digit text would not round-trip; in the default session and
under ``NO_BACKSLASH_ESCAPES`` on both servers. The INSERT path (``insert_unit``) on the
same values.
"""

from __future__ import annotations

import random
import struct
from dataclasses import replace

import pymysql
import pytest

from spark_on_ray.diff import literal
from spark_on_ray.diff_plan import KeyRange
from spark_on_ray.errors import SparkJobError
from spark_on_ray.load_plan import CopyUnit
from spark_on_ray.load_task import insert_unit, load_unit
from spark_on_ray.sql_task import connect
from tidb_binlog.compare import compare_databases
from tidb_binlog.config.spark import DatabaseConfig
from tidb_binlog.upstream.workload import ALL_TYPES_DDL, _all_types_row

AWKWARD = ["", "\\N", "N", "a\tb", "a\nb", "a\r\nb", "\\", "\\t", "a\x00b", "'\"", "中文\\日本語",
           "😀", "\\\\N", "tab\tat end\t"]
ODD = ("CREATE TABLE odd (id INT PRIMARY KEY, u VARCHAR(40) CHARACTER SET utf8mb4 "
       "COLLATE utf8mb4_bin, l VARCHAR(40) CHARACTER SET latin1, x TEXT, vb VARBINARY(16), "
       "bt BIT(3), f FLOAT, p POINT NULL)")


def _db(server) -> DatabaseConfig:
    p = server.params()
    return DatabaseConfig(host=p["host"], port=p["port"], user=p["user"],
                          password=p["password"] or "")


def _unit(conn, db: str, table: str) -> CopyUnit:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE "
                    "TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                    (db, table))
        cols = cur.fetchall()
    return CopyUnit(db, table, tuple(c[0] for c in cols), (), KeyRange(), 0,
                    tuple(c[1].lower() for c in cols))


def _fill(server, db: str) -> int:
    rng = random.Random(11)
    conn = server.connect(db, autocommit=True)
    with conn.cursor() as cur:
        cur.execute(ALL_TYPES_DDL)
        rows = [_all_types_row(rng) for _ in range(300)]
        rows += [dict.fromkeys(rows[0], None)]  # every column NULL (but the key)
        names = list(rows[0])
        cur.executemany(f"INSERT INTO all_types ({', '.join(names)}) VALUES "
                        f"({', '.join(['%s'] * len(names))})", [[r[n] for n in names] for r in rows])
        cur.execute(ODD)
        odd = []
        for i, text in enumerate(AWKWARD * 3):
            f = struct.unpack("f", struct.pack("f", rng.uniform(-1e30, 1e30)))[0]
            odd.append((i, text, text.encode("latin1", "replace").decode("latin1")
                        if i % 3 else None, text if i % 2 else None,
                        bytes([0, 9, 10, 92, 255, i % 256]) if i % 4 else None,
                        i % 8, f))
        cur.executemany("INSERT INTO odd (id, u, l, x, vb, bt, f) VALUES "
                        "(%s, %s, %s, %s, %s, %s, %s)", odd)
        cur.execute("UPDATE odd SET p = POINT(id, -id / 3) WHERE id % 5 = 0")
    conn.close()
    return len(rows), len(odd)


@pytest.mark.parametrize(("method", "sql_mode"), [
    ("load-data", ""), ("load-data", "STRICT_TRANS_TABLES,NO_BACKSLASH_ESCAPES"),
    ("load-data-grouped", ""), ("insert", "")])
def test_every_value_is_copied_exactly(mariadb_pair, fresh_database, method, sql_mode):
    up, down = mariadb_pair
    db = fresh_database(up, down)
    n_all, n_odd = _fill(up, db)
    src = up.connect(db)
    with src.cursor() as cur:
        cur.execute("SHOW CREATE TABLE all_types")
        all_ddl = cur.fetchone()[1]
        cur.execute("SHOW CREATE TABLE odd")
        odd_ddl = cur.fetchone()[1]
    dst = down.connect(db, autocommit=True)
    with dst.cursor() as cur:
        cur.execute(all_ddl)
        cur.execute(odd_ddl)
    units = [_unit(src, db, "all_types"), _unit(src, db, "odd")]
    if method == "load-data-grouped":  # line groups of 7 keys (any value, NULL, bytes...)
        units = [replace(u, key=("id",), group_rows=7) for u in units]
    src.close()
    dst.close()

    up_conn, down_conn = connect(_db(up), raw=True), connect(_db(down), local_infile=True)
    try:
        for conn in (up_conn, down_conn):
            with conn.cursor() as cur:
                cur.execute(f"SET SESSION sql_mode = '{sql_mode}'")
        down_conn.autocommit(False)
        copied = [load_unit(u, up_conn, down_conn, literal) if method.startswith("load-data")
                  else insert_unit(u, up_conn, down_conn, 1000, literal) for u in units]
        assert copied == [n_all, n_odd]
        down_conn.commit()
    finally:
        up_conn.close()
        down_conn.close()

    a, b = up.connect(db), down.connect(db)
    try:
        diff = compare_databases(a, b, [db])
        assert diff.equal, [str(d) for d in diff.diffs]
        # Bit-exact FLOATs and the NULL / "\N" / "" distinction, beyond the compare.
        sums = []
        for conn in (a, b):
            with conn.cursor() as cur:
                cur.execute("SELECT SUM(CRC32(CONCAT_WS('|', id, CAST(f AS DOUBLE), HEX(u), "
                            "ISNULL(u), HEX(l), ISNULL(l), HEX(x), ISNULL(x), HEX(vb), "
                            "ISNULL(vb), bt + 0, HEX(ST_AsBinary(p))))) FROM odd")
                sums.append(cur.fetchone()[0])
        assert sums[0] == sums[1]
    finally:
        a.close()
        b.close()


def test_load_data_refuses_a_changed_value_and_insert_path_still_works(mariadb_pair,
                                                                       fresh_database):
    """A value the downstream would change (here: a narrower column) is an error naming the
    table and the server's warning, not a silently different copy; the INSERT path copies
    the same table when the value fits."""
    up, down = mariadb_pair
    db = fresh_database(up, down)
    for server, width in ((up, 20), (down, 4)):
        conn = server.connect(db, autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR({width}))")
            if server is up:
                cur.execute("INSERT INTO t VALUES (1, 'abc'), (2, 'much too long')")
            else:
                cur.execute("SET SESSION sql_mode = ''")
        conn.close()
    src = up.connect(db)
    unit = _unit(src, db, "t")
    src.close()
    up_conn, down_conn = connect(_db(up), raw=True), connect(_db(down), local_infile=True)
    try:
        with down_conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # warn instead of failing the statement
        down_conn.autocommit(False)
        with pytest.raises(SparkJobError, match=r"LOAD DATA into `.*`\.`t` loaded 2 of 2 rows; "
                                               r"warnings: .*Data truncated"):
            load_unit(unit, up_conn, down_conn, literal)
        down_conn.rollback()
        # A line group longer than the upstream session's group_concat_max_len is cut by
        # the server with a warning: refused, not loaded short.
        grouped = replace(unit, key=("id",), group_rows=1000)
        with up_conn.cursor() as cur:
            cur.execute("SET SESSION group_concat_max_len = 8")
        try:
            with pytest.raises(SparkJobError, match=r"reading `.*`\.`t` from the upstream "
                                                   r"failed .*warned.*cut by GROUP_CONCAT"):
                load_unit(grouped, up_conn, down_conn, literal)
        finally:
            with up_conn.cursor() as cur:
                cur.execute("SET SESSION group_concat_max_len = DEFAULT")
        down_conn.rollback()
        # The upstream fails mid-unit (here: at once: a table only the downstream has): the
        # unit fails, nothing hangs.
        with down_conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{db}`.missing LIKE `{db}`.t")
        gone = CopyUnit(db, "missing", unit.columns, (), KeyRange(), 0, unit.types)
        with pytest.raises(SparkJobError, match=r"reading `.*`\.`missing` from the upstream "
                                               r"failed after 0 rows: .*doesn't exist"):
            load_unit(gone, up_conn, down_conn, literal)
        down_conn.rollback()
        # The downstream refuses LOCAL INFILE before it asks for the file: the feeder,
        # which never saw a reader, gives up instead of waiting for one.
        with down_conn.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 0")
        try:
            with pytest.raises(pymysql.err.MySQLError):
                load_unit(unit, up_conn, down_conn, literal)
        finally:
            admin = down.connect(autocommit=True)
            with admin.cursor() as cur:
                cur.execute("SET GLOBAL local_infile = 1")
            admin.close()
        up_conn.close()
        down_conn.close()
        up_conn, down_conn = connect(_db(up), raw=True), connect(_db(down), local_infile=True)
        down_conn.autocommit(False)
        with up_conn.cursor() as cur:
            cur.execute(f"DELETE FROM `{db}`.t WHERE id = 2")
        assert insert_unit(unit, up_conn, down_conn, 1000, literal) == 1
        down_conn.commit()
    finally:
        up_conn.close()
        down_conn.close()
