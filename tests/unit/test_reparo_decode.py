"""reparo's decoder: pb Binlog bytes → the drainer's Txn model, the file sink's translation
reversed. Round trips through the sink's own PbTranslator for every type family, the DDL
forms, the print output, and malformed records."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_old_row, encode_value, pack_time
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.apply.dml import DDL, DMLType, Txn
from tidb_binlog.drainer.translate.pb import PbTranslator, ddl_record
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.errors import CodecError, ProtocolError
from tidb_binlog.model import (
    ActionType,
    CIStr,
    ColumnInfo,
    DBInfo,
    FieldType,
    HistoryInfo,
    Job,
    JobState,
    SchemaState,
    TableInfo,
)
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.decode import (
    column_value,
    ddl_target,
    decode_binlog,
    split_ddl_query,
)
from tidb_binlog.reparo.printer import format_binlog

DB_ID, TABLE_ID = 2, 10
U, NN, PK = m.UNSIGNED_FLAG, m.NOT_NULL_FLAG, m.PRI_KEY_FLAG

# (column name, tp, flag, flen, decimal, charset, elems, stored datum, restored value)
FAMILIES = [
    ("t", m.TYPE_TINY, 0, 4, 0, "binary", None, Datum.int64(-5), -5),
    ("iu", m.TYPE_LONG, U, 10, 0, "binary", None, Datum.uint64(4_000_000_000), 4_000_000_000),
    ("bu", m.TYPE_LONGLONG, U, 20, 0, "binary", None, Datum.uint64(2**64 - 1), 2**64 - 1),
    ("f", m.TYPE_FLOAT, 0, 12, -1, "binary", None, Datum.float32(1.5), 1.5),
    ("d", m.TYPE_DOUBLE, 0, 22, -1, "binary", None, Datum.float64(-2.25e-7), -2.25e-7),
    ("de", m.TYPE_NEWDECIMAL, 0, 10, 2, "binary", None,
     Datum.decimal(Decimal("-12.30"), 10, 2), "-12.30"),
    ("vc", m.TYPE_VARCHAR, 0, 40, 0, "utf8mb4", None, Datum.bytes("héllo 中".encode()),
     "héllo 中"),
    ("c", m.TYPE_STRING, 0, 10, 0, "utf8mb4", None, Datum.bytes(b"ab"), "ab"),
    ("tx", m.TYPE_BLOB, 0, 65535, 0, "utf8mb4", None, Datum.bytes(b"long text"), "long text"),
    ("vb", m.TYPE_VARCHAR, 0, 8, 0, "binary", None, Datum.bytes(b"\x00\xffz"), b"\x00\xffz"),
    ("bn", m.TYPE_STRING, 0, 4, 0, "binary", None, Datum.bytes(b"\x01\x02\x03\x04"),
     b"\x01\x02\x03\x04"),
    ("bl", m.TYPE_BLOB, 0, 65535, 0, "binary", None, Datum.bytes(b"\x00\xff"), b"\x00\xff"),
    ("da", m.TYPE_DATE, 0, 10, 0, "binary", None, Datum.uint64(pack_time(2024, 1, 2)),
     "2024-01-02"),
    ("dt", m.TYPE_DATETIME, 0, 26, 6, "binary", None,
     Datum.uint64(pack_time(2024, 1, 2, 3, 4, 5, 123456)), "2024-01-02 03:04:05.123456"),
    ("ts", m.TYPE_TIMESTAMP, 0, 19, 0, "binary", None,
     Datum.uint64(pack_time(2024, 1, 2, 3, 4, 5)), "2024-01-02 03:04:05"),
    ("tm", m.TYPE_DURATION, 0, 10, 0, "binary", None,
     Datum.int64(-(1 * 3600 + 2 * 60 + 3) * 10**9), "-01:02:03"),
    ("y", m.TYPE_YEAR, U, 4, 0, "binary", None, Datum.int64(2024), 2024),
    ("j", m.TYPE_JSON, 0, -1, 0, "binary", None, Datum.json({"a": [1, "x"]}),
     '{"a": [1, "x"]}'),
    ("e", m.TYPE_ENUM, 0, -1, 0, "utf8mb4", ["a", "b", "c"], Datum.uint64(2), 2),
    ("st", m.TYPE_SET, 0, -1, 0, "utf8mb4", ["x", "y", "z"], Datum.uint64(5), 5),
    ("bt", m.TYPE_BIT, U, 64, 0, "binary", None, Datum.uint64(0b1010), 0b1010),
    ("nul", m.TYPE_VARCHAR, 0, 8, 0, "utf8mb4", None, Datum.null(), None),
]


def table_info() -> TableInfo:
    cols = [ColumnInfo(id=1, name=CIStr("id"), offset=0,
                       type=FieldType(tp=m.TYPE_LONGLONG, flag=PK | NN, flen=20, decimal=0,
                                      charset="binary", collate="binary"))]
    for i, (name, tp, flag, flen, dec, charset, elems, _, _) in enumerate(FAMILIES, start=2):
        cols.append(ColumnInfo(id=i, name=CIStr(name), offset=i - 1,
                               type=FieldType(tp=tp, flag=flag, flen=flen, decimal=dec,
                                              charset=charset, collate="utf8mb4_bin",
                                              elems=elems)))
    return TableInfo(id=TABLE_ID, name=CIStr("all_types"), cols=cols, pk_is_handle=True,
                     max_col_id=len(cols))


def translator() -> PbTranslator:
    db = DBInfo(id=DB_ID, db_name=CIStr("shop"))

    def job(job_id, tp, version, **kw):
        return Job(id=job_id, type=tp, schema_id=DB_ID, table_id=kw.pop("table_id", 0),
                   state=JobState.SYNCED, schema_state=SchemaState.PUBLIC, query="",
                   schema_name="shop", binlog=HistoryInfo(schema_version=version, **kw))

    jobs = [job(1, ActionType.CREATE_SCHEMA, 1, db_info=db),
            job(2, ActionType.CREATE_TABLE, 2, table_id=TABLE_ID, table_info=table_info())]
    keeper = SchemaKeeper.from_history(jobs, 2)
    return PbTranslator(Translator(keeper, {j.id: j for j in jobs}.get), tz=datetime.UTC)


def row(datums) -> bytes:
    return encode_old_row(list(range(2, 2 + len(datums))), datums)


def record(mutation, commit_ts=100) -> bytes:
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(bl.new_prewrite_value(2, [mutation]))
    return translator().translate(b)


STORED = [f[7] for f in FAMILIES]
WANT = {f[0]: f[8] for f in FAMILIES}


def test_insert_round_trip_every_type_family():
    insert = encode_value([Datum.int64(7)]) + row(STORED)
    mut = bl.new_table_mutation(TABLE_ID, inserted_rows=[insert],
                                sequence=[bl.MutationType.INSERT])
    txn = decode_binlog(record(mut))
    assert txn.commit_ts == 100 and txn.ddl is None
    (dml,) = txn.dmls
    assert (dml.database, dml.table, dml.tp, dml.old_values) == \
        ("shop", "all_types", DMLType.INSERT, None)
    assert dml.schema is None  # the applier attaches the downstream's
    assert dml.values == {"id": 7, **WANT}
    for name, value in dml.values.items():  # exact types, not just equal values
        assert type(value) is type(WANT.get(name, 7)), name


def test_update_and_delete_round_trip():
    changed = list(STORED)
    changed[6] = Datum.bytes(b"new")           # vc
    changed[19] = Datum.uint64(3)              # st
    ids = list(range(1, 2 + len(STORED)))
    old = encode_old_row(ids, [Datum.int64(7), *STORED])
    new = encode_old_row(ids, [Datum.int64(8), *changed])
    mut = bl.new_table_mutation(TABLE_ID, updated_rows=[old + new], deleted_rows=[new],
                                sequence=[bl.MutationType.UPDATE, bl.MutationType.DELETE_ROW])
    upd, dele = decode_binlog(record(mut, 300)).dmls
    assert upd.tp is DMLType.UPDATE and dele.tp is DMLType.DELETE
    assert upd.old_values == {"id": 7, **WANT}
    assert upd.values == {**WANT, "id": 8, "vc": "new", "st": 3}
    assert dele.values == {**WANT, "id": 8, "vc": "new", "st": 3}


def test_ddl_records():
    txn = decode_binlog(ddl_record(5, "shop", "CREATE TABLE t (id INT PRIMARY KEY)"))
    assert txn == Txn(5, ddl=DDL("shop", "t", "CREATE TABLE t (id INT PRIMARY KEY)", 5))
    assert decode_binlog(ddl_record(6, "shop", "CREATE DATABASE shop")).ddl == \
        DDL("shop", "", "CREATE DATABASE shop", 6)
    weird = decode_binlog(ddl_record(7, "we`ird; x", "DROP TABLE `a;b`"))
    assert weird.ddl == DDL("we`ird; x", "a;b", "DROP TABLE `a;b`", 7)


@pytest.mark.parametrize("sql, want", [
    ("CREATE TABLE IF NOT EXISTS t (id INT)", ("db", "t")),
    ("create table other.t like x", ("other", "t")),
    ("ALTER TABLE `t` ADD COLUMN c INT", ("db", "t")),
    ("TRUNCATE TABLE t", ("db", "t")),
    ("truncate t", ("db", "t")),
    ("RENAME TABLE old TO new", ("db", "old")),
    ("CREATE UNIQUE INDEX i ON s2.t (a)", ("s2", "t")),
    ("DROP INDEX i ON t", ("db", "t")),
    ("DROP TABLE IF EXISTS `x`.`y`", ("x", "y")),
    ("DROP DATABASE IF EXISTS gone", ("gone", "")),
    ("/* c */ CREATE SCHEMA s", ("s", "")),
    ("CREATE OR REPLACE VIEW v AS SELECT 1", ("db", "v")),
    ("GRANT ALL ON *.* TO x", ("db", "")),
])
def test_ddl_target(sql, want):
    assert ddl_target(sql, "db") == want


def test_split_ddl_query():
    assert split_ddl_query("use `shop`; CREATE TABLE t (a INT);") == \
        ("shop", "CREATE TABLE t (a INT)")
    assert split_ddl_query("CREATE DATABASE shop;") == ("", "CREATE DATABASE shop")
    assert split_ddl_query("x") == ("", "x")


def test_column_value_edges():
    assert column_value(Datum.bytes(b"\xff\xfe"), m.TYPE_VARCHAR, "varchar") == b"\xff\xfe"
    assert column_value(Datum.decimal(Decimal("1.5"), 3, 1), m.TYPE_NEWDECIMAL, "decimal") == \
        Decimal("1.5")
    with pytest.raises(CodecError, match="DURATION datum cannot be restored"):
        column_value(Datum.duration(5), m.TYPE_DURATION, "time")


def test_print_output_is_tidbs():
    mut = bl.new_table_mutation(
        TABLE_ID, inserted_rows=[encode_value([Datum.int64(7)]) + row(STORED)],
        sequence=[bl.MutationType.INSERT])
    lines = format_binlog(pb.Binlog.FromString(record(mut)))
    assert lines[0] == "schema: shop; table: all_types; type: Insert"
    assert lines[1] == "id(bigint): 7"
    assert "vc(varchar): héllo 中" in lines
    assert "bl(blob): 0x00ff" in lines
    assert "nul(varchar): <nil>" in lines
    assert "e(enum): 2" in lines
    assert "dt(datetime): 2024-01-02 03:04:05.123456" in lines
    ddl = pb.Binlog.FromString(ddl_record(5, "shop", "CREATE TABLE t (id INT)"))
    assert format_binlog(ddl) == ["DDL query: use `shop`; CREATE TABLE t (id INT);"]
    assert format_binlog(ddl, skip=lambda s, t: (s, t) == ("shop", "t")) == []
    assert format_binlog(pb.Binlog.FromString(record(mut)), skip=lambda s, t: True) == []


def test_print_update_shows_old_and_new():
    ids = list(range(1, 2 + len(STORED)))
    old = encode_old_row(ids, [Datum.int64(7), *STORED])
    changed = list(STORED)
    changed[0] = Datum.int64(9)
    new = encode_old_row(ids, [Datum.int64(7), *changed])
    mut = bl.new_table_mutation(TABLE_ID, updated_rows=[old + new],
                                sequence=[bl.MutationType.UPDATE])
    lines = format_binlog(pb.Binlog.FromString(record(mut)))
    assert lines[0] == "schema: shop; table: all_types; type: Update"
    assert "t(tinyint): -5 => 9" in lines


def test_malformed_records_are_clear_errors():
    with pytest.raises(ProtocolError, match="not a pb_binlog.Binlog"):
        decode_binlog(b"\xff\xff\xff")
    with pytest.raises(ProtocolError, match="no commit_ts"):
        decode_binlog(pb.Binlog(tp=pb.DML).SerializeToString())
    col = pb.column(name="x", tp=bytes((m.TYPE_LONG,)), mysql_type="int", value=b"\x08\x02")
    upd = pb.Binlog(tp=pb.DML, commit_ts=9)
    upd.dml_data.events.add(schema_name="s", table_name="t", tp=pb.Update,
                            row=[col.SerializeToString()])
    with pytest.raises(ProtocolError, match=r"`s`.`t`\) at commit_ts 9, column 'x'.*"
                                            "changed_value"):
        decode_binlog(upd.SerializeToString())
    bad = pb.Binlog(tp=pb.DML, commit_ts=10)
    bad.dml_data.events.add(schema_name="s", table_name="t", tp=pb.Insert, row=[
        pb.column(name="x", tp=bytes((m.TYPE_LONG,)), mysql_type="int",
                  value=b"\x77").SerializeToString()])
    with pytest.raises(CodecError, match=r"event 0 \(`s`.`t`\) at commit_ts 10"):
        decode_binlog(bad.SerializeToString())
