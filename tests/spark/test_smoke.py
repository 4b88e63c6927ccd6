"""Smoke test of the shared base: Spark on the test Ray, a DataFrame round trip through the
Parquet hand-off, and a JDBC read of a throwaway MariaDB table."""

from __future__ import annotations

import os

import pytest
from spark_helpers import db_config

from spark_on_ray.errors import SparkSetupError
from tidb_binlog.config.spark import SparkConfig


def test_dataframe_round_trip_through_parquet(spark_handle, tmp_path):
    import pyarrow.parquet as pq

    spark = spark_handle.spark
    df = spark.createDataFrame([(i, f"r{i}") for i in range(100)], ["id", "name"])
    out = str(tmp_path / "rows.parquet")
    df.write.parquet(out)
    table = pq.read_table(out)
    assert sorted(table.column("id").to_pylist()) == list(range(100))
    back = spark.read.parquet(out)
    assert back.filter("id >= 50").count() == 50


def test_jdbc_read_of_a_mariadb_table(spark_handle, mariadb, fresh_database):
    db = fresh_database(mariadb)
    conn = mariadb.connect(db, autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE `order` (id INT PRIMARY KEY, `select` VARCHAR(10), v DOUBLE)")
        cur.executemany("INSERT INTO `order` VALUES (%s, %s, %s)",
                        [(i, f"s{i}", i / 4) for i in range(1, 21)])
    conn.close()
    cfg = db_config(mariadb)
    # A reserved-word table and column: only the MySQL dialect's backticks work.
    rows = (spark_handle.spark.read.format("jdbc")
            .options(**spark_handle.jdbc_options(cfg, db), dbtable="`order`").load()
            .filter("id > 10").select("select").collect())
    assert sorted(r["select"] for r in rows) == [f"s{i}" for i in range(11, 21)]
    # A pushed-down aggregate: one row computed by the server.
    (row,) = spark_handle.read_query(cfg, f"SELECT COUNT(*) AS n, SUM(v) AS s FROM `{db}`.`order`"
                                     ).collect()
    assert (row["n"], float(row["s"])) == (20, 52.5)


def test_missing_jar_and_java_are_clear_errors(tmp_path, monkeypatch):
    from spark_on_ray.session import check_java, check_jdbc_jar

    with pytest.raises(SparkSetupError, match="JDBC driver jar is missing.*scripts/setup.sh"):
        check_jdbc_jar(SparkConfig(jdbc_jar=str(tmp_path / "nope.jar")))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SparkSetupError, match="Java not found.*openjdk-17"):
        check_java()
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'openjdk version \"21.0.1\"' >&2\n")
    os.chmod(fake, 0o755)
    with pytest.raises(SparkSetupError, match="Java 21.*openjdk-17"):
        check_java()


def test_spark_leaves_cpus_to_the_other_actors(spark_handle, ray_local):
    # One executor reserving one CPU and a master reserving none: on the 4-CPU test Ray
    # at least 3 CPUs stay for pumps and drainers (fewer only while other tests' actors run).
    total = ray_local.cluster_resources()["CPU"]
    assert spark_handle.config.num_executors * spark_handle.config.executor_ray_cpus == 1
    assert ray_local.available_resources().get("CPU", 0) >= 1 and total == 4
    assert spark_handle.slots == 4


def test_a_size_taking_every_cpu_is_refused(ray_local):
    from spark_on_ray.session import start_spark

    with pytest.raises(SparkSetupError, match=r"executor-ray-cpus = 4 would take every CPU"):
        start_spark(SparkConfig(num_executors=2, executor_ray_cpus=2.0))
