"""Loop control for bidirectional replication, without a database: the mark table SQL,
"does this transaction carry our channel's mark", the keeper's filter, and the mark
every downstream transaction of a SQL worker carries."""

from __future__ import annotations

import argparse

import pytest

from tidb_binlog.cli import drainer as drainer_cli
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.loopback import (
    MARK_TABLE_NAME,
    LoopbackFilter,
    carries_mark,
    mark_create_statements,
    mark_init_statement,
    mark_update_statement,
)
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.emulated import EmulatedTidbDownstream, _schema_of
from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
from tidb_binlog.errors import (
    DownstreamError,
    ProtocolError,
    TransientDownstreamError,
    TxnConflict,
    UpstreamError,
)

MARK = TableSchema.build("retl", "_drainer_repl_mark", ["id", "channel_id", "val",
                                                        "channel_info"], ["id", "channel_id"])
T = TableSchema.build("shop", "t", ["id", "v"], ["id"])


def mark(channel, worker=0, database="retl", table="_drainer_repl_mark"):
    new = {"id": worker, "channel_id": channel, "val": 3, "channel_info": ""}
    old = dict(new, val=2)
    return DML(database, table, DMLType.UPDATE, new, old, MARK)


def row(k):
    return DML("shop", "t", DMLType.INSERT, {"id": k, "v": k}, None, T)


def test_mark_table_sql_is_tidbs_table():
    create_db, create_table = mark_create_statements()
    assert create_db.sql == "CREATE DATABASE IF NOT EXISTS `retl`"
    assert create_table.sql.startswith("CREATE TABLE IF NOT EXISTS `retl`.`_drainer_repl_mark` (")
    for column in ("`id` BIGINT NOT NULL", "`channel_id` BIGINT NOT NULL DEFAULT 0",
                   "`val` BIGINT DEFAULT 0", "`channel_info` VARCHAR(64)",
                   "PRIMARY KEY (`id`, `channel_id`)"):
        assert column in create_table.sql
    init = mark_init_statement(2, 7)
    assert init.sql.startswith("REPLACE INTO `retl`.`_drainer_repl_mark` ")
    assert init.args == (2, 7, 1, "")
    update = mark_update_statement(2, 7)
    assert update.sql == ("UPDATE `retl`.`_drainer_repl_mark` SET `val` = `val` + 1 "
                          "WHERE `id` = %s AND `channel_id` = %s LIMIT 1")
    assert update.args == (2, 7)
    assert MARK_TABLE_NAME == "retl._drainer_repl_mark"


def test_carries_mark_compares_the_channel_and_ignores_name_case():
    assert carries_mark(Txn(5, (row(1), mark(7))), 7)
    assert not carries_mark(Txn(5, (row(1), mark(8))), 7)
    assert not carries_mark(Txn(5, (row(1),)), 7)
    assert carries_mark(Txn(5, (mark(7, database="RETL", table="_DRAINER_REPL_MARK"),)), 7)
    # a channel id stored as text (a decimal-formatted column) still compares as an integer
    assert carries_mark(Txn(5, (mark("7"),)), 7)
    with pytest.raises(ProtocolError, match="channel_id that is not an integer"):
        carries_mark(Txn(5, (mark("x"),)), 7)


def test_filter_drops_our_channel_strips_other_marks_and_mark_ddl():
    f = LoopbackFilter(loopback_control=True, channel_id=7)
    assert f.apply(Txn(5, (row(1), mark(7)))) is None  # came back: dropped
    assert f.dropped == 1
    kept = f.apply(Txn(6, (mark(9), row(2))))  # another channel's mark: not user data
    assert kept is not None and kept.commit_ts == 6 and [d.table for d in kept.dmls] == ["t"]
    assert f.marks_removed == 1
    assert f.apply(Txn(7, (mark(9),))) is None  # nothing left
    plain = Txn(8, (row(3),))
    assert f.apply(plain) is plain
    assert f.apply(None) is None
    ddl = Txn(9, ddl=DDL("retl", "_drainer_repl_mark", "CREATE TABLE ...", 9))
    assert f.apply(ddl) is None  # the mark table's own DDL never loops
    user_ddl = Txn(10, ddl=DDL("shop", "t", "ALTER TABLE t ADD c INT", 10))
    assert f.apply(user_ddl) is user_ddl


def test_sync_ddl_false_drops_ddl_only():
    f = LoopbackFilter(sync_ddl=False)
    assert f.apply(Txn(9, ddl=DDL("shop", "t", "ALTER TABLE t ADD c INT", 9))) is None
    marked = Txn(5, (row(1), mark(0)))
    assert f.apply(marked) is marked  # no loopback-control: marks are plain rows


def test_filter_from_settings():
    assert LoopbackFilter.from_settings(TaskSettings(cluster_id=1)) is None
    f = LoopbackFilter.from_settings(TaskSettings(cluster_id=1, loopback_control=True,
                                                  channel_id=3))
    assert (f.loopback_control, f.channel_id, f.sync_ddl) == (True, 3, True)
    f = LoopbackFilter.from_settings(TaskSettings(cluster_id=1, sync_ddl=False))
    assert (f.loopback_control, f.sync_ddl) == (False, False)
    cfg = LoaderConfig.from_settings(TaskSettings(cluster_id=1, loopback_control=True,
                                                  channel_id=3), worker=2)
    assert (cfg.loopback_control, cfg.channel_id, cfg.worker) == (True, 3, 2)


def test_drainer_toml_keys_reach_the_settings():
    cfg = load_drainer_config(None, {"syncer.loopback-control": True, "syncer.channel-id": 5,
                                     "syncer.sync-ddl": False})
    s = TaskSettings.from_config(cfg, upstream_meta={})
    assert (s.loopback_control, s.channel_id, s.sync_ddl) == (True, 5, False)


class Recorder:
    """A downstream that records what each transaction ran (statement texts, args)."""

    class config:  # noqa: N801 - what Loader reads of a DownstreamConfig
        address = "recorder:1"

    def __init__(self):
        self.txns: list[list[tuple]] = []
        self.pending: list[tuple] = []

    def execute(self, stmt):
        self.pending.append((stmt.sql, stmt.args))
        return 1

    def execute_script(self, statements, commit=False):
        for stmt in statements:
            self.execute(stmt)
        if commit:
            self.commit()

    def query(self, stmt):
        return []

    def commit(self):
        self.txns.append(self.pending)
        self.pending = []

    def rollback(self):
        self.pending = []

    def close(self):
        pass


def test_every_downstream_transaction_carries_the_mark():
    ds = Recorder()
    cfg = LoaderConfig(worker=1, txn_batch=1, exactly_once=True, loopback_control=True,
                       channel_id=7, merge=False, safe_mode_window_s=0)
    loader = Loader(ds, cfg)
    loader.execute_batch([Txn(10, (row(1),)), Txn(11, (row(2),)),
                          DDL("shop", "t", "ALTER TABLE t ADD c INT", 12)])
    loader.execute_batch([Txn(13, (row(3),))])
    # the first batch set the mark table up once: CREATE DATABASE/TABLE, this worker's row
    setup = [sql for sql, _ in ds.txns[1]]
    assert setup[0].startswith("CREATE DATABASE IF NOT EXISTS `retl`")
    assert setup[2].startswith("REPLACE INTO `retl`.`_drainer_repl_mark`")
    assert ds.txns[1][2][1] == (1, 7, 1, "")
    row_txns = [t for t in ds.txns if any(sql.startswith("INSERT INTO `shop`") for sql, _ in t)]
    assert len(row_txns) == 3
    for txn in row_txns:  # rows, then the mark (this worker's row, channel 7), then progress
        sqls = [sql for sql, _ in txn]
        assert sqls[1].startswith("UPDATE `retl`.`_drainer_repl_mark` SET `val` = `val` + 1")
        assert txn[1][1] == (1, 7)
        assert "worker_progress" in sqls[2]
    assert sum(sql.startswith("REPLACE INTO `retl`") for t in ds.txns for sql, _ in t) == 1


def test_no_mark_without_loopback_control():
    ds = Recorder()
    loader = Loader(ds, LoaderConfig(exactly_once=False, merge=False, safe_mode_window_s=0))
    loader.execute_batch([Txn(10, (row(1),))])
    assert not any("retl" in sql for t in ds.txns for sql, _ in t)


def test_drainer_flags_set_the_loop_control_keys():
    parser = argparse.ArgumentParser()
    drainer_cli.register(parser.add_subparsers())
    args = parser.parse_args(["drainer", "--loopback-control", "--channel-id", "4",
                              "--no-sync-ddl"])
    cfg = drainer_cli.load_config(args)
    assert (cfg.syncer.loopback_control, cfg.syncer.channel_id, cfg.syncer.sync_ddl) == (
        True, 4, False)
    cfg = drainer_cli.load_config(parser.parse_args(["drainer"]))
    assert (cfg.syncer.loopback_control, cfg.syncer.channel_id, cfg.syncer.sync_ddl) == (
        False, 0, True)
    help_text = parser._subparsers._group_actions[0].choices["drainer"].format_help()
    assert "--loopback-control" in help_text and "same N" in help_text


def test_emulated_downstream_classifies_statements():
    assert _schema_of("INSERT INTO `tidb_binlog`.`worker_progress` (a) VALUES (%s)",
                      None) == "tidb_binlog"
    assert _schema_of("CREATE SCHEMA IF NOT EXISTS `tidb_binlog`", None) == "tidb_binlog"
    assert _schema_of("CREATE TABLE IF NOT EXISTS `tidb_binlog`.`p` (x INT)", "shop") \
        == "tidb_binlog"
    assert _schema_of("UPDATE `retl`.`_drainer_repl_mark` SET `val` = `val` + 1", None) \
        == "retl"
    assert _schema_of("DELETE FROM t WHERE id = 1", "Shop") == "shop"
    assert _schema_of("ALTER TABLE t ADD c INT", None) is None


def test_emulated_downstream_maps_emulator_errors():
    ds = EmulatedTidbDownstream(DownstreamConfig(host="b", port=1), lambda: None)
    conflict = ds._error(TxnConflict("deadlock", code=1213), "UPDATE t")
    assert isinstance(conflict, TransientDownstreamError) and conflict.code == 1213
    exists = ds._error(UpstreamError("table exists", code=1050), "CREATE TABLE t (x INT)")
    assert type(exists) is DownstreamError and exists.code == 1050
    assert "emulated TiDB on b:1" in str(exists)


def test_worker_start_writes_the_mark_row_retrying_transient_errors():
    class FlakyRecorder(Recorder):
        failures = 1

        def execute(self, stmt):
            if self.failures:
                self.failures -= 1
                raise TransientDownstreamError("lost", code=2013)
            return super().execute(stmt)

    ds = FlakyRecorder()
    sleeps = []
    loader = Loader(ds, LoaderConfig(worker=3, exactly_once=False, loopback_control=True,
                                     channel_id=9), sleep=sleeps.append)
    loader.reload_marks()  # what SqlWorkerActor.__init__ runs with loopback-control
    assert len(sleeps) == 1 and loader.retries == 1
    assert ds.txns[-1][-1] == (mark_init_statement(3, 9).sql, (3, 9, 1, ""))
    loader.execute_batch([Txn(10, (row(1),))])  # not written again
    assert sum(sql.startswith("REPLACE INTO `retl`") for t in ds.txns for sql, _ in t) == 1
