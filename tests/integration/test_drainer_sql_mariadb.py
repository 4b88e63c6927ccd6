"""The drainer's generated SQL runs on a real MariaDB and does what it says.

Covers the per-row statements (normal and safe mode), WHERE selection with NULLs,
binary values and awkward identifiers, DDL with ``USE``, the checkpoint table, and
merge-by-key bulk apply against one-by-one apply on hypothesis-generated streams.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, UniqueKey
from tidb_binlog.drainer.apply.merge_by_key import merge_by_key, merge_statements, render_merged
from tidb_binlog.drainer.apply.sql import ddl_statements, dml_statements, quote_name
from tidb_binlog.drainer.checkpoint.checkpoint import (
    Checkpoint,
    create_statements,
    decode_json,
    load_statement,
    save_statement,
)

INS, UPD, DEL = DMLType.INSERT, DMLType.UPDATE, DMLType.DELETE


@pytest.fixture
def conn(mariadb):
    c = mariadb.connect(autocommit=True)
    yield c
    c.close()


def run(conn, statements):
    with conn.cursor() as cur:
        for stmt in statements:
            cur.execute(stmt.sql, stmt.args)


def rows(conn, db, table, order="1"):
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {quote_name(db)}.{quote_name(table)} ORDER BY {order}")
        return [tuple(r) for r in cur.fetchall()]


def make(db, schema, tp, values, old=None):
    return DML(db, schema.table, tp, values, old, schema)


def test_awkward_names_nulls_and_binary_values(conn, fresh_database):
    db = fresh_database()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`order` (`select` INT PRIMARY KEY, "
                    "`a``b` VARBINARY(16) NULL, `na me` VARCHAR(20) NULL UNIQUE, `v` INT NULL)")
    schema = TableSchema(db, "order", ("select", "a`b", "na me", "v"),
                         (UniqueKey("PRIMARY", ("select",), True), UniqueKey("na me", ("na me",))))
    blob = b"\x00\xff'\\\"%s"
    r1 = {"select": 1, "a`b": blob, "na me": "Zoë '%s", "v": None}
    r2 = {"select": 2, "a`b": None, "na me": None, "v": 7}
    run(conn, dml_statements(make(db, schema, INS, r1)))
    run(conn, dml_statements(make(db, schema, INS, r2)))
    assert rows(conn, db, "order") == [(1, blob, "Zoë '%s", None), (2, None, None, 7)]
    # update that changes the PK, located by the old PK
    r1b = {**r1, "select": 3, "v": 1}
    run(conn, dml_statements(make(db, schema, UPD, r1b, r1)))
    run(conn, dml_statements(make(db, schema, DEL, r2)))
    assert rows(conn, db, "order") == [(3, blob, "Zoë '%s", 1)]


def test_table_without_keys_uses_every_column_and_limit_1(conn, fresh_database):
    db = fresh_database()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`log` (a INT NULL, b VARBINARY(8) NULL)")
    schema = TableSchema.build(db, "log", ["a", "b"])
    same = {"a": None, "b": b"\x01"}
    for _ in range(2):
        run(conn, dml_statements(make(db, schema, INS, same)))
    run(conn, dml_statements(make(db, schema, INS, {"a": 5, "b": None})))
    run(conn, dml_statements(make(db, schema, DEL, same)))  # one of the two twins
    run(conn, dml_statements(make(db, schema, UPD, {"a": 6, "b": None}, {"a": 5, "b": None})))
    assert rows(conn, db, "log", "a, b") == [(None, b"\x01"), (6, None)]


def test_nullable_unique_key_falls_back_to_every_column(conn, fresh_database):
    db = fresh_database()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`t` (u INT NULL UNIQUE, v INT)")
    schema = TableSchema(db, "t", ("u", "v"), (UniqueKey("u", ("u",)),))
    run(conn, dml_statements(make(db, schema, INS, {"u": None, "v": 1})))
    run(conn, dml_statements(make(db, schema, INS, {"u": None, "v": 2})))
    run(conn, dml_statements(make(db, schema, UPD, {"u": 9, "v": 2}, {"u": None, "v": 2})))
    assert rows(conn, db, "t", "v") == [(None, 1), (9, 2)]


def test_safe_mode_replay_is_idempotent(conn, fresh_database):
    db = fresh_database()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`t` (id INT PRIMARY KEY, u INT UNIQUE, v INT)")
    schema = TableSchema.build(db, "t", ["id", "u", "v"], ["id"], {"u": ("u",)})
    stream = [make(db, schema, INS, {"id": 1, "u": 10, "v": 0}),
              make(db, schema, INS, {"id": 2, "u": 20, "v": 0}),
              make(db, schema, UPD, {"id": 1, "u": 30, "v": 1}, {"id": 1, "u": 10, "v": 0}),
              make(db, schema, UPD, {"id": 3, "u": 10, "v": 2}, {"id": 2, "u": 20, "v": 0}),
              make(db, schema, DEL, {"id": 1, "u": 30, "v": 1})]
    for dml in stream:
        run(conn, dml_statements(dml))
    expected = rows(conn, db, "t")
    assert expected == [(3, 10, 2)]
    # a crash replays from an older checkpoint: safe mode converges from any prefix
    for start in range(len(stream)):
        for dml in stream[start:]:
            run(conn, dml_statements(dml, safe_mode=True))
        assert rows(conn, db, "t") == expected


def test_ddl_with_use_and_create_database(conn, fresh_database):
    db = fresh_database()
    weird = db + "_we`ird"
    run(conn, ddl_statements(DDL(weird, "", f"CREATE DATABASE {quote_name(weird)}", 1)))
    try:
        run(conn, ddl_statements(DDL(weird, "t", "CREATE TABLE t (id INT PRIMARY KEY)", 2)))
        run(conn, ddl_statements(DDL(weird, "t", "ALTER TABLE t ADD COLUMN `100%` INT", 3)))
        with conn.cursor() as cur:
            cur.execute("SELECT column_name FROM information_schema.columns WHERE "
                        "table_schema = %s AND table_name = 't' ORDER BY ordinal_position",
                        (weird,))
            assert [r[0] for r in cur.fetchall()] == ["id", "100%"]
    finally:
        run(conn, ddl_statements(DDL("", "", f"DROP DATABASE {quote_name(weird)}", 4)))


def test_checkpoint_table_round_trip(conn):
    run(conn, create_statements())
    run(conn, create_statements())  # idempotent
    cluster_id = 2**63 + 12345  # BIGINT UNSIGNED
    for cp in (Checkpoint(414529105591271429), Checkpoint(414529105591271999, True, 52,
                                                          {"primary-ts": 1, "secondary-ts": 2})):
        run(conn, [save_statement(cluster_id, cp)])
        with conn.cursor() as cur:
            stmt = load_statement(cluster_id)
            cur.execute(stmt.sql, stmt.args)
            (text,) = cur.fetchone()
        assert decode_json(text) == cp
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM tidb_binlog.checkpoint WHERE clusterID = %s",
                    (cluster_id,))
        assert cur.fetchone()[0] == 1


def test_merge_large_batch_in_chunks(conn, fresh_database):
    db = fresh_database()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`t` (a INT, b VARCHAR(8), x BLOB, PRIMARY KEY (a, b))")
    schema = TableSchema.build(db, "t", ["a", "b", "x"], ["a", "b"])
    dmls = [make(db, schema, INS, {"a": i, "b": str(i % 7), "x": bytes([i % 256]) * 10})
            for i in range(2500)]
    dmls += [make(db, schema, DEL, dict(d.values)) for d in dmls[::2]]
    stmts = merge_statements(dmls, batch_size=1000)
    # insert+delete -> delete: 1250 deletes and 1250 inserts, 2 statements each
    assert [s.sql.split()[0] for s in stmts] == ["DELETE", "DELETE", "REPLACE", "REPLACE"]
    run(conn, stmts)
    assert rows(conn, db, "t", "a")[:2] == [(1, "1", b"\x01" * 10), (3, "3", b"\x03" * 10)]
    assert len(rows(conn, db, "t")) == 1250


# -- merge-by-key == one-by-one, on hypothesis streams -------------------------

SPEC = ("id", "u", "v")


def gen_changes(data, initial):
    """A valid change stream over pk 0..5, unique u in 0..4 or NULL: (tp, new, old)."""
    state = dict(initial)
    out = []
    for _ in range(data.draw(st.integers(1, 25))):
        used_u = {r["u"] for r in state.values() if r["u"] is not None}
        free = [k for k in range(6) if k not in state]
        op = data.draw(st.sampled_from(["ins", "upd", "del"])) if state else "ins"
        if op == "ins" and free:
            pk = data.draw(st.sampled_from(free))
            new = {"id": pk, "u": data.draw(st.sampled_from([None, *sorted(set(range(5)) - used_u)])),
                   "v": data.draw(st.integers(0, 9))}
            out.append((INS, new, None))
            state[pk] = new
        elif op in ("ins", "upd"):
            pk = data.draw(st.sampled_from(sorted(state)))
            old = state.pop(pk)
            free_u = (set(range(5)) - used_u) | ({old["u"]} - {None})
            new = {"id": data.draw(st.sampled_from([pk, *free])),
                   "u": data.draw(st.sampled_from([None, *sorted(free_u)])),
                   "v": data.draw(st.integers(0, 9))}
            out.append((UPD, new, old))
            state[new["id"]] = new
        else:
            pk = data.draw(st.sampled_from(sorted(state)))
            out.append((DEL, state.pop(pk), None))
    return out, state


@pytest.fixture(scope="module")
def merge_dbs(mariadb):
    conn = mariadb.connect(autocommit=True)
    names = ("drainer_merge_seq", "drainer_merge_bulk")
    with conn.cursor() as cur:
        for name in names:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
            cur.execute(f"CREATE DATABASE {name}")
            cur.execute(f"CREATE TABLE {name}.t (id INT PRIMARY KEY, u INT NULL UNIQUE, "
                        "v INT NOT NULL)")
    yield conn, names
    with conn.cursor() as cur:
        for name in names:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
    conn.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_merge_by_key_equals_one_by_one_on_mariadb(merge_dbs, data):
    conn, (seq_db, bulk_db) = merge_dbs
    initial = {pk: {"id": pk, "u": pk if data.draw(st.booleans()) else None, "v": 0}
               for pk in data.draw(st.sets(st.integers(0, 5), max_size=4))}
    changes, expected = gen_changes(data, initial)
    batch_size = data.draw(st.integers(1, 4))
    schemas = {db: TableSchema.build(db, "t", SPEC, ["id"], {"u": ("u",)})
               for db in (seq_db, bulk_db)}
    with conn.cursor() as cur:
        for db in (seq_db, bulk_db):
            cur.execute(f"DELETE FROM {db}.t")
            for r in initial.values():
                cur.execute(f"INSERT INTO {db}.t VALUES (%s,%s,%s)", (r["id"], r["u"], r["v"]))
    for tp, new, old in changes:
        run(conn, dml_statements(make(seq_db, schemas[seq_db], tp, new, old)))
    bulk = [make(bulk_db, schemas[bulk_db], tp, new, old) for tp, new, old in changes]
    run(conn, render_merged(merge_by_key(bulk), batch_size=batch_size))
    want = sorted((r["id"], r["u"], r["v"]) for r in expected.values())
    assert rows(conn, seq_db, "t") == want
    assert rows(conn, bulk_db, "t") == want
