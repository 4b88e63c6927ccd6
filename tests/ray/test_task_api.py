"""The task API (cluster/api.py) on a real local Ray: a task submitted from one driver
(a subprocess that exits) is found from another (this test process) by name, observed
and controlled (status, lag, checkpoint, pause, resume, update, stop, remove), and two
tasks to two downstreams run side by side (the second with filters, a password and a
status that shows neither the password nor the filtered schema's rows). Its actors carry
the dashboard names, and every metric the Ray-export alert rules
(cluster/monitoring/binlog.ray.rules.yml) use is in Ray's Prometheus export under the
name they use. README.md's Python API example runs as written."""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
import yaml
from drainer_helpers import SHOP, query, rows, wait_until, write

from cluster.api import connect
from cluster.drainer import Drainer
from tidb_binlog.errors import ConfigError, UnavailableError

pytestmark = [pytest.mark.timeout(600)]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def task_keys(db) -> dict:
    return {"syncer.to.host": db.host, "syncer.to.port": db.port,
            "syncer.to.user": db.user, "syncer.to.password": db.password,
            "syncer.worker-count": 2, "initial-commit-ts": 0, "detect-interval": 30,
            "addr": "127.0.0.1:0"}


STACK = SHOP


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read()
    except OSError:
        return b""


RAY_RULES = os.path.join(REPO, "cluster", "monitoring", "binlog.ray.rules.yml")


def ray_rule_series() -> set[tuple[str, str]]:
    """``(series name, label matcher or "")`` of every selector in the Ray-export rules."""
    with open(RAY_RULES) as f:
        doc = yaml.safe_load(f)
    exprs = [r["expr"] for g in doc["groups"] for r in g["rules"]]
    return {(m.group(1), m.group(2) or "") for e in exprs
            for m in re.finditer(r"\b(ray_binlog_[a-z0-9_]+)(?:\{([^}]*)\})?", e)}


def missing_from_export(text: str, sources: dict[str, str]) -> list[str]:
    """The rules' selectors with no series in Ray's export ``text`` from the actor
    ``sources[pump|drainer]`` (each selector's label matchers must hold too)."""
    missing = []
    for name, matcher in sorted(ray_rule_series()):
        source = sources["pump" if name.startswith("ray_binlog_pump_") else "drainer"]
        needed = [f'source="{source}"', *(m.strip() for m in matcher.split(",") if m)]
        if not any(all(n in line for n in needed) for line in text.splitlines()
                   if line.startswith(name + "{")):
            missing.append(f"{name}{{{', '.join(needed)}}}")
    return missing


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
    # Every series the Ray-export alert rules select is there under the rules' name
    # (ray_binlog_*, tagged source=<actor>), with the rules' label matchers.
    port = ray._private.worker._global_node.metrics_export_port  # private: test only
    sources = {"pump": "pump-0", "drainer": "orders-merger"}
    missing: list[str] = []

    # ... and every gauge the mirrors set is there as ray_<its name> (counters' _total too)
    gauges = {(name, dict(tags)["source"]) for actor in ("pump-0", "orders-merger")
              for (name, tags) in ray.get(ray.get_actor(actor, namespace=ns)
                                          .mirrored_metrics.remote())}
    assert any(name.endswith("_total") for name, _ in gauges)

    def exported():
        text = _get(f"http://127.0.0.1:{port}/metrics").decode("utf-8", "replace")
        missing[:] = missing_from_export(text, sources) + sorted(
            f"ray_{name}{{source={source}}}" for name, source in gauges
            if not re.search(rf'^ray_{name}\{{[^}}]*source="{source}"', text, re.M))
        if missing:
            write(upstream, 1000 + len(polls), 1)   # keep the histograms observing
            polls.append(1)
        return not missing

    polls: list[int] = []
    assert len(ray_rule_series()) >= 6
    try:
        wait_until(exported, timeout_s=150, what="the alert rules' series in Ray's export")
    except AssertionError:
        raise AssertionError(f"not in Ray's Prometheus export: {missing}") from None

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

    # a second task to a second downstream, side by side: through a user with a
    # password, and filters= leaving out the schema "noise"
    down2 = mariadb_factory("down2")
    secret = "pw-Secr3t-4711"
    query(down2, f"CREATE USER 'copier'@'127.0.0.1' IDENTIFIED BY '{secret}'")
    query(down2, "GRANT ALL ON *.* TO 'copier'@'127.0.0.1'")
    keys = {**task_keys(down2), "syncer.to.user": "copier", "syncer.to.password": secret}
    with pytest.raises(ConfigError, match="exists"):
        api.submit("orders", keys)
    other = api.submit("copy", keys, worker_count=3, filters={
        "ignore-schemas": "INFORMATION_SCHEMA,PERFORMANCE_SCHEMA,mysql,noise"})
    assert sorted(t.name for t in api.tasks()) == ["copy", "orders"]
    upstream.ddl("CREATE DATABASE noise")
    upstream.ddl("CREATE TABLE noise.n (id INT PRIMARY KEY)")
    with upstream.session("noise") as s, s.begin() as txn:
        txn.insert("n", [{"id": 1}])
    write(upstream, 10, 5)
    st = other.wait_synced(timeout=120)
    task.wait_synced(timeout=120)
    assert rows(down2, "shop.t") == rows(up_db, "shop.t") == rows(down_db, "shop.t")
    assert rows(down_db, "noise.n") == ((1,),)            # "orders" has no filter
    assert query(down2, "SHOW DATABASES LIKE 'noise'") == ()
    # no password in the typed status nor on the drainer's HTTP /status
    assert secret not in repr(st) and secret not in repr(dataclasses.asdict(st))
    status_addr = Drainer.attach("copy", ns, 30).status_addr
    body = _get(f"http://{status_addr}/status")
    assert b"PumpPos" in body and secret.encode() not in body

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


def readme_python_api_block() -> str:
    """README.md's first Python block under "### Python API"."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    start = text.index("```python", text.index("### Python API")) + len("```python")
    return text[start:text.index("```", start)]


def test_readme_python_api_example_runs_as_written(ray_local, tmp_path, free_port):
    """The block runs as a new user runs it (``python example.py`` in a directory with
    ``config/``), as its own driver that exits, joined to this session's Ray through
    ``$RAY_ADDRESS`` (the README's ``address=None`` honours it) in a namespace of its
    own. It must print the synced status and the replicated rows and end cleanly: no
    traceback and no crash report from Ray's core worker at exit (the pump client it
    used is closed before Ray shuts down)."""
    ray = ray_local
    block = readme_python_api_block()
    namespace = f"readme-{os.getpid()}"
    assert block.count('namespace="tidb-binlog"') == 1
    (tmp_path / "example.py").write_text(
        block.replace('namespace="tidb-binlog"', f"namespace={namespace!r}"))
    shutil.copytree(os.path.join(REPO, "config"), tmp_path / "config")
    toml = tmp_path / "config" / "drainer.toml"
    text = toml.read_text()
    assert text.count('addr = "127.0.0.1:8249"') == 1  # a free port: tests run side by side
    toml.write_text(text.replace('addr = "127.0.0.1:8249"', f'addr = "127.0.0.1:{free_port()}"'))
    env = {**os.environ, "PYTHONPATH": REPO,
           "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    try:
        proc = subprocess.Popen([sys.executable, "example.py"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-4000:]
        assert "TaskStatus(name='shop-copy', state='running'" in out, out
        assert "((1, 'a'), (2, 'c'))" in out, out
        # the driver's own core log (where Ray's C++ side reports a crash at exit)
        session = ray._private.worker._global_node.get_session_dir_path()  # private: test only
        logs = glob.glob(os.path.join(session, "logs", f"python-core-driver-*_{proc.pid}.log"))
        assert logs, "the example driver's core log is missing"
        for text in [err, *(open(p, errors="replace").read() for p in logs)]:
            for crash in ("Traceback", "*** SIG", "Check failed", " F ", "FATAL"):
                assert crash not in text, text[-4000:]
        assert (tmp_path / "work" / "pump-0").is_dir()   # relative dirs: the driver's cwd
    finally:  # the registry and the pump are detached: they outlive the example's driver
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == namespace:
                ray.kill(ray.get_actor(actor["name"], namespace=namespace))
