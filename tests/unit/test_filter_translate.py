"""Filters and routing inside the translators (no Ray, no servers): the MySQL
translator drops filtered tables' rows before decoding them, and the pb translator (the
file sink) drops by table and event type and writes routed names, DDLs included."""

from __future__ import annotations

from test_pb_translate import CIStr, history, job, row_of, users_table

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.drainer.translate.pb import PbTranslator
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.filter.events import EventRule
from tidb_binlog.filter.router import RouteRule
from tidb_binlog.filter.rules import FilterSettings, TxnFilter
from tidb_binlog.filter.tables import TableRule
from tidb_binlog.model import ActionType
from tidb_binlog.proto import pb_binlog_pb2 as pb


def translators(settings: FilterSettings, jobs=None):
    jobs = jobs if jobs is not None else history()
    tr = Translator(SchemaKeeper.from_history(jobs, 2), {j.id: j for j in jobs}.get,
                    filters=TxnFilter(settings))
    return tr, PbTranslator(tr)


def commit(*mutations, commit_ts=100):
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(bl.new_prewrite_value(2, list(mutations)))
    return b


def users_insert_update_delete():
    old = row_of("ann", "12.30", 2, with_id=7)
    new = row_of("bob", "1.00", 1, with_id=7)
    insert = encode_value([Datum.int64(8)]) + row_of("cy", "0.50", 1)
    return bl.new_table_mutation(
        10, inserted_rows=[insert], updated_rows=[old + new], deleted_rows=[new],
        sequence=[bl.MutationType.INSERT, bl.MutationType.UPDATE, bl.MutationType.DELETE_ROW])


def test_a_filtered_table_gives_nothing_in_either_translator():
    tr, pbt = translators(FilterSettings(ignore_tables=(TableRule("shop", "users"),)))
    # (an empty Txn, as for ignore-schemas: it still moves the checkpoint)
    assert tr.translate(commit(users_insert_update_delete())).dmls == ()
    assert pbt.translate(commit(users_insert_update_delete())) is None
    tr, _ = translators(FilterSettings(do_dbs=("other",)))
    assert tr.translate(commit(users_insert_update_delete())).dmls == ()


def test_pb_records_drop_ignored_events_and_carry_routed_names():
    _, pbt = translators(FilterSettings(
        event_rules=(EventRule("shop", "users", ("delete",)),),
        route_rules=(RouteRule("shop", "users", "archive", "people", 0),)))
    rec = pb.Binlog.FromString(pbt.translate(commit(users_insert_update_delete())))
    assert [(e.schema_name, e.table_name, e.tp) for e in rec.dml_data.events] == [
        ("archive", "people", pb.Insert), ("archive", "people", pb.Update)]


def test_pb_ddl_records_are_filtered_and_routed():
    table = users_table()
    table.name = CIStr("users")
    jobs = [*history(),
            job(3, ActionType.TRUNCATE_TABLE, 3, table=users_table(12),
                query="TRUNCATE TABLE users"),
            job(4, ActionType.ADD_COLUMN, 4, table=users_table(12),
                query="ALTER TABLE users ADD COLUMN note INT")]
    _, pbt = translators(FilterSettings(
        event_rules=(EventRule("shop", "users", ("truncate table",)),),
        route_rules=(RouteRule("shop", "users", "archive", "people", 0),)), jobs)
    assert pbt.translate(bl.commit(199, 200, ddl_query=b"TRUNCATE TABLE users",
                                   ddl_job_id=3)) is None
    assert pbt.keeper.schema_version == 3  # the skipped DDL still changed the schema
    rec = pb.Binlog.FromString(pbt.translate(bl.commit(
        299, 300, ddl_query=b"ALTER TABLE users ADD COLUMN note INT", ddl_job_id=4)))
    assert rec.ddl_query == b"use `shop`; ALTER TABLE `archive`.`people` ADD COLUMN note INT;"
