"""The file sink when another pipeline actor dies mid-load: the merger, the PbKeeperActor
or a pump is killed (``ray.kill(actor, no_restart=False)``, so Ray restarts it) while the
upstream writes. The pipeline replays from the sink's savepoint and the sink cuts its
files back to that savepoint first, so the files still hold every committed transaction
exactly once, in commit order, and replaying their row events gives the upstream's rows.

(The sink actor's own deaths, ``ray.kill`` and SIGKILL, are in test_file_sink.py.)"""

from __future__ import annotations

import time

import pytest
from test_file_sink import Writer, check_once_in_order, check_shop, file_config, read_records

from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from tidb_binlog.upstream import Upstream

pytestmark = pytest.mark.timeout(400)


@pytest.fixture
def stack(ray_local, mariadb_factory, tmp_path):
    up_db = mariadb_factory("up")
    cluster = LocalCluster(tmp_path / "cluster", pumps=2, upstream_params=up_db.params(),
                           namespace="file-sink-faults").start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    upstream.ddl("CREATE DATABASE shop")
    upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, name VARCHAR(32), "
                 "amount DECIMAL(10,2))")
    started: list[Drainer] = []
    yield up_db, cluster, upstream, started, tmp_path / "drainer"
    for drainer in started:  # a failed test leaves its task running
        drainer.stop()
    upstream.close()
    cluster.stop()


def wait_status(ray, drainer, ok, timeout_s: float = 180) -> dict:
    """Poll the task's status until ``ok(status)``, riding out restarting actors."""
    deadline = time.monotonic() + timeout_s
    st = None
    while True:
        try:
            st = drainer.status()
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.GetTimeoutError):
            st = None
        if st is not None:
            assert st["state"] != "failed", st["error"]
            if ok(st):
                return st
        assert time.monotonic() < deadline, f"the task did not get there: {st}"
        time.sleep(0.3)


@pytest.mark.parametrize("kind", ["merger", "keeper", "pump"])
def test_pipeline_actor_killed_mid_load_keeps_the_files_exact(stack, ray_local, kind):
    up_db, cluster, upstream, started, data_dir = stack
    # A long save interval: at the kill the files hold records above the savepoint, which
    # the replay writes again unless the sink cut them first.
    drainer = Drainer.start(file_config(data_dir), registry=cluster.registry,
                            save_interval_s=30.0)
    started.append(drainer)
    writer = Writer(upstream).start()
    try:
        writer.wait_txns(100)
        drainer.wait_for_checkpoint(writer.commit_tss[50], timeout_s=120)
        target = {"merger": drainer.merger, "keeper": drainer.keeper,
                  "pump": cluster.pumps["pump-0"]}[kind]
        ray_local.kill(target, no_restart=False)
        writer.wait_txns(len(writer.commit_tss) + 150)
    finally:
        writer.stop()
    upstream.flush()
    final_ts = cluster.get_ts()
    st = wait_status(ray_local, drainer, lambda s: s["checkpoint_commit_ts"] >= final_ts)
    if kind == "keeper":
        assert st["resets"] >= 1, st  # the merger noticed and replayed from the savepoint
    if kind in ("merger", "keeper"):
        assert st["trimmed_bytes"] > 0, st  # the replay started below what the files held
    result = drainer.stop()
    started.remove(drainer)
    assert result.get("consistent") is True, result
    recs = read_records(data_dir)
    check_once_in_order(recs, writer.commit_tss)
    check_shop(recs, up_db)
