"""End to end on a real local Ray: upstream MariaDB → pump client → 2 PumpActors → drainer
actors → downstream MariaDB, then a full comparison of the tables."""

from __future__ import annotations

import pytest

from cluster.drainer import Drainer
from tidb_binlog.config import load_drainer_config
from tidb_binlog.testing.stack import StackSpec

pytestmark = pytest.mark.timeout(600)


def table_rows(server, database, table, order_by="1"):
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM `{database}`.`{table}` ORDER BY {order_by}")
            return cur.fetchall()
    finally:
        conn.close()


# Not the default namespace: the drainer must find the PumpActors through the registry
# client's namespace (else it pulls them over gRPC, several times slower).
STACK = StackSpec(pumps=2, namespace="e2e-cluster")


def drainer_config(stack, workers=4, **extra):
    downstream = stack.down_db
    overrides = {"syncer.to.host": downstream.host, "syncer.to.port": downstream.port,
                 "syncer.to.user": downstream.user, "syncer.to.password": downstream.password,
                 "syncer.worker-count": workers, "syncer.txn-batch": 20,
                 "initial-commit-ts": stack.start_ts}
    overrides.update(extra)
    return load_drainer_config(None, overrides)


def test_dml_and_ddl_replicate_in_commit_order(stack):
    up_db, down_db, cluster, upstream = stack
    upstream.ddl("CREATE DATABASE shop")
    upstream.ddl("CREATE TABLE shop.users (id BIGINT PRIMARY KEY, name VARCHAR(32), "
                 "amount DECIMAL(10,2), uk INT, UNIQUE KEY uk (uk))")
    drainer = Drainer.start(drainer_config(stack), registry=cluster.registry)
    try:
        with upstream.session("shop") as s:
            for i in range(30):
                txn = s.begin()
                txn.insert("users", [{"id": i, "name": f"n{i}", "amount": f"{i}.50", "uk": i}])
                if i % 3 == 0 and i:
                    txn.update("users", {"name": f"u{i}"}, "id = %s", (i - 1,))
                if i % 5 == 4:
                    txn.delete("users", "id = %s", (i - 2,))
                txn.commit()
            upstream.ddl("ALTER TABLE shop.users ADD COLUMN note VARCHAR(10) DEFAULT 'x'")
            txn = s.begin()
            # swap unique keys of two rows inside one transaction
            txn.update("users", {"uk": -1}, "id = %s", (1,))
            txn.update("users", {"uk": 1}, "id = %s", (4,))
            txn.update("users", {"uk": 4}, "id = %s", (1,))
            txn.insert("users", [{"id": 100, "name": "late", "amount": "1.00", "uk": 100,
                                  "note": "hi"}])
            txn.commit()
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert table_rows(down_db, "shop", "users") == table_rows(up_db, "shop", "users")
        status = drainer.status()
        assert status["state"] == "running" and status["applied_rows"] > 30
        assert status["routed_batches"] > 0  # exactly-once: the keeper routed the rows
        assert status["pump_feeds"] == {n: "actor" for n in status["pumps"]}, status
        assert len(status["pumps"]) == 2
    finally:
        result = drainer.stop()
    assert result["consistent"] is True


def test_a_checkpoint_database_of_its_own_is_where_the_task_saves_and_resumes(
        stack, mariadb_factory):
    """``[syncer.to.checkpoint]`` host/port/user/password name another server (TiDB
    Binlog's separate checkpoint database): the checkpoint row is saved there, never in
    the downstream, and a restarted task resumes from it (nothing lost, nothing twice)."""
    up_db, down_db, cluster, upstream = stack
    ckpt = mariadb_factory("ckpt")
    upstream.ddl("CREATE DATABASE ck")
    upstream.ddl("CREATE TABLE ck.t (id INT PRIMARY KEY, v INT)")
    extra = {"syncer.to.checkpoint.host": ckpt.host, "syncer.to.checkpoint.port": ckpt.port,
             "syncer.to.checkpoint.user": ckpt.user,
             "syncer.to.checkpoint.password": ckpt.password}

    def write(ids):
        with upstream.session("ck") as s:
            for i in ids:
                txn = s.begin()
                txn.insert("t", [{"id": i, "v": i}])
                txn.commit()
        upstream.flush()

    def checkpoint_rows(server):
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.tables WHERE "
                            "table_schema = 'tidb_binlog' AND table_name = 'checkpoint'")
                if not cur.fetchone()[0]:
                    return None
                cur.execute("SELECT checkPoint FROM tidb_binlog.checkpoint")
                return [row[0] for row in cur.fetchall()]
        finally:
            conn.close()

    for ids in (range(20), range(20, 40)):  # the second run resumes from the saved row
        drainer = Drainer.start(drainer_config(stack, **extra), registry=cluster.registry)
        try:
            write(ids)
            drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        finally:
            result = drainer.stop()
        assert result["consistent"] is True
        saved = checkpoint_rows(ckpt)
        assert saved and f'"commitTS":{result["commit_ts"]}' in saved[0].replace(" ", ""), \
            (saved, result)
        assert checkpoint_rows(down_db) is None  # the downstream holds no checkpoint table
    assert table_rows(down_db, "ck", "t") == table_rows(up_db, "ck", "t")
