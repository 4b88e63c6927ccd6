"""The task API (cluster/api.py) on a real local Ray: a task submitted from one driver
(a subprocess that exits) is found from another (this test process) by name, observed
and controlled (status, lag, checkpoint, pause, resume, update, stop, remove), and two
tasks to two downstreams run side by side. Its actors carry the dashboard names."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
from drainer_helpers import rows, shop_stack, wait_until, write

from cluster.api import connect
from tidb_binlog.errors import ConfigError, UnavailableError

pytestmark = [pytest.mark.timeout(600)]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def task_keys(db) -> dict:
    return {"syncer.to.host": db.host, "syncer.to.port": db.port,
            "syncer.to.user": db.user, "syncer.to.password": db.password,
            "syncer.worker-count": 2, "initial-commit-ts": 0, "detect-interval": 30,
            "addr": "127.0.0.1:0"}


@pytest.fixture
def stack(ray_local, mariadb_factory, tmp_path):
    yield from shop_stack(mariadb_factory, tmp_path)


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read()
    except OSError:
        return b""


def submit_from_another_driver(ray, namespace: str, name: str, keys: dict) -> None:
    """Submit ``name`` from a separate Python process that then exits."""
    script = textwrap.dedent(f"""
        from cluster.api import connect
        cluster = connect(address={ray.get_runtime_context().gcs_address!r},
                          namespace={namespace!r})
        task = cluster.submit({name!r}, {keys!r})
        print("submitted", task.status().state)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": REPO})
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert "submitted" in stdout
    # Ray warns (in the creating driver's core log) of an actor with max_restarts > 0 whose
    # constructor arguments live in the object store (handles, refs): a named task has none.
    session = ray._private.worker._global_node.get_session_dir_path()  # private: test only
    logs = glob.glob(os.path.join(session, "logs", f"python-core-driver-*_{proc.pid}.log"))
    assert logs, "the submitting driver's core log is missing"
    for path in logs:
        with open(path, errors="replace") as f:
            assert "constructor arguments in the object store" not in f.read()


def test_submit_from_one_driver_supervise_from_another_and_two_tasks_side_by_side(
        stack, mariadb_factory, ray_local):
    ray = ray_local
    up_db, down_db, cluster, upstream = stack
    ns = cluster.namespace
    submit_from_another_driver(ray, ns, "orders", task_keys(down_db))

    api = connect(namespace=ns)        # this driver: ray.init'ed in another namespace
    task = api.task("orders")          # found by name; its driver has exited
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["namespace"] == ns}
    assert {"orders-merger", "orders-keeper", "orders-coordinator", "orders-worker-0",
            "orders-worker-1", "orders-task", "pump-0"} <= names

    write(upstream, 0, 5)
    st = task.wait_synced(timeout=120)
    assert st.state == "running" and st.error is None and st.pumps == ("pump-0",)
    assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
    assert task.lag() is not None and task.checkpoint() >= st.checkpoint_ts

    # the pump's and the drainer's (workers' included) metrics, copied into
    # ray.util.metrics gauges tagged with the actor's dashboard name
    def mirrored(actor_name, prefix):
        values = ray.get(ray.get_actor(actor_name, namespace=ns).mirrored_metrics.remote())
        return {name: dict(tags) for (name, tags) in values if name.startswith(prefix)}

    drainer_metrics = wait_until(lambda: mirrored("orders-merger", "binlog_drainer_"),
                                 what="drainer metrics mirrored to Ray")
    assert {t["source"] for t in drainer_metrics.values()} == {"orders-merger"}
    wait_until(lambda: "binlog_drainer_checkpoint_tso" in mirrored("orders-merger", "binlog_"),
               what="the checkpoint gauge mirrored")
    assert wait_until(lambda: mirrored("pump-0", "binlog_pump_"),
                      what="pump metrics mirrored to Ray")
    assert wait_until(lambda: any(n.startswith("binlog_drainer_event") for n in
                                  mirrored("orders-merger", "binlog_drainer_")),
                      what="the SQL workers' metrics merged in")
    # ... and read back where Grafana reads them: Ray's Prometheus export on this node
    port = ray._private.worker._global_node.metrics_export_port  # private: test only
    wait_until(lambda: b"binlog_pump_" in _get(f"http://127.0.0.1:{port}/metrics"),
               timeout_s=90, what="pump metrics in Ray's Prometheus export")

    # Ray restarts a killed actor of the task from its settings alone (its creator is
    # gone): the coordinator finds its workers by name, the merger resets the pipeline.
    # Meanwhile a status poll answers "restarting", naming the actor, instead of raising.
    # ray.kill returns before the process dies (a poll right after it may reach the old
    # one), so the poll waits for Ray's control store to show the kill; a restart that
    # ends before a poll sees it is killed again (no timing is asserted).
    coordinator = ray.get_actor("orders-coordinator", namespace=ns)
    polled: list[str] = []

    def kill_coordinator():
        ray.kill(coordinator, no_restart=False)
        for _ in range(100):  # private: test only (the actor is not asked)
            if ray._private.state.actors(coordinator._actor_id.hex())["State"] != "ALIVE":
                return
            time.sleep(0.05)

    def seen_restarting():
        st = task.status(timeout=30)
        polled.append(st.state)
        if st.state == "restarting":
            return st
        assert st.state in ("running", "starting"), (st, polled)
        kill_coordinator()
        return None

    kill_coordinator()

    st = wait_until(seen_restarting, timeout_s=120, what="a restarting status")
    assert st.restarting.actor == "coordinator" and st.error is None
    assert st.restarting.name == "orders-coordinator" and st.restarting.since_s > 0
    assert st.worker_count == 2 and not st.ok
    write(upstream, 100, 3)
    task.wait_synced(timeout=180)
    assert rows(down_db, "shop.t") == rows(up_db, "shop.t")

    # pause: final checkpoint, actors gone, resumable from this driver
    cp = task.pause()
    assert cp >= st.checkpoint_ts
    assert task.status().state == "paused"
    assert "orders-merger" not in [a["name"] for a in
                                   ray.util.list_named_actors(all_namespaces=True)]
    write(upstream, 5, 5)
    task.resume()
    task.wait_synced(timeout=120)
    assert rows(down_db, "shop.t") == rows(up_db, "shop.t")

    # a second task to a second downstream, side by side
    down2 = mariadb_factory("down2")
    with pytest.raises(ConfigError, match="exists"):
        api.submit("orders", task_keys(down2))
    other = api.submit("copy", task_keys(down2), worker_count=3)
    assert sorted(t.name for t in api.tasks()) == ["copy", "orders"]
    write(upstream, 10, 5)
    other.wait_synced(timeout=120)
    task.wait_synced(timeout=120)
    assert rows(down2, "shop.t") == rows(up_db, "shop.t") == rows(down_db, "shop.t")

    # fewer workers: stop with the final checkpoint, restart with the new count
    assert other.update(worker_count=1).worker_count == 1
    write(upstream, 15, 5)
    other.wait_synced(timeout=120)
    assert rows(down2, "shop.t") == rows(up_db, "shop.t")

    task.stop()
    assert task.status().state == "stopped"
    task.remove()
    other.remove()
    assert api.tasks() == []
    with pytest.raises(UnavailableError, match="no replication task named 'orders'"):
        api.task("orders")
