"""Recovery mode's decision and checkpoint row against a real MariaDB (no Ray).

``recover_if_needed`` reads the checkpoint table's only row (the cluster id is unknown
without the registry) and must save the recovered checkpoint into *that* row: a new
``clusterID = 0`` row would leave the task's own row inconsistent. The relay records
are applied through reparo's apply path, in safe mode.
"""

from __future__ import annotations

import json

from tidb_binlog.drainer.apply.dml import DML, DMLType, Txn
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import MySQLCheckpointStore
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay import RelayLog
from tidb_binlog.drainer.relay.recover import recover_if_needed
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig


def run(server, sql, args=None):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def test_recovery_runs_only_without_the_upstream_and_saves_into_the_tasks_row(
        mariadb_factory, tmp_path):
    down = mariadb_factory("down")
    ds = DownstreamConfig(host=down.host, port=down.port, user=down.user,
                          password=down.password)
    run(down, "CREATE DATABASE shop")
    run(down, "CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
    run(down, "INSERT INTO shop.t VALUES (1, 'half')")  # a piece of txn 20 was applied
    store = MySQLCheckpointStore(ds, 7101)
    store.save(Checkpoint(10, consistent=False, schema_version=3))
    store.close()
    relay = RelayLog(tmp_path / "relay")
    relay.append([(20, Txn(20, (DML("shop", "t", DMLType.INSERT, {"id": 1, "v": "a"}),
                                DML("shop", "t", DMLType.INSERT, {"id": 2, "v": "b"}))), 4)])
    relay.close()
    settings = TaskSettings(cluster_id=1, worker_count=2, downstream=ds,
                            relay_dir=str(tmp_path / "relay"))

    assert recover_if_needed(settings, lambda: None) is None  # the upstream answers
    assert run(down, "SELECT id, v FROM shop.t") == ((1, "half"),)

    summary = recover_if_needed(settings, lambda: "no registry actor")
    assert (summary.from_ts, summary.to_ts, summary.records, summary.rows) == (10, 20, 1, 2)
    assert run(down, "SELECT id, v FROM shop.t ORDER BY id") == ((1, "a"), (2, "b"))
    [(cluster, text)] = run(down, "SELECT clusterID, checkPoint FROM tidb_binlog.checkpoint")
    saved = json.loads(text)
    assert cluster == 7101 and saved["consistent"] is True
    assert (saved["commitTS"], saved["schema-version"]) == (20, 4)
    assert recover_if_needed(settings, lambda: "no registry actor") is None  # consistent now
