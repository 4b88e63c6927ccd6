"""TiDB model JSON: names, order, round trips, tolerance, and the table helpers."""

from __future__ import annotations

import json

import pytest

from tidb_binlog.errors import SchemaError
from tidb_binlog.model import (
    ActionType,
    CIStr,
    ColumnInfo,
    DBInfo,
    FieldType,
    Flag,
    HistoryInfo,
    IndexColumn,
    IndexInfo,
    Job,
    JobState,
    PartitionDefinition,
    PartitionInfo,
    PartitionType,
    SchemaState,
    TableInfo,
    TypeCode,
)


def _col(cid, name, tp, flag=0, flen=-1, dec=0, offset=0, **kw):
    return ColumnInfo(id=cid, name=CIStr(name), offset=offset,
                      type=FieldType(tp=tp, flag=flag, flen=flen, decimal=dec, charset="binary",
                                     collate="binary"), **kw)


def illustrative_table() -> TableInfo:
    """§5.2: CREATE TABLE t (id BIGINT PRIMARY KEY, d DECIMAL(10,2))."""
    return TableInfo(
        id=100, name=CIStr("t"),
        cols=[_col(1, "id", TypeCode.LONGLONG, Flag.NOT_NULL | Flag.PRI_KEY | Flag.NO_DEFAULT_VALUE,
                   20, 0, 0),
              _col(2, "d", TypeCode.NEWDECIMAL, 0, 10, 2, 1)],
        pk_is_handle=True, max_col_id=2)


def test_illustrative_table_json_matches_reference_fragment():
    obj = json.loads(illustrative_table().to_json())
    assert list(obj)[:12] == ["id", "name", "charset", "collate", "cols", "index_info",
                              "constraint_info", "fk_info", "state", "pk_is_handle",
                              "is_common_handle", "common_handle_version"]
    assert obj["name"] == {"O": "t", "L": "t"}
    assert obj["index_info"] is None and obj["partition"] is None
    assert obj["pk_is_handle"] is True and obj["version"] == 5
    assert "auto_inc_id_extra" not in obj and "old_schema_id" not in obj  # omitempty
    assert "ShardRowIDBits" in obj and "Lock" in obj
    col = obj["cols"][0]
    assert list(col) == ["id", "name", "offset", "origin_default", "origin_default_bit", "default",
                         "default_bit", "default_is_expr", "generated_expr_string",
                         "generated_stored", "dependences", "type", "state", "comment", "hidden",
                         "change_state_info", "version"]
    assert col["type"] == {"Tp": 8, "Flag": 4099, "Flen": 20, "Decimal": 0, "Charset": "binary",
                           "Collate": "binary", "Elems": None, "ElemsIsBinaryLit": None,
                           "Array": False}
    assert obj["cols"][1]["type"]["Tp"] == 246 and obj["cols"][1]["type"]["Decimal"] == 2
    assert col["state"] == 5 and col["version"] == 2


def test_table_round_trip_with_indexes_and_partitions():
    t = illustrative_table()
    t.pk_is_handle = False
    t.is_common_handle = True
    t.index_info = [IndexInfo(id=1, idx_name=CIStr("PRIMARY"), tbl_name=CIStr("t"),
                              idx_cols=[IndexColumn(CIStr("d"), 1), IndexColumn(CIStr("id"), 0)],
                              is_unique=True, is_primary=True)]
    t.partition = PartitionInfo(type=PartitionType.RANGE, expr="`id`", definitions=[
        PartitionDefinition(101, CIStr("p0"), less_than=["10"]),
        PartitionDefinition(102, CIStr("p1"), less_than=["MAXVALUE"])], num=2)
    back = TableInfo.from_json(t.to_json())
    assert back == t
    assert back.to_json() == t.to_json()
    assert back.physical_ids() == [101, 102]
    assert [c.name.O for c in back.common_handle_columns()] == ["d", "id"]
    assert back.handle_kind == "common"


def test_unknown_keys_are_kept_and_bare_string_cistr_accepted():
    obj = json.loads(illustrative_table().to_json())
    obj["future_field"] = {"x": 1}
    obj["name"] = "T1"
    obj["cols"][0]["new_col_key"] = 7
    t = TableInfo.from_json(json.dumps(obj))
    assert t.name == CIStr("T1", "t1")
    again = json.loads(t.to_json())
    assert again["future_field"] == {"x": 1}
    assert again["cols"][0]["new_col_key"] == 7


def test_from_json_rejects_non_object():
    with pytest.raises(SchemaError, match="TableInfo: expected a JSON object"):
        TableInfo.from_json("[1]")
    with pytest.raises(SchemaError, match="cols: expected a JSON array"):
        TableInfo.from_json('{"id": 1, "name": "t", "cols": 3}')


def test_job_json_names_and_history_info_untagged():
    db = DBInfo(id=2, db_name=CIStr("Test"))
    job = Job(id=10, type=ActionType.CREATE_TABLE, schema_id=2, table_id=100, schema_name="Test",
              table_name="t", state=JobState.SYNCED, schema_state=SchemaState.PUBLIC,
              query="create table t (id bigint primary key, d decimal(10,2))",
              binlog=HistoryInfo(schema_version=7, db_info=db, table_info=illustrative_table(),
                                 finished_ts=12345))
    obj = json.loads(job.to_json())
    assert list(obj)[:8] == ["id", "type", "schema_id", "table_id", "schema_name", "table_name",
                             "state", "err"]
    assert list(obj["binlog"]) == ["SchemaVersion", "DBInfo", "TableInfo", "FinishedTS",
                                   "MultipleTableInfos"]
    assert obj["binlog"]["MultipleTableInfos"] is None
    assert obj["binlog"]["DBInfo"]["db_name"] == {"O": "Test", "L": "test"}
    back = Job.from_json(job.to_json())
    assert back == job and back.schema_version == 7
    assert not back.drainer_skips()
    back.state = JobState.RUNNING
    assert back.drainer_skips()


def test_job_without_binlog_field():
    job = Job.from_json('{"id": 1, "type": 4, "state": 6, "binlog": null}')
    assert job.schema_version == 0


def _rowid_table() -> TableInfo:
    cols = [_col(1, "a", TypeCode.LONG, offset=0), _col(2, "b", TypeCode.VARCHAR, offset=1),
            _col(4, "g", TypeCode.LONG, offset=2, generated_expr_string="a+1"),
            _col(5, "w", TypeCode.LONG, offset=3, state=SchemaState.WRITE_ONLY)]
    return TableInfo(id=5, name=CIStr("r"), cols=cols, max_col_id=5, index_info=[
        IndexInfo(1, CIStr("ub"), CIStr("r"), [IndexColumn(CIStr("b"), 1)], is_unique=True),
        IndexInfo(2, CIStr("k"), CIStr("r"), [IndexColumn(CIStr("a"), 0)]),
        IndexInfo(3, CIStr("ua"), CIStr("r"), [IndexColumn(CIStr("a"), 0)], is_unique=True,
                  state=SchemaState.WRITE_ONLY)])


def test_helpers_rowid_table():
    t = _rowid_table()
    assert t.handle_kind == "rowid"
    assert [c.name.O for c in t.writable_columns()] == ["a", "b"]
    assert [c.name.O for c in t.public_columns()] == ["a", "b", "g"]
    assert t.column_by_name("B").id == 2 and t.column_by_id(4).name.O == "g"
    assert t.column_by_id(3) is None and t.column_by_name("zz") is None
    assert set(t.field_types()) == {1, 2, 4, 5}
    assert [(k.name, [c.name.O for c in k.columns]) for k in t.unique_keys()] == [("ub", ["b"])]
    assert t.pk_handle_column() is None and t.primary_index() is None
    assert t.index_by_name("K").id == 2


def test_helpers_pk_is_handle_puts_primary_first():
    t = illustrative_table()
    t.index_info = [IndexInfo(1, CIStr("ud"), CIStr("t"), [IndexColumn(CIStr("d"), 1)],
                              is_unique=True)]
    keys = t.unique_keys()
    assert [(k.name, k.primary) for k in keys] == [("PRIMARY", True), ("ud", False)]
    assert t.pk_handle_column().name.O == "id"
    assert t.handle_kind == "int"


def test_field_type_flags():
    ft = FieldType(tp=TypeCode.LONGLONG, flag=Flag.UNSIGNED | Flag.NOT_NULL)
    assert ft.is_unsigned and ft.is_integer and ft.has(Flag.NOT_NULL)
    assert not FieldType(tp=TypeCode.VARCHAR).is_integer
