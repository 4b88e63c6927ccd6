"""The Parquet sink's pure parts: exact Arrow types, the manifest, flush and reset."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.sinks.parquet.arrow import ColumnSpec, TableSpec, arrow_type
from tidb_binlog.drainer.sinks.parquet.keeper import Changes, ParquetKeeper
from tidb_binlog.drainer.sinks.parquet.manifest import (
    MANIFEST_NAME,
    Manifest,
    committed_files,
    read_manifest,
    write_manifest,
)
from tidb_binlog.drainer.sinks.parquet.sink import ParquetLake, ParquetSink, commit_date
from tidb_binlog.errors import DownstreamError, StorageError
from tidb_binlog.model.consts import Flag, TypeCode
from tidb_binlog.model.schema import CIStr, ColumnInfo, FieldType, TableInfo

T = TypeCode
TS0 = (1_764_000_000_000 << 18)  # 2025-11-24 UTC

COLUMNS = (
    ColumnSpec("id", T.LONGLONG, Flag.PRI_KEY),
    ColumnSpec("ti", T.TINY), ColumnSpec("tu", T.TINY, Flag.UNSIGNED),
    ColumnSpec("bu", T.LONGLONG, Flag.UNSIGNED), ColumnSpec("mi", T.INT24),
    ColumnSpec("f", T.FLOAT), ColumnSpec("d", T.DOUBLE),
    ColumnSpec("dec", T.NEWDECIMAL, flen=20, decimal=6),
    ColumnSpec("bigdec", T.NEWDECIMAL, flen=65, decimal=30),
    ColumnSpec("dt", T.DATE), ColumnSpec("dtm", T.DATETIME, decimal=6),
    ColumnSpec("ts", T.TIMESTAMP, decimal=3), ColumnSpec("tm", T.DURATION, decimal=6),
    ColumnSpec("y", T.YEAR), ColumnSpec("s", T.VARCHAR, charset="utf8mb4"),
    ColumnSpec("vb", T.VARCHAR, charset="binary"), ColumnSpec("bl", T.BLOB, charset="binary"),
    ColumnSpec("tx", T.BLOB, charset="utf8mb4"), ColumnSpec("bit", T.BIT, flen=12),
    ColumnSpec("e", T.ENUM, elems=("a", "b", "c")), ColumnSpec("st", T.SET, elems=("x", "y", "z")),
    ColumnSpec("j", T.JSON),
)
SPEC = TableSpec("db", "all_types", COLUMNS)

# the SQL arguments the translator produces (format_sql_arg), and what must come back
ARGS = {"id": 1, "ti": -128, "tu": 255, "bu": 18446744073709551615, "mi": -8388608,
        "f": 1.5, "d": 2.000000000000001, "dec": "-12345678901234.123456",
        "bigdec": "12345678901234567890123456789012345.123456789012345678901234567891",
        "dt": "2024-02-29", "dtm": "2024-02-29 23:59:59.999999", "ts": "1970-01-01 00:00:01.500",
        "tm": "-838:59:59.000000", "y": 2155, "s": "héllo ✓", "vb": b"\x00\xff",
        "bl": b"\x01\x02", "tx": "text", "bit": 0b101000000001, "e": 2, "st": 0b101,
        "j": '{"a": [1, 2.5, "x"]}'}
EXPECTED = {"id": 1, "ti": -128, "tu": 255, "bu": 18446744073709551615, "mi": -8388608,
            "f": 1.5, "d": 2.000000000000001, "dec": Decimal("-12345678901234.123456"),
            "bigdec": Decimal("12345678901234567890123456789012345.123456789012345678901234567891"),
            "dt": datetime.date(2024, 2, 29),
            "dtm": datetime.datetime(2024, 2, 29, 23, 59, 59, 999999),
            "ts": datetime.datetime(1970, 1, 1, 0, 0, 1, 500000),
            "tm": -datetime.timedelta(hours=838, minutes=59, seconds=59), "y": 2155,
            "s": "héllo ✓", "vb": b"\x00\xff", "bl": b"\x01\x02", "tx": "text",
            "bit": b"\x0a\x01", "e": "b", "st": "x,z", "j": '{"a": [1, 2.5, "x"]}'}


def rows_of(directory) -> list[dict]:
    out = []
    for path in committed_files(directory):
        out.extend(pq.read_table(path).to_pylist())
    return out


def lake(tmp_path, **kw) -> ParquetLake:
    clock = kw.pop("clock", lambda: 0.0)
    return ParquetLake(tmp_path / "lake", clock=clock, **kw)


def test_arrow_types_are_exact_per_family():
    types = {c.name: arrow_type(c) for c in COLUMNS}
    assert types["ti"] == pa.int8() and types["tu"] == pa.uint8()
    assert types["bu"] == pa.uint64() and types["mi"] == pa.int32()
    assert types["f"] == pa.float32() and types["d"] == pa.float64()
    assert types["dec"] == pa.decimal128(20, 6) and types["bigdec"] == pa.decimal256(65, 30)
    assert types["dt"] == pa.date32() and types["dtm"] == pa.timestamp("us")
    assert types["tm"] == pa.duration("us") and types["y"] == pa.int16()
    assert types["s"] == pa.string() and types["vb"] == pa.binary()
    assert types["bit"] == pa.binary() and types["e"] == pa.string() and types["j"] == pa.string()


def test_every_type_round_trips_exactly(tmp_path):
    lk = lake(tmp_path)
    lk.reset()
    nulls = dict.fromkeys(ARGS) | {"id": 2}
    lk.apply([(TS0 + 1, Changes(rows=((SPEC, "insert", None, ARGS),
                                      (SPEC, "update", ARGS, nulls),
                                      (SPEC, "delete", nulls, None))), 5)])
    lk.flush()
    rows = rows_of(tmp_path / "lake")
    assert [r["op"] for r in rows] == ["insert", "update", "delete"]
    assert rows[0]["before"] is None and rows[0]["after"] == EXPECTED
    assert rows[1]["before"] == EXPECTED and rows[1]["after"] == dict.fromkeys(ARGS) | {"id": 2}
    assert rows[2]["after"] is None
    assert all(r["commit_ts"] == TS0 + 1 for r in rows)
    m = read_manifest(tmp_path / "lake")
    assert m.commit_ts == TS0 + 1 and m.schema_version == 5
    (entry,) = m.schemas
    cols = {c["name"]: c for c in entry["columns"]}
    assert cols["dec"]["mysql_type"] == "decimal(20,6)" and cols["bu"]["arrow_type"] == "uint64"
    assert m.files[0]["path"].startswith(f"db/all_types/date={commit_date(TS0)}/")


def test_zero_date_is_null_and_counted_non_utf8_text_refused(tmp_path):
    lk = lake(tmp_path)
    lk.reset()
    lk.apply([(TS0 + 1, Changes(rows=((SPEC, "insert", None, {"id": 1, "dtm":
                                                              "0000-00-00 00:00:00"}),)), 1)])
    lk.flush()
    assert rows_of(tmp_path / "lake")[0]["after"]["dtm"] is None
    assert lk.status()["zero_dates"] == 1
    lk.apply([(TS0 + 2, Changes(rows=((SPEC, "insert", None, {"id": 2, "s": b"\xff"}),)), 1)])
    with pytest.raises(DownstreamError, match="'s' is a text column"):
        lk.flush()


def test_manifest_replace_is_atomic(tmp_path, monkeypatch):
    write_manifest(tmp_path, Manifest(commit_ts=10))
    import tidb_binlog.drainer.sinks.parquet.manifest as mod

    def crash(*a):
        raise OSError("crash before the rename")
    monkeypatch.setattr(mod.os, "replace", crash)
    with pytest.raises(OSError):
        write_manifest(tmp_path, Manifest(commit_ts=20))
    assert read_manifest(tmp_path).commit_ts == 10  # the old one, whole
    monkeypatch.undo()
    with pytest.raises(StorageError, match="format"):
        (tmp_path / MANIFEST_NAME).write_text(json.dumps({"commit_ts": 1}))
        read_manifest(tmp_path)


def test_reset_removes_unlisted_files_and_replay_writes_each_change_once(tmp_path):
    lk = lake(tmp_path)
    assert lk.reset().commit_ts == 0
    batch = [(TS0 + i, Changes(rows=((SPEC, "insert", None, {"id": i}),)), 1)
             for i in range(1, 6)]
    lk.apply(batch[:2])
    lk.flush()  # committed: 1, 2
    lk.apply(batch[2:])
    # a crash after the files of the next flush were renamed, before the manifest
    for (_spec, date), builder in lk._groups.items():
        lk._write_file(f"db/all_types/date={date}/part-x.parquet", builder)
    (tmp_path / "lake" / "db" / ".half.parquet.tmp").write_bytes(b"torn")
    assert len(list((tmp_path / "lake").rglob("*.parquet"))) == 2
    lk2 = lake(tmp_path)
    cp = lk2.reset()
    assert cp.commit_ts == TS0 + 2 and lk2.status()["removed_files"] == 2
    lk2.apply(batch)  # the replay: 1, 2 skipped
    lk2.close()
    assert [r["after"]["id"] for r in rows_of(tmp_path / "lake")] == [1, 2, 3, 4, 5]
    assert read_manifest(tmp_path / "lake").commit_ts == TS0 + 5


def test_flush_policy_rows_time_and_ddl(tmp_path):
    now = [0.0]
    lk = lake(tmp_path, flush_rows=3, flush_interval_s=3.0, clock=lambda: now[0])
    lk.reset()
    one = lambda i: (TS0 + i, Changes(rows=((SPEC, "insert", None, {"id": i}),)), 1)  # noqa: E731
    lk.apply([one(1), one(2)])
    assert read_manifest(lk.directory).commit_ts == 0      # buffered
    lk.apply([one(3)])
    assert read_manifest(lk.directory).commit_ts == TS0 + 3  # 3 rows: flushed
    lk.apply([(TS0 + 4, None, 0)])                          # a fake binlog
    now[0] = 3.5
    lk.idle()
    assert read_manifest(lk.directory).commit_ts == TS0 + 4  # by time
    lk.apply([one(5), (TS0 + 6, Changes(ddl=("db", "all_types", "ALTER TABLE all_types "
                                            "ADD COLUMN z INT")), 2)])
    m = read_manifest(lk.directory)
    assert m.commit_ts == TS0 + 6 and m.schema_version == 2 and m.ddls[0]["commit_ts"] == TS0 + 6
    assert m.files[-1]["max_commit_ts"] == TS0 + 5          # flushed before the DDL
    wider = TableSpec("db", "all_types", (*COLUMNS, ColumnSpec("z", T.LONG)))
    lk.apply([(TS0 + 7, Changes(rows=((wider, "insert", None, {"id": 7, "z": 1}),)), 2)])
    lk.close()
    m = read_manifest(lk.directory)
    assert [s["schema_version"] for s in m.schemas] == [1, 2]
    assert m.files[-1]["schema_version"] == 2 and m.files[-1]["path"].endswith("-v2-2.parquet")


def test_sink_gate_and_status(tmp_path):
    sink = ParquetSink(lake(tmp_path))
    assert sink.close().commit_ts == 0  # never reset: nothing written
    sink.reset()
    assert sink.apply(0, [(TS0 + 1, Changes(rows=((SPEC, "insert", None, {"id": 1}),)), 1)]) \
        == TS0 + 1
    st = sink.status().as_dict()
    assert st["pending"] == 1 and st["saved_commit_ts"] == 0
    assert sink.close().commit_ts == TS0 + 1


def test_direct_path_for_plain_columns_and_its_fallback_names_the_column(tmp_path):
    spec = TableSpec("db", "plain", (ColumnSpec("id", T.LONG), ColumnSpec("f", T.FLOAT),
                                     ColumnSpec("y", T.YEAR), ColumnSpec("s", T.VARCHAR),
                                     ColumnSpec("vb", T.VARCHAR, charset="binary")))
    lk = lake(tmp_path)
    lk.reset()
    row = {"id": 1, "f": -3.25, "y": 1901, "s": "ü", "vb": b"\x00"}
    lk.apply([(TS0 + 1, Changes(rows=((spec, "insert", None, row),
                                      (spec, "delete", {"id": 2}, None))), 1)])
    lk.flush()
    got = rows_of(tmp_path / "lake")
    assert got[0]["after"] == row and got[1]["before"] == {"id": 2, "f": None, "y": None,
                                                           "s": None, "vb": None}
    lk.apply([(TS0 + 2, Changes(rows=((spec, "insert", None, {"id": 3, "s": b"\xfe"}),)), 1)])
    with pytest.raises(DownstreamError, match="'s' is a text column"):
        lk.flush()


def test_keeper_changes_carry_ops_types_and_drop_ignored_ddl():
    schema = TableSchema.build("db", "t", ["id", "v"], primary_key=["id"])
    cols = [ColumnInfo(1, CIStr("id"), type=FieldType(tp=T.LONG)),
            ColumnInfo(2, CIStr("v"), type=FieldType(tp=T.NEWDECIMAL, flen=10, decimal=2))]
    keeper = object.__new__(ParquetKeeper)
    keeper.translator = SimpleNamespace(tz=datetime.UTC, _views={1: SimpleNamespace(
        schema=schema, writable=cols, info=TableInfo(1, CIStr("t"), pk_is_handle=True))})
    keeper._ignored_dbs = frozenset({"mysql"})
    txn = Txn(5, (DML("db", "t", DMLType.INSERT, {"id": 1, "v": "1.00"}, None, schema),
                  DML("db", "t", DMLType.UPDATE, {"id": 1, "v": "2.00"},
                      {"id": 1, "v": "1.00"}, schema),
                  DML("db", "t", DMLType.DELETE, {"id": 1, "v": "2.00"}, None, schema)))
    changes = keeper._changes(txn)
    assert [(op, b, a) for _, op, b, a in changes.rows] == [
        ("insert", None, {"id": 1, "v": "1.00"}),
        ("update", {"id": 1, "v": "1.00"}, {"id": 1, "v": "2.00"}),
        ("delete", {"id": 1, "v": "2.00"}, None)]
    spec = changes.rows[0][0]
    assert arrow_type(spec.columns[1]) == pa.decimal128(10, 2)
    assert keeper._changes(Txn(6, ddl=DDL("mysql", "x", "CREATE TABLE x (a INT)", 6))) is None
    assert keeper._changes(Txn(7, ddl=DDL("db", "t", "ALTER TABLE t ADD c INT", 7))).ddl == (
        "db", "t", "ALTER TABLE t ADD c INT")
