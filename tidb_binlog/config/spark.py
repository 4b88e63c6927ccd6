"""spark.toml: :class:`SparkJobConfig` and :func:`load_spark_config` (the Spark jobs' file).

One file configures every ``tidb-binlog spark <job>``: ``[spark]`` sizes the Spark that
RayDP starts on the Ray cluster, ``[upstream]`` / ``[downstream]`` name the two MySQL
servers, and one section per job holds that job's options (``[diff]``, ``[load]``). The same
strict rules as pump.toml / drainer.toml apply (unknown keys are errors naming the key and
the file; ``overrides`` are dotted keys and win over the file).

The ``[spark]`` defaults fit a 2-core machine: one executor of 1 GiB that reserves one Ray
CPU (with four Spark task slots: the tasks mostly wait on the databases) and a master
actor that reserves none, so Spark holds one CPU and leaves the rest of the Ray cluster
to pumps and drainers. ``spark_on_ray.session`` refuses a size that would take
every CPU of the cluster (RayDP hangs when Spark holds all resources).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from tidb_binlog.config._common import SecurityConfig
from tidb_binlog.config._kinds import (
    _BOOL,
    _MIB,
    _STR,
    _bytes_kind,
    _float_kind,
    _int_kind,
    _list_kind,
    _opt,
    _section,
    _str_map_kind,
)
from tidb_binlog.config._toml import _load, _to_toml
from tidb_binlog.errors import ConfigError
from tidb_binlog.security import mysql_ssl

__all__ = ["SparkConfig", "DatabaseConfig", "DiffConfig", "SparkJobConfig",
           "LoadConfig", "RestoreConfig", "LakeConfig", "load_spark_config",
           "DEFAULT_JDBC_JARS"]  # fmt: skip

# Where Debian's libmariadb-java (installed by scripts/setup.sh) puts the driver.
DEFAULT_JDBC_JARS = ("/usr/share/java/mariadb-java-client.jar",)
LOAD_METHODS = ("auto", "load-data", "insert")
"""``[load] method`` values (see :class:`LoadConfig`)."""


@dataclass(frozen=True)
class SparkConfig:
    """``[spark]``: the Spark application RayDP starts on the Ray cluster."""

    app_name: str = _opt("app-name", _STR, "tidb-binlog-spark")
    num_executors: int = _opt("num-executors", _int_kind(1), 1)
    # Spark task slots per executor. The jobs' tasks mostly wait on JDBC (the databases do
    # the work), so there are more slots than the CPUs the executor reserves on Ray.
    executor_cores: int = _opt("executor-cores", _int_kind(1), 4)
    # CPUs each executor actor reserves on the Ray cluster (RayDP's
    # spark.ray.raydp_spark_executor.actor.resource.cpu).
    executor_ray_cpus: float = _opt("executor-ray-cpus", _float_kind(unit="CPUs"), 1.0)
    executor_memory_bytes: int = _opt("executor-memory", _bytes_kind(), 1024 * _MIB)
    driver_memory_bytes: int = _opt("driver-memory", _bytes_kind(), 512 * _MIB)
    # Seconds to wait, after RayDP's start, for every executor to register (an executor
    # whose Ray CPUs no node has free never does; the job fails then instead of waiting).
    start_timeout_s: float = _opt("start-timeout", _float_kind(), 300.0)
    # Empty: the first of DEFAULT_JDBC_JARS that exists.
    jdbc_jar: str = _opt("jdbc-jar", _STR, "")
    # Where intermediate Parquet files go (the hand-off between Spark and Ray / Python).
    work_dir: str = _opt("work-dir", _STR, "data.spark")
    # Extra Spark settings, passed through unchanged ("spark.sql.shuffle.partitions" = "4").
    configs: dict = _opt("configs", _str_map_kind(), {})


@dataclass(frozen=True)
class DatabaseConfig:
    """``[upstream]`` / ``[downstream]``: one MySQL-compatible server."""

    host: str = _opt("host", _STR, "127.0.0.1")
    port: int = _opt("port", _int_kind(1, 65535), 3306)
    user: str = _opt("user", _STR, "root")
    password: str = _opt("password", _STR, "")
    # [upstream.security] / [downstream.security]: TLS of every connection the jobs open
    # to this server (pymysql in the driver and the Spark tasks, the JDBC URL), read as
    # drainer.toml's [syncer.to.security]: on when ssl-ca is set (the server's certificate
    # and host name verified); ssl-cert/ssl-key add a client certificate (pymysql only).
    security: SecurityConfig = _section("security", SecurityConfig)

    def where(self) -> str:
        """``user@host:port`` for messages (never the password)."""
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True)
class DiffConfig:
    """``[diff]``: the consistency diff (``tidb-binlog spark diff``)."""

    # "db" (every table of it) or "db.table"; names are the same on both sides.
    tables: tuple[str, ...] = _opt("tables", _list_kind(_STR, "an array of strings"), ())
    chunk_size: int = _opt("chunk-size", _int_kind(16), 50_000)
    # Bisect a mismatching chunk until it holds at most this many rows, then compare rows.
    leaf_size: int = _opt("leaf-size", _int_kind(1), 256)
    # Relative tolerance for FLOAT/DOUBLE columns: values are compared after rounding to
    # this many significant digits (FLOAT keeps ~7, DOUBLE ~15 exact digits).
    float_digits: int = _opt("float-digits", _int_kind(1, 17), 6)
    double_digits: int = _opt("double-digits", _int_kind(1, 17), 15)
    fix_sql_file: str = _opt("fix-sql-file", _STR, "fix.sql")
    timeout_s: float = _opt("connect-timeout", _float_kind(), 10.0)
    # Compare at a running drainer's checkpoint: the downstream table it saves its
    # checkpoint in ("tidb_binlog.checkpoint"); empty = compare the two sides as they are.
    # Chunks that differ are re-checked once the checkpoint passed the upstream's ts
    # (spark_on_ray.diff_settle), so replication in flight is not reported.
    checkpoint_table: str = _opt("checkpoint-table", _STR, "")
    # The checkpoint row (the upstream cluster id); 0 = the table's only row.
    checkpoint_cluster_id: int = _opt("checkpoint-cluster-id", _int_kind(0), 0)
    # Re-check rounds before a chunk still being written is reported anyway.
    recheck_rounds: int = _opt("recheck-rounds", _int_kind(1), 8)
    # How long one round waits for the checkpoint to pass the upstream's ts.
    checkpoint_wait_s: float = _opt("checkpoint-wait", _float_kind(), 120.0)


@dataclass(frozen=True)
class LoadConfig:
    """``[load]``: the initial snapshot load (``tidb-binlog spark load``)."""

    # "db" (every table of it) or "db.table" (the upstream's catalog schema is never copied).
    tables: tuple[str, ...] = _opt("tables", _list_kind(_STR, "an array of strings"), ())
    chunk_size: int = _opt("chunk-size", _int_kind(16), 50_000)
    batch_size: int = _opt("batch-size", _int_kind(1), 1000)
    # How rows reach the downstream: "load-data" (LOAD DATA LOCAL INFILE of lines the
    # upstream renders), "insert" (multi-row INSERTs of batch-size rows), or "auto":
    # load-data when the downstream allows LOCAL INFILE (@@local_infile), else insert.
    method: str = _opt("method", _STR, "auto")
    # Parallel copy tasks (each holds one upstream read view); 0 = one per CPU of the Ray
    # cluster, at most every Spark task slot.
    parallelism: int = _opt("parallelism", _int_kind(0), 0)
    # On: tables the load creates get their secondary indexes (KEY, UNIQUE KEY) after the
    # rows, in one ALTER TABLE per table: one sort per index instead of a random insert per
    # row (myloader's --innodb-optimize-keys), for tables far beyond the buffer pool. Off
    # by default: up to 1M rows here it saved nothing (the ALTER runs after the copy).
    defer_indexes: bool = _opt("defer-indexes", _BOOL, False)
    # Seconds to wait for a running DDL (the upstream's DDL owner lock) before giving up.
    ddl_lock_timeout_s: float = _opt("ddl-lock-timeout", _float_kind(), 60.0)
    # drainer.toml to name in the printed `tidb-binlog drainer ... --initial-commit-ts` line.
    drainer_config: str = _opt("drainer-config", _STR, "config/drainer.toml")


@dataclass(frozen=True)
class RestoreConfig:
    """``[restore]``: replay a file-sink directory into the downstream (``tidb-binlog spark
    restore``), reparo's job in parallel Spark tasks; always in safe mode."""

    # The directory the drainer's file sink writes (drainer.toml [syncer.to] dir).
    data_dir: str = _opt("data-dir", _STR, "")
    # Records with start-tso <= commit_ts <= stop-tso (0: no bound).
    start_tso: int = _opt("start-tso", _int_kind(0), 0)
    stop_tso: int = _opt("stop-tso", _int_kind(0), 0)
    # Row changes per downstream transaction in a task.
    txn_batch: int = _opt("txn-batch", _int_kind(1), 100)
    # Key-hash partitions (Spark tasks) per stage; 0 = every Spark task slot.
    partitions: int = _opt("partitions", _int_kind(0), 0)
    # A stretch between two DDLs with fewer row changes is applied by the driver itself
    # (a Spark stage costs more than it saves on a few hundred rows).
    min_spark_rows: int = _opt("min-spark-rows", _int_kind(0), 500)
    # Schemas to keep / drop (reparo's replicate-do-db / replicate-ignore-db rules).
    replicate_do_db: tuple[str, ...] = _opt("replicate-do-db",
                                            _list_kind(_STR, "an array of strings"), ())
    replicate_ignore_db: tuple[str, ...] = _opt("replicate-ignore-db",
                                                _list_kind(_STR, "an array of strings"), ())
    # Session time zone the rows are written in: the drainer's [syncer.to.params] time_zone.
    time_zone: str = _opt("time-zone", _STR, "+00:00")


@dataclass(frozen=True)
class LakeConfig:
    """``[lake]``: the change-log jobs ``snapshot-at`` and ``stats`` over the drainer's
    change log; table keys are read from ``[downstream]``."""

    # The Parquet sink's lake (its [syncer.to] dir, holding _manifest.json), else a file
    # sink's directory of pb binlogs.
    data_dir: str = _opt("data-dir", _STR, "")
    # "db" (every table of it that the downstream has) or "db.table".
    tables: tuple[str, ...] = _opt("tables", _list_kind(_STR, "an array of strings"), ())
    # Where the Parquet output goes (one folder per table under it).
    out_dir: str = _opt("out-dir", _STR, "data.lake")
    # snapshot-at: the commit_ts of the image (0: the end of the files; for the Parquet
    # lake its manifest's commit_ts).
    at_tso: int = _opt("at-tso", _int_kind(0), 0)
    # stats: records with start-tso <= commit_ts <= stop-tso (0: no bound).
    start_tso: int = _opt("start-tso", _int_kind(0), 0)
    stop_tso: int = _opt("stop-tso", _int_kind(0), 0)
    # stats: how many of the most changed keys to report per table.
    top_keys: int = _opt("top-keys", _int_kind(1), 5)


@dataclass(frozen=True)
class SparkJobConfig:
    """spark.toml: ``[spark]``, the two servers, and each job's section."""

    spark: SparkConfig = _section("spark", SparkConfig)
    upstream: DatabaseConfig = _section("upstream", DatabaseConfig)
    downstream: DatabaseConfig = _section("downstream", DatabaseConfig)
    diff: DiffConfig = _section("diff", DiffConfig)
    load: LoadConfig = _section("load", LoadConfig)
    restore: RestoreConfig = _section("restore", RestoreConfig)
    lake: LakeConfig = _section("lake", LakeConfig)

    def to_toml(self) -> str:
        return _to_toml(self)


def load_spark_config(path: str | Path | None, overrides: dict | None = None) -> SparkJobConfig:
    """Load spark.toml (``None``: defaults only), apply ``overrides``, validate."""
    cfg, source = _load(SparkJobConfig, path, overrides, {})
    spark = cfg.spark
    if spark.executor_memory_bytes < 64 * _MIB:
        raise ConfigError(f"`spark.executor-memory` in {source} is "
                          f"{spark.executor_memory_bytes} bytes; Spark needs at least 64 MiB",
                          key="spark.executor-memory", path=source)  # fmt: skip
    for name, db in (("upstream", cfg.upstream), ("downstream", cfg.downstream)):
        if not db.host:
            raise ConfigError(f"`{name}.host` in {source} is empty; name the server",
                              key=f"{name}.host", path=source)  # fmt: skip
        mysql_ssl(db.security, f"{name}.security")  # files readable, cert with its CA
    for key, entries in (("diff.tables", cfg.diff.tables), ("load.tables", cfg.load.tables),
                         ("lake.tables", cfg.lake.tables)):
        for entry in entries:
            parts = entry.split(".")
            if len(parts) not in (1, 2) or not all(parts):
                raise ConfigError(f"`{key}` in {source} has {entry!r}; expected \"db\" or "
                                  "\"db.table\"", key=key, path=source)  # fmt: skip
    if cfg.load.method not in LOAD_METHODS:
        raise ConfigError(f"`load.method` in {source} is {cfg.load.method!r}; expected one of "
                          f"{', '.join(repr(m) for m in LOAD_METHODS)}", key="load.method",
                          path=source)  # fmt: skip
    table = cfg.diff.checkpoint_table
    if table and (len(table.split(".")) != 2 or not all(table.split("."))):
        raise ConfigError(f"`diff.checkpoint-table` in {source} is {table!r}; expected "
                          "\"schema.table\" of the drainer's checkpoint on the downstream "
                          "(e.g. \"tidb_binlog.checkpoint\")", key="diff.checkpoint-table",
                          path=source)  # fmt: skip
    return cfg


def resolve_jdbc_jar(spark: SparkConfig) -> str | None:
    """The JDBC driver jar to use: ``jdbc-jar`` when set, else the first default that exists
    (None when none does; the caller says what to do)."""
    if spark.jdbc_jar:
        return spark.jdbc_jar if os.path.isfile(spark.jdbc_jar) else None
    return next((p for p in DEFAULT_JDBC_JARS if os.path.isfile(p)), None)


def with_work_dir(cfg: SparkJobConfig, work_dir: str) -> SparkJobConfig:
    """A copy with ``[spark] work-dir`` replaced (tests and the CLI's ``--work-dir``)."""
    return replace(cfg, spark=replace(cfg.spark, work_dir=work_dir))
