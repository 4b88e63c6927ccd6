"""The throwaway MariaDB servers: isolation, restart, crash recovery, cleanup, errors."""

from __future__ import annotations

import socket

import pymysql
import pytest

from tidb_binlog.errors import LocalServerError
from tidb_binlog.testing import mariadb as mariadb_mod
from tidb_binlog.testing.mariadb import MariaDBServer


def _scalar(server: MariaDBServer, sql: str, database: str | None = None):
    conn = server.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()[0]
    finally:
        conn.close()


def _execute(server: MariaDBServer, database: str | None, *statements: str) -> None:
    conn = server.connect(database)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
        conn.commit()
    finally:
        conn.close()


def test_pair_is_two_independent_servers(mariadb_pair, fresh_database):
    up, down = mariadb_pair
    assert up.port != down.port
    assert up.socket != down.socket
    db = fresh_database(up, down)
    _execute(up, db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
    _execute(down, db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (7)")
    assert _scalar(up, "SELECT SUM(id) FROM t", db) == 3
    assert _scalar(down, "SELECT SUM(id) FROM t", db) == 7


def test_server_settings(mariadb):
    conn = mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@time_zone, @@character_set_server, @@collation_server, "
                        "@@max_allowed_packet, @@performance_schema, @@log_bin, "
                        "@@innodb_flush_log_at_trx_commit, @@autocommit")
            row = cur.fetchone()
    finally:
        conn.close()
    assert row == ("+00:00", "utf8mb4", "utf8mb4_bin", 256 * 1024 * 1024, 0, 0, 1, 0)


def test_unix_socket_login(mariadb):
    conn = pymysql.connect(unix_socket=mariadb.socket, user=mariadb.user,
                           password=mariadb.password)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@port")
            assert cur.fetchone()[0] == mariadb.port
    finally:
        conn.close()


def test_fresh_database_is_created_and_unique(mariadb, fresh_database):
    a, b = fresh_database(), fresh_database()
    assert a != b
    assert _scalar(mariadb, f"SELECT COUNT(*) FROM information_schema.schemata "
                            f"WHERE schema_name IN ('{a}', '{b}')") == 2


def test_restart_keeps_data_and_port(mariadb_factory):
    server = mariadb_factory("restart")
    port, datadir = server.port, server.datadir
    _execute(server, None, "CREATE DATABASE d")
    _execute(server, "d", "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (42)")
    server.restart()
    assert server.is_running()
    assert (server.port, server.datadir) == (port, datadir)
    assert _scalar(server, "SELECT id FROM t", "d") == 42


def test_kill_then_start_recovers_committed_data(mariadb_factory):
    server = mariadb_factory("crash")
    port = server.port
    _execute(server, None, "CREATE DATABASE d")
    _execute(server, "d", "CREATE TABLE t (id INT PRIMARY KEY)",
             *(f"INSERT INTO t VALUES ({i})" for i in range(100)))
    uncommitted = server.connect("d")
    uncommitted.cursor().execute("INSERT INTO t VALUES (1000)")  # never committed
    server.kill()
    assert not server.is_running()
    uncommitted.close()
    server.start()
    assert server.port == port
    assert _scalar(server, "SELECT COUNT(*) FROM t", "d") == 100
    assert _scalar(server, "SELECT COUNT(*) FROM t WHERE id = 1000", "d") == 0


def test_close_removes_everything(tmp_path):
    server = MariaDBServer(base_dir=tmp_path, name="gone").start()
    directory = server.directory
    assert directory.is_dir() and (directory / "data" / "mysql").is_dir()
    assert server in mariadb_mod._live
    server.close()
    assert not server.is_running()
    assert not directory.exists()
    assert list(tmp_path.iterdir()) == []
    assert server not in mariadb_mod._live


def test_context_manager_closes(tmp_path):
    with MariaDBServer(base_dir=tmp_path, name="ctx") as server:
        assert _scalar(server, "SELECT 1") == 1
        directory = server.directory
    assert not server.is_running()
    assert not directory.exists()


@pytest.mark.parametrize("precheck", [True, False], ids=["precheck", "server-bind"])
def test_port_taken_gives_clear_error(tmp_path, monkeypatch, precheck):
    if not precheck:  # let mariadbd itself hit EADDRINUSE, as in a race
        monkeypatch.setattr(mariadb_mod, "_port_taken", lambda port: False)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = MariaDBServer(base_dir=tmp_path, port=port, name="clash")
        try:
            with pytest.raises(LocalServerError, match=rf"127\.0\.0\.1:{port}.*already in use"):
                server.start()
            assert not server.is_running()
        finally:
            server.close()


def test_missing_binary_names_setup_script(monkeypatch):
    monkeypatch.setattr(mariadb_mod.shutil, "which", lambda name: None)
    monkeypatch.setattr(mariadb_mod.os, "access", lambda path, mode: False)
    with pytest.raises(LocalServerError, match=r"mariadbd not found.*scripts/setup\.sh"):
        MariaDBServer(name="nobinary").start()


def test_start_after_stop_on_a_taken_port_fails_instead_of_moving(mariadb_factory):
    server = mariadb_factory("moved")
    port = server.port
    server.stop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # old TIME_WAITs
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(LocalServerError, match="already in use"):
            server.start()
    server.start()
    assert server.port == port and _scalar(server, "SELECT 1") == 1


def test_log_bin_server_is_a_primary_a_native_replica_follows(tmp_path):
    with MariaDBServer(base_dir=tmp_path, name="primary", log_bin=True, server_id=11) as primary, \
            MariaDBServer(base_dir=tmp_path, name="replica", server_id=12) as replica:
        assert _scalar(primary, "SELECT CONCAT(@@log_bin + 0, @@binlog_format, @@server_id)") \
            == "1ROW11"
        assert _scalar(replica, "SELECT CONCAT(@@log_bin + 0, @@server_id)") == "012"
        conn = replica.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, "
                            "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos",
                            (primary.host, primary.port, primary.user, primary.password))
                cur.execute("START SLAVE")
                _execute(primary, None, "CREATE DATABASE r",
                         "CREATE TABLE r.t (id INT PRIMARY KEY)", "INSERT INTO r.t VALUES (5)")
                pos = _scalar(primary, "SELECT @@gtid_binlog_pos")
                assert pos  # the server writes GTIDs
                cur.execute("SELECT MASTER_GTID_WAIT(%s, 30)", (pos,))
                assert cur.fetchone()[0] == 0
                cur.execute("STOP SLAVE")
        finally:
            conn.close()
        assert _scalar(replica, "SELECT SUM(id) FROM r.t") == 5


def test_server_id_out_of_range_is_refused():
    with pytest.raises(ValueError, match="server_id"):
        MariaDBServer(server_id=0)
