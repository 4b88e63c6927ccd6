"""Fixtures of the Spark tests: ONE Spark on the session's Ray, shared by every test.

Starting Spark through RayDP costs ~15 s, so ``spark_handle`` is session-scoped and stopped
at session end. It is sized to leave CPUs to everything else on the test Ray (4 CPUs): one
executor with one core, and a master actor that reserves none.
"""

from __future__ import annotations

import pytest

from tidb_binlog.config.spark import SparkConfig
from tidb_binlog.testing.stack import StackSpec


@pytest.fixture(scope="session")
def spark_handle(ray_local, tmp_path_factory):
    from spark_on_ray.session import start_spark

    cfg = SparkConfig(app_name="tidb-binlog-test-spark", executor_memory_bytes=768 << 20,
                      work_dir=str(tmp_path_factory.mktemp("spark-work")))
    handle = start_spark(cfg, warm=True)  # the load's barrier stage needs warm workers
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def stack_spec() -> StackSpec:
    """The Spark modules' ``stack`` (tests/conftest.py): upstream and downstream MariaDB,
    one pump, the emulator writing binlogs to it, for the jobs that meet a drainer."""
    return StackSpec(pumps=1, namespace="spark-stack")
