"""Actor logs on a real Ray: a pump's and a replication task's actors write their lines
to Ray's session logs stamped with their node id (``pump-0``, ``<task>-<role>``), a DDL
line carries its commit_ts as a field, and the downstream password of a started task
appears in no file of the session's logs."""

from __future__ import annotations

import os
import re

import pytest
from drainer_helpers import SHOP, rows, wait_until, write

from cluster.api import connect

pytestmark = [pytest.mark.timeout(600)]

SECRET = "Zq-s3cret-4417"


STACK = SHOP


def _session_logs(ray) -> dict[str, str]:
    logs = os.path.join(ray._private.worker._global_node.get_session_dir_path(),  # private
                        "logs")
    out = {}
    for dirpath, _, files in os.walk(logs):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    out[path] = f.read().decode("utf-8", "replace")
            except OSError:
                pass  # a socket, or a file rotated away meanwhile
    return out


def test_actor_lines_carry_node_ids_and_no_password(stack, ray_local):
    ray = ray_local
    up_db, down_db, cluster, upstream = stack
    conn = down_db.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE USER 'binlog'@'%%' IDENTIFIED BY %s", (SECRET,))
        cur.execute("GRANT ALL ON *.* TO 'binlog'@'%'")  # no args: no %-escaping
    conn.close()

    api = connect(namespace=cluster.namespace)
    task = api.submit("logs", {
        "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
        "syncer.to.user": "binlog", "syncer.to.password": SECRET,
        "syncer.worker-count": 1, "initial-commit-ts": stack.start_ts, "detect-interval": 30,
        "addr": "127.0.0.1:0"})
    try:
        write(upstream, 0, 3)
        upstream.ddl("CREATE TABLE shop.t2 (id INT PRIMARY KEY)")
        task.wait_synced(timeout=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")

        def lines(pattern: str) -> list[str]:
            return [line for text in _session_logs(ray).values()
                    for line in text.splitlines() if re.search(pattern, line)]

        assert wait_until(lambda: lines(r"\[node=pump-0\] "), what="a pump-0 line")
        assert wait_until(lambda: lines(r"\[node=logs-merger\] "), what="a merger line")
        # the DDL's line: the worker's node id, and its commit_ts as a field at the end
        assert wait_until(lambda: lines(r"\[node=logs-worker-0\] .*DDL applied at commit_ts "
                                        r"\d+: CREATE TABLE .*t2.* commit_ts=\d+$"),
                          what="the worker's DDL line")
    finally:
        task.remove()
    leaked = [path for path, text in _session_logs(ray).items() if SECRET in text]
    assert not leaked, f"the downstream password is in {leaked}"
