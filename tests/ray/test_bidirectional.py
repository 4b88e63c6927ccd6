"""Bidirectional replication end to end on a real local Ray with real MariaDB servers:
two clusters A and B (each a TiDB emulator over its own MariaDB, its own registry/TSO and
pump), drainer A→B writing through B's emulated TiDB and drainer B→A through A's, both
with ``loopback-control`` and the same ``channel-id``. Both sides write (to different
rows) while the drainers run: no loop (every echo is dropped, the mark rows stop moving,
no row is applied twice) and both sides converge to the same rows. Every binlog reaches
the keepers by reference here (``large-binlog-bytes = 1``): the loop verdicts are read
from the pumps in ranges."""

from __future__ import annotations

import uuid

import pytest

from cluster.drainer import Drainer
from cluster.launch import LocalCluster
from tidb_binlog.config import load_drainer_config
from tidb_binlog.upstream import Upstream

pytestmark = pytest.mark.timeout(600)

CHANNEL = 3
ROWS = 30  # per side


def query(server, sql):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def drainer_config(target_db, target_namespace, initial_ts):
    return load_drainer_config(None, {
        "syncer.to.host": target_db.host, "syncer.to.port": target_db.port,
        "syncer.to.user": target_db.user, "syncer.to.password": target_db.password,
        "syncer.to.emulated-tidb-registry": target_namespace,
        "syncer.loopback-control": True, "syncer.channel-id": CHANNEL,
        "syncer.worker-count": 2, "syncer.txn-batch": 4, "initial-commit-ts": initial_ts,
        # a worker's downstream transaction (up to 4 rows + the mark) that comes back
        # with more than 3 row changes gets its loop verdict before its first chunk
        # (how many batch that full is depends on timing: not asserted)
        "syncer.txn-chunk-rows": 3,
        # every Commit binlog reaches the keeper by reference (read from the PumpActor in
        # ranges), so every loop verdict here is taken from a byte source: the mark rows
        # read by range from the prewrite value's walk, never the payload whole
        "syncer.large-binlog-bytes": 1,
        "detect-interval": 30, "addr": "127.0.0.1:0"})


def writes(up, base: int) -> None:
    """Inserts, updates and deletes of this side's own rows (ids base+1..base+ROWS)."""
    with up.session("shop") as s:
        for i in range(1, ROWS + 1):
            with s.begin() as t:
                t.insert("t", [{"id": base + i, "v": f"n{i}", "n": 0}])
        for i in range(1, ROWS + 1, 3):
            with s.begin() as t:
                t.execute("UPDATE t SET v = %s, n = n + 1 WHERE id = %s", (f"u{i}", base + i))
        with s.begin() as t:
            t.delete("t", "id = %s", (base + 2,))
    up.flush()


@pytest.fixture
def two_clusters(ray_local, mariadb_factory, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    sides = []
    try:
        for name in ("a", "b"):
            db = mariadb_factory(name)
            namespace = f"bidi-{name}-{suffix}"
            cluster = LocalCluster(tmp_path / name, pumps=1, upstream_params=db.params(),
                                   namespace=namespace).start()
            up = Upstream(db.params(), cluster.pump_client(), cluster.get_ts)
            # the same schema on both sides, made before replication starts (DDL is not
            # marked: with DDL flowing both ways one direction would set sync-ddl = false)
            up.ddl("CREATE DATABASE shop")
            up.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16), n INT NOT NULL)")
            sides.append((db, namespace, cluster, up))
        yield sides
    finally:
        for _, _, cluster, up in sides:
            up.close()
            cluster.stop()


def test_two_clusters_replicate_into_each_other_without_loop(two_clusters, ray_local):
    (a_db, a_ns, a, up_a), (b_db, b_ns, b, up_b) = two_clusters
    ab = Drainer.start(drainer_config(b_db, b_ns, a.get_ts()), registry=a.registry)
    try:
        ba = Drainer.start(drainer_config(a_db, a_ns, b.get_ts()), registry=b.registry)
    except BaseException:
        ab.stop()
        raise
    try:
        writes(up_a, 0)
        writes(up_b, 1000)

        def settle():
            """Both checkpoints past a timestamp taken now, twice over: the second round
            covers the echoes the first round's writes made on the other side."""
            for _ in range(2):
                ab.wait_for_checkpoint(a.get_ts(), timeout_s=300)
                ba.wait_for_checkpoint(b.get_ts(), timeout_s=300)

        settle()
        sql = "SELECT id, v, n FROM shop.t ORDER BY id"
        rows_a, rows_b = query(a_db, sql), query(b_db, sql)
        marks_sql = "SELECT id, channel_id, val FROM retl._drainer_repl_mark ORDER BY id"
        marks = (query(a_db, marks_sql), query(b_db, marks_sql))
        settle()  # nothing may move any more: a loop would keep both sides writing
        assert (query(a_db, marks_sql), query(b_db, marks_sql)) == marks
        assert query(a_db, sql) == rows_a and query(b_db, sql) == rows_b
        status = (ab.status(), ba.status())
        assert [s["state"] for s in status] == ["running", "running"], status
        # each drainer applied exactly its own side's row changes (30 inserts, 10 updates,
        # 1 delete): an echo not dropped would be applied again by the other drainer
        applied = [s["applied_rows"] for s in status]
        assert applied == [ROWS + len(range(1, ROWS + 1, 3)) + 1] * 2, status
        # every transaction (each side's 41, and the echoes) by reference, none read whole
        for drainer in (ab, ba):
            refs = ray_local.get(drainer.keeper.ref_stats.remote(), timeout=60)
            assert refs["refs"] >= ROWS + len(range(1, ROWS + 1, 3)) + 1, refs
            assert refs["whole"] == 0, refs
    finally:
        ab.stop()
        ba.stop()

    # converged: both sides hold both sides' rows, each once, updated once
    assert rows_a == rows_b
    expected = []
    for base in (0, 1000):
        for i in range(1, ROWS + 1):
            if i == 2:
                continue
            updated = (i - 1) % 3 == 0
            expected.append((base + i, f"u{i}" if updated else f"n{i}", 1 if updated else 0))
    assert list(rows_a) == expected
    # the mark rows: one per worker of the channel on each side, val bounded by the
    # transactions that drainer applied (val 1 at start, +1 per downstream transaction)
    for side in marks:
        assert {(w, ch) for w, ch, _ in side} == {(0, CHANNEL), (1, CHANNEL)}
        assert sum(val for _, _, val in side) <= 2 + ROWS + ROWS // 3 + 1 + 1
    # the mark table is the drainers' own: never in either upstream catalog's user data
    # twice, and no transaction was applied twice (an echo would bump n past 1)
    assert max(n for _, _, n in rows_a) == 1
