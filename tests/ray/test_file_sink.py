"""The file sink end to end on a real local Ray: upstream MariaDB → 2 PumpActors → merger →
PbKeeperActor → FileSinkActor → binlog files, read back with the binlogfile reader and
decoded as pb: every committed transaction is there once, in commit order, and replaying
the row events gives the upstream's rows; the large transaction among them reaches the pb
keeper by reference and the files in record parts. Also with the sink actor killed mid-load
(``ray.kill`` and a real SIGKILL): nothing lost, nothing written twice."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cluster.drainer import Drainer
from tidb_binlog.binlogfile import WalkStats, walk
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.checkpoint.store import FileCheckpointStore
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.translate.pb import decode_columns
from tidb_binlog.errors import UnavailableError, UpstreamError
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.testing.stack import StackSpec
from tidb_binlog.upstream import workload

pytestmark = pytest.mark.timeout(400)


SHOP_T_DDL = ("CREATE DATABASE shop",
              "CREATE TABLE shop.t (id INT PRIMARY KEY, name VARCHAR(32), amount DECIMAL(10,2))")
STACK = StackSpec(pumps=2, namespace="file-sink", downstream=False, ddl=SHOP_T_DDL)


def file_config(stack, **extra):
    """db-type file into the test's ``data_dir``, from its ``start_ts``."""
    overrides = {"syncer.db-type": "file", "data-dir": str(stack.data_dir),
                 "initial-commit-ts": stack.start_ts, "addr": "127.0.0.1:0"}
    overrides.update(extra)
    return load_drainer_config(None, overrides)


class Writer:
    """Inserts, updates and deletes on shop.t from a thread; keeps every commit_ts."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.commit_tss: list[int] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def _run(self):
        try:
            with self.upstream.session("shop") as s:
                i = 0
                while not self._stop.is_set():
                    txn = s.begin()
                    try:
                        txn.insert("t", [{"id": i, "name": f"n{i}",
                                          "amount": f"{i % 1000}.25"}])
                        if i % 3 == 2:
                            txn.update("t", {"name": f"u{i}", "amount": "0.50"}, "id = %s",
                                       (i - 1,))
                        if i % 5 == 4:
                            txn.delete("t", "id = %s", (i - 3,))
                        ts = txn.commit()
                    except UpstreamError as exc:
                        # a DDL of another table ran meanwhile (SchemaChanged), a lock
                        # conflict: rolled back whole, so the same transaction runs again
                        txn.rollback()
                        if not exc.retryable:
                            raise
                        continue
                    if ts:
                        self.commit_tss.append(ts)
                    i += 1
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def wait_txns(self, n: int, timeout_s: float = 120):
        deadline = time.monotonic() + timeout_s
        while len(self.commit_tss) < n:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"writer stuck at {len(self.commit_tss)}"
            time.sleep(0.05)

    def stop(self):
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def read_records(directory) -> list:
    stats = WalkStats()
    recs = [pb.Binlog.FromString(payload) for _, payload in walk(directory, stats=stats)]
    assert stats.corrupt == 0, stats.corruptions
    return recs


def check_once_in_order(recs, commit_tss):
    tss = [r.commit_ts for r in recs]
    assert tss == sorted(set(tss)), "a commit_ts is missing order or written twice"
    missing = set(commit_tss) - set(tss)
    assert not missing, f"{len(missing)} committed transactions are not in the files"


def replay(recs, schema: str, table: str, key: str) -> dict:
    """The table's rows by ``key`` after applying every row event of the files."""
    rows: dict = {}
    for r in recs:
        for ev in r.dml_data.events if r.tp == pb.DML else ():
            if (ev.schema_name, ev.table_name) != (schema, table):
                continue
            cols = decode_columns(ev.row)
            old = {c.name: c.value[1] for c in cols}
            if ev.tp == pb.Insert:
                rows[old[key]] = old
            elif ev.tp == pb.Update:
                new = {c.name: c.changed[1] for c in cols}
                del rows[old[key]]
                rows[new[key]] = new
            else:
                del rows[old[key]]
    return rows


def upstream_rows(up_db, sql):
    conn = up_db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def check_shop(recs, up_db):
    got = {k: (v["name"], v["amount"]) for k, v in replay(recs, "shop", "t", "id").items()}
    want = {i: (n.encode(), str(a).encode())
            for i, n, a in upstream_rows(up_db, "SELECT id, name, amount FROM shop.t")}
    assert got == want


def test_workload_through_two_pumps_into_files(stack, ray_local):
    up_db, _, cluster, upstream = stack
    started, data_dir = stack.started, stack.data_dir
    upstream.ddl("CREATE DATABASE wl")
    # small chunks: the large transaction below reaches the files in record parts; and
    # a small large-binlog-bytes: it reaches the pb keeper by reference, read from its
    # PumpActor in ranges (the workload's transactions are all far smaller)
    drainer = Drainer.start(file_config(stack, **{"syncer.txn-chunk-rows": 25,
                                                     "syncer.large-binlog-bytes": 8 << 10}),
                            registry=cluster.registry)
    started.append(drainer)
    writer = Writer(upstream).start()
    try:
        workload.run(upstream, "all_types", database="wl", sessions=2, ops=60, seed=3)
        writer.wait_txns(150)
    finally:
        writer.stop()
    with upstream.session("shop") as s:  # 300 inserts and 100 updates in one transaction
        txn = s.begin()
        txn.insert("t", [{"id": 10**6 + i, "name": f"big{i}", "amount": "7.00"}
                         for i in range(300)])
        txn.update("t", {"amount": "8.00"}, "id >= %s AND id < %s", (10**6, 10**6 + 100))
        large_ts = txn.commit()
    upstream.ddl("ALTER TABLE shop.t ADD COLUMN note VARCHAR(8) DEFAULT 'x'")
    upstream.flush()
    drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=180)
    st = drainer.status()
    assert st["state"] == "running" and len(st["pumps"]) == 2 and st["resets"] == 0, st
    assert st["parts"] >= 400 // 25, st  # the large one came in parts, assembled whole
    refs = ray_local.get(drainer.keeper.ref_stats.remote(), timeout=60)
    assert refs["refs"] == 1 and refs["whole"] == 0 and refs["reads"] >= 2, refs
    final = drainer.stop()
    started.remove(drainer)
    assert final["consistent"] is True
    saved = FileCheckpointStore(data_dir).load()
    assert saved.consistent and saved.commit_ts == final["commit_ts"]

    recs = read_records(data_dir)
    check_once_in_order(recs, [*writer.commit_tss, large_ts])
    check_shop(recs, up_db)
    (large,) = [r for r in recs if r.commit_ts == large_ts]
    assert len(large.dml_data.events) == 400
    ddls = [r.ddl_query for r in recs if r.tp == pb.DDL]
    assert b"use `shop`; ALTER TABLE shop.t ADD COLUMN note VARCHAR(8) DEFAULT 'x';" in ddls
    assert b"CREATE DATABASE wl;" in ddls

    got = replay(recs, "wl", "all_types", "id")
    want = upstream_rows(up_db, "SELECT id, t, tu, s, m, i, iu, bi, bu, de, da, dt, vc, tx "
                                "FROM wl.all_types")
    assert len(got) == len(want) == 60
    for (rid, *values) in want:
        row = got[rid]
        t, tu, s, m, i, iu, bi, bu, de, da, dt, vc, tx = values
        assert [row[c] for c in ("t", "tu", "s", "m", "i", "iu", "bi", "bu")] == \
            [t, tu, s, m, i, iu, bi, bu]
        assert row["de"] == str(de).encode()
        assert row["da"] == da.isoformat().encode()
        assert row["dt"] == dt.strftime("%Y-%m-%d %H:%M:%S.%f").encode()
        assert row["vc"] == (vc.encode() if vc is not None else None)
        assert row["tx"] == tx.encode()


def test_sink_actor_killed_mid_load_loses_and_duplicates_nothing(stack, ray_local):
    up_db, _, cluster, upstream = stack
    started, data_dir = stack.started, stack.data_dir
    # A long save interval: at each kill the files hold records above the savepoint.
    drainer = Drainer.start(file_config(stack), registry=cluster.registry,
                            save_interval_s=30.0)
    started.append(drainer)
    writer = Writer(upstream).start()
    try:
        writer.wait_txns(100)
        drainer.wait_for_checkpoint(writer.commit_tss[50], timeout_s=120)
        ray_local.kill(drainer.coordinator, no_restart=False)       # Ray's kill
        writer.wait_txns(len(writer.commit_tss) + 100)
        pid = _sink_pid(ray_local, drainer)
        _wait_checkpoint(ray_local, drainer, writer.commit_tss[-20])
        os.kill(pid, signal.SIGKILL)                                 # kill -9
        writer.wait_txns(len(writer.commit_tss) + 100)
    finally:
        writer.stop()
    upstream.flush()
    st = _wait_checkpoint(ray_local, drainer, cluster.get_ts())
    assert st["resets"] >= 2, st
    assert st["trimmed_bytes"] > 0, st  # the restarted sink dropped what it wrote after the savepoint
    drainer.stop()
    started.remove(drainer)
    recs = read_records(data_dir)
    check_once_in_order(recs, writer.commit_tss)
    check_shop(recs, up_db)


def _sink_pid(ray, drainer, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while True:  # the sink restarted after the first kill
        try:
            return ray.get(drainer.coordinator.pid.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            assert time.monotonic() < deadline, "the sink actor did not come back"
            time.sleep(0.3)


def _wait_checkpoint(ray, drainer, commit_ts: int, timeout_s: float = 180) -> dict:
    """``Drainer.wait_for_checkpoint``, riding out the sink actor's restart."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            st = drainer.status()
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                PipelineReset, UnavailableError):  # an actor restarting: ask again
            st = None
        if st is not None:
            assert st["state"] != "failed", st["error"]
            if st["checkpoint_commit_ts"] >= commit_ts:
                return st
        assert time.monotonic() < deadline, f"checkpoint stuck below {commit_ts}: {st}"
        time.sleep(0.3)
