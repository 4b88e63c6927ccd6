"""Checkpoint stores: the downstream table (real MariaDB) and the savepoint file."""

from __future__ import annotations

import itertools
import os

import pytest

from cluster.drainer import check_downstream
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import (
    CheckpointStore,
    FileCheckpointStore,
    MySQLCheckpointStore,
)
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.errors import (
    ConfigError,
    DownstreamError,
    ProtocolError,
    StorageError,
    TransientDownstreamError,
)

_cluster_ids = itertools.count(9000)

GO_ROW = ('{"consistent":false,"commitTS":414529105591271429,"ts-map":{},'
          '"schema-version":52}')


def cfg_of(server) -> DownstreamConfig:
    return DownstreamConfig(host=server.host, port=server.port, user=server.user,
                            password=server.password)


def run(server, sql, args=None):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def test_mysql_store_creates_table_and_round_trips(mariadb, fresh_database):
    schema = fresh_database()  # an empty database of our own: the store adds its table
    cid = next(_cluster_ids)
    store = MySQLCheckpointStore(cfg_of(mariadb), cid, schema=schema, table="cp")
    assert isinstance(store, CheckpointStore)
    try:
        assert store.load() is None
        cp = Checkpoint(414529105591271429, False, 52)
        store.save(cp)
        assert store.load() == cp
        row = run(mariadb, f"SELECT clusterID, checkPoint FROM `{schema}`.cp")
        assert row == ((cid, GO_ROW),)  # byte-identical to what Go's drainer writes
        final = Checkpoint(414529105591271500, True, 53, {"primary-ts": 1, "secondary-ts": 2})
        store.save(final)
        assert store.load() == final
        assert run(mariadb, f"SELECT COUNT(*) FROM `{schema}`.cp") == ((1,),)
    finally:
        store.close()
    columns = run(mariadb, "SELECT column_name, column_type, column_key FROM "
                           "information_schema.columns WHERE table_schema = %s "
                           "ORDER BY ordinal_position", (schema,))
    assert columns == (("clusterID", "bigint(20) unsigned", "PRI"),
                       ("checkPoint", "mediumtext", ""))


def test_mysql_store_loads_a_go_row_and_cluster_zero(mariadb, fresh_database):
    schema = fresh_database()
    run(mariadb, f"CREATE TABLE `{schema}`.checkpoint (clusterID BIGINT UNSIGNED PRIMARY KEY,"
                 " checkPoint MEDIUMTEXT)")
    run(mariadb, f"INSERT INTO `{schema}`.checkpoint VALUES (6789, %s)", (GO_ROW,))
    for cid in (6789, 0):  # 0: the single row, whoever wrote it
        store = MySQLCheckpointStore(cfg_of(mariadb), cid, schema=schema)
        try:
            assert store.load() == Checkpoint(414529105591271429, False, 52)
        finally:
            store.close()
    run(mariadb, f"INSERT INTO `{schema}`.checkpoint VALUES (6790, %s)", (GO_ROW,))
    store = MySQLCheckpointStore(cfg_of(mariadb), 0, schema=schema)
    try:
        with pytest.raises(ProtocolError, match="2 clusters"):
            store.load()
    finally:
        store.close()
    run(mariadb, f"UPDATE `{schema}`.checkpoint SET checkPoint = 'garbage' WHERE clusterID = 6790")
    store = MySQLCheckpointStore(cfg_of(mariadb), 6790, schema=schema)
    try:
        with pytest.raises(ProtocolError, match="not JSON"):
            store.load()
    finally:
        store.close()


def test_mysql_store_retries_then_gives_up(free_port):
    sleeps = []
    store = MySQLCheckpointStore(DownstreamConfig(port=free_port(), connect_timeout_s=1), 1,
                                 sleep=sleeps.append)
    with pytest.raises(TransientDownstreamError) as info:
        store.save(Checkpoint(5))
    assert info.value.code == 2003 and sleeps == [1.0] * 4   # 5 attempts, 1 s apart


def test_mysql_store_survives_a_server_restart(mariadb_factory):
    server = mariadb_factory("cp-restart")
    store = MySQLCheckpointStore(cfg_of(server), 3, sleep=lambda s: None)
    try:
        store.save(Checkpoint(10))
        server.restart()  # the store's connection is now dead
        store.save(Checkpoint(20))
        assert store.load() == Checkpoint(20)
    finally:
        store.close()


def test_file_store_round_trip_and_format(tmp_path):
    store = FileCheckpointStore(tmp_path / "data")
    assert store.load() is None
    store.save(Checkpoint(414529105591271429, True, 7))
    assert (tmp_path / "data" / "savepoint").read_text() == (
        "consistent = true\ncommitTS = 414529105591271429\nschema-version = 7\n")
    assert FileCheckpointStore(tmp_path / "data").load() == Checkpoint(414529105591271429,
                                                                       True, 7)
    assert os.listdir(tmp_path / "data") == ["savepoint"]  # no temporary left behind


def test_file_store_crash_during_save_keeps_the_old_savepoint(tmp_path, monkeypatch):
    store = FileCheckpointStore(tmp_path)
    store.save(Checkpoint(100))

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StorageError, match="No space left"):
        store.save(Checkpoint(200))
    monkeypatch.undo()
    assert store.load() == Checkpoint(100)
    assert os.listdir(tmp_path) == ["savepoint"]
    # a temporary left by a killed process does not matter either
    (tmp_path / "savepoint.123.tmp").write_text("consistent = tr")
    assert store.load() == Checkpoint(100)


def test_file_store_bad_file_names_the_key(tmp_path):
    (tmp_path / "savepoint").write_text('commitTS = "soon"\n')
    with pytest.raises(ConfigError) as info:
        FileCheckpointStore(tmp_path).load()
    assert info.value.key == "commitTS" and str(tmp_path / "savepoint") in str(info.value)


def test_worker_layout_is_recorded_and_a_changed_count_after_a_crash_drops_the_rows(
        mariadb, fresh_database):
    from tidb_binlog.drainer.sinks.mysql.progress import progress_upsert_statement

    schema = fresh_database()
    cid = next(_cluster_ids)
    store = MySQLCheckpointStore(cfg_of(mariadb), cid, schema=schema)
    try:
        first = store.check_workers(4)                    # fresh: record the count
        assert (first.previous_count, first.reset_progress, first.safe_mode) == \
            (None, False, False)
        for worker, ts in enumerate((150, 120, 100, 180)):   # 4 workers wrote rows
            stmt = progress_upsert_statement(cid, worker, ts, schema)
            run(mariadb, stmt.sql, stmt.args)
        store.save(Checkpoint(100))                        # then a crash
        same = store.check_workers(4)
        assert (same.previous_count, same.reset_progress, same.safe_mode) == (4, False, False)
        changed = store.check_workers(2)
        assert (changed.previous_count, changed.reset_progress, changed.safe_mode,
                changed.safe_mode_until_ts) == (4, True, True, 180)
        assert run(mariadb, f"SELECT COUNT(*) FROM `{schema}`.worker_progress "
                            "WHERE clusterID = %s", (cid,)) == ((0,),)
        assert run(mariadb, f"SELECT workerCount, safeModeUntilTS FROM `{schema}`.worker_layout "
                            "WHERE clusterID = %s", (cid,)) == ((2, 180),)
        # crashed again before the checkpoint passed 180: safe mode again, rows kept
        stmt = progress_upsert_statement(cid, 0, 130, schema)
        run(mariadb, stmt.sql, stmt.args)
        store.save(Checkpoint(120))
        again = store.check_workers(2)
        assert (again.reset_progress, again.safe_mode) == (False, True)
        # a clean stop past the window: free, and the window is closed
        store.save(Checkpoint(200, consistent=True))
        clean = store.check_workers(3)
        assert (clean.reset_progress, clean.safe_mode, clean.safe_mode_until_ts) == \
            (True, False, 0)
        assert run(mariadb, f"SELECT workerCount, safeModeUntilTS FROM `{schema}`.worker_layout "
                            "WHERE clusterID = %s", (cid,)) == ((3, 0),)
    finally:
        store.close()


def test_a_checkpoint_server_of_its_own_holds_the_row_the_downstream_the_progress(
        mariadb_pair, fresh_database):
    """``[syncer.to.checkpoint]`` naming another server (TiDB Binlog's separate checkpoint
    database): the checkpoint row goes there; the worker progress rows and the layout
    stay in the downstream, with the data they are committed with."""
    down, ckpt = mariadb_pair
    schema = fresh_database(down, ckpt)
    cid = next(_cluster_ids)
    store = MySQLCheckpointStore(cfg_of(down), cid, schema=schema,
                                 checkpoint_config=cfg_of(ckpt))
    try:
        assert store.address == f"{ckpt.host}:{ckpt.port}"
        assert store.load() is None
        store.save(Checkpoint(4242, consistent=True))
        assert store.load().commit_ts == 4242
        assert store.check_workers(2).worker_count == 2
        store.ping_downstream()
    finally:
        store.close()
    rows = run(ckpt, f"SELECT clusterID FROM `{schema}`.checkpoint")
    assert rows == ((cid,),)
    assert run(down, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s "
                     "AND table_name = 'checkpoint'", (schema,)) == ((0,),)
    assert run(down, f"SELECT workerCount FROM `{schema}`.worker_layout WHERE clusterID = %s",
               (cid,)) == ((2,),)
    assert run(ckpt, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s "
                     "AND table_name = 'worker_layout'", (schema,)) == ((0,),)


def test_the_start_check_names_a_checkpoint_server_that_refuses(mariadb_pair, tmp_path):
    down, ckpt = mariadb_pair
    path = tmp_path / "drainer.toml"
    path.write_text(f"[syncer.to]\nhost = '127.0.0.1'\nport = {down.port}\nuser = 'root'\n"
                    f"[syncer.to.checkpoint]\nport = {ckpt.port}\npassword = 'wrong-one'\n")
    settings = TaskSettings.from_config(load_drainer_config(path, env={}), upstream_meta={})
    with pytest.raises(DownstreamError) as info:
        check_downstream(settings, wait_s=0)
    text = str(info.value)
    assert f"the checkpoint database 127.0.0.1:{ckpt.port} ([syncer.to.checkpoint]) " \
           "refused the drainer" in text, text
    assert "check [syncer.to.checkpoint] user and password" in text and "wrong-one" not in text
