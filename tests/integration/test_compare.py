"""compare_databases on real MariaDB servers: a difference says which side is wrong
(rows missing downstream, extra downstream, values differ, columns differ, a whole
table missing) and carries sample rows."""

from __future__ import annotations

from tidb_binlog.compare import (
    COLUMNS_DIFFER,
    ROWS_DIFFER,
    SAMPLES,
    TABLE_EXTRA,
    TABLE_MISSING,
    compare_databases,
)


def run(server, db, *statements):
    conn = server.connect(db, autocommit=True)
    try:
        with conn.cursor() as cur:
            for stmt in statements:
                cur.execute(stmt)
    finally:
        conn.close()


def compare(pair, db):
    with pair.upstream.connect() as up, pair.downstream.connect() as down:
        return compare_databases(up, down, [db])


def both(pair, db, *statements):
    run(pair.upstream, db, *statements)
    run(pair.downstream, db, *statements)


def test_equal_tables_compare_equal(mariadb_pair, fresh_database):
    db = fresh_database(*mariadb_pair)
    both(mariadb_pair, db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(8))",
         "INSERT INTO t VALUES (1, 'a'), (2, NULL)")
    result = compare(mariadb_pair, db)
    assert result.equal and result.tables == 1 and result.rows == 2


def test_missing_extra_and_changed_rows_are_told_apart(mariadb_pair, fresh_database):
    db = fresh_database(*mariadb_pair)
    both(mariadb_pair, db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(8))",
         "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (5, 'e')")
    run(mariadb_pair.upstream, db, "INSERT INTO t VALUES (4, 'd')")    # lost downstream
    run(mariadb_pair.downstream, db, "INSERT INTO t VALUES (9, 'z')",  # extra downstream
        "UPDATE t SET v = 'B' WHERE id = 2")                           # values differ
    result = compare(mariadb_pair, db)
    [d] = result.diffs
    assert d.kind == ROWS_DIFFER
    assert (d.missing, d.extra, d.changed) == (1, 1, 1)
    assert (result.rows_missing, result.rows_extra, result.rows_changed) == (1, 1, 1)
    assert d.reason == ("1 rows missing downstream, 1 rows extra downstream, 1 rows with "
                        "different values; matched by key (id)")
    assert d.samples == [("missing downstream", (4, "d"), None),
                         ("extra downstream", None, (9, "z")),
                         ("values differ", (2, "b"), (2, "B"))]
    text = "\n".join(d.details())
    assert "missing downstream: (4, 'd')" in text and "extra downstream:   (9, 'z')" in text
    assert "upstream (2, 'b')" in text and "downstream (2, 'B')" in text


def test_one_missing_row_does_not_make_later_rows_differ(mariadb_pair, fresh_database):
    db = fresh_database(*mariadb_pair)
    both(mariadb_pair, db, "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
         "INSERT INTO t SELECT seq, seq FROM seq_1_to_50")
    run(mariadb_pair.downstream, db, "DELETE FROM t WHERE id = 3")
    [d] = compare(mariadb_pair, db).diffs
    assert (d.missing, d.extra, d.changed) == (1, 0, 0)
    assert d.samples == [("missing downstream", (3, 3), None)]


def test_samples_are_capped_per_kind(mariadb_pair, fresh_database):
    db = fresh_database(*mariadb_pair)
    both(mariadb_pair, db, "CREATE TABLE t (id INT PRIMARY KEY)")
    run(mariadb_pair.upstream, db, "INSERT INTO t SELECT seq FROM seq_1_to_20")
    [d] = compare(mariadb_pair, db).diffs
    assert d.missing == 20 and len(d.samples) == SAMPLES


def test_a_table_without_key_is_a_multiset(mariadb_pair, fresh_database):
    db = fresh_database(*mariadb_pair)
    both(mariadb_pair, db, "CREATE TABLE n (a INT, b VARCHAR(4))",
         "INSERT INTO n VALUES (1, 'x'), (1, 'x'), (NULL, NULL)")
    run(mariadb_pair.downstream, db, "INSERT INTO n VALUES (1, 'x')")  # a duplicate row
    [d] = compare(mariadb_pair, db).diffs
    assert (d.missing, d.extra, d.changed) == (0, 1, 0)
    assert d.samples == [("extra downstream", None, (1, "x"))]
    assert "no key: whole rows matched" in d.reason


def test_columns_and_whole_tables(mariadb_pair, fresh_database):
    db = fresh_database(*mariadb_pair)
    run(mariadb_pair.upstream, db, "CREATE TABLE c (id INT PRIMARY KEY, a INT, b INT)",
        "CREATE TABLE only_up (id INT PRIMARY KEY)", "INSERT INTO only_up VALUES (1), (2)")
    run(mariadb_pair.downstream, db, "CREATE TABLE c (id INT PRIMARY KEY, a INT, x INT)",
        "CREATE TABLE only_down (id INT PRIMARY KEY)", "INSERT INTO only_down VALUES (7)")
    diffs = {d.table: d for d in compare(mariadb_pair, db).diffs}
    assert diffs["c"].kind == COLUMNS_DIFFER
    assert "upstream only ['b'], downstream only ['x']" in diffs["c"].reason
    assert diffs["only_up"].kind == TABLE_MISSING and diffs["only_up"].missing == 2
    assert diffs["only_down"].kind == TABLE_EXTRA and diffs["only_down"].extra == 1
