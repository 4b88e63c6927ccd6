"""SqlWorkerActor on a real local Ray against a real MariaDB: object-ref batches, restart."""

from __future__ import annotations

import itertools
import time

import pytest

from actors.syncer_workers import start_sql_worker
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig, RetryPolicy
from tidb_binlog.drainer.sinks.mysql.loader import Ack, LoaderConfig

_cluster_ids = itertools.count(5000)


def rows(server, db, sql):
    conn = server.connect(db, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def parts(db, start_ts, ids):
    t = TableSchema.build(db, "t", ["id", "v"], ["id"])
    log = TableSchema.build(db, "log", ["id"])
    return [(start_ts + i, (DML(db, "t", DMLType.INSERT, {"id": k, "v": k * 10}, None, t),
                            DML(db, "log", DMLType.INSERT, {"id": k}, None, log)))
            for i, k in enumerate(ids)]


def call_after_restart(ray, method, *args, timeout_s=60.0):
    """Call until the restarted actor answers (calls are not retried by Ray)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(method.remote(*args), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_execute_object_ref_and_survive_restart(ray_local, mariadb, fresh_database,
                                                new_incarnation):
    ray = ray_local
    db = fresh_database()
    ds = DownstreamConfig(host=mariadb.host, port=mariadb.port, user=mariadb.user,
                          password=mariadb.password)
    config = LoaderConfig(worker=2, cluster_id=next(_cluster_ids), txn_batch=4,
                          retry=RetryPolicy(max_elapsed_s=30))
    worker = start_sql_worker(ds, config)
    try:
        assert ray.get(worker.begin.remote(7), timeout=60) == 0  # the coordinator's reset
        ddl = DDL(db, "t", "CREATE TABLE t (id INT PRIMARY KEY, v INT)", 100)
        ack = ray.get(worker.execute_ddl.remote(ddl, 7), timeout=60)
        assert ack.max_commit_ts == 100
        ray.get(worker.execute.remote([DDL(db, "log", "CREATE TABLE log (id INT)", 101)], 7))

        first = parts(db, 200, range(1, 11))
        ack = ray.get(worker.execute.remote(ray.put(first), 7), timeout=60)   # a resolved ref
        assert isinstance(ack, Ack) and ack.worker == 2 and ack.parts == 10 and ack.rows == 20
        assert ack.commit_ts == tuple(range(200, 210)) and ack.skipped == 0
        second = parts(db, 300, range(11, 16))
        ack = ray.get(worker.execute.remote([ray.put(second)], 7), timeout=60)  # a nested ref
        assert ack.max_commit_ts == 304
        assert ray.get(worker.progress.remote()) == 304
        pid = ray.get(worker.pid.remote())

        ray.kill(worker, no_restart=False)
        new_incarnation(worker, pid)
        assert call_after_restart(ray, worker.progress) == 304   # reloaded, not remembered
        # a call sent in the epoch before the restart is refused (the ones lost with the
        # crash would be missing), until the coordinator's reset starts a new epoch
        late = parts(db, 500, [17])
        with pytest.raises(PipelineReset, match="before this process was told of a reset"):
            ray.get(worker.execute.remote(late, 7), timeout=60)
        assert ray.get(worker.begin.remote(8), timeout=60) == 304
        # the coordinator resends what it never saw acked: nothing is applied twice
        ack = ray.get(worker.execute.remote(ray.put(second + parts(db, 400, [16])), 8),
                      timeout=60)
        assert ack.skipped == 5 and ack.rows == 2 and ack.max_commit_ts == 400
        assert rows(mariadb, db, "SELECT COUNT(*), COUNT(DISTINCT id) FROM log") == ((16, 16),)
        assert rows(mariadb, db, "SELECT SUM(v) FROM t") == ((sum(range(1, 17)) * 10,),)
        text = ray.get(worker.metrics.remote()).decode()
        assert 'binlog_drainer_event_total{type="Insert"} 2.0' in text
        assert "binlog_drainer_execute_duration_time_count" in text
    finally:
        ray.kill(worker)
