"""The relay log end to end: kill -9 of the whole task, pumps and registry mid-apply, then
``tidb-binlog drainer`` in recovery mode brings the downstream to the upstream's state at
the relayed checkpoint.

A task with ``[syncer.relay] log-dir``, exactly-once off and ``txn-batch = 2`` applies
9-row upstream transactions as several downstream transactions on 2 workers, so a kill
leaves some of them half applied (``consistent = false``). A trigger on the downstream
table slows each row change, so the kill lands while the workers are behind. Every
pipeline actor, the pump and the registry are SIGKILLed at once and marked not to
restart. The recovery run (the CLI, on the same Ray, no registry) applies the relay log
and exits 0; the downstream then equals the upstream as of the checkpoint it saved
(the writer's own record of each committed transaction), with ``consistent: true``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from drainer_helpers import drainer_config, query, shop_stack, wait_until

from cluster.drainer import Drainer
from tidb_binlog.binlogfile import walk
from tidb_binlog.drainer.translate.pb import record_commit_ts

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
TXNS = 250


@pytest.fixture
def stack(mariadb_factory, tmp_path):
    yield from shop_stack(mariadb_factory, tmp_path)


def write_workload(upstream, txns: int) -> list[tuple[int, dict, list]]:
    """``txns`` transactions of 6 inserts, 2 updates, 1 delete; per transaction its
    ``(commit_ts, rows set, ids deleted)`` (the upstream as the writer knows it)."""
    log, live, next_id = [], [], 0
    with upstream.session("shop") as s:
        for n in range(txns):
            txn = s.begin()
            new = {next_id + i: f"n{n}-{i}" for i in range(6)}
            next_id += 6
            txn.insert("t", [{"id": k, "v": v} for k, v in new.items()])
            changed, deleted = dict(new), []
            if len(live) > 4:
                for k in (live[0], live[len(live) // 2]):
                    txn.update("t", {"v": f"u{n}"}, "id = %s", (k,))
                    changed[k] = f"u{n}"
                gone = live.pop(1)
                txn.delete("t", "id = %s", (gone,))
                deleted.append(gone)
            log.append((txn.commit(), changed, deleted))
            live.extend(new)
    upstream.flush()
    return log


def upstream_at(log, ts: int) -> list[tuple]:
    state: dict[int, str] = {}
    for commit_ts, changed, deleted in log:
        if commit_ts > ts:
            break
        state.update(changed)
        for k in deleted:
            state.pop(k, None)
    return sorted(state.items())


def kill_everything(ray, drainer: Drainer, cluster) -> None:
    """SIGKILL every pipeline actor, the pump and the registry at once; no restarts."""
    from ray._private.state import actors  # the GCS actor table (no dashboard needed)

    handles = [drainer.merger, drainer.keeper, drainer.coordinator, *drainer.workers,
               *cluster.pumps.values(), cluster.registry.actor]
    pids = [actors(actor_id=h._actor_id.hex())["Pid"] for h in handles]
    assert all(pids), f"every actor to kill has a live process: {pids}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for h in handles:
        ray.kill(h, no_restart=True)


def checkpoint(down_db) -> dict:
    return json.loads(query(down_db, "SELECT checkPoint FROM tidb_binlog.checkpoint")[0][0])


def test_recovery_from_the_relay_log_after_kill_9_of_task_pumps_and_registry(
        ray_local, stack, tmp_path):
    up_db, down_db, cluster, upstream = stack
    relay = tmp_path / "relay"
    cfg = drainer_config(down_db, **{"syncer.relay.log-dir": str(relay),
                                     "syncer.relay.max-file-size": 8192,
                                     "syncer.exactly-once": False, "syncer.txn-batch": 2})
    drainer = Drainer.start(cfg, registry=cluster.registry, save_interval_s=0.3)
    wait_until(lambda: query(
        down_db, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'shop' "
                 "AND TABLE_NAME = 't'"), what="shop.t downstream")
    for event in ("INSERT", "UPDATE", "DELETE"):
        query(down_db, f"CREATE TRIGGER shop.slow_{event.lower()} BEFORE {event} ON shop.t "
                       "FOR EACH ROW SET @slow = SLEEP(0.004)")
    log = write_workload(upstream, TXNS)
    last_ts = log[-1][0]

    def behind_with_a_file_gone():
        cp = drainer.checkpoint_ts()
        first = sorted(relay.glob("binlog-*"))[0].name
        return cp > log[20][0] and not first.startswith("binlog-0000000000000000-") and cp
    cp_at_kill = wait_until(behind_with_a_file_gone, timeout_s=120,
                            what="a saved checkpoint past a relay file")
    kill_everything(ray_local, drainer, cluster)
    assert cp_at_kill < last_ts, "the kill came after the task caught up: no backlog"
    saved = checkpoint(down_db)
    assert saved["consistent"] is False
    for event in ("insert", "update", "delete"):
        query(down_db, f"DROP TRIGGER shop.slow_{event}")

    config = tmp_path / "drainer.toml"
    config.write_text(f"""
data-dir = "{tmp_path / 'drainer'}"
registry = "{cluster.namespace}"
[syncer]
worker-count = 2
txn-batch = 2
exactly-once = false
[syncer.relay]
log-dir = "{relay}"
[syncer.to]
host = "{down_db.host}"
port = {down_db.port}
user = "{down_db.user}"
password = "{down_db.password}"
""")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, "-m", "tidb_binlog.cli.main", "drainer", "--config", str(config),
         "--ray-address", ray_local.get_runtime_context().gcs_address],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "relay log recovery: applied" in out and "consistent" in out

    relayed = [record_commit_ts(p) for _, p in walk(relay)]
    after = checkpoint(down_db)
    assert after["consistent"] is True
    assert after["commitTS"] == relayed[-1] >= saved["commitTS"]
    assert query(down_db, "SELECT id, v FROM shop.t ORDER BY id") == \
        tuple(upstream_at(log, after["commitTS"]))
