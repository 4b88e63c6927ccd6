"""reparo into a real MariaDB (no Ray): DDL and DML records applied through the drainer's
loader, safe-mode reruns, the errors a user meets (table missing downstream, duplicate key
without safe mode, unreachable destination) as the CLI prints them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tidb_binlog.binlogfile import Binlogger
from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.config.reparo import load_reparo_config
from tidb_binlog.drainer.translate.pb import ddl_record
from tidb_binlog.errors import DownstreamError, ProtocolError, SchemaError
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo import apply as reparo_apply
from tidb_binlog.reparo.runner import run_reparo


def column(name: str, tp: int, mysql_type: str, value, changed=None) -> bytes:
    c = pb.column(name=name, tp=bytes((tp,)), mysql_type=mysql_type,
                  value=encode_value([value]))
    if changed is not None:
        c.changed_value = encode_value([changed])
    return c.SerializeToString()


def dml(ts: int, db: str, tp, rows) -> bytes:
    """One record of ``rows``: each a list of (id, v) pairs, or for Update ((old), (new))."""
    b = pb.Binlog(tp=pb.DML, commit_ts=ts)
    for r in rows:
        ev = b.dml_data.events.add(schema_name=db, table_name="t", tp=tp)
        if tp == pb.Update:
            (oid, ov), (nid, nv) = r
            ev.row.extend([column("id", 3, "int", Datum.int64(oid), Datum.int64(nid)),
                           column("v", 15, "varchar", Datum.bytes(ov.encode()),
                                  Datum.bytes(nv.encode()))])
        else:
            rid, v = r
            ev.row.extend([column("id", 3, "int", Datum.int64(rid)),
                           column("v", 15, "varchar",
                                  Datum.bytes(v.encode()) if v is not None else Datum.null())])
    return b.SerializeToString()


def write_files(d, db: str, *, with_ddl: bool = True) -> None:
    records = [ddl_record(5, "", f"CREATE DATABASE `{db}`"),
               ddl_record(6, db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
               ] if with_ddl else []
    records += [dml(10, db, pb.Insert, [(i, f"v{i}") for i in range(1, 31)]),
                dml(11, db, pb.Update, [((1, "v1"), (100, "moved")), ((2, "v2"), (2, "x"))]),
                dml(12, db, pb.Delete, [(3, "v3")]),
                dml(13, db, pb.Insert, [(3, None)])]
    with Binlogger(d) as b:
        b.write_many(records)
        b.sync()


def rows(server, db):
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM t ORDER BY id")
            return cur.fetchall()
    finally:
        conn.close()


def config(d, server, **extra):
    over = {"data-dir": str(d), "dest-type": "mysql", "dest-db.host": server.host,
            "dest-db.port": server.port, "dest-db.user": server.user,
            "dest-db.password": server.password, "worker-count": 3, "txn-batch": 4}
    over.update(extra)
    return load_reparo_config(None, over)


WANT = ((2, "x"), (3, None), *((i, f"v{i}") for i in range(4, 31)), (100, "moved"))


def drop(server, db):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    finally:
        conn.close()


def test_restore_ddl_and_dml_then_safe_mode_rerun(mariadb, tmp_path):
    db = "reparo_it_a"
    drop(mariadb, db)
    write_files(tmp_path / "f", db)
    try:
        result = run_reparo(config(tmp_path / "f", mariadb))
        assert (result.records, result.ddls, result.rows) == (6, 2, 34)
        assert rows(mariadb, db) == WANT
        # a rerun over restored rows converges in safe mode (the DDLs' "exists" errors are
        # ignored as the drainer ignores them)
        run_reparo(config(tmp_path / "f", mariadb, **{"safe-mode": True}))
        assert rows(mariadb, db) == WANT
        # without safe mode the rerun is refused, naming the commit_ts
        with pytest.raises(DownstreamError, match=r"txn at commit_ts 10.*Duplicate entry") as e:
            run_reparo(config(tmp_path / "f", mariadb))
        # the two DDLs before it were applied (their "exists" errors ignored): where to rerun
        assert str(e.value).endswith("[reparo stopped: everything up to commit_ts 6 (1970-01-01 "
                                     "00:00:00 UTC) is applied; rerun with start-tso = 7]")
    finally:
        drop(mariadb, db)


def test_table_missing_downstream_is_a_clear_error(mariadb, tmp_path):
    db = "reparo_it_b"
    drop(mariadb, db)
    write_files(tmp_path / "f", db, with_ddl=False)
    with pytest.raises(SchemaError, match=rf"table `{db}`.`t` \(rows at commit_ts 10\) does not "
                                          r"exist in the downstream .* create the table "
                                          "downstream first"):
        run_reparo(config(tmp_path / "f", mariadb))


def test_cli_unreachable_destination(tmp_path, free_port):
    write_files(tmp_path / "f", "x")
    toml = tmp_path / "reparo.toml"
    port = free_port()
    toml.write_text(f'data-dir = "{tmp_path / "f"}"\ndest-type = "mysql"\n[dest-db]\n'
                    f'host = "127.0.0.1"\nport = {port}\npassword = "hunter2"\n')
    proc = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "reparo", "--config",
                           str(toml)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert (f"tidb-binlog reparo: DownstreamError: cannot restore into the dest-db "
            f"127.0.0.1:{port} as user 'root'") in proc.stderr
    assert "Check [dest-db] host, port, user and password" in proc.stderr
    assert "hunter2" not in proc.stderr + proc.stdout


def test_large_transactions_apply_in_chunks_as_whole_ones(mariadb, tmp_path, monkeypatch):
    """Records of large-record-bytes or more are read in place and applied in chunks of
    txn-batch x worker-count rows (here 12), the causality window flushed every 500 keys:
    the downstream ends up as with the whole read, and a rerun without safe mode names
    the commit_ts below which all is applied."""
    monkeypatch.setattr(reparo_apply, "MAX_WINDOW_KEYS", 500)
    db = "reparo_it_c"
    n = 3000
    records = [ddl_record(5, "", f"CREATE DATABASE `{db}`"),
               ddl_record(6, db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))"),
               dml(10, db, pb.Insert, [(i, f"v{i}") for i in range(1, n + 1)]),
               dml(11, db, pb.Update, [((i, f"v{i}"), (i + n, "moved")) for i in range(1, 501)]
                   + [((i, f"v{i}"), (i, "x")) for i in range(501, 1001)]),
               dml(12, db, pb.Delete, [(i, f"v{i}") for i in range(1001, 1501)]),
               dml(13, db, pb.Insert, [(1001, None)])]
    assert len(records[2]) > 50_000 and len(records[4]) > 10_000
    want = (*((i, "x") for i in range(501, 1001)), (1001, None),
            *((i, f"v{i}") for i in range(1501, n + 1)), *((i + n, "moved") for i in range(1, 501)))
    with Binlogger(tmp_path / "f") as b:
        b.write_many(records)
        b.sync()
    try:
        for large in (0, 10_000):
            drop(mariadb, db)
            result = run_reparo(config(tmp_path / "f", mariadb, **{"large-record-bytes": large}))
            assert (result.records, result.ddls, result.rows) == (6, 2, n + 1000 + 500 + 1)
            assert result.large_records == (3 if large else 0)
            assert rows(mariadb, db) == want
        with pytest.raises(DownstreamError, match=r"txn at commit_ts 10.*Duplicate entry") as e:
            run_reparo(config(tmp_path / "f", mariadb, **{"large-record-bytes": 10_000}))
        assert str(e.value).endswith("rerun with start-tso = 7]")
        # a row that does not decode at event 2000 of the large insert: nothing of the
        # record is applied (its rows are checked before the first chunk goes out)
        bad = pb.Binlog.FromString(records[2])
        bad.dml_data.events[2000].row[1] = b"\xff"
        with Binlogger(tmp_path / "g") as b:
            b.write_many([*records[:2], bad.SerializeToString()])
            b.sync()
        drop(mariadb, db)
        with pytest.raises(ProtocolError, match="event 2000 .* at commit_ts 10"):
            run_reparo(config(tmp_path / "g", mariadb, **{"large-record-bytes": 10_000}))
        assert rows(mariadb, db) == ()
    finally:
        drop(mariadb, db)
