"""What the Parquet lake's manifest tells a reader of each table: the key columns, the
handle, each column's nullability and default (the value a row written before an ADD
COLUMN holds), which entry applies at a commit_ts; and the README's pyarrow-only
example, run as it is written."""

from __future__ import annotations

import ast
import dataclasses
import datetime
import json
from pathlib import Path

import pyarrow as pa
import pytest
from test_parquet_sink import ARGS, COLUMNS, EXPECTED

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_old_row, encode_value
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.parquet.arrow import (
    BatchBuilder,
    ColumnSpec,
    TableSpec,
    column_entry,
)
from tidb_binlog.drainer.sinks.parquet.keeper import Changes, ParquetKeeper, fill_default
from tidb_binlog.drainer.sinks.parquet.manifest import (
    FORMAT,
    MANIFEST_NAME,
    REVISION,
    Manifest,
    column_default,
    read_manifest,
)
from tidb_binlog.drainer.sinks.parquet.sink import ParquetLake
from tidb_binlog.errors import DownstreamError
from tidb_binlog.model import (
    ActionType,
    CIStr,
    ColumnInfo,
    DBInfo,
    FieldType,
    HistoryInfo,
    IndexColumn,
    IndexInfo,
    Job,
    JobState,
    SchemaState,
    TableInfo,
)
from tidb_binlog.model.consts import Flag, TypeCode

T = TypeCode
TS0 = (1_764_000_000_000 << 18)  # 2025-11-24 UTC
README = Path(__file__).resolve().parents[2] / "tidb_binlog/drainer/sinks/parquet/README.md"


# -- an upstream history: CREATE TABLE (a PK and a unique key; a unique key and no PK; no
#    key at all), ADD COLUMN with a default (text, and an INT one: TiDB's defaults are
#    text), DROP COLUMN -------------------------------------------------------------------

def _col(cid, name, tp, flag=0, flen=-1, offset=0, default=None, origin=None):
    return ColumnInfo(id=cid, name=CIStr(name), offset=offset, default=default,
                      origin_default=origin,
                      type=FieldType(tp=tp, flag=flag, flen=flen, decimal=0,
                                     charset="binary" if tp == T.LONG else "utf8mb4",
                                     collate="utf8mb4_bin"))


def _unique(iid, name, table, offset):
    return IndexInfo(id=iid, idx_name=CIStr(name), tbl_name=CIStr(table), is_unique=True,
                     idx_cols=[IndexColumn(CIStr(name.removeprefix("uk_")), offset)])


def _t(*extra, drop_name=False) -> TableInfo:
    cols = [_col(1, "id", T.LONG, Flag.PRI_KEY | Flag.NOT_NULL, 11),
            _col(2, "name", T.VARCHAR, 0, 32),
            _col(3, "email", T.VARCHAR, Flag.NOT_NULL | Flag.UNIQUE_KEY, 64), *extra]
    if drop_name:
        cols = [c for c in cols if c.name.O != "name"]
    for i, c in enumerate(cols):
        c.offset = i
    email = next(i for i, c in enumerate(cols) if c.name.O == "email")
    return TableInfo(id=10, name=CIStr("t"), pk_is_handle=True, cols=cols,
                     index_info=[_unique(1, "uk_email", "t", email)])


NOTE = _col(4, "note", T.VARCHAR, 0, 8, default="x", origin="x")
QTY = _col(5, "qty", T.LONG, Flag.NOT_NULL, 11, default="7", origin="7")
NOPK = TableInfo(id=20, name=CIStr("nopk"), cols=[
    _col(1, "code", T.VARCHAR, Flag.NOT_NULL | Flag.UNIQUE_KEY, 16),
    _col(2, "v", T.DOUBLE, 0, 22, offset=1)], index_info=[_unique(1, "uk_code", "nopk", 0)])
BARE = TableInfo(id=30, name=CIStr("bare"), cols=[_col(1, "msg", T.VARCHAR, 0, 64)])

# (schema version, job type, table id, TableInfo or DBInfo, query)
HISTORY = [
    (1, ActionType.CREATE_SCHEMA, 0, DBInfo(id=2, db_name=CIStr("shop")), "CREATE DATABASE shop"),
    (2, ActionType.CREATE_TABLE, 10, _t(), "CREATE TABLE t (id INT PRIMARY KEY, "
     "name VARCHAR(32), email VARCHAR(64) NOT NULL UNIQUE KEY uk_email)"),
    (3, ActionType.CREATE_TABLE, 20, NOPK, "CREATE TABLE nopk (code VARCHAR(16) NOT NULL, "
     "v DOUBLE, UNIQUE KEY uk_code (code))"),
    (4, ActionType.CREATE_TABLE, 30, BARE, "CREATE TABLE bare (msg VARCHAR(64))"),
    (5, ActionType.ADD_COLUMN, 10, _t(NOTE), "ALTER TABLE t ADD COLUMN note VARCHAR(8) "
     "DEFAULT 'x'"),
    (6, ActionType.ADD_COLUMN, 10, _t(NOTE, QTY), "ALTER TABLE t ADD COLUMN qty INT NOT "
     "NULL DEFAULT 7"),
    (7, ActionType.DROP_COLUMN, 10, _t(NOTE, QTY, drop_name=True), "ALTER TABLE t DROP "
     "COLUMN name"),
]


class _Meta:
    def __init__(self):
        self.jobs = []
        for version, tp, table_id, info, query in HISTORY:
            db = info if isinstance(info, DBInfo) else None
            self.jobs.append(Job(
                id=version, type=tp, schema_id=2, table_id=table_id, state=JobState.SYNCED,
                schema_state=SchemaState.NONE if tp == ActionType.DROP_COLUMN
                else SchemaState.PUBLIC, query=query, schema_name="shop",
                table_name="" if db else info.name.O,
                binlog=HistoryInfo(schema_version=version, db_info=db,
                                   table_info=None if db else info)))

    def history_jobs(self, up_to_schema_version=None):
        return list(self.jobs)

    def job(self, job_id):
        return next((j for j in self.jobs if j.id == job_id), None)


def _ddl(commit_ts: int, version: int) -> tuple[int, bytes]:
    query = HISTORY[version - 1][4]
    return commit_ts, bl.encode(bl.commit(commit_ts - 1, commit_ts, ddl_query=query.encode(),
                                          ddl_job_id=version))


def _datum(v):
    return Datum.int64(v) if isinstance(v, int) else Datum.string(v)


def _insert(commit_ts: int, version: int, table_id: int, handle: int, values: dict
            ) -> tuple[int, bytes]:
    """An insert of ``values`` ({column id: value}; the int PK comes from ``handle``)."""
    row = encode_value([Datum.int64(handle)]) + encode_old_row(
        list(values), [_datum(v) for v in values.values()])
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(bl.new_prewrite_value(version, [bl.new_table_mutation(
        table_id, inserted_rows=[row], sequence=[bl.MutationType.INSERT])]))
    return commit_ts, bl.encode(b)


# the upstream's binlogs, in commit order: rows of every table version between the DDLs
BINLOGS = [
    _ddl(TS0 + 10, 2), _ddl(TS0 + 11, 3), _ddl(TS0 + 12, 4),
    _insert(TS0 + 20, 4, 10, 1, {2: "ann", 3: "a@x"}),
    _insert(TS0 + 21, 4, 20, 1, {1: "c1"}),
    _insert(TS0 + 22, 4, 30, 1, {1: "hello"}),
    _ddl(TS0 + 30, 5),
    _insert(TS0 + 40, 5, 10, 2, {2: "bob", 3: "b@x", 4: "y"}),
    _ddl(TS0 + 50, 6),
    _insert(TS0 + 60, 6, 10, 3, {2: "cy", 3: "c@x", 4: "z", 5: 3}),
    _ddl(TS0 + 70, 7),
    _insert(TS0 + 80, 7, 10, 4, {3: "d@x", 4: "w", 5: 4}),
]


def _write_lake(directory) -> ParquetLake:
    """The history through the real keeper into a lake, one flush per binlog (so every
    table version gets its entry whatever the flush policy)."""
    keeper = ParquetKeeper(TaskSettings(cluster_id=1), _Meta(), 1)
    keeper.reset(1)
    lake = ParquetLake(directory, clock=lambda: 0.0)
    lake.reset()
    for item in BINLOGS:
        lake.apply(keeper.translate([item]))
        lake.flush()
    lake.close()
    return lake


def _rows(*rows) -> Changes:
    return Changes(rows=rows)


def _entries(m: Manifest, table: str) -> list[dict]:
    return [s for s in m.schemas if s["table"] == table]


def test_manifest_carries_keys_and_defaults_across_create_add_and_drop_column(tmp_path):
    _write_lake(tmp_path / "lake")
    m = read_manifest(tmp_path / "lake")
    t = _entries(m, "t")
    assert [e["schema_version"] for e in t] == [4, 5, 6, 7]
    assert [e["min_commit_ts"] for e in t] == [TS0 + 20, TS0 + 40, TS0 + 60, TS0 + 80]
    for e in t:  # the keys and the handle stay; the columns follow the DDLs
        assert (e["primary_key"], e["handle"]) == (["id"], "int")
        assert e["unique_keys"] == [{"name": "PRIMARY", "columns": ["id"], "primary": True},
                                    {"name": "uk_email", "columns": ["email"],
                                     "primary": False}]
    cols = [{c["name"]: (c["nullable"], c["default"]) for c in e["columns"]} for e in t]
    # CREATE TABLE: a NOT NULL column without a default holds the type's zero value,
    # a nullable one NULL (TiDB Binlog's rule for a row lacking a column)
    assert cols[0] == {"id": (False, 0), "name": (True, None), "email": (False, "")}
    assert cols[1] == cols[0] | {"note": (True, "x")}                    # ADD COLUMN DEFAULT 'x'
    assert cols[2] == cols[1] | {"qty": (False, 7)}                      # the INT's "7" → 7
    assert list(cols[3]) == ["id", "email", "note", "qty"]              # DROP COLUMN name
    assert cols[3] == {k: v for k, v in cols[2].items() if k != "name"}
    assert [c["arrow_type"] for c in t[2]["columns"]] == ["int32", "string", "string",
                                                          "string", "int32"]
    # tables without a primary key: the row handle is TiDB's hidden _tidb_rowid (not in
    # the images); the identity is the first non-null unique key, else the whole image
    (nopk,) = _entries(m, "nopk")
    assert (nopk["primary_key"], nopk["handle"]) == ([], "rowid")
    assert nopk["unique_keys"] == [{"name": "uk_code", "columns": ["code"], "primary": False}]
    assert [(c["name"], c["nullable"], c["default"]) for c in nopk["columns"]] == [
        ("code", False, ""), ("v", True, None)]
    (bare,) = _entries(m, "bare")
    assert (bare["primary_key"], bare["unique_keys"], bare["handle"]) == ([], [], "rowid")

    # which entry applies to a row of commit_ts T: the file's, and by T alone the table's
    # last entry with min_commit_ts <= T
    for f in m.files:
        entry = m.schema_of(f["database"], f["table"], f["schema_version"])
        assert m.schema_at(f["database"], f["table"], f["min_commit_ts"]) is entry
    assert m.schema_at("shop", "t", TS0 + 19) is None
    assert m.schema_at("shop", "t", TS0 + 55)["schema_version"] == 5
    assert m.schema_at("shop", "t", m.commit_ts)["schema_version"] == 7
    # the reader helper: defaults as reading the lake gives values
    assert {c["name"]: column_default(c) for c in t[-1]["columns"]} == {
        "id": 0, "email": "", "note": "x", "qty": 7}


def _readme_example() -> str:
    text = README.read_text("utf-8")
    section = text[text.index("### A table's schema as of a commit_ts"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("\n```", start)]


def _run_readme_example(monkeypatch, root: Path) -> dict:
    code = _readme_example()
    imported = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported == {"base64", "json", "os", "pyarrow"}  # pyarrow and the stdlib only
    monkeypatch.chdir(root)  # its LAKE is data.drainer/lake
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 (the README's own code)
    return namespace


def test_readme_example_reads_the_lake_with_pyarrow_alone(tmp_path, monkeypatch):
    _write_lake(tmp_path / "data.drainer" / "lake")
    rows = _run_readme_example(monkeypatch, tmp_path)["rows"]
    assert [r["op"] for r in rows] == ["insert"] * 4
    assert [r["after"] for r in rows] == [
        {"id": 1, "email": "a@x", "note": "x", "qty": 7},   # before both ADD COLUMNs
        {"id": 2, "email": "b@x", "note": "y", "qty": 7},   # before ADD COLUMN qty
        {"id": 3, "email": "c@x", "note": "z", "qty": 3},
        {"id": 4, "email": "d@x", "note": "w", "qty": 4}]   # name: dropped
    assert all(r["before"] is None for r in rows)


def test_readme_example_fills_every_type_family(tmp_path, monkeypatch):
    """Columns of every type family added later, each with a default: the README's fill
    gives what the lake would hold for the value, and column_default what to_pylist does."""
    first = TableSpec("shop", "t", (COLUMNS[0],), (("PRIMARY", ("id",), True),), "int")
    added = tuple(dataclasses.replace(c, default=ARGS[c.name]) for c in COLUMNS)
    later = TableSpec("shop", "t", added, first.unique_keys, "int")
    lake = ParquetLake(tmp_path / "data.drainer" / "lake", clock=lambda: 0.0)
    lake.reset()
    lake.apply([(TS0 + 1, _rows((first, "insert", None, {"id": 1})), 1)])
    lake.flush()
    lake.apply([(TS0 + 2, _rows((later, "insert", None, ARGS | {"id": 2})), 2)])
    lake.close()
    entry = read_manifest(lake.directory).schemas[-1]
    assert {c["name"]: column_default(c) for c in entry["columns"]} == EXPECTED | {"id": 1}
    rows = _run_readme_example(monkeypatch, tmp_path)["rows"]
    assert rows[0]["after"] == EXPECTED | {"id": 1}
    assert rows[1]["after"] == EXPECTED | {"id": 2}


def test_defaults_the_manifest_cannot_tell_are_left_out():
    col = ColumnSpec("dt", T.DATETIME)
    assert "default" not in column_entry(col)                            # not told
    assert "default" not in column_entry(dataclasses.replace(col, default="CURRENT_TIMESTAMP"))
    assert "default" not in column_entry(ColumnSpec("i", T.TINY, default="300"))  # no fit
    assert column_entry(dataclasses.replace(col, default="0000-00-00 00:00:00"))["default"] \
        is None                                                          # a zero date: null
    # TiDB sets the origin default at ADD COLUMN; a TableInfo with only a DEFAULT (an
    # upstream that records no origin default) takes it; an expression is not a value
    assert fill_default(_col(9, "n", T.VARCHAR, default="d")) == "d"
    assert fill_default(_col(9, "n", T.VARCHAR, default="d", origin="o")) == "o"
    now = _col(9, "at", T.DATETIME, default="CURRENT_TIMESTAMP")
    assert fill_default(now) is None                                     # nullable: NULL
    assert fill_default(dataclasses.replace(now, type=dataclasses.replace(
        now.type, flag=Flag.NOT_NULL))) == "0000-00-00 00:00:00"        # the zero value


def test_numeric_text_in_an_int_column_is_stored_as_the_number():
    """A row written before an INT column was added: the translator fills the column's
    default, which a TableInfo holds as text ("7"); the lake stores the number."""
    spec = TableSpec("db", "t", (ColumnSpec("id", T.LONG), ColumnSpec("qty", T.LONG),
                                 ColumnSpec("f", T.FLOAT)))
    b = BatchBuilder(spec)
    b.add(1, "insert", None, {"id": 1, "qty": "7", "f": "1.5"})
    b.add(2, "insert", None, {"id": 2, "qty": 8, "f": 2.0})
    assert [r["after"] for r in b.build().to_pylist()] == [
        {"id": 1, "qty": 7, "f": 1.5}, {"id": 2, "qty": 8, "f": 2.0}]
    b.add(3, "insert", None, {"id": 3, "qty": "many"})
    with pytest.raises(DownstreamError, match="column 'qty' of db.t .* does not fit"):
        b.build()


def test_an_older_sinks_entry_is_completed_in_place_and_the_format_stays_1(tmp_path):
    spec = TableSpec("db", "t", (ColumnSpec("id", T.LONG, Flag.NOT_NULL, default=0),),
                     (("PRIMARY", ("id",), True),), "int")
    old_entry = {"database": "db", "table": "t", "schema_version": 3,
                 "columns": [{"name": "id", "mysql_type": "int", "arrow_type": "int32"}]}
    old_file = {"path": "db/t/date=2025-11-24/part-1-1-v3-0.parquet", "database": "db",
                "table": "t", "date": "2025-11-24", "schema_version": 3,
                "min_commit_ts": TS0 + 1, "max_commit_ts": TS0 + 1, "rows": 1, "bytes": 1}
    directory = tmp_path / "lake"
    directory.mkdir()
    (directory / MANIFEST_NAME).write_text(json.dumps({  # an older sink's (revision 1)
        "format": FORMAT, "commit_ts": TS0 + 1, "schema_version": 3, "files": [old_file],
        "schemas": [old_entry], "ddls": []}))
    old = read_manifest(directory)
    assert old.revision == 1 and old.schema_at("db", "t", TS0 + 1) is old.schemas[0]
    lake = ParquetLake(directory, clock=lambda: 0.0)
    lake._lock.acquire()
    lake.manifest, lake.applied_ts, lake.schema_version = old, old.commit_ts, 3
    lake.apply([(TS0 + 2, _rows((spec, "insert", None, {"id": 2})), 3)])
    lake.flush()
    m = read_manifest(directory)
    (entry,) = m.schemas                       # the same TableInfo: completed, not repeated
    assert entry["min_commit_ts"] == TS0 + 1 and entry["primary_key"] == ["id"]
    assert entry["columns"] == [{"name": "id", "mysql_type": "int", "arrow_type": "int32",
                                 "nullable": False, "default": 0}]
    assert [f["schema_version"] for f in m.files] == [3, 3]
    lake.apply([(TS0 + 3, _rows((dataclasses.replace(spec, unique_keys=()), "insert", None,
                                 {"id": 3})), 4)])
    lake.close()
    m = read_manifest(directory)
    assert [s["schema_version"] for s in m.schemas] == [3, 4]      # the keys changed
    doc = json.loads((directory / MANIFEST_NAME).read_text())
    assert (doc["format"], doc["format_revision"]) == ("tidb-binlog-parquet/1", 2) == (FORMAT, REVISION)
    assert m.revision == 2 and m.schema_at("db", "t", TS0 + 3)["min_commit_ts"] == TS0 + 3


def test_column_default_decodes_what_the_lake_holds():
    assert column_default({"arrow_type": "string"}) is None              # an older entry
    assert column_default({"arrow_type": "duration[us]", "default": -1_500_000}) == \
        -datetime.timedelta(seconds=1.5)
    assert pa.array([column_default({"arrow_type": "binary", "default": "AP8="})]).to_pylist() \
        == [b"\x00\xff"]
