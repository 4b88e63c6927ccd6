"""The file sink when another pipeline actor dies mid-load: the merger, the PbKeeperActor
or a pump is killed (``ray.kill(actor, no_restart=False)``, so Ray restarts it) while the
upstream writes. The pipeline replays from the sink's savepoint and the sink cuts its
files back to that savepoint first, so the files still hold every committed transaction
exactly once, in commit order, and replaying their row events gives the upstream's rows.

(The sink actor's own deaths, ``ray.kill`` and SIGKILL, are in test_file_sink.py.)"""

from __future__ import annotations

import time

import pytest
from test_file_sink import (
    SHOP_T_DDL,
    Writer,
    check_once_in_order,
    check_shop,
    file_config,
    read_records,
)

from cluster.drainer import Drainer
from tidb_binlog.testing.stack import StackSpec

pytestmark = pytest.mark.timeout(400)


STACK = StackSpec(pumps=2, namespace="file-sink-faults", downstream=False, ddl=SHOP_T_DDL)


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
    up_db, _, cluster, upstream = stack
    started, data_dir = stack.started, stack.data_dir
    # A long save interval: at the kill the files hold records above the savepoint, which
    # the replay writes again unless the sink cut them first.
    drainer = Drainer.start(file_config(stack), registry=cluster.registry,
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
