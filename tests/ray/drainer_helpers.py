"""Helpers shared by the drainer service and operations Ray tests (one small task
on a LocalCluster: the stack, its config, downstream queries, polling, a
1-row-per-txn writer)."""

from __future__ import annotations

import time

from tidb_binlog.config import load_drainer_config
from tidb_binlog.testing.stack import StackSpec, TestStack

__all__ = ["SHOP", "SHOP_DDL", "drainer_config", "query", "rows", "wait_until", "write"]

SHOP_DDL = ("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
SHOP = StackSpec(pumps=1, ddl=SHOP_DDL)
"""The shop stack (``STACK = SHOP`` in a test module): one pump, and at each test's start
``shop.t (id INT PRIMARY KEY, v VARCHAR(16))`` through the upstream."""


def drainer_config(target, **extra):
    """A drainer.toml into ``target``: a :class:`TestStack` (its downstream, from the
    test's ``start_ts``) or a MariaDB server (from commit_ts 0)."""
    downstream = target.down_db if isinstance(target, TestStack) else target
    start = target.start_ts if isinstance(target, TestStack) else 0
    overrides = {"syncer.to.host": downstream.host, "syncer.to.port": downstream.port,
                 "syncer.to.user": downstream.user, "syncer.to.password": downstream.password,
                 "syncer.worker-count": 2, "initial-commit-ts": start, "detect-interval": 30,
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
