"""A task's record actor restarted by Ray (``ray.kill(no_restart=False)``, as when its
node dies) keeps a ``pause()`` and an ``update(worker_count=...)`` made before: it
reloads them from the registry's KV. Real Ray, real MariaDB, real pump."""

from __future__ import annotations

import pytest
from drainer_helpers import SHOP, rows, wait_until, write

from cluster.api import connect
from tidb_binlog.errors import UnavailableError

pytestmark = [pytest.mark.timeout(600)]


STACK = SHOP


def test_paused_and_updated_task_survives_a_restart_of_its_record(stack, ray_local):
    ray = ray_local
    up_db, down_db, cluster, upstream = stack
    api = connect(namespace=cluster.namespace)
    task = api.submit("rec", {
        "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
        "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
        "syncer.worker-count": 2, "initial-commit-ts": stack.start_ts, "detect-interval": 30,
        "addr": "127.0.0.1:0"})
    try:
        write(upstream, 0, 3)
        task.wait_synced(timeout=120)
        task.pause()
        assert task.update(worker_count=1).worker_count == 1

        record = ray.get_actor("rec-task", namespace=cluster.namespace)
        ray.kill(record, no_restart=False)

        def answers():
            try:
                return task.status()
            except UnavailableError:  # restarting
                return None

        st = wait_until(answers, timeout_s=120, what="the restarted record answers")
        assert st.state == "paused" and st.worker_count == 1

        write(upstream, 3, 3)
        task.resume()
        task.wait_synced(timeout=120)
        assert rows(down_db, "shop.t") == rows(up_db, "shop.t")
        names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["namespace"] == cluster.namespace}
        assert "rec-worker-0" in names and "rec-worker-1" not in names
    finally:
        task.remove()
