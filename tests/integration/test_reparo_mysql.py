"""reparo into a real MariaDB (no Ray): DDL and DML records applied through the drainer's
loader, safe-mode reruns, the errors a user meets (table missing downstream, duplicate key
without safe mode, unreachable destination, a damaged record, a torn tail) as the CLI
prints them, and what is applied before a damaged record or a torn tail."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tidb_binlog.binlogfile import Binlogger, encode_record, walk
from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.config.reparo import load_reparo_config
from tidb_binlog.drainer.translate.pb import ddl_record
from tidb_binlog.errors import CorruptRecord, DownstreamError, ProtocolError, SchemaError
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


AFTER_11 = ((2, "x"), (3, "v3"), *((i, f"v{i}") for i in range(4, 31)), (100, "moved"))
AFTER_12 = ((2, "x"), *((i, f"v{i}") for i in range(4, 31)), (100, "moved"))


def record_starts(d) -> list[int]:
    """Where each record of the (one) file starts."""
    return [0, *(pos.offset for pos, _ in walk(d))][:-1]


def test_crc_damage_applies_every_record_before_it(mariadb, tmp_path):
    """The defect: at a damaged record the workers' queued rows were dropped and the
    reported point ("everything up to commit_ts X is applied") lay well before the
    damage (6 here: 11 and most of 10 were read but not applied). Now the intact prefix
    is applied first and the point is the last record before the damage."""
    db = "reparo_it_d"
    drop(mariadb, db)
    d = tmp_path / "f"
    write_files(d, db)
    seg = sorted(d.glob("binlog-*"))[0]
    at = record_starts(d)[4]  # commit_ts 12, with 13 after it
    data = bytearray(seg.read_bytes())
    data[at + 12 + 3] ^= 0xFF
    seg.write_bytes(bytes(data))
    try:
        with pytest.raises(CorruptRecord) as info:
            run_reparo(config(d, mariadb))
        msg = str(info.value)
        assert msg.startswith(f"corrupt binlog record in {seg} at offset {at}: CRC mismatch")
        assert msg.endswith("[reparo stopped: every record before the damage is applied, up to "
                            "commit_ts 11 (1970-01-01 00:00:00 UTC); restore the file from a "
                            "copy and rerun with start-tso = 12, or set skip-corrupt = true to "
                            "skip the damaged bytes]")
        assert rows(mariadb, db) == AFTER_11
    finally:
        drop(mariadb, db)


def reparo_cli(toml, *flags):
    return subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "reparo", "--config",
                           str(toml), *flags], capture_output=True, text=True, timeout=120)


def test_cli_torn_tail_into_mariadb(mariadb, tmp_path):
    """The newest file lost its last 3 bytes (the last transaction, commit_ts 13): exit 1
    naming the file, the offset and the last commit_ts applied, everything before it
    applied; exit 0 with --allow-torn-tail, and exit 0 while a writer holds the lock."""
    db = "reparo_it_e"
    drop(mariadb, db)
    d = tmp_path / "f"
    write_files(d, db)
    seg = sorted(d.glob("binlog-*"))[0]
    at = record_starts(d)[5]
    size = seg.stat().st_size
    os.truncate(seg, size - 3)
    toml = tmp_path / "reparo.toml"
    toml.write_text(f'data-dir = "{d}"\ndest-type = "mysql"\nworker-count = 3\ntxn-batch = 4\n'
                    f'[dest-db]\nhost = "{mariadb.host}"\nport = {mariadb.port}\n'
                    f'user = "{mariadb.user}"\npassword = "{mariadb.password}"\n')
    try:
        proc = reparo_cli(toml)
        assert proc.returncode == 1, proc
        err = proc.stderr
        assert (f"tidb-binlog reparo: TornTail: {seg} ends in a record cut short at offset "
                f"{at} ({size - 3 - at} bytes to the end of the file), after commit_ts 12 "
                "(1970-01-01 00:00:00 UTC)") in err, err
        assert "everything up to commit_ts 12 (1970-01-01 00:00:00 UTC) is applied" in err
        assert "pass --allow-torn-tail (reparo.toml allow-torn-tail = true)" in err
        assert "restore the file from a copy and rerun with start-tso = 13" in err
        assert "reparo: commit_ts 5 (1970-01-01 00:00:00 UTC) .. 12 (1970-01-01" in err
        assert rows(mariadb, db) == AFTER_12
        drop(mariadb, db)
        proc = reparo_cli(toml, "--allow-torn-tail")
        assert proc.returncode == 0, proc
        assert (f"reparo: torn tail accepted (allow-torn-tail): {seg} ends in a record cut "
                f"short at offset {at} ({size - 3 - at} bytes), after commit_ts 12") in \
            proc.stderr
        assert rows(mariadb, db) == AFTER_12
        # a drainer at the directory (here this process's writer, holding .lock) with a
        # record half appended: a write in progress, not a loss
        drop(mariadb, db)
        with Binlogger(d) as b:  # (it drops the torn tail at open, as the file sink does)
            with open(b.path, "ab") as f:
                f.write(encode_record(dml(13, db, pb.Insert, [(3, None)]))[:20])
            proc = reparo_cli(toml)
        assert proc.returncode == 0, proc
        assert (f"reparo: {seg} is being written by a live drainer (it holds the directory's "
                f".lock): read up to offset {at}, after commit_ts 12") in proc.stderr
        assert rows(mariadb, db) == AFTER_12
    finally:
        drop(mariadb, db)
