"""The driver of tests/ray/test_multinode.py: a multi-node Ray cluster on this machine.

Run as a separate process because it owns its Ray (``ray.cluster_utils.Cluster``: a
head and worker nodes, each a raylet of its own), which cannot share a process with the
session's local Ray. Reads ``{"work_dir", "upstream", "downstream"}`` (JSON) on stdin,
prints progress lines and, last, ``RESULT <json>``; any failed check raises (exit 1).

The cluster: the head holds the registry (pinned there) and the task's merger (pinned
to the submitting driver's node), a worker node offers ``drainer`` (the task's keeper,
coordinator and SQL workers, placed by ``submit(resources=...)``), others offer
``pump-a`` / ``pump-b`` (one pump each). Under a steady
write load through the pump client it kills pump-a's node (SIGKILL, no graceful stop),
checks that Ray keeps the pump's restart pending rather than failing it, brings a node
with ``pump-a`` back (the same machine, so the same data dir), checks the pump reopened
its data, then adds a node with ``pump-c`` and a third pump, and waits until the task
has everything; a pause and resume places the task's actors the same way again. The
test process compares upstream and downstream.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import ray
from ray.cluster_utils import Cluster as RayCluster

from cluster.api import Cluster
from cluster.registry import get_or_create_registry
from tidb_binlog.drainer.pipeline.names import pump_actor_name
from tidb_binlog.errors import UpstreamError
from tidb_binlog.upstream import Upstream
from tidb_binlog.upstream.workload import retryable

NAMESPACE = "multinode-test"
TASK = "mn"
MB = 1024 * 1024
# A killed node is declared dead after about period x threshold (Ray's default ~15 s).
SYSTEM_CONFIG = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3,
                 "health_check_initial_delay_ms": 1000}


def say(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def wait_for(predicate, what: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.3)


def node_of(actor) -> str:
    """The Ray node id the actor runs on (asked inside the actor)."""
    return ray.get(actor.__ray_call__.remote(
        lambda self: ray.get_runtime_context().get_node_id()), timeout=60)


def actor_state(name: str) -> str:
    actor = ray.get_actor(name, namespace=NAMESPACE)
    info = ray._private.state.actors(actor._actor_id.hex())  # private: test only
    return info["State"]


def answers(actor, timeout_s: float = 2.0) -> bool:
    try:
        ray.get(actor.address.remote(), timeout=timeout_s)
        return True
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError,
            ray.exceptions.ActorUnavailableError):
        return False


def check_task_placement(head: str, drainer_node: str) -> None:
    assert node_of(ray.get_actor(f"{TASK}-merger", namespace=NAMESPACE)) == head
    for role in ("keeper", "coordinator", "worker-0", "worker-1"):
        actor = ray.get_actor(f"{TASK}-{role}", namespace=NAMESPACE)
        assert node_of(actor) == drainer_node, f"{TASK}-{role} is not on the drainer node"


class Load:
    """One session inserting a row per transaction until stopped; retryable upstream
    errors (a pump outage during the Prewrite) are retried, any other one is kept and
    re-raised by :meth:`stop`."""

    def __init__(self, upstream: Upstream):
        self.upstream = upstream
        self.committed = 0
        self.retries = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self.upstream.session("shop") as s:
                i = 0
                while not self._stop.is_set():
                    try:
                        txn = s.begin()
                        txn.insert("t", [{"id": i, "v": f"v{i}"}])
                        txn.commit()
                    except UpstreamError as exc:
                        if not retryable(exc):
                            raise
                        self.retries += 1
                        time.sleep(0.05)
                        continue
                    i += 1
                    self.committed = i
                    time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - handed to stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        if self.error is not None:
            raise self.error
        assert not self._thread.is_alive(), "the load thread did not stop"


def main() -> None:
    args = json.load(sys.stdin)
    work = args["work_dir"]
    up, down = args["upstream"], args["downstream"]
    store = 80 * MB
    rc = RayCluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False,
        "object_store_memory": store, "_system_config": SYSTEM_CONFIG})
    upstream = load = client = None
    try:
        nodes = {r: rc.add_node(num_cpus=1, resources={r: 1}, object_store_memory=store)
                 for r in ("drainer", "pump-a", "pump-b")}
        ray.init(address=rc.address, namespace=NAMESPACE, log_to_driver=False)
        head = ray.get_runtime_context().get_node_id()
        registry = get_or_create_registry(os.path.join(work, "registry"), namespace=NAMESPACE,
                                          resources={"node:__internal_head__": 0.001})
        api = Cluster(registry, NAMESPACE)
        pumps_dir = os.path.join(work, "pumps")
        assert api.start_pumps(2, pumps_dir, upstream=up,
                               resources=[{"pump-a": 1}, {"pump-b": 1}]) == ["pump-0", "pump-1"]
        pump0 = ray.get_actor(pump_actor_name("pump-0"), namespace=NAMESPACE)
        pump1 = ray.get_actor(pump_actor_name("pump-1"), namespace=NAMESPACE)
        assert node_of(pump0) == nodes["pump-a"].node_id
        assert node_of(pump1) == nodes["pump-b"].node_id
        say("pumps placed: pump-0 on pump-a's node, pump-1 on pump-b's")

        client = api.pump_client()
        upstream = Upstream(up, client, api.get_ts)
        upstream.ddl("CREATE DATABASE shop")
        upstream.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
        task = api.submit(TASK, to=down, worker_count=2, initial_commit_ts=0,
                          resources={"drainer": 0.01},
                          overrides={"addr": "127.0.0.1:0", "detect-interval": 30})
        check_task_placement(head, nodes["drainer"].node_id)
        say("task submitted: its merger on the head, the other actors on the drainer node")

        load = Load(upstream)
        wait_for(lambda: load.committed >= 30 or load.error, "the load to commit")
        task.wait_synced(timeout=120)
        before = ray.get(pump0.status.remote(), timeout=30).max_commit_ts
        assert before > 0

        # -- pump-a's node dies under load: the pump waits for its resource ---------------
        rc.remove_node(nodes.pop("pump-a"), allow_graceful=False)
        state = wait_for(lambda: (s := actor_state("pump-0")) != "ALIVE" and s,
                         "Ray to notice pump-a's node is gone", timeout_s=90)
        say("pump-a's node killed; pump-0 is", state)
        time.sleep(3)  # the load keeps writing (to pump-1) meanwhile
        state = actor_state("pump-0")
        assert state in ("RESTARTING", "PENDING_CREATION"), \
            f"pump-0 is {state}: Ray gave up instead of waiting for a node with pump-a"
        assert not answers(pump0), "pump-0 answers with no node offering pump-a"

        # -- the machine comes back: same resource, same data dir ----------------------------
        committed_while_down = load.committed
        nodes["pump-a"] = rc.add_node(num_cpus=1, resources={"pump-a": 1},
                                      object_store_memory=store)
        wait_for(lambda: answers(pump0, 5.0), "pump-0 to restart on the new pump-a node")
        assert node_of(pump0) == nodes["pump-a"].node_id
        st = ray.get(pump0.status.remote(), timeout=30)
        assert st.node_id == "pump-0" and st.max_commit_ts >= before, (st, before)
        batch, _ = ray.get(pump0.pull.remote(0, 1 << 20, 0.0), timeout=60)
        assert batch and batch[0][0] <= before, "pump-0 lost the binlogs it stored"
        say("pump-0 back on the new pump-a node with its data (max commit ts",
            st.max_commit_ts, ">=", before, ")")

        # -- a new machine with a new pump joins under load -----------------------------------
        nodes["pump-c"] = rc.add_node(num_cpus=1, resources={"pump-c": 1},
                                      object_store_memory=store)
        api.start_pump("pump-2", pumps_dir, upstream=up, resources={"pump-c": 1})
        pump2 = ray.get_actor(pump_actor_name("pump-2"), namespace=NAMESPACE)
        assert node_of(pump2) == nodes["pump-c"].node_id
        joined = load.committed
        wait_for(lambda: load.committed >= joined + 30 or load.error,
                 "more writes after pump-2 joined")
        load.stop()
        upstream.flush()
        st = task.wait_synced(timeout=240)
        assert st.state == "running" and st.error is None, st
        assert set(st.pumps) == {"pump-0", "pump-1", "pump-2"}, st.pumps
        say("synced with pumps", st.pumps)
        task.pause()
        task.resume()
        check_task_placement(head, nodes["drainer"].node_id)
        task.wait_synced(timeout=120)
        say("paused and resumed: placed as submitted")
        print("RESULT " + json.dumps({"committed": load.committed, "retries": load.retries,
                                      "committed_before_comeback": committed_while_down,
                                      "pumps": list(st.pumps)}), flush=True)
    finally:
        if load is not None:
            load._stop.set()
        if upstream is not None:
            upstream.close()
        if client is not None:
            client.close()
        ray.shutdown()
        rc.shutdown()


if __name__ == "__main__":
    main()
