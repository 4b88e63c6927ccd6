"""TaskSettings: everything a replication task's actors need, derived once from drainer.toml.

Each actor takes the settings (they pickle) and nothing else the driver held, so an
actor Ray restarts, or a detached one started by a task API, rebuilds itself from them
(peers are looked up by name: :mod:`tidb_binlog.drainer.pipeline.names`).

``sink`` picks the pipeline's mode, a row of the sink table
(:mod:`tidb_binlog.drainer.sinks.kinds`): ``"mysql"`` (schema keeper → coordinator → SQL
workers; routed in the keeper when ``exactly_once``), ``"file"`` (pb keeper → file
sink) or ``"parquet"`` (parquet keeper → Parquet lake). :meth:`TaskSettings.from_config`
sets it from ``[syncer] db-type``, with what the kind implies (no downstream, one
writer and no exactly-once for the file and Parquet sinks).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from tidb_binlog.binlog_ref import DEFAULT_REF_ABOVE_BYTES
from tidb_binlog.cpus import default_worker_count
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE
from tidb_binlog.drainer.sinks.kinds import SINK_KINDS, SinkKind, sink_kind, sink_of_db_type
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.errors import ConfigError
from tidb_binlog.filter.rules import FilterSettings
from tidb_binlog.security import mysql_ssl

__all__ = ["TaskSettings", "SINKS", "sink_of_db_type", "check_worker_count_update",
           "checkpoint_db_of"]

SINKS = tuple(SINK_KINDS)
"""The sink kinds a task can write to (``[syncer] db-type`` tidb is ``mysql`` here)."""


def check_worker_count_update(task: str, db_type: str, worker_count) -> None:
    """ConfigError unless ``ReplicationTask.update(worker_count=...)`` can change the SQL
    workers of task ``task`` writing to ``db_type``: a whole number of at least 1, and a
    MySQL/TiDB sink (a file or Parquet task has one writer, no SQL workers)."""
    if isinstance(worker_count, bool) or not isinstance(worker_count, int) or worker_count < 1:
        raise ConfigError(f"task {task!r}: worker_count must be a whole number of at least 1, "
                          f"got {worker_count!r}", key="syncer.worker-count")
    if not sink_kind(db_type).sql_workers:
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
    exactly_once: bool = None  # type: ignore[assignment]  # None: the sink kind's default
    txn_atomic: bool = False  # [syncer] txn-atomic: each upstream txn one downstream txn
    safe_mode: bool = False
    merge: bool = True
    initial_commit_ts: int = -1
    ignore_schemas: tuple[str, ...] = ("information_schema", "performance_schema", "mysql")
    ignore_txn_commit_ts: tuple[int, ...] = ()
    time_zone: str = "+00:00"
    downstream: DownstreamConfig | None = None  # None for a file sink
    # [syncer.to.checkpoint] host/port/user/password of a MySQL sink when they name
    # another server or user than [syncer.to] (TiDB Binlog's separate checkpoint
    # database): the checkpoint row lives there, the worker progress rows stay with the
    # data; None: everything in the downstream
    checkpoint_db: DownstreamConfig | None = None
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
            raise ConfigError(f"unknown sink {self.sink!r}; expected one of "
                              f"{', '.join(SINKS)}", key="syncer.db-type")
        if self.exactly_once is None:
            object.__setattr__(self, "exactly_once", self.kind.exactly_once)
        if self.exactly_once and not self.kind.exactly_once:
            raise ConfigError(f"a {self.sink} sink cannot be exactly-once (only a mysql or "
                              "tidb downstream commits the checkpoint with the data)",
                              key="syncer.exactly-once")

    @property
    def kind(self) -> SinkKind:
        """The sink's row in :data:`~tidb_binlog.drainer.sinks.kinds.SINK_KINDS`."""
        return SINK_KINDS[self.sink]

    @classmethod
    def from_config(cls, cfg, *, upstream_meta: dict, **overrides) -> TaskSettings:
        """From a resolved :class:`~tidb_binlog.config.DrainerConfig`; ``sink`` and what
        it implies (downstream, exactly-once, worker count) come from ``[syncer]
        db-type`` through the sink table, never from ``overrides``."""
        if "sink" in overrides:
            raise ConfigError("TaskSettings.from_config sets the sink from [syncer] db-type; "
                              f"do not pass sink={overrides['sink']!r}", key="syncer.db-type")
        s = cfg.syncer
        kind = sink_kind(s.db_type)
        exactly_once = kind.exactly_once if s.exactly_once is None else s.exactly_once
        values = dict(
            sink=kind.name, cluster_id=cfg.cluster_id,
            worker_count=s.worker_count if kind.sql_workers else 1, txn_batch=s.txn_batch,
            exactly_once=exactly_once, txn_atomic=s.txn_atomic, safe_mode=s.safe_mode,
            txn_chunk_rows=s.txn_chunk_rows, large_binlog_bytes=s.large_binlog_bytes,
            merge=s.to.merge,
            initial_commit_ts=cfg.initial_commit_ts,
            ignore_schemas=tuple(x.lower() for x in s.ignore_schemas),
            ignore_txn_commit_ts=tuple(s.ignore_txn_commit_ts),
            filters=FilterSettings.from_syncer(s),
            time_zone=str(s.to.params.get("time_zone", "+00:00")),
            downstream=DownstreamConfig.from_drainer_config(cfg)
            if kind.needs_downstream else None,
            checkpoint_db=checkpoint_db_of(cfg) if kind.checkpoint == "downstream" else None,
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
    def checkpoint_address(self) -> str:
        """Where the checkpoint row lives (host:port), for messages."""
        db = self.checkpoint_db or self.downstream
        return db.address if db is not None else ""

    @property
    def routed(self) -> bool:
        """Whether the keeper routes rows to workers and the coordinator gets only the
        plan (exactly-once into MySQL); otherwise ``translate`` → ``apply``. A relay log
        needs the transactions in the coordinator, so it is never routed (exactly-once
        still holds: the coordinator's dispatcher routes the same way)."""
        return self.exactly_once and self.kind.sql_workers and not self.relay_dir

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


def checkpoint_db_of(cfg) -> DownstreamConfig | None:
    """The connection of ``[syncer.to.checkpoint]`` (a resolved config, mysql/tidb
    checkpoint type) when it names another server or user than ``[syncer.to]``, else
    None (the checkpoint lives in the downstream, under its connection and TLS)."""
    to, cp = cfg.syncer.to, cfg.syncer.to.checkpoint
    if cp.type not in ("mysql", "tidb"):
        return None
    if (cp.host, cp.port, cp.user, cp.password) == (to.host, to.port, to.user, to.password) \
            and not mysql_ssl(cp.security, "syncer.to.checkpoint.security"):
        return None
    section, security = "syncer.to.checkpoint.security", cp.security
    if not mysql_ssl(security, section) and (cp.host, cp.port) == (to.host, to.port):
        # the downstream's own server with another user: the same server wants the same
        # TLS (TiDB Binlog uses [syncer.to]'s for a checkpoint that follows the downstream)
        section, security = "syncer.to.security", to.security
    return DownstreamConfig(host=cp.host, port=cp.port, user=cp.user, password=cp.password,
                            read_timeout_s=to.read_timeout_s,
                            ssl=mysql_ssl(security, section), tls_section=section)
