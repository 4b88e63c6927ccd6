"""pb translation (drainer/translator/pb.go): hand-checked bytes per column type family,
event and record bytes, DDL queries, and a round trip back to the datums."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_old_row, encode_value, pack_time
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.translate.pb import (
    PbTranslator,
    ddl_record,
    decode_columns,
    pb_datum,
    record_commit_ts,
    type_to_str,
)
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.errors import ProtocolError
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

DB_ID = 2


def col(cid, name, tp, flag=0, flen=-1, decimal=-1, charset="utf8mb4", elems=None, offset=0,
        **kw):
    return ColumnInfo(id=cid, name=CIStr(name), offset=offset,
                      type=FieldType(tp=tp, flag=flag, flen=flen, decimal=decimal,
                                     charset=charset, collate="utf8mb4_bin", elems=elems), **kw)


def ft(tp, flag=0, flen=-1, decimal=-1, charset="binary", elems=()):
    return m.FieldType(tp, flag, flen, decimal, charset, "", tuple(elems))


def value_bytes(d, t, tz=datetime.UTC):
    return encode_value([pb_datum(d, t, tz)])


# -- per type family: MySQL type name and stored value bytes --------------------------------
def test_type_to_str():
    assert type_to_str(m.TYPE_LONG, "binary") == "int"
    assert type_to_str(m.TYPE_LONGLONG, "binary") == "bigint"
    assert type_to_str(m.TYPE_VARCHAR, "utf8mb4") == "varchar"
    assert type_to_str(m.TYPE_VARCHAR, "binary") == "varbinary"
    assert type_to_str(m.TYPE_STRING, "binary") == "binary"
    assert type_to_str(m.TYPE_BLOB, "utf8mb4") == "text"
    assert type_to_str(m.TYPE_BLOB, "binary") == "blob"
    assert type_to_str(m.TYPE_MEDIUM_BLOB, "binary") == "mediumblob"
    assert type_to_str(m.TYPE_NEWDECIMAL, "binary") == "decimal"
    assert type_to_str(m.TYPE_DURATION, "binary") == "time"
    assert type_to_str(m.TYPE_JSON, "binary") == "json"
    assert type_to_str(m.TYPE_ENUM, "utf8mb4") == "enum"


def test_value_bytes_integers_and_floats():
    assert value_bytes(Datum.int64(7), ft(m.TYPE_LONG)) == b"\x08\x0e"          # zigzag varint
    assert value_bytes(Datum.int64(-1), ft(m.TYPE_LONG)) == b"\x08\x01"
    # an int handle in an UNSIGNED column is reinterpreted: uvarint flag 0x09
    assert value_bytes(Datum.int64(-1), ft(m.TYPE_LONGLONG, m.UNSIGNED_FLAG)) == \
        b"\x09" + b"\xff" * 9 + b"\x01"
    assert value_bytes(Datum.uint64(300), ft(m.TYPE_LONG, m.UNSIGNED_FLAG)) == b"\x09\xac\x02"
    # float flag 0x05 + memcomparable float64 (sign bit flipped for >= 0)
    assert value_bytes(Datum.float64(1.5), ft(m.TYPE_DOUBLE)) == \
        b"\x05" + bytes.fromhex("bff8000000000000")
    assert value_bytes(Datum.float64(1.5), ft(m.TYPE_FLOAT)) == \
        b"\x05" + bytes.fromhex("bff8000000000000")
    assert value_bytes(Datum.int64(2024), ft(m.TYPE_YEAR)) == b"\x08\xd0\x1f"


def test_value_bytes_text_families():
    assert value_bytes(Datum.bytes(b"ann"), ft(m.TYPE_VARCHAR, charset="utf8mb4")) == b"\x02\x06ann"
    assert value_bytes(Datum.bytes(b"\x00\xff"), ft(m.TYPE_BLOB)) == b"\x02\x04\x00\xff"
    assert value_bytes(Datum.null(), ft(m.TYPE_VARCHAR)) == b"\x00"
    # DECIMAL, times and JSON become their text (compact bytes, flag 0x02)
    dec = Datum.decimal(Decimal("12.30"), 10, 2)
    assert value_bytes(dec, ft(m.TYPE_NEWDECIMAL, flen=10, decimal=2)) == b"\x02\x0a12.30"
    packed = pack_time(2024, 1, 2, 3, 4, 5)
    assert value_bytes(Datum.uint64(packed), ft(m.TYPE_DATETIME, decimal=0)) == \
        b"\x02\x26" + b"2024-01-02 03:04:05"
    assert value_bytes(Datum.uint64(pack_time(2024, 1, 2)), ft(m.TYPE_DATE)) == \
        b"\x02\x14" + b"2024-01-02"
    # TIMESTAMP is stored UTC and shown in the sink's zone
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    assert value_bytes(Datum.uint64(packed), ft(m.TYPE_TIMESTAMP, decimal=0), plus2) == \
        b"\x02\x26" + b"2024-01-02 05:04:05"
    nanos = (1 * 3600 + 2 * 60 + 3) * 10**9
    assert value_bytes(Datum.int64(nanos), ft(m.TYPE_DURATION, decimal=0)) == b"\x02\x1001:02:03"
    assert value_bytes(Datum.json({"a": 1}), ft(m.TYPE_JSON)) == b"\x02\x10" + b'{"a": 1}'


def test_value_bytes_enum_set_bit_are_numbers():
    colors = ft(m.TYPE_ENUM, charset="utf8mb4", elems=("red", "green"))
    assert value_bytes(Datum.uint64(2), colors) == b"\x09\x02"
    tags = ft(m.TYPE_SET, charset="utf8mb4", elems=("a", "b", "c"))
    assert value_bytes(Datum.uint64(5), tags) == b"\x09\x05"
    assert value_bytes(Datum.uint64(0b1010), ft(m.TYPE_BIT, flen=4)) == b"\x09\x0a"


# -- whole records --------------------------------------------------------------------------
def users_table(table_id=10):
    cols = [col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, 0, "binary"),
            col(2, "name", m.TYPE_VARCHAR, 0, 64, offset=1),
            col(3, "amount", m.TYPE_NEWDECIMAL, 0, 10, 2, "binary", offset=2),
            col(4, "color", m.TYPE_ENUM, 0, elems=["red", "green"], offset=3)]
    return TableInfo(id=table_id, name=CIStr("users"), cols=cols, pk_is_handle=True, max_col_id=4)


def job(job_id, tp, version, *, table=None, db=None, query=""):
    return Job(id=job_id, type=tp, schema_id=DB_ID, table_id=table.id if table else 0,
               state=JobState.SYNCED, schema_state=SchemaState.PUBLIC, query=query,
               schema_name="shop",
               binlog=HistoryInfo(schema_version=version, db_info=db, table_info=table))


def history():
    db = DBInfo(id=DB_ID, db_name=CIStr("shop"))
    return [job(1, ActionType.CREATE_SCHEMA, 1, db=db, query="CREATE DATABASE shop"),
            job(2, ActionType.CREATE_TABLE, 2, table=users_table(), query="CREATE TABLE users")]


def pb_translator(jobs=None, version=2, **kw):
    jobs = jobs if jobs is not None else history()
    keeper = SchemaKeeper.from_history(jobs, version)
    return PbTranslator(Translator(keeper, {j.id: j for j in jobs}.get), **kw)


def commit_with(mutations, schema_version=2, commit_ts=100):
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(bl.new_prewrite_value(schema_version, mutations))
    return b


def row_of(name, amount, color, with_id=None):
    ids = [2, 3, 4] if with_id is None else [1, 2, 3, 4]
    datums = [Datum.string(name), Datum.decimal(Decimal(amount), 10, 2), Datum.enum(color)]
    if with_id is not None:
        datums.insert(0, Datum.int64(with_id))
    return encode_old_row(ids, datums)


def ld(field_tag: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (lengths here are < 128)."""
    assert len(data) < 128
    return bytes((field_tag, len(data))) + data


def column_bytes(name, tp, mysql_type, value, changed=None):
    out = ld(0x0A, name.encode()) + ld(0x12, bytes((tp,))) + ld(0x1A, mysql_type.encode()) \
        + ld(0x22, value)
    return out + (ld(0x2A, changed) if changed is not None else b"")


def test_insert_record_bytes_hand_checked():
    insert = encode_value([Datum.int64(7)]) + row_of("ann", "12.30", 2)
    mut = bl.new_table_mutation(10, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    got = pb_translator().translate(commit_with([mut]))
    row = [column_bytes("id", m.TYPE_LONGLONG, "bigint", b"\x08\x0e"),
           column_bytes("name", m.TYPE_VARCHAR, "varchar", b"\x02\x06ann"),
           column_bytes("amount", m.TYPE_NEWDECIMAL, "decimal", b"\x02\x0a12.30"),
           column_bytes("color", m.TYPE_ENUM, "enum", b"\x09\x02")]
    # Event: schema_name, table_name, tp (Insert = 0, still written), rows
    event = ld(0x0A, b"shop") + ld(0x12, b"users") + b"\x18\x00" + b"".join(ld(0x22, r)
                                                                              for r in row)
    # Binlog: tp DML = 0 (written), commit_ts 100, dml_data{events}
    expected = b"\x08\x00" + b"\x10\x64" + ld(0x1A, ld(0x0A, event))
    assert got == expected


def test_update_and_delete_records():
    old = row_of("ann", "12.30", 2, with_id=7)
    new = row_of("bob", "1.00", 1, with_id=7)
    mut = bl.new_table_mutation(10, updated_rows=[old + new], deleted_rows=[new],
                                sequence=[bl.MutationType.UPDATE, bl.MutationType.DELETE_ROW])
    got = pb.Binlog.FromString(pb_translator().translate(commit_with([mut], commit_ts=300)))
    assert got.tp == pb.DML and got.commit_ts == 300
    upd, dele = got.dml_data.events
    assert (upd.tp, dele.tp) == (pb.Update, pb.Delete)
    assert upd.row[1] == column_bytes("name", m.TYPE_VARCHAR, "varchar", b"\x02\x06ann",
                                      b"\x02\x06bob")  # value = old, changed_value = new
    assert dele.row[0] == column_bytes("id", m.TYPE_LONGLONG, "bigint", b"\x08\x0e")
    assert [c.name for c in decode_columns(dele.row)] == ["id", "name", "amount", "color"]


def test_round_trip_to_datums():
    old = row_of("ann", "12.30", 2, with_id=7)
    new = row_of("bob", "1.00", 1, with_id=7)
    insert = encode_value([Datum.int64(8)]) + row_of("cy", "0.50", 1)
    mut = bl.new_table_mutation(10, inserted_rows=[insert], updated_rows=[old + new],
                                sequence=[bl.MutationType.INSERT, bl.MutationType.UPDATE])
    rec = pb_translator().translate(commit_with([mut]))
    assert record_commit_ts(rec) == 100
    ins, upd = pb.Binlog.FromString(rec).dml_data.events
    cols = decode_columns(ins.row)
    assert [(c.name, c.mysql_type, c.tp) for c in cols] == [
        ("id", "bigint", m.TYPE_LONGLONG), ("name", "varchar", m.TYPE_VARCHAR),
        ("amount", "decimal", m.TYPE_NEWDECIMAL), ("color", "enum", m.TYPE_ENUM)]
    assert [c.value for c in cols] == [Datum.int64(8), Datum.bytes(b"cy"), Datum.bytes(b"0.50"),
                                       Datum.uint64(1)]
    assert all(c.changed is None for c in cols)
    upd_cols = decode_columns(upd.row)
    assert [(c.value, c.changed) for c in upd_cols] == [
        (Datum.int64(7), Datum.int64(7)), (Datum.bytes(b"ann"), Datum.bytes(b"bob")),
        (Datum.bytes(b"12.30"), Datum.bytes(b"1.00")), (Datum.uint64(2), Datum.uint64(1))]


def test_missing_insert_column_gets_default():
    table = users_table()
    table.cols.append(col(5, "note", m.TYPE_VARCHAR, 0, 16, offset=4, origin_default="n/a"))
    table.cols.append(col(6, "qty", m.TYPE_LONG, m.NOT_NULL_FLAG, 11, 0, "binary", offset=5))
    table.cols.append(col(7, "opt", m.TYPE_LONG, 0, 11, 0, "binary", offset=6))
    jobs = history()[:1] + [job(2, ActionType.CREATE_TABLE, 2, table=table)]
    insert = encode_value([Datum.int64(1)]) + row_of("a", "1.00", 1)
    mut = bl.new_table_mutation(10, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    rec = pb.Binlog.FromString(pb_translator(jobs).translate(commit_with([mut])))
    cols = {c.name: c.value for c in decode_columns(rec.dml_data.events[0].row)}
    assert cols["note"] == Datum.bytes(b"n/a")        # origin default (a string datum)
    assert cols["qty"] == Datum.int64(0)              # NOT NULL, no default: zero value
    assert cols["opt"] == Datum.null()                # nullable: NULL


def test_ddl_records():
    rec = ddl_record(5, "shop", "CREATE TABLE t (id INT)")
    assert rec == b"\x08\x01\x10\x05" + ld(0x22, b"use `shop`; CREATE TABLE t (id INT);")
    assert pb.Binlog.FromString(ddl_record(5, "shop", "create database shop")).ddl_query == \
        b"create database shop;"
    assert pb.Binlog.FromString(ddl_record(5, "", "x")).ddl_query == b"x"
    assert pb.Binlog.FromString(ddl_record(5, "we`ird", "drop table t")).ddl_query == \
        b"use `we``ird`; drop table t;"


def test_ddl_binlog_through_the_keeper():
    table = users_table(11)
    table.name = CIStr("other")
    jobs = [*history(), job(3, ActionType.CREATE_TABLE, 3, table=table,
                            query="CREATE TABLE other (id BIGINT PRIMARY KEY)")]
    t = pb_translator(jobs, version=2)
    b = bl.commit(199, 200, ddl_query=b"CREATE TABLE other (id BIGINT PRIMARY KEY)", ddl_job_id=3)
    rec = pb.Binlog.FromString(t.translate(b))
    assert rec.tp == pb.DDL and rec.commit_ts == 200
    assert rec.ddl_query == b"use `shop`; CREATE TABLE other (id BIGINT PRIMARY KEY);"
    assert t.keeper.schema_version == 3 and t.keeper.table(11) is not None


def test_nothing_to_write():
    t = pb_translator(ignore_schemas=["SHOP"])
    assert pb_translator().translate(bl.fake(500)) is None
    insert = encode_value([Datum.int64(7)]) + row_of("ann", "12.30", 2)
    mut = bl.new_table_mutation(10, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    assert t.translate(commit_with([mut])) is None  # every row in an ignored schema


def test_malformed_bytes_are_clear_errors():
    with pytest.raises(ProtocolError):
        record_commit_ts(b"\xff\xff\xff")
    with pytest.raises(ProtocolError, match="1-byte"):
        decode_columns([pb.column(name="x", tp=b"", mysql_type="int", value=b"\x00")
                    .SerializeToString()])


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 70_000])
def test_column_bytes_equal_protobufs(size):
    from tidb_binlog.drainer.translate.pb import _column, _column_head

    value, changed = b"v" * size, b"c" * (size // 2 + 1)
    head = _column_head("name", m.TYPE_BLOB, "blob")
    for new in (None, changed):
        want = pb.column(name="name", tp=bytes((m.TYPE_BLOB,)), mysql_type="blob", value=value)
        if new is not None:
            want.changed_value = new
        assert _column(head, value, new) == want.SerializeToString()
