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

``exactly-once-chunks``: the same with exactly-once on and ``txn-chunk-rows = 100``, and
a 3000-row upstream transaction after the small ones: the kill lands between its
chunks (their one downstream transaction open, the last chunk not yet relayed). The
crash rolled that downstream transaction back, so recovery skips the unfinished
transaction (its relay records say its chunks were atomic) and saves the checkpoint
consistent at the last whole transaction before it: the downstream equals the
upstream there, with no row of the large transaction and nothing doubled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from drainer_helpers import SHOP, drainer_config, query, wait_until

from cluster.drainer import Drainer
from tidb_binlog.binlogfile import walk
from tidb_binlog.drainer.relay.record import record_chunk
from tidb_binlog.drainer.translate.pb import record_commit_ts

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
TXNS = 250
BIG_FIRST_ID = 1_000_000  # the large transaction's rows (exactly-once-chunks)
BIG_ROWS = 3000


STACK = SHOP


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


def write_big(upstream) -> int:
    """One upstream transaction of BIG_ROWS inserts; its commit_ts."""
    with upstream.session("shop") as s:
        txn = s.begin()
        txn.insert("t", [{"id": BIG_FIRST_ID + i, "v": "big"} for i in range(BIG_ROWS)])
        ts = txn.commit()
    upstream.flush()
    return ts


def chunks_open(down_db) -> bool:
    """The large transaction's downstream transaction is open with rows in it (the
    small transactions' units hold 9 rows at most)."""
    return query(down_db, "SELECT COUNT(*) FROM information_schema.INNODB_TRX "
                          "WHERE trx_rows_modified > 50")[0][0] > 0


@pytest.mark.parametrize("chunks", [False, True], ids=["causality", "exactly-once-chunks"])
def test_recovery_from_the_relay_log_after_kill_9_of_task_pumps_and_registry(
        ray_local, stack, tmp_path, chunks):
    up_db, down_db, cluster, upstream = stack
    relay = tmp_path / "relay"
    mode = ({"syncer.exactly-once": True, "syncer.txn-chunk-rows": 100} if chunks
            else {"syncer.exactly-once": False})
    cfg = drainer_config(stack, **{"syncer.relay.log-dir": str(relay),
                                     "syncer.relay.max-file-size": 8192,
                                     "syncer.txn-batch": 2, **mode})
    drainer = Drainer.start(cfg, registry=cluster.registry, save_interval_s=0.3)
    wait_until(lambda: query(
        down_db, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'shop' "
                 "AND TABLE_NAME = 't'"), what="shop.t downstream")
    for event in ("INSERT", "UPDATE", "DELETE"):
        query(down_db, f"CREATE TRIGGER shop.slow_{event.lower()} BEFORE {event} ON shop.t "
                       "FOR EACH ROW SET @slow = SLEEP(0.004)")
    log = write_workload(upstream, 60 if chunks else TXNS)
    big_ts = 0
    if chunks:  # after the small ones: the kill comes between its chunks
        big_ts = write_big(upstream)
        log.append((big_ts, {BIG_FIRST_ID + i: "big" for i in range(BIG_ROWS)}, []))
    last_ts = log[-1][0]

    def behind_with_a_file_gone():
        cp = drainer.checkpoint_ts()
        first = sorted(relay.glob("binlog-*"))[0].name
        return cp > log[20][0] and not first.startswith("binlog-0000000000000000-") and cp
    if chunks:
        wait_until(lambda: chunks_open(down_db), timeout_s=120,
                   what="the large transaction's open chunks downstream")
        cp_at_kill = drainer.checkpoint_ts()
    else:
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
exactly-once = {'true' if chunks else 'false'}
txn-chunk-rows = 100
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
    if chunks:
        # the kill came between the large transaction's chunks: its last one is not in
        # the relay log, and recovery skipped it (never committed downstream)
        last = record_chunk(list(walk(relay))[-1][1])
        assert (last.commit_ts, last.more, last.atomic) == (big_ts, True, True), last
        assert f"skipped the unfinished transaction(s) at commit_ts {big_ts}" in out
        whole = [ts for ts in relayed if ts != big_ts]
        # the last whole record, or the saved checkpoint when fake binlogs had moved it
        # past that record before the kill (it stays below the open transaction)
        assert after["commitTS"] == max(whole[-1], saved["commitTS"])
        assert after["commitTS"] < big_ts
        assert query(down_db, "SELECT COUNT(*) FROM shop.t WHERE id >= %s",
                     (BIG_FIRST_ID,))[0][0] == 0
    else:
        assert after["commitTS"] == max(relayed[-1], saved["commitTS"])
    assert query(down_db, "SELECT id, v FROM shop.t ORDER BY id") == \
        tuple(upstream_at(log, after["commitTS"]))
