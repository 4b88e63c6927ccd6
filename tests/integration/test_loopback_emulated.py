"""Loop control through an emulated TiDB, on a real MariaDB, without Ray: a SQL worker's
Loader with ``loopback-control`` writes into cluster B's TiDB emulator
(:class:`EmulatedTidbDownstream`), and B's binlogs, read back by the schema keeper of the
other direction, are dropped when they carry the same channel's mark (and kept, minus
the mark rows, for another channel)."""

from __future__ import annotations

from tidb_binlog import binlog as bl
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.emulated import EmulatedTidbDownstream
from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
from tidb_binlog.drainer.translate.keeper import RowKeeper
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import Upstream

T = TableSchema.build("shop", "t", ["id", "v"], ["id"])


def ins(k, v):
    return DML("shop", "t", DMLType.INSERT, {"id": k, "v": v}, None, T)


def served(collector: BinlogCollector) -> list[tuple[int, bytes]]:
    """What a pump serves for the collected binlogs: each committed Prewrite with its
    commit_ts, in commit order."""
    binlogs = collector.binlogs()
    prewrites = {b.start_ts: b for b in binlogs if b.tp == bl.BinlogType.PREWRITE}
    out = []
    for c in binlogs:
        if c.tp == bl.BinlogType.COMMIT:
            b = prewrites[c.start_ts]
            b.tp, b.commit_ts = bl.BinlogType.COMMIT, c.commit_ts
            out.append((c.commit_ts, bl.encode(b)))
    return sorted(out)


def query(server, sql):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def test_marked_writes_come_back_and_are_dropped(mariadb_factory):
    b_db = mariadb_factory("b")
    collector = BinlogCollector()
    tso = TimestampOracle()
    admin = Upstream(b_db.params(), collector, tso.get_ts)
    admin.ddl("CREATE DATABASE shop")
    admin.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
    config = DownstreamConfig(host=b_db.host, port=b_db.port, user=b_db.user,
                              password=b_db.password, emulated_tidb_registry="unused")
    ds = EmulatedTidbDownstream(config, lambda: Upstream(b_db.params(), collector, tso.get_ts))
    loader = Loader(ds, LoaderConfig(worker=1, txn_batch=1, exactly_once=True,
                                     loopback_control=True, channel_id=7, merge=False,
                                     safe_mode_window_s=0))
    try:
        loader.execute_batch([Txn(100, (ins(1, "a"), ins(2, "b"))), Txn(101, (ins(3, "c"),))])
        upd = DML("shop", "t", DMLType.UPDATE, {"id": 1, "v": "A"}, {"id": 1, "v": "a"}, T)
        dele = DML("shop", "t", DMLType.DELETE, {"id": 2, "v": "b"}, None, T)
        loader.execute_batch([Txn(102, (upd, dele)),
                              DDL("shop", "t", "ALTER TABLE t ADD COLUMN w INT", 103)])
        merged = Txn(104, (ins(4, "d"),))
        loader.config = LoaderConfig(**{**loader.config.__dict__, "merge": True})
        loader.execute_batch([merged])  # merge-by-key: bulk REPLACE through the emulator
    finally:
        loader.close()
        admin.close()

    # B holds the rows, the mark row (val 1 at start + one per transaction), the progress
    assert query(b_db, "SELECT id, v FROM shop.t ORDER BY id") == ((1, "A"), (3, "c"),
                                                                    (4, "d"))
    assert query(b_db, "SELECT id, channel_id, val FROM retl._drainer_repl_mark") == ((1, 7, 5),)
    assert query(b_db, "SELECT commitTS FROM tidb_binlog.worker_progress WHERE worker = 1"
                 ) == ((104,),)

    items = served(collector)
    meta = admin.meta()
    # the other direction, same channel: every transaction the worker wrote is dropped,
    # and so is the mark table's DDL; the user DDL and the admin's DDL still pass
    same = RowKeeper(TaskSettings(cluster_id=1, loopback_control=True, channel_id=7), meta)
    same.reset(0)
    kept = [txn for _, txn, _ in same.translate(items) if txn is not None]
    assert all(txn.ddl is not None for txn in kept), kept
    assert [txn.ddl.sql for txn in kept] == [
        "CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))",
        "ALTER TABLE t ADD COLUMN w INT"]
    assert same._loopback.dropped == 5  # the mark row's init + four row transactions

    # another channel: the rows are replicated, the mark rows (not user data) are not
    other = RowKeeper(TaskSettings(cluster_id=1, loopback_control=True, channel_id=8), meta)
    other.reset(0)
    rows = [d for _, txn, _ in other.translate(items) if txn is not None for d in txn.dmls]
    assert {d.table for d in rows} == {"t"}
    assert len(rows) == 6  # 3 inserts, update, delete, 1 insert (merge: REPLACE)

    # without loopback-control, the marks are plain rows (what TiDB's drainer does)
    plain = RowKeeper(TaskSettings(cluster_id=1), meta)
    plain.reset(0)
    tables = {d.table for _, txn, _ in plain.translate(items) if txn is not None
              for d in txn.dmls}
    assert tables == {"t", "_drainer_repl_mark"}
