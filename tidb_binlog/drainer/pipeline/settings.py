"""TaskSettings: everything a replication task's actors need, derived once from drainer.toml.

Each actor takes the settings (they pickle) and nothing else the driver held, so an
actor Ray restarts, or a detached one started by a task API, rebuilds itself from them
(peers are looked up by name: :mod:`tidb_binlog.drainer.pipeline.names`).

``sink`` picks the pipeline's mode: ``"mysql"`` (schema keeper → coordinator → SQL
workers; routed in the keeper when ``exactly_once``) or ``"file"`` (pb keeper → file
sink) or ``"parquet"`` (parquet keeper → Parquet lake). A new sink kind adds its name
here and a :class:`~.sink.Sink` class.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from tidb_binlog.binlog_ref import DEFAULT_REF_ABOVE_BYTES
from tidb_binlog.cpus import default_worker_count
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.errors import ConfigError
from tidb_binlog.filter.rules import FilterSettings

__all__ = ["TaskSettings", "SINKS", "sink_of_db_type", "check_worker_count_update"]

SINKS = ("mysql", "file", "parquet")
"""The sink kinds a task can write to (``[syncer] db-type`` tidb is ``mysql`` here)."""


def sink_of_db_type(db_type: str) -> str:
    """``TaskSettings.sink`` of a ``[syncer] db-type`` (tidb writes through mysql)."""
    return db_type if db_type in ("file", "parquet") else "mysql"


def check_worker_count_update(task: str, db_type: str, worker_count) -> None:
    """ConfigError unless ``ReplicationTask.update(worker_count=...)`` can change the SQL
    workers of task ``task`` writing to ``db_type``: a whole number of at least 1, and a
    MySQL/TiDB sink (a file or Parquet task has one writer, no SQL workers)."""
    if isinstance(worker_count, bool) or not isinstance(worker_count, int) or worker_count < 1:
        raise ConfigError(f"task {task!r}: worker_count must be a whole number of at least 1, "
                          f"got {worker_count!r}", key="syncer.worker-count")
    if sink_of_db_type(db_type) != "mysql":
        raise ConfigError(
            f"task {task!r} writes to a {db_type} sink, which has one writer and no SQL "
            "workers: update(worker_count=...) applies to db-type mysql/tidb tasks only "
            "(nothing was changed; the task runs on as it was)", key="syncer.worker-count")


@dataclass(frozen=True)
class TaskSettings:
    """Everything the pipeline actors need, derived once from drainer.toml."""

    cluster_id: int
    worker_count: int = field(default_factory=default_worker_count)  # drainer.toml's
    txn_batch: int = 20
    exactly_once: bool = True
    txn_atomic: bool = False  # [syncer] txn-atomic: each upstream txn one downstream txn
    safe_mode: bool = False
    merge: bool = True
    initial_commit_ts: int = -1
    ignore_schemas: tuple[str, ...] = ("information_schema", "performance_schema", "mysql")
    ignore_txn_commit_ts: tuple[int, ...] = ()
    time_zone: str = "+00:00"
    downstream: DownstreamConfig | None = None  # None for a file sink
    checkpoint_schema: str = "tidb_binlog"
    checkpoint_table: str = "checkpoint"
    upstream_meta: dict = field(default_factory=dict)  # UpstreamMeta params
    max_inflight: int = 4
    # [syncer] txn-chunk-rows: a transaction with more row changes is translated and
    # applied in chunks of this many (0: whole; see RowKeeper.translate_routed)
    txn_chunk_rows: int = 50_000
    # [syncer] large-binlog-bytes: a Commit binlog this large comes from a PumpActor as a
    # BinlogRef the keeper reads in ranges (see ``ref_above``); 0: every payload whole
    large_binlog_bytes: int = DEFAULT_REF_ABOVE_BYTES
    merge_batch: int = 512
    pull_max_bytes: int = 4 << 20
    # drainer.toml's [security] and compressor: how standalone pumps are pulled over gRPC,
    # whether or not the task also serves as a drainer node (a pipeline-only task too)
    pump_security: object = None  # tidb_binlog.config.SecurityConfig
    pump_compressor: str = ""
    save_interval_s: float = 3.0
    sink: str = "mysql"
    # [syncer.relay]: the MySQL sink writes every transaction here before applying it
    # ("" = off); a relay log turns the keeper's routing off (see ``routed``).
    relay_dir: str = ""
    relay_max_file_size: int = 10 << 20
    # [syncer] loopback-control / channel-id / sync-ddl: bidirectional replication's loop
    # control (tidb_binlog/drainer/loopback.py): every downstream transaction carries this
    # channel's mark, and transactions carrying it are dropped on the way back.
    loopback_control: bool = False
    channel_id: int = 0
    sync_ddl: bool = True
    # A named task (the task API): its actors are ``<task>-<role>`` in ``namespace`` and
    # find their peers by those names (names.py). "" = anonymous actors, handles passed.
    task: str = ""
    namespace: str = DEFAULT_NAMESPACE
    # replicate-do-db/-table, ignore-table, table-migrate-rule + binlog-filter-rule as
    # plain data; the keepers compile them (tidb_binlog.filter.rules.TxnFilter)
    filters: FilterSettings = FilterSettings()

    def __post_init__(self) -> None:
        if self.sink not in SINKS:
            raise ValueError(f"unknown sink {self.sink!r}; expected one of {SINKS}")

    @classmethod
    def from_config(cls, cfg, *, upstream_meta: dict, **overrides) -> TaskSettings:
        """From a resolved :class:`~tidb_binlog.config.DrainerConfig`."""
        s = cfg.syncer
        exactly_once = s.exactly_once if s.exactly_once is not None else True
        values = dict(
            cluster_id=cfg.cluster_id, worker_count=s.worker_count, txn_batch=s.txn_batch,
            exactly_once=exactly_once, txn_atomic=s.txn_atomic, safe_mode=s.safe_mode,
            txn_chunk_rows=s.txn_chunk_rows, large_binlog_bytes=s.large_binlog_bytes,
            merge=s.to.merge,
            initial_commit_ts=cfg.initial_commit_ts,
            ignore_schemas=tuple(x.lower() for x in s.ignore_schemas),
            ignore_txn_commit_ts=tuple(s.ignore_txn_commit_ts),
            filters=FilterSettings.from_syncer(s),
            time_zone=str(s.to.params.get("time_zone", "+00:00")),
            downstream=DownstreamConfig.from_drainer_config(cfg),
            checkpoint_schema=s.to.checkpoint.schema or "tidb_binlog",
            checkpoint_table=s.to.checkpoint.table or "checkpoint",
            upstream_meta=dict(upstream_meta),
            relay_dir=os.path.abspath(s.relay.log_dir) if s.relay.log_dir else "",
            relay_max_file_size=s.relay.max_file_size_bytes,
            loopback_control=s.loopback_control, channel_id=s.channel_id, sync_ddl=s.sync_ddl,
            pump_security=cfg.security, pump_compressor=cfg.compressor)
        values.update(overrides)
        return cls(**values)

    @property
    def routed(self) -> bool:
        """Whether the keeper routes rows to workers and the coordinator gets only the
        plan (exactly-once into MySQL); otherwise ``translate`` → ``apply``. A relay log
        needs the transactions in the coordinator, so it is never routed (exactly-once
        still holds: the coordinator's dispatcher routes the same way)."""
        return self.exactly_once and self.sink == "mysql" and not self.relay_dir

    @property
    def ref_above(self) -> int:
        """The ``ref_above`` the pump feeds pass to ``PumpActor.pull``: Commit binlogs of
        this many bytes or more come as :class:`~tidb_binlog.binlog_ref.BinlogRef` and
        the keeper reads them in ranges from the pump (``tidb_binlog/binlog_ref.py``);
        0: every payload whole. Only where the keeper streams a large transaction from
        such a source, i.e. where it chunks (``txn-chunk-rows`` > 0), on every path: the
        file sink's pb keeper and the Parquet keeper; the MySQL sink's row keeper routed
        (exactly-once) or through ``translate_more`` into the coordinator (a relay log,
        txn-atomic, the causality mode: ``RowKeeper.chunk_rows``), with or without loop
        control (its verdict reads the mark rows by range)."""
        if self.large_binlog_bytes <= 0 or self.txn_chunk_rows <= 0:
            return 0
        return self.large_binlog_bytes

    def tzinfo(self) -> datetime.tzinfo:
        """The downstream time zone: ``+HH:MM`` offsets, ``UTC``, or an IANA name."""
        text = self.time_zone.strip()
        if text.upper() in ("UTC", "Z", "+00:00", "-00:00"):
            return datetime.UTC
        if text[:1] in "+-" and ":" in text:
            sign = -1 if text.startswith("-") else 1
            hours, _, minutes = text[1:].partition(":")
            return datetime.timezone(sign * datetime.timedelta(hours=int(hours),
                                                               minutes=int(minutes)))
        return ZoneInfo(text)
