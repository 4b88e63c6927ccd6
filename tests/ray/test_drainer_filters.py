"""Filters and routing end to end on a real local Ray: one upstream workload touching
every rule (replicate-do-db, replicate-do-table, ignore-table, ignore-schemas,
binlog-filter-rule ignore-event / ignore-sql, table-migrate-rule routing of rows and
DDLs), replicated by a MySQL-sink task into a real MariaDB, then by a file-sink task
whose records must carry the same choices and the routed names, then by a Parquet-sink
task whose lake must too."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from cluster.drainer import Drainer
from tidb_binlog.binlogfile import WalkStats, walk
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.sinks.parquet.manifest import read_manifest
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.testing.stack import StackSpec

pytestmark = pytest.mark.timeout(600)

CONFIG = """
[syncer]
replicate-do-db = ["shop", "~^src"]
ignore-schemas = "INFORMATION_SCHEMA,PERFORMANCE_SCHEMA,mysql,src_tmp"

[[syncer.replicate-do-table]]
db-name = "bank"
tbl-name = "~^acc"

[[syncer.ignore-table]]
db-name = "shop"
tbl-name = "log"

[syncer.binlog-filter-rule.keep-history]
ignore-event = ["delete", "truncate table"]
[syncer.binlog-filter-rule.no-aaa]
ignore-sql = ["add column aaa"]
[syncer.binlog-filter-rule.frozen]
ignore-event = ["update", "alter table"]
[syncer.binlog-filter-rule.never]
ignore-event = ["create table", "insert"]
[syncer.binlog-filter-rule.keep-table]
ignore-event = ["drop table"]

[[syncer.table-migrate-rule]]
binlog-filter-rule = ["keep-history", "no-aaa"]
source = { schema = "shop", table = "orders" }
[[syncer.table-migrate-rule]]
binlog-filter-rule = ["frozen"]
source = { schema = "shop", table = "stock" }
[[syncer.table-migrate-rule]]
binlog-filter-rule = ["never"]
source = { schema = "shop", table = "scratch" }
[[syncer.table-migrate-rule]]
binlog-filter-rule = ["keep-table"]
source = { schema = "shop", table = "keep*" }
[[syncer.table-migrate-rule]]
source = { schema = "shop", table = "items" }
target = { schema = "shop", table = "items_v2" }
[[syncer.table-migrate-rule]]
source = { schema = "src*" }
target = { schema = "dst" }
"""


def query(server, sql):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def tables(server) -> set[str]:
    return {f"{s}.{t}" for s, t in query(
        server, "SELECT table_schema, table_name FROM information_schema.tables WHERE "
        "table_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys', "
        "'tidb_binlog')")}


def txn(upstream, database, *steps):
    with upstream.session(database) as s:
        t = s.begin()
        for op, *args in steps:
            getattr(t, op)(*args)
        t.commit()


def workload(upstream):
    """Every rule's case; returns nothing: the tests compare with the upstream."""
    ddl = upstream.ddl
    for db in ("shop", "bank", "other", "src1", "src_tmp"):
        ddl(f"CREATE DATABASE {db}")
    for t in ("orders", "stock", "log", "scratch", "keep1", "items"):
        ddl(f"CREATE TABLE shop.{t} (id INT PRIMARY KEY, v VARCHAR(16))")
    ddl("CREATE TABLE bank.accounts (id INT PRIMARY KEY, v VARCHAR(16))")
    ddl("CREATE TABLE bank.ledger (id INT PRIMARY KEY, v VARCHAR(16))")
    ddl("CREATE TABLE other.t (id INT PRIMARY KEY, v VARCHAR(16))")
    ddl("CREATE TABLE src1.t (id INT PRIMARY KEY, v VARCHAR(16))")
    ddl("CREATE TABLE src_tmp.t (id INT PRIMARY KEY, v VARCHAR(16))")
    rows = [{"id": i, "v": f"v{i}"} for i in range(1, 4)]
    # one transaction over kept, filtered and routed tables: only its filtered rows go
    txn(upstream, "shop", *[("insert", t, rows) for t in
                            ("orders", "stock", "log", "scratch", "keep1", "items")])
    for db, t in (("bank", "accounts"), ("bank", "ledger"), ("other", "t"), ("src1", "t"),
                  ("src_tmp", "t")):
        txn(upstream, db, ("insert", t, rows))
    txn(upstream, "shop", ("delete", "orders", "id = 1"), ("update", "stock", {"v": "new"},
                                                               "id = 2"),
        ("update", "orders", {"v": "new"}, "id = 2"), ("update", "items", {"v": "new"},
                                                       "id = 2"),
        ("delete", "items", "id = 3"))
    ddl("TRUNCATE TABLE shop.orders")                    # ignored: keep-history
    ddl("ALTER TABLE shop.orders ADD COLUMN aaa INT")    # ignored: ignore-sql
    ddl("ALTER TABLE shop.orders ADD COLUMN bbb INT")    # applied
    ddl("ALTER TABLE shop.stock ADD INDEX iv (v)")       # ignored: frozen's alter table
    ddl("DROP TABLE shop.keep1")                         # ignored: keep-table
    ddl("ALTER TABLE shop.items ADD COLUMN c INT")       # routed to items_v2
    txn(upstream, "shop", ("insert", "items", [{"id": 9, "v": "late", "c": 7}]))
    ddl("RENAME TABLE src1.t TO src1.t2")                # routed: dst.t -> dst.t2
    txn(upstream, "src1", ("insert", "t2", [{"id": 9, "v": "late"}]))
    ddl("CREATE INDEX iv ON src1.t2 (v)")                # routed: ON dst.t2
    upstream.flush()


STACK = StackSpec(pumps=1, namespace="filters")


def config(stack, tmp_path, **overrides):
    path = tmp_path / "drainer.toml"
    path.write_text(CONFIG)
    return load_drainer_config(path, {"initial-commit-ts": stack.start_ts,
                                      "addr": "127.0.0.1:0", "detect-interval": 30,
                                      **overrides})


def test_every_rule_into_mysql_then_into_files(stack, tmp_path):
    up_db, down_db, cluster, upstream = stack
    started = stack.started
    workload(upstream)
    # bank: only bank.accounts passes (do-table), and a do-table rule cannot pass
    # CREATE DATABASE bank (as in TiDB Binlog), so the database is made by hand
    query(down_db, "CREATE DATABASE bank")
    drainer = Drainer.start(config(stack, tmp_path, **{
        "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
        "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
        "syncer.worker-count": 2}), registry=cluster.registry)
    started.append(drainer)
    drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
    status = drainer.status()
    assert status["state"] == "running", status

    assert tables(down_db) == {"shop.orders", "shop.stock", "shop.keep1", "shop.items_v2",
                               "bank.accounts", "dst.t2"}
    # keep-history: the delete and the TRUNCATE are not applied; the update is
    assert query(down_db, "SELECT id, v FROM shop.orders ORDER BY id") == (
        (1, "v1"), (2, "new"), (3, "v3"))
    # ignore-sql dropped ADD COLUMN aaa, ADD COLUMN bbb went through
    assert [c[0] for c in query(down_db, "SHOW COLUMNS FROM shop.orders")] == ["id", "v", "bbb"]
    # frozen: the update and the ALTER TABLE (ADD INDEX) are not applied
    assert query(down_db, "SELECT v FROM shop.stock WHERE id = 2") == (("v2",),)
    assert [r[2] for r in query(down_db, "SHOW INDEX FROM shop.stock")] == ["PRIMARY"]
    # keep-table: DROP TABLE skipped, the rows stay
    assert len(query(down_db, "SELECT * FROM shop.keep1")) == 3
    # routing: rows, ALTER and the late row with the new column land in items_v2
    assert query(down_db, "SELECT id, v, c FROM shop.items_v2 ORDER BY id") == query(
        up_db, "SELECT id, v, c FROM shop.items ORDER BY id")
    assert query(down_db, "SELECT id, v FROM dst.t2 ORDER BY id") == query(
        up_db, "SELECT id, v FROM src1.t2 ORDER BY id")
    assert "iv" in [r[2] for r in query(down_db, "SHOW INDEX FROM dst.t2")]
    assert len(query(down_db, "SELECT * FROM bank.accounts")) == 3
    drainer.stop()

    # the file sink: the same choices, and records carry the routed names
    data_dir = tmp_path / "files"
    drainer = Drainer.start(config(stack, tmp_path, **{"syncer.db-type": "file",
                                                "data-dir": str(data_dir)}),
                            registry=cluster.registry)
    started.append(drainer)
    drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
    stats = WalkStats()
    recs = [pb.Binlog.FromString(p) for _, p in walk(data_dir / "binlog"
                                                     if (data_dir / "binlog").exists()
                                                     else data_dir, stats=stats)]
    events = {(e.schema_name, e.table_name, e.tp) for r in recs if r.tp == pb.DML
              for e in r.dml_data.events}
    names = {(s, t) for s, t, _ in events}
    assert names == {("shop", "orders"), ("shop", "stock"), ("shop", "keep1"),
                     ("shop", "items_v2"), ("bank", "accounts"), ("dst", "t"), ("dst", "t2")}
    assert ("shop", "orders", pb.Delete) not in events
    assert ("shop", "stock", pb.Update) not in events
    assert ("shop", "items_v2", pb.Delete) in events
    ddls = [r.ddl_query.decode() for r in recs if r.tp == pb.DDL]
    assert "CREATE DATABASE `dst`;" in ddls
    assert "use `dst`; RENAME TABLE `dst`.`t` TO `dst`.`t2`;" in ddls
    assert not any("aaa" in q or "TRUNCATE" in q or "keep1" in q and "DROP" in q
                   for q in ddls), ddls
    assert not any("other" in q or "src_tmp" in q or "log" in q or "scratch" in q
                   for q in ddls), ddls
    drainer.stop()
    started.remove(drainer)

    # the Parquet lake: the same choices, the files and DDLs under the routed names
    lake = tmp_path / "lake"
    drainer = Drainer.start(config(stack, tmp_path, **{"syncer.db-type": "parquet",
                                                "data-dir": str(lake)}),
                            registry=cluster.registry)
    started.append(drainer)
    drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
    manifest = read_manifest(lake)
    changes = {}
    for f in manifest.files:
        for r in pq.read_table(lake / f["path"]).to_pylist():
            changes.setdefault((f["database"], f["table"]), []).append(r)
    assert set(changes) == {("shop", "orders"), ("shop", "stock"), ("shop", "keep1"),
                            ("shop", "items_v2"), ("bank", "accounts"), ("dst", "t"),
                            ("dst", "t2")}
    ops = {(key, r["op"]) for key, rs in changes.items() for r in rs}
    assert (("shop", "orders"), "delete") not in ops
    assert (("shop", "stock"), "update") not in ops
    assert (("shop", "items_v2"), "delete") in ops
    items = {}
    for r in changes["shop", "items_v2"]:  # replayed: the upstream's shop.items
        if r["op"] != "insert":
            items.pop(r["before"]["id"])
        if r["op"] != "delete":
            items[r["after"]["id"]] = (r["after"]["v"], r["after"].get("c"))
    assert sorted((k, *v) for k, v in items.items()) == sorted(
        query(up_db, "SELECT id, v, c FROM shop.items"))
    lake_ddls = [(d["database"], d["table"], d["query"]) for d in manifest.ddls]
    assert any(db == "dst" and "RENAME TABLE `dst`.`t` TO `dst`.`t2`" in q
               for db, _, q in lake_ddls), lake_ddls
    assert any(t == "items_v2" and "ADD COLUMN c" in q for _, t, q in lake_ddls), lake_ddls
    assert not any("aaa" in q or "TRUNCATE" in q or "keep1" in q and "DROP" in q
                   or db in ("other", "src_tmp", "src1") or t in ("log", "scratch")
                   for db, t, q in lake_ddls), lake_ddls
