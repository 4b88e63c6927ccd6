"""End to end on a real local Ray: upstream MariaDB → pump client → 2 PumpActors → drainer
actors → downstream MariaDB, then a full comparison of the tables."""

from __future__ import annotations

import pytest

from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from tidb_binlog.config import load_drainer_config
from tidb_binlog.upstream import Upstream

pytestmark = pytest.mark.timeout(600)


def table_rows(server, database, table, order_by="1"):
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM `{database}`.`{table}` ORDER BY {order_by}")
            return cur.fetchall()
    finally:
        conn.close()


def drainer_config(downstream, workers=4, **extra):
    overrides = {"syncer.to.host": downstream.host, "syncer.to.port": downstream.port,
                 "syncer.to.user": downstream.user, "syncer.to.password": downstream.password,
                 "syncer.worker-count": workers, "syncer.txn-batch": 20,
                 "initial-commit-ts": 0}
    overrides.update(extra)
    return load_drainer_config(None, overrides)


@pytest.fixture
def stack(ray_local, mariadb_factory, tmp_path):
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    # Not the default namespace: the drainer must find the PumpActors through the
    # registry client's namespace (else it pulls them over gRPC, several times slower).
    cluster = LocalCluster(tmp_path / "cluster", pumps=2, upstream_params=up_db.params(),
                           namespace="e2e-cluster").start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    yield up_db, down_db, cluster, upstream
    upstream.close()
    cluster.stop()


def test_dml_and_ddl_replicate_in_commit_order(stack):
    up_db, down_db, cluster, upstream = stack
    upstream.ddl("CREATE DATABASE shop")
    upstream.ddl("CREATE TABLE shop.users (id BIGINT PRIMARY KEY, name VARCHAR(32), "
                 "amount DECIMAL(10,2), uk INT, UNIQUE KEY uk (uk))")
    drainer = Drainer.start(drainer_config(down_db), registry=cluster.registry)
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
