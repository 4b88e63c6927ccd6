"""Drainer operations on a real local Ray with real pumps and MariaDB: the task stops when
the registry stops answering heartbeats; GET /metrics shows every series a run produces;
a restarted drainer pulls the tail of a pump that went offline after its checkpoint; a
task that crashed with 4 SQL workers and restarts with 2 loses no row."""

from __future__ import annotations

import sys
import time
import urllib.request

import pytest
from drainer_helpers import SHOP, drainer_config, query, rows, wait_until, write
from prometheus_client.parser import text_string_to_metric_families

from cluster.drainer import Drainer
from tidb_binlog.drainer.apply.causality import image_keys
from tidb_binlog.drainer.apply.dml import TableSchema
from tidb_binlog.drainer.apply.routing import Router
from tidb_binlog.errors import UnavailableError
from tidb_binlog.node import DRAINER, OFFLINE, PUMP

pytestmark = pytest.mark.timeout(300)

FAIL_HEARTBEATS_KEY = "test/drainer-heartbeats-fail"


class HeartbeatsFailWhenFlagged:
    """A registry client whose drainer record writes fail once the KV flag is set
    (everything else, the flag included, goes to the real registry)."""

    def __init__(self, inner):
        self.inner = inner

    def update_node(self, kind, status, *, force=False):
        if kind == DRAINER and self.inner.kv_get(FAIL_HEARTBEATS_KEY) == "1":
            raise UnavailableError("registry unreachable (test flag)")
        return self.inner.update_node(kind, status, force=force)

    def __getattr__(self, name):
        if name == "inner":  # not set yet while unpickling
            raise AttributeError(name)
        return getattr(self.inner, name)




STACK = SHOP


def test_the_task_fails_when_the_registry_stops_answering_heartbeats(stack):
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    up_db, down_db, cluster, upstream = stack
    registry = HeartbeatsFailWhenFlagged(cluster.registry)
    drainer = Drainer.start(drainer_config(stack), registry=registry)
    try:
        write(upstream, 0, 5)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        cluster.registry.kv_put(FAIL_HEARTBEATS_KEY, "1")
        # A streak shorter than 20 (HEARTBEAT_MAX_FAILURES) beats at 1 s keeps the task.
        time.sleep(5)
        assert drainer.task_state()["state"] == "running"
        cluster.registry.kv_put(FAIL_HEARTBEATS_KEY, "0")
        write(upstream, 5, 5)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        time.sleep(2)                                  # successful beats reset the count
        cluster.registry.kv_put(FAIL_HEARTBEATS_KEY, "1")
        state = wait_until(lambda: (st := drainer.task_state())["state"] == "failed" and st,
                           timeout_s=90, what="the task to fail")
        assert "did not answer 20 heartbeats in a row since" in state["error"]
        assert "Restart the task once the registry is back" in state["error"]
        assert state["error"].startswith("UnavailableError")
    finally:
        cluster.registry.kv_put(FAIL_HEARTBEATS_KEY, "0")
        result = drainer.stop()
    assert "heartbeats" in result["error"]
    assert rows(down_db, "shop.t") == rows(up_db, "shop.t")


def test_a_restarted_drainer_pulls_the_tail_of_a_pump_that_went_offline_after_its_checkpoint(
        stack):
    ray = pytest.importorskip("ray")
    up_db, down_db, cluster, upstream = stack
    cfg = drainer_config(stack)
    drainer = Drainer.start(cfg, registry=cluster.registry)
    try:
        write(upstream, 0, 5)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
    finally:
        result = drainer.stop(OFFLINE)      # closed: pumps no longer wait for this drainer
    assert result["consistent"] is True
    write(upstream, 5, 10)                  # stored by the pump only
    ray.get(cluster.pumps["pump-0"].close.remote())
    wait_until(lambda: cluster.registry.node(PUMP, "pump-0").state == OFFLINE,
               what="pump-0 offline")
    final_ts = cluster.registry.node(PUMP, "pump-0").max_commit_ts
    assert final_ts > result["commit_ts"]

    drainer = Drainer.start(cfg, registry=cluster.registry)   # from the old checkpoint
    try:
        drainer.wait_for_checkpoint(final_ts, timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        assert len(rows(down_db, "shop.t")) == 15
        wait_until(lambda: drainer.status()["pumps"] == [], what="pump-0 retired")
    finally:
        second = drainer.stop()
    assert second["consistent"] is True and second["commit_ts"] >= final_ts

    # Offline since before this checkpoint: not added (the merge would wait on it).
    drainer = Drainer.start(cfg, registry=cluster.registry)
    try:
        assert drainer.task_state()["state"] == "running"
        assert drainer.status()["pumps"] == []
    finally:
        drainer.stop()


def scrape(status_addr) -> dict:
    with urllib.request.urlopen(f"http://{status_addr}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_get_metrics_shows_every_series_a_run_with_a_ddl_produces(stack):
    up_db, down_db, cluster, upstream = stack
    drainer = Drainer.start(drainer_config(stack), registry=cluster.registry)
    try:
        write(upstream, 0, 10)
        upstream.ddl("ALTER TABLE shop.t ADD COLUMN w INT")
        with upstream.session("shop") as s:
            txn = s.begin()
            txn.update("t", {"v": "changed"}, "id < %s", (3,))
            txn.delete("t", "id >= %s", (8,))
            txn.commit()
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        # The heartbeat reads the saved checkpoint every second; the DDL forced a save.
        m = wait_until(lambda: (m := scrape(drainer.status_addr))
                       .get(("binlog_drainer_checkpoint_tso", ()), 0) > 0 and m,
                       what="checkpoint_tso")
    finally:
        drainer.stop()
    node = (("nodeID", "pump-0"),)
    must_be_positive = [
        ("binlog_drainer_pump_position", node),
        ("binlog_drainer_binlog_reach_duration_time_count", node),
        ("binlog_drainer_read_binlog_size_count", node),
        ("binlog_drainer_checkpoint_tso", ()),
        ("binlog_drainer_checkpoint_delay_seconds", ()),
        ("binlog_drainer_ddl_jobs_total", ()),
        ("binlog_drainer_execute_duration_time_count", ()),
        ("binlog_drainer_query_duration_time_count", (("type", "exec"),)),
        ("binlog_drainer_query_duration_time_count", (("type", "commit"),)),
        ("binlog_drainer_event_total", (("type", "Insert"),)),
        ("binlog_drainer_event_total", (("type", "Update"),)),
        ("binlog_drainer_event_total", (("type", "Delete"),)),
        ("binlog_drainer_event_total", (("type", "DDL"),)),
        ("binlog_drainer_event_total", (("type", "savepoint"),)),
    ]
    missing = [key for key in must_be_positive if not m.get(key, 0) > 0]
    assert missing == [], f"series absent or zero: {missing}"
    for name in ("merger_buffer", "syncer_input", "workers"):   # present; 0 when idle
        assert ("binlog_drainer_queue_size", (("name", name),)) in m
    assert ("binlog_drainer_disorder_binlog_count_total", ()) in m



T_SCHEMA = TableSchema.build("shop", "t", ["id", "v"], primary_key=["id"])


def worker_of(row_id: int, worker_count: int) -> int:
    """The SQL worker exactly-once routing gives shop.t's row ``row_id``."""
    return Router(worker_count).worker_for_key(
        image_keys(T_SCHEMA, "shop", "t", {"id": row_id})[0])


def test_a_crash_with_4_workers_and_a_restart_with_2_loses_no_row(stack):
    ray = pytest.importorskip("ray")
    up_db, down_db, cluster, upstream = stack
    later = range(100, 112)
    # Row `blocked` goes to worker 2 or 3 of 4; with 2 workers its rows go to worker
    # blocked - 2, whose old progress row (worker blocked - 2 of 4) is ahead of it.
    blocked = next(i for i in range(20) if worker_of(i, 4) in (2, 3)
                   and any(worker_of(j, 4) == worker_of(i, 4) - 2 for j in later))
    slow = worker_of(blocked, 4)
    query(down_db, "SET GLOBAL innodb_lock_wait_timeout = 600")   # the worker waits, not fails
    drainer = Drainer.start(drainer_config(stack, **{"syncer.worker-count": 4}),
                            registry=cluster.registry)
    lock = None
    try:
        write(upstream, 0, 20)
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        # Hold row `blocked` downstream: its worker stops at the update below while
        # the other three go on applying (and moving their progress rows) past it.
        lock = down_db.connect()
        lock.begin()
        with lock.cursor() as cur:
            cur.execute("SELECT * FROM shop.t WHERE id = %s FOR UPDATE", (blocked,))
        with upstream.session("shop") as s:
            txn = s.begin()
            txn.update("t", {"v": "changed"}, "id = %s", (blocked,))
            txn.commit()
        write(upstream, 100, 12)
        applied = sorted(i for i in later if worker_of(i, 4) != slow)
        wait_until(lambda: [r[0] for r in query(down_db, "SELECT id FROM shop.t WHERE id >= 100 "
                                                         "ORDER BY id")] == applied,
                   what="the other workers to apply the later rows")
        progress = dict(query(down_db, "SELECT worker, commitTS FROM tidb_binlog.worker_progress"))
        assert progress[slow - 2] > progress[slow]    # the state a 2-worker replay trips on
    finally:
        for actor in [drainer.merger, drainer.keeper, drainer.coordinator, *drainer.workers]:
            ray.kill(actor, no_restart=True)          # a crash: no consistent checkpoint
        if lock is not None:
            lock.rollback()
            lock.close()
    text = query(down_db, "SELECT checkPoint FROM tidb_binlog.checkpoint")[0][0]
    assert '"consistent":false' in text

    drainer = Drainer.start(drainer_config(stack, **{"syncer.worker-count": 2}),
                            registry=cluster.registry)
    try:
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        assert len(rows(down_db, "shop.t")) == 32
        assert query(down_db, "SELECT workerCount, safeModeUntilTS > 0 FROM "
                              "tidb_binlog.worker_layout") == ((2, 1),)
        assert {w for (w,) in query(down_db, "SELECT worker FROM "
                                             "tidb_binlog.worker_progress")} <= {0, 1}
    finally:
        result = drainer.stop()
    assert result["consistent"] is True
