"""The upstream workloads end to end on a real local Ray: upstream MariaDB → 2 PumpActors
→ drainer actors → downstream MariaDB, then every table compared (ordered full rows and
a checksum, :func:`tidb_binlog.compare.compare_databases`).

The workloads run concurrently in one database while the drainer applies them:
all MySQL type families, a table without a primary key whose unique key is nullable,
random DML with primary-key changes and unique-key swaps, DDL interleaved with DML,
sysbench mixed DML, and one large transaction (10 000 rows by default, 100 000 in
the slow variant).
"""

from __future__ import annotations

import threading

import pytest

from cluster.drainer import Drainer
from tidb_binlog.compare import compare_databases
from tidb_binlog.config import load_drainer_config
from tidb_binlog.testing.stack import StackSpec
from tidb_binlog.upstream import workload

pytestmark = pytest.mark.timeout(600)

DATABASE = "wl"


STACK = StackSpec(pumps=2)


def drainer_config(stack, **extra):
    downstream = stack.down_db
    overrides = {"syncer.to.host": downstream.host, "syncer.to.port": downstream.port,
                 "syncer.to.user": downstream.user, "syncer.to.password": downstream.password,
                 "syncer.worker-count": 4, "syncer.txn-batch": 100,
                 "initial-commit-ts": stack.start_ts, "addr": "127.0.0.1:0"}
    overrides.update(extra)
    return load_drainer_config(None, overrides)


def run_concurrently(upstream, plan: dict[str, dict]) -> dict:
    """Run each ``kind: kwargs`` workload on its own thread; raise the first failure."""
    stats, errors = {}, []

    def one(kind, kw):
        try:
            stats[kind] = workload.run(upstream, kind, database=DATABASE, seed=len(kind), **kw)
        except Exception as exc:  # re-raised below, after every thread ended
            errors.append(exc)

    threads = [threading.Thread(target=one, args=item, name=f"wl-{item[0]}")
               for item in plan.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return stats


def assert_identical(up_db, down_db):
    with up_db.connect() as up_conn, down_db.connect() as down_conn:
        result = compare_databases(up_conn, down_conn, [DATABASE])
    assert result.equal, [str(d) for d in result.diffs]
    return result


def replicate_workloads(stack, large_rows: int) -> None:
    up_db, down_db, cluster, upstream = stack
    upstream.ddl(f"CREATE DATABASE {DATABASE}")
    drainer = Drainer.start(drainer_config(stack), registry=cluster.registry)
    try:
        stats = run_concurrently(upstream, {
            "all_types": dict(sessions=2, ops=150),
            "no_pk": dict(sessions=2, ops=300),
            "random_dml": dict(sessions=2, ops=400),
            "ddl": dict(sessions=2, ops=120),
            "mixed": dict(sessions=2, ops=400),
            "large": dict(ops=1, rows_per_txn=large_rows),
        })
        upstream.flush()
        assert stats["large"].rows == large_rows
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=300)
        result = assert_identical(up_db, down_db)
        # every workload's table exists, and the large transaction's rows arrived
        assert result.tables >= 5 and result.rows >= large_rows
        status = drainer.status()
        assert status["state"] == "running" and status["resets"] == 0
    finally:
        final = drainer.stop()
    assert final["consistent"] is True


def test_all_workloads_replicate_identically(stack):
    replicate_workloads(stack, large_rows=10_000)


@pytest.mark.slow
def test_all_workloads_with_a_100k_row_transaction(stack):
    replicate_workloads(stack, large_rows=100_000)
