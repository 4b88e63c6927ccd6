"""Schema keeper and translator: TiDB-encoded binlog rows back to DMLs with SQL arguments."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_old_row, encode_value, pack_time
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.apply.dml import DMLType
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator, default_value
from tidb_binlog.errors import SchemaError
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

# every test twice: row values decoded by the compiled decoder and by the Python reference
pytestmark = pytest.mark.usefixtures("row_args_impl")

DB_ID = 2


def col(cid, name, tp, flag=0, flen=-1, decimal=-1, charset="utf8mb4", elems=None, offset=0,
        **kw):
    return ColumnInfo(id=cid, name=CIStr(name), offset=offset,
                      type=FieldType(tp=tp, flag=flag, flen=flen, decimal=decimal,
                                     charset=charset, collate="utf8mb4_bin", elems=elems), **kw)


def users_table(table_id=10, extra_cols=()):
    cols = [col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, 0, "binary"),
            col(2, "name", m.TYPE_VARCHAR, 0, 64, offset=1),
            col(3, "amount", m.TYPE_NEWDECIMAL, 0, 10, 2, "binary", offset=2),
            col(4, "ts", m.TYPE_TIMESTAMP, 0, 19, 0, "binary", offset=3),
            col(5, "color", m.TYPE_ENUM, 0, elems=["red", "green"], offset=4)]
    cols += list(extra_cols)
    return TableInfo(id=table_id, name=CIStr("users"), cols=cols, pk_is_handle=True,
                     max_col_id=max(c.id for c in cols))


def clustered_table(table_id=20):
    cols = [col(1, "k", m.TYPE_VARCHAR, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 32),
            col(2, "n", m.TYPE_LONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 11, 0, "binary", offset=1),
            col(3, "v", m.TYPE_LONG, 0, 11, 0, "binary", offset=2)]
    pk = IndexInfo(id=1, idx_name=CIStr("PRIMARY"), tbl_name=CIStr("kv"),
                   idx_cols=[IndexColumn(CIStr("k"), 0), IndexColumn(CIStr("n"), 1)],
                   is_unique=True, is_primary=True)
    return TableInfo(id=table_id, name=CIStr("kv"), cols=cols, index_info=[pk],
                     is_common_handle=True, max_col_id=3)


def job(job_id, tp, version, *, table=None, db=None, table_id=0, state=JobState.SYNCED,
        schema_state=SchemaState.PUBLIC, query=""):
    return Job(id=job_id, type=tp, schema_id=DB_ID, table_id=table_id or (table.id if table else 0),
               state=state, schema_state=schema_state, query=query,
               binlog=HistoryInfo(schema_version=version, db_info=db, table_info=table))


def history():
    db = DBInfo(id=DB_ID, db_name=CIStr("shop"))
    return [job(1, ActionType.CREATE_SCHEMA, 1, db=db, query="CREATE DATABASE shop"),
            job(2, ActionType.CREATE_TABLE, 2, table=users_table(), query="CREATE TABLE users"),
            job(3, ActionType.CREATE_TABLE, 3, table=clustered_table(), query="CREATE TABLE kv")]


def commit_with(mutations, schema_version=3, commit_ts=100):
    pv = bl.new_prewrite_value(schema_version, mutations)
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(pv)
    return b


def translator(jobs=None, version=3, tz=datetime.UTC):
    jobs = jobs if jobs is not None else history()
    keeper = SchemaKeeper.from_history(jobs, version)
    by_id = {j.id: j for j in jobs}
    return Translator(keeper, by_id.get, tz=tz)


def users_row(name, amount, ts_packed, color):
    ids = [2, 3, 4, 5]
    datums = [Datum.string(name), Datum.decimal(Decimal(amount), 10, 2), Datum.time(ts_packed),
              Datum.enum(color)]
    return encode_old_row(ids, datums)


def test_insert_update_delete_in_sequence_order():
    ts = pack_time(2024, 1, 2, 3, 4, 5)
    insert = encode_value([Datum.int64(7)]) + users_row("ann", "12.30", ts, 2)
    old = encode_old_row([1, 2, 3, 4, 5], [Datum.int64(7), Datum.string("ann"),
                                           Datum.decimal(Decimal("12.30"), 10, 2),
                                           Datum.time(ts), Datum.enum(2)])
    new = encode_old_row([1, 2, 3, 4, 5], [Datum.int64(7), Datum.string("bob"),
                                           Datum.decimal(Decimal("1.00"), 10, 2),
                                           Datum.time(ts), Datum.enum(1)])
    mut = bl.new_table_mutation(10, inserted_rows=[insert], updated_rows=[old + new],
                                deleted_rows=[new],
                                sequence=[bl.MutationType.INSERT, bl.MutationType.UPDATE,
                                          bl.MutationType.DELETE_ROW])
    txn = translator().translate(commit_with([mut]))
    assert txn.commit_ts == 100
    ins, upd, dele = txn.dmls
    assert ins.tp is DMLType.INSERT and ins.database == "shop" and ins.table == "users"
    assert ins.values == {"id": 7, "name": "ann", "amount": "12.30",
                          "ts": "2024-01-02 03:04:05", "color": 2}
    assert upd.tp is DMLType.UPDATE
    assert upd.old_values["name"] == "ann" and upd.values["name"] == "bob"
    assert upd.values["amount"] == "1.00" and upd.values["color"] == 1
    assert dele.tp is DMLType.DELETE and dele.values["name"] == "bob"
    assert ins.schema.primary_key.columns == ("id",)


def test_timestamp_converted_to_downstream_zone():
    ts = pack_time(2024, 1, 2, 3, 4, 5)
    insert = encode_value([Datum.int64(1)]) + users_row("x", "0", ts, 1)
    mut = bl.new_table_mutation(10, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    tz = datetime.timezone(datetime.timedelta(hours=8))
    txn = translator(tz=tz).translate(commit_with([mut]))
    assert txn.dmls[0].values["ts"] == "2024-01-02 11:04:05"


def test_missing_insert_columns_get_defaults():
    insert = encode_value([Datum.int64(3)]) + encode_old_row([2], [Datum.string("only")])
    mut = bl.new_table_mutation(10, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    values = translator().translate(commit_with([mut])).dmls[0].values
    assert values == {"id": 3, "name": "only", "amount": None, "ts": None, "color": None}


def test_clustered_handle_fills_pk_columns_from_prefix():
    prefix = encode_value([Datum.bytes(b"key-1"), Datum.int64(5)])
    insert = prefix + encode_old_row([3], [Datum.int64(42)])
    mut = bl.new_table_mutation(20, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    dml = translator().translate(commit_with([mut])).dmls[0]
    assert dml.values == {"k": "key-1", "n": 5, "v": 42}
    assert dml.schema.primary_key.columns == ("k", "n")


def test_unsigned_int_handle_is_reinterpreted():
    cols = [col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG | m.UNSIGNED_FLAG,
                20, 0, "binary")]
    t = TableInfo(id=30, name=CIStr("u"), cols=cols, pk_is_handle=True, max_col_id=1)
    jobs = history() + [job(4, ActionType.CREATE_TABLE, 4, table=t)]
    mut = bl.new_table_mutation(30, inserted_rows=[encode_value([Datum.int64(-1)]) + b"\x00"],
                                sequence=[bl.MutationType.INSERT])
    dml = translator(jobs, 4).translate(commit_with([mut], schema_version=4)).dmls[0]
    assert dml.values == {"id": 18446744073709551615}


def test_ddl_binlog_applies_job_and_renders_query():
    extra = col(6, "note", m.TYPE_VARCHAR, 0, 10, origin_default="n/a", offset=5)
    jobs = history() + [job(9, ActionType.ADD_COLUMN, 4, table=users_table(extra_cols=[extra]),
                            query="ALTER TABLE users ADD COLUMN note varchar(10) DEFAULT 'n/a'")]
    tr = translator(jobs[:3], 3)
    tr.job_of = {j.id: j for j in jobs}.get
    ddl = bl.commit(200, 201, ddl_query=jobs[3].query.encode(), ddl_job_id=9)
    txn = tr.translate(ddl)
    assert txn.is_ddl and txn.ddl.database == "shop" and txn.ddl.sql.startswith("ALTER TABLE")
    assert tr.keeper.schema_version == 4
    # A DML written at version 3 lacks the new column: insert gets the origin default.
    ts = pack_time(2024, 1, 1)
    insert = encode_value([Datum.int64(1)]) + users_row("a", "1", ts, 1)
    mut = bl.new_table_mutation(10, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    dml = tr.translate(commit_with([mut], schema_version=3, commit_ts=300)).dmls[0]
    assert dml.values["note"] == "n/a"


def test_update_lacking_columns_without_ddl_in_flight_is_an_error():
    short = encode_old_row([1, 2], [Datum.int64(1), Datum.string("a")])
    mut = bl.new_table_mutation(10, updated_rows=[short + short],
                                sequence=[bl.MutationType.UPDATE])
    with pytest.raises(SchemaError, match="lacks columns"):
        translator().translate(commit_with([mut]))


def test_truncated_table_mutations_are_dropped_and_new_id_used():
    new = users_table(table_id=11)
    jobs = history() + [job(5, ActionType.TRUNCATE_TABLE, 4, table=new, table_id=10)]
    tr = translator(jobs, 4)
    assert tr.keeper.is_truncated(10) and tr.keeper.table(11) is not None
    mut = bl.new_table_mutation(10, deleted_rows=[b"\x00"], sequence=[bl.MutationType.DELETE_ROW])
    assert tr.translate(commit_with([mut], schema_version=4)).dmls == ()


def test_fake_and_setval_binlogs_translate_to_nothing():
    tr = translator()
    assert tr.translate(bl.fake(500)) is None
    assert tr.translate(bl.commit(1, 2, ddl_query=b"select setval(s, 5)", ddl_job_id=77)) is None


def test_unknown_table_and_unknown_job_are_clear_errors():
    tr = translator()
    mut = bl.new_table_mutation(999, deleted_rows=[b"\x00"], sequence=[bl.MutationType.DELETE_ROW])
    with pytest.raises(SchemaError, match="table id 999"):
        tr.translate(commit_with([mut]))
    with pytest.raises(SchemaError, match="DDL job 4242"):
        tr.translate(bl.commit(1, 2, ddl_query=b"CREATE TABLE x (a int)", ddl_job_id=4242))


def test_keeper_keeps_two_versions_and_picks_by_schema_version():
    extra = col(6, "note", m.TYPE_VARCHAR, 0, 10, offset=5)
    jobs = history() + [job(6, ActionType.ADD_COLUMN, 4, table=users_table(extra_cols=[extra])),
                        job(7, ActionType.MODIFY_COLUMN, 5, table=users_table(extra_cols=[extra]))]
    keeper = SchemaKeeper.from_history(jobs, 5)
    assert [v for v, _ in keeper.tables[10]] == [4, 5]
    assert keeper.table_at(10, 3) is keeper.tables[10][0][1]
    assert keeper.table_at(10, 9) is keeper.tables[10][1][1]
    assert keeper.can_append_default(10, 4) and not keeper.can_append_default(10, 5)


def test_keeper_skips_cancelled_jobs_and_marks_dropping_column():
    cancelled = job(8, ActionType.DROP_TABLE, 4, table_id=10, state=JobState.CANCELLED)
    keeper = SchemaKeeper.from_history(history() + [cancelled], 4)
    assert keeper.table(10) is not None and keeper.schema_version == 4
    dropping = job(9, ActionType.DROP_COLUMN, 5, table=users_table(), state=JobState.RUNNING,
                   schema_state=SchemaState.DELETE_ONLY)
    keeper.add_job(dropping)
    keeper.apply_until(5)
    assert keeper.can_append_default(10, 5)


def test_rename_and_drop_schema():
    renamed = users_table()
    renamed.name = CIStr("customers")
    keeper = SchemaKeeper.from_history(
        history() + [job(10, ActionType.RENAME_TABLE, 4, table=renamed)], 4)
    assert keeper.names(10) == ("shop", "customers")
    keeper.add_job(job(11, ActionType.DROP_SCHEMA, 5))
    keeper.apply_until(5)
    assert keeper.table(10) is None and keeper.table(20) is None


def test_default_values_follow_tidb_rules():
    ts_col = col(1, "t", m.TYPE_TIMESTAMP, 0, decimal=0, origin_default="2020-01-01 00:00:00")
    assert default_value(ts_col, datetime.timezone(datetime.timedelta(hours=2))) == \
        "2020-01-01 02:00:00"
    set_col = col(2, "s", m.TYPE_SET, elems=["a", "b", "c"], origin_default="a,c")
    assert default_value(set_col) == 0b101
    enum_col = col(3, "e", m.TYPE_ENUM, elems=["x", "y"], origin_default="y")
    assert default_value(enum_col) == 2
    notnull = col(4, "d", m.TYPE_NEWDECIMAL, m.NOT_NULL_FLAG, 10, 2)
    assert default_value(notnull) == "0.00"
    assert default_value(col(5, "n", m.TYPE_LONG)) is None


def test_table_lookups_cached_per_version_follow_ddl_and_queued_jobs():
    """The per-(table, version) lookup cache never outlives a schema change: a DDL binlog
    and a queued job applied by a DML's schema version both drop it."""
    ts = pack_time(2024, 1, 1)
    insert = encode_value([Datum.int64(1)]) + users_row("a", "1", ts, 1)
    ins = bl.new_table_mutation(10, inserted_rows=[insert], sequence=[bl.MutationType.INSERT])
    extra = col(6, "note", m.TYPE_VARCHAR, 0, 10, origin_default="n/a", offset=5)
    add = job(9, ActionType.ADD_COLUMN, 4, table=users_table(extra_cols=[extra]),
              query="ALTER TABLE users ADD COLUMN note varchar(10) DEFAULT 'n/a'")
    tr = translator()
    assert "note" not in tr.translate(commit_with([ins], 3, 100)).dmls[0].values
    tr.job_of = {9: add}.get
    tr.translate(bl.commit(200, 201, ddl_query=add.query.encode(), ddl_job_id=9))
    # the same (table, version 3) again: now the table has the column (default filled)
    assert tr.translate(commit_with([ins], 3, 300)).dmls[0].values["note"] == "n/a"

    # a truncate queued in the keeper, applied by the first DML written at its version
    tr = translator()
    assert len(tr.translate(commit_with([ins], 3, 100)).dmls) == 1
    tr.keeper.add_job(job(5, ActionType.TRUNCATE_TABLE, 4, table=users_table(table_id=11),
                          table_id=10))
    assert tr.translate(commit_with([ins], 4, 200)).dmls == ()


def test_rows_of_ignored_schemas_are_dropped_before_decoding():
    """ignore-schemas (any case) drops a database's rows in the translator: the row bytes
    are not even decoded (garbage would raise otherwise)."""
    garbage = bl.new_table_mutation(10, inserted_rows=[b"\xff\xfe"],
                                    sequence=[bl.MutationType.INSERT])
    jobs = history()
    tr = Translator(SchemaKeeper.from_history(jobs, 3), {j.id: j for j in jobs}.get,
                    ignore_schemas=["SHOP"])
    assert tr.translate(commit_with([garbage])).dmls == ()
    with pytest.raises(Exception, match="cannot decode a row of table id 10"):
        translator().translate(commit_with([garbage]))
