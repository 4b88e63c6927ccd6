"""Fixtures of the Spark tests: ONE Spark on the session's Ray, shared by every test.

Starting Spark through RayDP costs ~15 s, so ``spark_handle`` is session-scoped and stopped
at session end. It is sized to leave CPUs to everything else on the test Ray (4 CPUs): one
executor with one core, and a master actor that reserves none.
"""

from __future__ import annotations

import pytest

from cluster.launch import LocalCluster
from tidb_binlog.config.spark import SparkConfig
from tidb_binlog.upstream import Upstream


@pytest.fixture(scope="session")
def spark_handle(ray_local, tmp_path_factory):
    from spark_on_ray.session import start_spark

    cfg = SparkConfig(app_name="tidb-binlog-test-spark", executor_memory_bytes=768 << 20,
                      work_dir=str(tmp_path_factory.mktemp("spark-work")))
    handle = start_spark(cfg, warm=True)  # the load's barrier stage needs warm workers
    yield handle
    handle.stop()



@pytest.fixture
def stack(ray_local, mariadb_factory, tmp_path):
    """``(upstream MariaDB, downstream MariaDB, LocalCluster with one pump, Upstream)``: the
    emulator writing binlogs to a real pump, for the jobs that meet a drainer."""
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    cluster = LocalCluster(tmp_path / "cluster", pumps=1, upstream_params=up_db.params(),
                           namespace="spark-stack").start()
    upstream = Upstream(up_db.params(), cluster.pump_client(), cluster.get_ts)
    yield up_db, down_db, cluster, upstream
    upstream.close()
    cluster.stop()
