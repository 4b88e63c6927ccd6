"""Change events of the change-log jobs: puts and dels per row key, in commit order; a key
change is a del of the old key then a put; keyless tables carry +1/-1; one counted event
per row change. Reducing the events (last per key) gives the table's image."""

from __future__ import annotations

import datetime
from collections import Counter
from decimal import Decimal

import pytest

from spark_on_ray.lake_plan import (
    EventTypeError,
    change_txns,
    events_table,
    lake_files,
    lake_layout,
    minute_of,
    row_events,
    text_value,
)
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, Txn
from tidb_binlog.tso import compose

INS, U, D = DMLType.INSERT, DMLType.UPDATE, DMLType.DELETE


def dml(tp, values, old=None, table="t"):
    return DML("db", table, tp, values, old)


def image(events):
    """The reduction snapshot-at runs in Spark, in plain Python."""
    last = {}
    for e in sorted(events, key=lambda e: e["_seq"]):
        last[e["_key"]] = e
    return sorted(tuple(sorted((k, v) for k, v in e.items() if not k.startswith("_")))
                  for e in last.values() if e["_op"] == "put")


def test_keyed_events_reduce_to_the_image():
    txns = [Txn(1, (dml(INS, {"id": 1, "v": "a"}), dml(INS, {"id": 2, "v": "b"}))),
            Txn(2, (dml(U, {"id": 10, "v": "a"}, {"id": 1, "v": "a"}),)),   # key move
            Txn(3, ddl=DDL("db", "t", "ALTER TABLE t ADD w INT", 3)),
            Txn(4, (dml(U, {"id": 2, "v": "c"}, {"id": 2, "v": "b"}),
                    dml(INS, {"x": 1}, table="other"))),
            Txn(5, (dml(D, {"id": 10, "v": "a"}), dml(INS, {"id": 1, "v": "z"})))]
    events = row_events(txns, {("db", "t"): ("id",)})
    assert list(events) == [("db", "t")]   # other tables and DDLs skipped
    ev = events[("db", "t")]
    assert [e["_seq"] for e in ev] == sorted(e["_seq"] for e in ev)
    assert [(e["_op"], e["_key"], e["_count"]) for e in ev[2:4]] == [
        ("del", "(1,)", 0), ("put", "(10,)", 1)]
    assert image(ev) == [(("id", 1), ("v", "z")), (("id", 2), ("v", "c"))]
    assert Counter(e["_type"] for e in ev if e["_count"]) == {"insert": 3, "update": 2,
                                                              "delete": 1}


def test_keyless_events_count_identical_rows():
    row = {"a": 1, "u": None}
    txns = [Txn(1, (dml(INS, row), dml(INS, row), dml(INS, {"a": 2, "u": None}))),
            Txn(2, (dml(U, {"a": 3, "u": None}, {"a": 2, "u": None}), dml(D, row)))]
    ev = row_events(txns, {("db", "t"): ()})[("db", "t")]
    n = Counter()
    for e in ev:
        n[e["_key"]] += e["_delta"]
    assert sorted(v for v in n.values() if v > 0) == [1, 1]   # one copy of row, one of a=3
    assert sum(e["_count"] for e in ev) == 5


def test_minute_of_is_utc_minutes_of_the_physical_time():
    assert minute_of(compose(60_000 * 7 + 59_999, 5)) == 7


def test_events_table_types_big_unsigned_nulls_and_mixed():
    big = (1 << 64) - 1
    rows = [{"_key": "(1,)", "bu": big, "n": None, "v": "a"},
            {"_key": "(2,)", "bu": -5, "n": None},
            {"_key": "(3,)", "bu": None, "v": "b"}]
    tbl = events_table(rows)
    assert tbl.column_names == ["_key", "bu", "n", "v"]
    assert str(tbl.schema.field("bu").type) == "decimal128(20, 0)"
    assert [None if v is None else int(v) for v in tbl.column("bu").to_pylist()] == [
        big, -5, None]
    assert str(tbl.schema.field("n").type) == "string"
    assert tbl.column("v").to_pylist() == ["a", None, "b"]
    with pytest.raises(EventTypeError, match=r"column 'x': values of mixed kinds"):
        events_table([{"x": 1}, {"x": "one"}])


def test_parquet_lake_rows_become_the_same_events():
    """The Parquet sink's rows (before/after structs) → transactions → events, only in
    [start, stop]; files picked by table and commit_ts range, in manifest order."""
    files = [{"database": "db", "table": "t", "min_commit_ts": 10, "max_commit_ts": 20},
             {"database": "db", "table": "u", "min_commit_ts": 15, "max_commit_ts": 25},
             {"database": "db", "table": "t", "min_commit_ts": 30, "max_commit_ts": 40}]
    assert lake_files(files, [("db", "t")], 0, 0) == [files[0], files[2]]
    assert lake_files(files, [("db", "t")], 21, 35) == [files[2]]
    assert lake_files(files, [("db", "t"), ("db", "u")], 0, 12) == [files[0]]
    rows = [{"commit_ts": 10, "op": "insert", "before": None, "after": {"id": 1, "v": "a"}},
            {"commit_ts": 11, "op": "update", "before": {"id": 1, "v": "a"},
             "after": {"id": 2, "v": "a"}},
            {"commit_ts": 12, "op": "insert", "before": None, "after": {"id": 3, "v": "c"}},
            {"commit_ts": 13, "op": "delete", "before": {"id": 3, "v": "c"}, "after": None},
            {"commit_ts": 99, "op": "insert", "before": None, "after": {"id": 9, "v": "z"}}]
    txns = list(change_txns(rows, "db", "t", 0, 50))
    assert [t.commit_ts for t in txns] == [10, 11, 12, 13]
    events = row_events(txns, {("db", "t"): ("id",)})[("db", "t")]
    assert image(events) == [(("id", 2), ("v", "a"))]
    assert [t.commit_ts for t in change_txns(rows, "db", "t", 11, 12)] == [11, 12]
    assert text_value(Decimal("1.50")) == "1.50"
    assert text_value(datetime.date(2024, 5, 1)) == "2024-05-01"
    assert text_value(datetime.datetime(2024, 5, 1, 8, 0, 1, 500)) == \
        "2024-05-01 08:00:01.000500"
    assert text_value(-datetime.timedelta(hours=26, seconds=5)) == "-26:00:05"
    assert text_value(b"\x01") == b"\x01" and text_value(7) == 7


def test_lake_images_have_the_tables_columns_as_of_the_end(tmp_path):
    """From the Parquet lake, every image has the table's columns as of the range's end
    (the manifest's entry there): a row written before an ADD COLUMN holds the column's
    default, a dropped column is left out; so a keyless row inserted before the ADD
    COLUMN and deleted after it is gone from the image."""
    from spark_on_ray import lake as lake_job
    from tidb_binlog.drainer.sinks.parquet.arrow import ColumnSpec, TableSpec
    from tidb_binlog.drainer.sinks.parquet.keeper import Changes
    from tidb_binlog.drainer.sinks.parquet.manifest import read_manifest
    from tidb_binlog.drainer.sinks.parquet.sink import ParquetLake
    from tidb_binlog.model.consts import Flag, TypeCode

    pk = (("PRIMARY", ("id",), True),)
    ident = ColumnSpec("id", TypeCode.LONG, Flag.NOT_NULL, default=0)
    name = ColumnSpec("name", TypeCode.VARCHAR, default=None)
    note = ColumnSpec("note", TypeCode.VARCHAR, default="x")
    v = ColumnSpec("v", TypeCode.LONG, default=None)
    t1 = TableSpec("db", "t", (ident, name), pk, "int")
    t2 = TableSpec("db", "t", (ident, name, note), pk, "int")
    t3 = TableSpec("db", "t", (ident, note), pk, "int")
    k1, k2 = TableSpec("db", "k", (v,), (), "rowid"), TableSpec("db", "k", (v, note), (), "rowid")
    ts = compose(1_764_000_000_000, 0)

    def rows(version, *changes):
        return Changes(rows=changes), version

    def ddl(table, query, version):
        return Changes(ddl=("db", table, query)), version

    items = [rows(1, (t1, "insert", None, {"id": 1, "name": "a"}),
                  (t1, "insert", None, {"id": 2, "name": "b"}),
                  (k1, "insert", None, {"v": 1}), (k1, "insert", None, {"v": 2})),
             ddl("t", "ALTER TABLE t ADD COLUMN note VARCHAR(8) DEFAULT 'x'", 2),
             ddl("k", "ALTER TABLE k ADD COLUMN note VARCHAR(8) DEFAULT 'x'", 3),
             rows(3, (t2, "update", {"id": 1, "name": "a", "note": "x"},
                      {"id": 1, "name": "a", "note": "y"}),
                  (k2, "delete", {"v": 1, "note": "x"}, None)),
             ddl("t", "ALTER TABLE t DROP COLUMN name", 4),
             rows(4, (t3, "insert", None, {"id": 3, "note": "z"}))]
    lk = ParquetLake(tmp_path / "lake", clock=lambda: 0.0)
    lk.reset()
    lk.apply([(ts + i, *item) for i, item in enumerate(items, 1)])
    lk.close()
    m = read_manifest(lk.directory)
    keys = {("db", "t"): ("id",), ("db", "k"): ()}
    events, end = lake_job._lake_events(str(lk.directory), m, 0, 0, keys,
                                        lake_job.SnapshotResult(at_ts=0))
    assert end == m.commit_ts == ts + len(items)
    assert image(events[("db", "t")]) == [(("id", 1), ("note", "y")), (("id", 2), ("note", "x")),
                                          (("id", 3), ("note", "z"))]
    assert image(events[("db", "k")]) == [(("note", "x"), ("v", 2))]
    # as of an earlier ts: the columns then
    events, _ = lake_job._lake_events(str(lk.directory), m, 0, ts + 1, keys,
                                      lake_job.SnapshotResult(at_ts=0))
    assert image(events[("db", "t")]) == [(("id", 1), ("name", "a")), (("id", 2), ("name", "b"))]
    assert lake_layout(m, "db", "t", ts + 1) == (("id", "name"), {"id": 0, "name": None})
    assert lake_layout(m, "db", "t", ts) is None                      # before its first row
