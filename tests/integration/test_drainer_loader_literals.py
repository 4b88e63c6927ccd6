"""The loader's fast apply path (literal rendering, one-round-trip scripts) is exact.

Two checks against a real MariaDB, in the default session and under
``NO_BACKSLASH_ESCAPES``:

- the text :class:`LiteralRenderer` sends is byte-identical to pymysql's own
  ``cursor.mogrify`` for every value type the all-types table carries (as the
  translator produces them and as native Python objects), NULLs and edge values;
- the all-types table applied through the :class:`Loader` (merge on and off, so
  REPLACE/DELETE bulk statements, coalesced INSERTs and per-row UPDATE/DELETE)
  ends identical to the same row changes applied one per statement through
  ``cursor.execute(sql, args)``, the path the loader used before.
"""

from __future__ import annotations

import datetime
import itertools
import random
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.apply.sql import LiteralRenderer, Statement, dml_statements
from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
from tidb_binlog.errors import DownstreamError
from tidb_binlog.upstream.workload import ALL_TYPES_DDL

_cluster_ids = itertools.count(5000)
NO_BACKSLASH = "STRICT_TRANS_TABLES,NO_BACKSLASH_ESCAPES"
COLUMNS = ("id", "b", "t", "tu", "s", "m", "i", "iu", "bi", "bu", "f", "d", "de", "bt", "da",
           "dt", "ts", "tm", "y", "c", "vc", "bn", "bl", "tx", "e", "st", "j")
SCHEMA_COLUMNS = COLUMNS
AWKWARD = ["", "'", "''", "\\", "\\'", '"', "a\x00b", "\n\r\x1a", "%s", "%%", "中文'日本語\\",
           "'; DROP TABLE x; --", "\\\\'\\", "😀"]


def cfg_of(server, **kw) -> DownstreamConfig:
    return DownstreamConfig(host=server.host, port=server.port, user=server.user,
                            password=server.password, read_timeout_s=10, **kw)


def value_corpus() -> list:
    """Every Python type a DML value may have, with edges."""
    return [None, 0, -1, 2**64 - 1, -2**63, True, False, 0.0, -0.0, 1.5, 0.1, 1e300,
            -2.2250738585072014e-308, 5e-324, Decimal("0"), Decimal("-12345678901234567890.1"),
            Decimal("1E+5"), Decimal("-0.0000000000000000001"),
            datetime.datetime(2023, 5, 6, 7, 8, 9, 123456), datetime.datetime(1000, 1, 1),
            datetime.date(9999, 12, 31), datetime.time(23, 59, 59, 500000), datetime.time(0, 0),
            datetime.timedelta(hours=-838, minutes=-59, seconds=-59),
            datetime.timedelta(seconds=1, microseconds=1), datetime.timedelta(0),
            b"", b"\x00'\\\"\xff", bytes(range(256)), bytearray(b"ab'"),
            *AWKWARD, "x" * 5000, DMLType.DELETE]


@pytest.mark.parametrize("sql_mode", [None, NO_BACKSLASH])
def test_rendered_text_is_pymysqls(mariadb, sql_mode):
    ds = Downstream(cfg_of(mariadb, sql_mode=sql_mode))
    try:
        conn = ds.connection()
        renderer = LiteralRenderer(conn)
        # every fast function passed its self-check against pymysql (none fell back)
        assert renderer.fast_types() == {int, bool, float, type(None), bytes, str}
        corpus = value_corpus()
        stmt = Statement("SELECT " + ",".join(["%s"] * len(corpus)), tuple(corpus))
        with conn.cursor() as cur:
            expected = cur.mogrify(stmt.sql, stmt.args)
            assert renderer.render(stmt) == expected
            assert ds.render(stmt) == expected
            for value in corpus:
                assert renderer.literal(value) == cur.mogrify("%s", (value,))
            # and the server reads every literal back as sent
            cur.execute(expected)
            assert len(cur.fetchone()) == len(corpus)
        assert ds.render(Statement("DROP TABLE `%s`", None)) == "DROP TABLE `%s`"
        with pytest.raises(DownstreamError, match="inf can not be used"):
            ds.render(Statement("SELECT %s", (float("inf"),)))
        with pytest.raises(DownstreamError, match="not all arguments converted"):
            ds.render(Statement("SELECT %s", (1, 2)))
    finally:
        ds.close()


@pytest.fixture(scope="module", params=[None, NO_BACKSLASH])
def session(request, mariadb):
    ds = Downstream(cfg_of(mariadb, sql_mode=request.param))
    yield ds.connection()
    ds.close()


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.text(), st.binary(), st.integers(-2**63, 2**64 - 1),
                                 st.floats(allow_nan=False, allow_infinity=False),
                                 st.none(), st.booleans()), max_size=8))
def test_rendered_text_is_pymysqls_for_any_value(session, values):
    stmt = Statement("SELECT 1" + ",%s" * len(values), tuple(values))
    with session.cursor() as cur:
        assert LiteralRenderer(session).render(stmt) == cur.mogrify(stmt.sql, stmt.args)


def translated(rng: random.Random, row_id: int) -> dict:
    """An all-types row as the translator hands it over (texts, ints for BIT/ENUM/SET)."""
    from tidb_binlog.upstream.workload import _all_types_row

    row = _all_types_row(rng)
    row["id"] = row_id
    row["b"] = int(row["b"])
    row["bt"] = int.from_bytes(row["bt"], "big")
    row["e"] = None if row["e"] is None else "abc".index(row["e"]) + 1
    row["st"] = sum(1 << "xyz".index(x) for x in row["st"].split(",") if x)
    row["tx"] += rng.choice(AWKWARD)
    return row


def native(rng: random.Random, row_id: int) -> dict:
    """The same columns as native Python objects (Decimal, datetime, timedelta...)."""
    row = translated(rng, row_id)
    row.update(b=rng.random() < 0.5, de=Decimal(row["de"]), f=rng.choice([None, 0.5, -2.0]),
               da=datetime.date(2020, 2, 29), dt=datetime.datetime(2023, 5, 6, 7, 8, 9, 1),
               tm=datetime.timedelta(hours=-rng.randrange(839), seconds=-1, microseconds=-500000),
               ts=rng.choice([None, datetime.datetime(2021, 3, 4, 5, 6, 7)]),
               vc=rng.choice(AWKWARD), c=rng.choice(AWKWARD)[:10], bl=bytearray(b"x'\\\x00"))
    return row


def null_row(row_id: int) -> dict:
    return {c: None for c in COLUMNS} | {"id": row_id}


def edge_row(row_id: int) -> dict:
    return {"id": row_id, "b": 1, "t": -128, "tu": 255, "s": -32768, "m": 8388607,
            "i": -2**31, "iu": 2**32 - 1, "bi": -2**63, "bu": 2**64 - 1, "f": -3.25,
            "d": -1.7976931348623157e308, "de": "-9999999999999999999.9999999999999999999",
            "bt": 2**64 - 1, "da": "1000-01-01", "dt": "9999-12-31 23:59:59.999999",
            "ts": "2038-01-19 03:14:07", "tm": "-838:59:59.000", "y": 2155, "c": "'\\'\\",
            "vc": "\\" * 40, "bn": b"\x00\x00'\\", "bl": bytes(range(256)), "tx": "中" * 300,
            "e": 3, "st": 7, "j": '{"k": "\\"quoted\\" \'s\' \\\\ 中"}'}


def workload(db: str) -> list[tuple[int, list[DML]]]:
    """Inserts, updates (incl. PK changes), deletes over mixed-type all-types rows."""
    schema = TableSchema.build(db, "all_types", COLUMNS, ["id"])
    rng = random.Random(11)
    state: dict[int, dict] = {}
    parts = []
    ts = itertools.count(100)

    def dml(tp, values, old=None):
        return DML(db, "all_types", tp, values, old, schema)

    makers = [lambda i: translated(rng, i), lambda i: native(rng, i), null_row, edge_row]
    for row_id in range(1, 41):
        row = makers[row_id % len(makers)](row_id)
        state[row_id] = row
        parts.append((next(ts), [dml(DMLType.INSERT, row)]))
    for _ in range(60):
        row_id = rng.choice(sorted(state))
        old = state[row_id]
        if rng.random() < 0.2:
            parts.append((next(ts), [dml(DMLType.DELETE, state.pop(row_id))]))
            continue
        new = makers[rng.randrange(len(makers))](row_id)
        if rng.random() < 0.2:  # a PK change
            new["id"] = max(state) + 1
            del state[row_id]
        state[new["id"]] = new
        parts.append((next(ts), [dml(DMLType.UPDATE, new, old)]))
    return parts


def table_rows(server, db) -> list[tuple]:
    with server.connect(db, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM all_types ORDER BY id")
        return cur.fetchall()


@pytest.mark.parametrize("sql_mode", [None, NO_BACKSLASH])
@pytest.mark.parametrize("merge", [True, False])
def test_all_types_through_the_loader_equal_per_row_statements(mariadb, fresh_database, merge,
                                                               sql_mode):
    ref, got = fresh_database(), fresh_database()
    for db in (ref, got):
        with mariadb.connect(db, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(ALL_TYPES_DDL)
    parts = workload(got)
    # the reference: one statement per row change, pymysql's own interpolation
    with mariadb.connect(ref, autocommit=True) as conn, conn.cursor() as cur:
        for _, dmls in workload(ref):
            for stmt in dml_statements(dmls[0]):
                cur.execute(stmt.sql, stmt.args)
    loader = Loader(Downstream(cfg_of(mariadb, sql_mode=sql_mode)),
                    LoaderConfig(merge=merge, txn_batch=25, cluster_id=next(_cluster_ids)))
    try:
        for i in range(0, len(parts), 30):
            loader.execute_batch(parts[i:i + 30])
        round_trips = loader.downstream.round_trips
    finally:
        loader.close()
    expected = table_rows(mariadb, ref)
    assert len(expected) > 20
    assert table_rows(mariadb, got) == expected
    # one round trip per downstream transaction (plus reading the progress row once)
    assert round_trips <= len(parts) // 25 + 4 + 3


@pytest.mark.parametrize("multi", [True, False])
def test_execute_script_runs_in_order_and_names_the_failing_statement(
        mariadb, fresh_database, monkeypatch, multi):
    db = fresh_database()
    with mariadb.connect(db, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    ds = Downstream(cfg_of(mariadb, multi_statements=multi))
    table = f"`{db}`.`t`"
    try:
        ok = [Statement(f"INSERT INTO {table} VALUES (%s,%s)", (i, f"v;{i}'")) for i in range(5)]
        ok.append(Statement(f"UPDATE {table} SET v = %s WHERE id > %s", ("u;", 2)))
        before = ds.round_trips
        assert ds.execute_script(ok, commit=True) == 5 + 2
        assert ds.round_trips - before == (1 if multi else len(ok) + 1)
        bad = [Statement(f"INSERT INTO {table} VALUES (%s,%s)", (10, "a")),
               Statement(f"INSERT INTO {table} VALUES (%s,%s)", (1, "duplicate")),
               Statement(f"INSERT INTO {table} VALUES (%s,%s)", (11, "never runs"))]
        with pytest.raises(DownstreamError) as info:
            ds.execute_script(bad, commit=True)
        assert info.value.code == 1062 and info.value.statement_index == 1
        ds.rollback()
        # scripts split by size still run everything in order, in more round trips
        monkeypatch.setattr("tidb_binlog.drainer.sinks.mysql.downstream.SCRIPT_CHARS", 60)
        before = ds.round_trips
        more = [Statement(f"INSERT INTO {table} VALUES (%s,%s)", (20 + i, "x" * 30))
                for i in range(4)]
        assert ds.execute_script(more, commit=True) == 4
        assert ds.round_trips - before == (4 if multi else 5)
    finally:
        ds.close()
    with mariadb.connect(db, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        assert cur.fetchall() == (
            (0, "v;0'"), (1, "v;1'"), (2, "v;2'"), (3, "u;"), (4, "u;"),
            *((20 + i, "x" * 30) for i in range(4)))
