"""Helpers shared by the drainer service and operations Ray tests (one small task
on a LocalCluster: the stack, its config, downstream queries, polling, a
1-row-per-txn writer)."""

from __future__ import annotations

import time

from cluster.launch import LocalCluster
from tidb_binlog.config import load_drainer_config
from tidb_binlog.upstream import Upstream

__all__ = ["shop_stack", "drainer_config", "query", "rows", "wait_until", "write"]


def shop_stack(mariadb_factory, tmp_path, **cluster_kw):
    """Fixture body: upstream and downstream MariaDB, a LocalCluster with one pump, an
    Upstream with ``shop.t (id INT PRIMARY KEY, v VARCHAR(16))``; yields
    ``(up_db, down_db, cluster, upstream)`` and tears them down."""
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params(),
                           **cluster_kw).start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    upstream.ddl("CREATE DATABASE shop")
    upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
    yield up_db, down_db, cluster, upstream
    upstream.close()
    cluster.stop()


def drainer_config(downstream, **extra):
    overrides = {"syncer.to.host": downstream.host, "syncer.to.port": downstream.port,
                 "syncer.to.user": downstream.user, "syncer.to.password": downstream.password,
                 "syncer.worker-count": 2, "initial-commit-ts": 0, "detect-interval": 30,
                 "addr": "127.0.0.1:0"}
    overrides.update(extra)
    return load_drainer_config(None, overrides)


def query(server, sql, args=None):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def rows(server, table):
    return query(server, f"SELECT * FROM {table} ORDER BY 1")


def wait_until(predicate, timeout_s=60.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def write(upstream, first, count):
    with upstream.session("shop") as s:
        for i in range(first, first + count):
            txn = s.begin()
            txn.insert("t", [{"id": i, "v": f"v{i}"}])
            txn.commit()
    upstream.flush()
