"""Helpers shared by the drainer service and operations Ray tests (one small task
on a LocalCluster: its config, downstream rows, polling, a 1-row-per-txn writer)."""

from __future__ import annotations

import time

from tidb_binlog.config import load_drainer_config

__all__ = ["drainer_config", "rows", "wait_until", "write"]


def drainer_config(downstream, **extra):
    overrides = {"syncer.to.host": downstream.host, "syncer.to.port": downstream.port,
                 "syncer.to.user": downstream.user, "syncer.to.password": downstream.password,
                 "syncer.worker-count": 2, "initial-commit-ts": 0, "detect-interval": 30,
                 "addr": "127.0.0.1:0"}
    overrides.update(extra)
    return load_drainer_config(None, overrides)


def rows(server, table):
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {table} ORDER BY 1")
            return cur.fetchall()
    finally:
        conn.close()


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
