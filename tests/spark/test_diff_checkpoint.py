"""The diff at a running drainer's checkpoint ([diff] checkpoint-table): while a workload
writes the upstream emulator and a real drainer replicates, the diff reports equal (the
replication in flight is re-checked away), and a difference injected downstream under the
same running replication is still found, exactly."""

from __future__ import annotations

import threading

import pytest
from spark_helpers import db_config

from cluster.drainer import Drainer
from spark_on_ray import diff
from spark_on_ray.errors import SparkJobError
from tidb_binlog.config import load_drainer_config
from tidb_binlog.config.spark import DiffConfig, SparkJobConfig
from tidb_binlog.upstream import workload
from tidb_binlog.upstream.txn import Raw

pytestmark = pytest.mark.timeout(600)


def _cfg(up_db, down_db, tmp_path, **kw) -> SparkJobConfig:
    d = DiffConfig(tables=("shop",), chunk_size=100, leaf_size=16,
                   fix_sql_file=str(tmp_path / "fix.sql"),
                   checkpoint_table="tidb_binlog.checkpoint", recheck_rounds=40,
                   checkpoint_wait_s=120.0, **kw)
    return SparkJobConfig(upstream=db_config(up_db), downstream=db_config(down_db), diff=d)


def _writing(upstream, seed):
    """A thread running a bounded mixed workload on shop.sbtest; join() re-raises."""
    errors: list[BaseException] = []

    def work():
        try:
            workload.run(upstream, "mixed", sessions=2, ops=300, database="shop", seed=seed)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()

    def join():
        thread.join()
        assert not errors, errors

    return join


def test_diff_at_checkpoint_under_running_replication(spark_handle, stack, tmp_path):
    up_db, down_db, cluster, upstream = stack
    cfg = load_drainer_config(None, {
        "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
        "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
        "syncer.worker-count": 2, "initial-commit-ts": cluster.get_ts()})
    drainer = Drainer.start(cfg, registry=cluster.registry)
    try:
        upstream.ddl("CREATE DATABASE shop")
        for kind in ("mixed", "all_types"):
            workload.run(upstream, kind, sessions=2, ops=200, database="shop")
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=240)
        jcfg = _cfg(up_db, down_db, tmp_path)

        # A lag the first pass is sure to see: a downstream transaction holds the row the
        # upstream changes next, so the drainer cannot apply that change until the diff
        # starts re-checking (then the lock goes). Without the re-check, the row differs.
        lock = down_db.connect()
        with lock.cursor() as cur:
            cur.execute("SELECT MIN(id) FROM shop.sbtest")
            (row_id,), = cur.fetchall()
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM shop.sbtest WHERE id = %s FOR UPDATE", (row_id,))
        with upstream.session("shop") as s, s.begin() as t:
            t.update("sbtest", {"k": Raw("k + 1")}, "id = %s", (row_id,))
        upstream.flush()
        stages = []

        def progress(stage, done, total):
            stages.append(stage)
            if stage.startswith("re-check") and lock.open:
                lock.rollback()

        join = _writing(upstream, seed=3)
        try:
            result = diff.run(jcfg, handle=spark_handle, progress=progress)
        finally:
            join()
            lock.close()
        assert result.equal, [(t.name, t.diffs) for t in result.tables if not t.equal]
        assert result.unsettled == 0 and result.recheck_rounds >= 1
        assert "re-check at checkpoint 1" in stages
        assert {t.name for t in result.tables} == {"shop.sbtest", "shop.all_types"}

        # Differences injected downstream, in a table the workload keeps writing and in
        # one it leaves alone, are found under the same running replication.
        conn = down_db.connect(autocommit=True)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO shop.sbtest (id, k, c, pad) VALUES "
                        "(10000000, 1, 'injected', 'x')")
            cur.execute("DELETE FROM shop.all_types ORDER BY id LIMIT 1")
        conn.close()
        join = _writing(upstream, seed=4)
        try:
            result = diff.run(jcfg, handle=spark_handle)
        finally:
            join()
        by_name = {t.name: t for t in result.tables}
        sb, at = by_name["shop.sbtest"], by_name["shop.all_types"]
        assert [(x.kind, x.key()) for x in sb.diffs] == [("extra", (10000000,))]
        assert (at.missing, at.extra, at.changed) == (1, 0, 0)
        assert result.recheck_rounds >= 2 and result.unsettled == 0
    finally:
        drainer.stop()


def test_checkpoint_table_errors_are_clear(spark_handle, mariadb_pair, fresh_database,
                                           tmp_path):
    """A plain MariaDB upstream has no commit ts; a missing checkpoint table is named."""
    db = fresh_database(mariadb_pair.upstream, mariadb_pair.downstream)
    for server, v in ((mariadb_pair.upstream, 1), (mariadb_pair.downstream, 2)):
        conn = server.connect(db, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO t VALUES (1, {v})")
        conn.close()
    d = DiffConfig(tables=(db,), fix_sql_file=str(tmp_path / "fix.sql"),
                   checkpoint_table="tidb_binlog.checkpoint")
    jcfg = SparkJobConfig(upstream=db_config(mariadb_pair.upstream),
                          downstream=db_config(mariadb_pair.downstream), diff=d)
    with pytest.raises(SparkJobError, match=r"neither TiDB nor the emulator .* unset \[diff\] "
                       r"checkpoint-table"):
        diff.run(jcfg, handle=spark_handle)
    assert not (tmp_path / "fix.sql").exists()
