"""drainer.toml: :class:`DrainerConfig` and :func:`load_drainer_config`.

TiDB Binlog's ``cmd/drainer/drainer.toml`` / ``drainer/config.go`` keys and defaults,
plus ours (``cluster-id``, ``registry``, ``syncer.exactly-once``; ``syncer.to.merge``
defaults to true). After loading, TiDB Binlog's adjustments: ``advertise-addr``
defaults to ``addr``; db-type ``pb`` means ``file``; ``worker-count`` is 1 for
``file`` or when dispatch is off; ``replicate-do-*`` names are lower-cased;
``[syncer.to]`` host/port/user/password default to ``$MYSQL_HOST``/``$MYSQL_PORT``/
``$MYSQL_USER``/``$MYSQL_PSWD`` or localhost/3306/root/"" for mysql/tidb, and
``dir`` to ``data-dir`` for file and parquet; the checkpoint type follows db-type (file
 for parquet: its manifest is the checkpoint) and an
empty checkpoint host/port/user/password is taken from ``[syncer.to]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from tidb_binlog.binlog_ref import DEFAULT_REF_ABOVE_BYTES
from tidb_binlog.binlogctl.encrypt import decrypt, secret_key
from tidb_binlog.config._common import (
    SUPPORTED_DB_TYPES,
    SecurityConfig,
    _check_common,
    _check_security,
    _fail,
)
from tidb_binlog.config._kinds import (
    _BOOL,
    _DAY_S,
    _INT,
    _STR,
    _bytes_kind,
    _csv_kind,
    _float_kind,
    _go_duration_kind,
    _int_kind,
    _list_kind,
    _opt,
    _section,
    _str_map_kind,
)
from tidb_binlog.config._toml import _load, _to_toml
from tidb_binlog.cpus import default_worker_count
from tidb_binlog.drainer.sinks.kinds import SinkKind, sink_kind
from tidb_binlog.errors import ConfigError
from tidb_binlog.filter.rules import config_problems

__all__ = [
    "TableName",
    "TableRef",
    "TableMigrateRule",
    "BinlogFilterRule",
    "RelayConfig",
    "CheckpointConfig",
    "ToConfig",
    "SyncerConfig",
    "DrainerConfig",
    "SUPPORTED_DB_TYPES",
    "load_drainer_config",
]

# TiDB Binlog's command-line flag names that are not the dotted TOML key.
_DRAINER_FLAGS = {
    "L": "log-level", "c": "syncer.worker-count", "dest-db-type": "syncer.db-type",
    "relay-log-dir": "syncer.relay.log-dir", "relay-max-file-size": "syncer.relay.max-file-size",
    **{k: f"syncer.{k}" for k in (
        "txn-batch", "loopback-control", "sync-ddl", "channel-id", "ignore-schemas", "safe-mode",
        "enable-dispatch", "disable-dispatch", "enable-detect", "disable-detect",
        "load-schema-snapshot", "exactly-once", "txn-atomic", "sql-mode")},
}  # fmt: skip


@dataclass(frozen=True)
class TableName:
    """An entry of ``[[syncer.ignore-table]]`` / ``[[syncer.replicate-do-table]]``."""

    db_name: str = _opt("db-name", _STR, "")
    tbl_name: str = _opt("tbl-name", _STR, "")


@dataclass(frozen=True)
class TableRef:
    """``source`` / ``target`` of a table-migrate-rule (wildcards allowed in source)."""

    schema: str = _opt("schema", _STR, "")
    table: str = _opt("table", _STR, "")


@dataclass(frozen=True)
class BinlogFilterRule:
    """``[syncer.binlog-filter-rule.<name>]``: tidb-tools event types and SQL regexes."""

    ignore_event: tuple[str, ...] = _opt("ignore-event", _list_kind(_STR, "an array of strings"), ())
    ignore_sql: tuple[str, ...] = _opt("ignore-sql", _list_kind(_STR, "an array of strings"), ())


@dataclass(frozen=True)
class TableMigrateRule:
    """``[[syncer.table-migrate-rule]]``: binds filter rules (and, for oracle, a target)."""

    binlog_filter_rule: tuple[str, ...] = _opt(
        "binlog-filter-rule", _list_kind(_STR, "an array of rule names"), ())
    source: TableRef = _section("source", TableRef)
    target: TableRef | None = _section("target", TableRef, default=None)


@dataclass(frozen=True)
class RelayConfig:
    """``[syncer.relay]``: relay log (empty ``log-dir`` disables it)."""

    log_dir: str = _opt("log-dir", _STR, "")
    max_file_size_bytes: int = _opt("max-file-size", _bytes_kind(), 10485760)


@dataclass(frozen=True)
class CheckpointConfig:
    """``[syncer.to.checkpoint]``: where the checkpoint is saved."""

    type: str = _opt("type", _STR, "")
    schema: str = _opt("schema", _STR, "tidb_binlog")
    table: str = _opt("table", _STR, "checkpoint")
    host: str = _opt("host", _STR, "")
    port: int = _opt("port", _int_kind(0, 65535), 0)
    user: str = _opt("user", _STR, "")
    password: str = _opt("password", _STR, "", secret=True)
    encrypted_password: str = _opt("encrypted_password", _STR, "", secret=True)
    security: SecurityConfig = _section("security", SecurityConfig)


@dataclass(frozen=True)
class ParquetConfig:
    """``[syncer.to.parquet]`` (ours; db-type parquet): when buffered changes are flushed
    into files and committed in the manifest (whichever comes first), and the codec."""

    flush_rows: int = _opt("flush-rows", _int_kind(1), 100_000)
    flush_bytes: int = _opt("flush-bytes", _bytes_kind(), 64 << 20)
    flush_interval_s: float = _opt("flush-interval", _float_kind("seconds"), 3.0)
    compression: str = _opt("compression", _STR, "zstd")


@dataclass(frozen=True)
class ToConfig:
    """``[syncer.to]``: the downstream (mysql/tidb connection, or the file sink dir)."""

    host: str = _opt("host", _STR, "")
    port: int = _opt("port", _int_kind(0, 65535), 0)
    user: str = _opt("user", _STR, "")
    password: str = _opt("password", _STR, "", secret=True)
    encrypted_password: str = _opt("encrypted_password", _STR, "", secret=True)
    sync_mode: int = _opt("sync-mode", _int_kind(1, 2), 1)
    read_timeout_s: float = _opt("read-timeout", _go_duration_kind(), 60.0)
    params: dict = _opt("params", _str_map_kind(), {})
    merge: bool = _opt("merge", _BOOL, True)
    # ours: write through the emulated TiDB of the cluster whose registry this names
    # ("<namespace>[/<actor>]"; bidirectional replication), host/port being its MariaDB
    emulated_tidb_registry: str = _opt("emulated-tidb-registry", _STR, "")
    dir: str = _opt("dir", _STR, "")
    retention_time_s: float = _opt("retention-time", _float_kind("days", unit_s=_DAY_S, allow_zero=True),
                                   0.0)  # fmt: skip
    security: SecurityConfig = _section("security", SecurityConfig)
    checkpoint: CheckpointConfig = _section("checkpoint", CheckpointConfig)
    parquet: ParquetConfig = _section("parquet", ParquetConfig)


@dataclass(frozen=True)
class SyncerConfig:
    """``[syncer]``: translation, filters, workers and the downstream."""

    sql_mode: str | None = _opt("sql-mode", _STR, None)
    txn_batch: int = _opt("txn-batch", _int_kind(1), 20)
    # TiDB Binlog's 16, but never more than this machine's CPUs (tidb_binlog/cpus.py)
    worker_count: int = _opt("worker-count", _int_kind(1), default_worker_count())
    enable_dispatch: bool = _opt("enable-dispatch", _BOOL, True, inverse="disable-dispatch")
    enable_detect: bool = _opt("enable-detect", _BOOL, True, inverse="disable-detect")
    safe_mode: bool = _opt("safe-mode", _BOOL, False)
    db_type: str = _opt("db-type", _STR, "mysql")
    sync_ddl: bool = _opt("sync-ddl", _BOOL, True)
    loopback_control: bool = _opt("loopback-control", _BOOL, False)
    channel_id: int = _opt("channel-id", _int_kind(-(1 << 63), (1 << 63) - 1), 0)
    ignore_schemas: tuple[str, ...] = _opt(
        "ignore-schemas", _csv_kind(), ("INFORMATION_SCHEMA", "PERFORMANCE_SCHEMA", "mysql"))
    replicate_do_db: tuple[str, ...] = _opt(
        "replicate-do-db", _list_kind(_STR, "an array of schema names"), ())
    ignore_txn_commit_ts: tuple[int, ...] = _opt(
        "ignore-txn-commit-ts", _list_kind(_INT, "an array of commit ts integers"), ())
    load_schema_snapshot: bool = _opt("load-schema-snapshot", _BOOL, False)
    case_sensitive: bool = _opt("case-sensitive", _BOOL, False)
    exactly_once: bool | None = _opt("exactly-once", _BOOL, None)
    # ours: each upstream txn is one downstream txn (README "Transaction-atomic mode")
    txn_atomic: bool = _opt("txn-atomic", _BOOL, False)
    # ours: a transaction with more row changes is applied in chunks (0: always whole)
    txn_chunk_rows: int = _opt("txn-chunk-rows", _int_kind(0), 50_000)
    # ours: a Commit binlog this large (bytes) goes pump -> keeper by reference, read in
    # ranges from the pump actor (tidb_binlog/binlog_ref.py); 0: every payload whole
    large_binlog_bytes: int = _opt("large-binlog-bytes", _bytes_kind(), DEFAULT_REF_ABOVE_BYTES)
    ignore_table: tuple[TableName, ...] = _section("ignore-table", TableName, shape="array")
    replicate_do_table: tuple[TableName, ...] = _section(
        "replicate-do-table", TableName, shape="array")
    table_migrate_rule: tuple[TableMigrateRule, ...] = _section(
        "table-migrate-rule", TableMigrateRule, shape="array")
    binlog_filter_rule: dict = _section("binlog-filter-rule", BinlogFilterRule, shape="map")
    relay: RelayConfig = _section("relay", RelayConfig)
    to: ToConfig = _section("to", ToConfig)


@dataclass(frozen=True)
class DrainerConfig:
    """drainer.toml (``cmd/drainer/drainer.toml``, ``drainer/config.go``) plus our keys."""

    addr: str = _opt("addr", _STR, "127.0.0.1:8249")
    advertise_addr: str = _opt("advertise-addr", _STR, "")
    node_id: str = _opt("node-id", _STR, "")
    log_level: str = _opt("log-level", _STR, "info")
    log_file: str = _opt("log-file", _STR, "")
    data_dir: str = _opt("data-dir", _STR, "data.drainer")
    detect_interval_s: float = _opt("detect-interval", _float_kind(), 5.0)
    pd_urls: str = _opt("pd-urls", _STR, "http://127.0.0.1:2379")
    initial_commit_ts: int = _opt("initial-commit-ts", _int_kind(-1, (1 << 63) - 1), -1)
    synced_check_time_s: float = _opt("synced-check-time", _float_kind("minutes", unit_s=60),
                                      300.0)  # fmt: skip
    compressor: str = _opt("compressor", _STR, "")
    cache_binlog_count: int = _opt("cache-binlog-count", _int_kind(1), 8)
    cluster_id: int = _opt("cluster-id", _int_kind(1, (1 << 64) - 1), 1)
    registry: str = _opt("registry", _STR, "")
    security: SecurityConfig = _section("security", SecurityConfig)
    syncer: SyncerConfig = _section("syncer", SyncerConfig)

    def to_toml(self) -> str:
        return _to_toml(self)


def load_drainer_config(path: str | Path | None, overrides: dict | None = None, *,
                        env: dict | None = None) -> DrainerConfig:  # fmt: skip
    """Load drainer.toml, apply flag ``overrides``, then TiDB Binlog's adjustments.

    ``env`` (default ``os.environ``) supplies ``MYSQL_HOST/PORT/USER/PSWD``.
    """
    cfg, source = _load(DrainerConfig, path, overrides, _DRAINER_FLAGS)
    return _resolve_drainer(cfg, source, os.environ if env is None else env)



_PARQUET_CODECS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")


def _resolve_drainer(cfg: DrainerConfig, source: str, env) -> DrainerConfig:
    advertise = _check_common(cfg, source)
    if cfg.compressor not in ("", "gzip"):
        raise _fail("compressor", source, f"{cfg.compressor!r} is not supported; use \"gzip\" "
                    "or \"\" (no compression)")  # fmt: skip
    return replace(cfg, advertise_addr=advertise, syncer=_resolve_syncer(cfg, source, env))


def _resolve_syncer(cfg: DrainerConfig, source: str, env) -> SyncerConfig:
    s = cfg.syncer
    try:
        kind = sink_kind(s.db_type)
    except ConfigError as exc:
        raise _fail("syncer.db-type", source, exc.message.removeprefix("db-type ")) from None
    db_type = kind.canonical_db_type if s.db_type == "pb" else s.db_type
    exactly_once = kind.exactly_once if s.exactly_once is None else s.exactly_once
    if exactly_once and not kind.exactly_once:
        raise _fail("syncer.exactly-once", source, "needs a mysql or tidb downstream; set it "
                    f"to false for db-type {db_type}")  # fmt: skip
    for i, name in enumerate(s.ignore_schemas):
        if not name:
            raise _fail("syncer.ignore-schemas", source, f"empty schema name at position {i}")
    for i, name in enumerate(s.replicate_do_db):
        if not name:
            raise _fail("syncer.replicate-do-db", source, f"empty schema name at position {i}")
    for key, tables in (("ignore-table", s.ignore_table), ("replicate-do-table",
                                                           s.replicate_do_table)):  # fmt: skip
        for i, t in enumerate(tables):
            if not t.db_name or not t.tbl_name:
                raise _fail(f"syncer.{key}[{i}]", source, "db-name and tbl-name are required")
    for i, rule in enumerate(s.table_migrate_rule):
        if not rule.source.schema:
            raise _fail(f"syncer.table-migrate-rule[{i}].source.schema", source, "is required")
        for name in rule.binlog_filter_rule:
            if name not in s.binlog_filter_rule:
                raise _fail(f"syncer.table-migrate-rule[{i}].binlog-filter-rule", source,
                            f"no [syncer.binlog-filter-rule.{name}] is defined")  # fmt: skip
    for key, problem in config_problems(s)[:1]:  # patterns, regexes, event types
        raise _fail(key, source, problem)
    if s.txn_atomic and not kind.txn_atomic:
        raise _fail("syncer.txn-atomic", source, f"applies to a mysql or tidb downstream only "
                    f"(db-type {db_type!r} writes whole transactions already); remove it")
    if s.to.emulated_tidb_registry:
        ns, _, name = s.to.emulated_tidb_registry.partition("/")
        if not kind.needs_downstream or not ns or "/" in name:
            raise _fail("syncer.to.emulated-tidb-registry", source, "names the registry of the "
                        "cluster whose emulated TiDB is the downstream: \"<ray namespace>"
                        "[/<actor name>]\", with db-type mysql or tidb; got "
                        f"{s.to.emulated_tidb_registry!r} (db-type {db_type!r})")
    if s.relay.log_dir and not kind.relay_log:
        raise _fail("syncer.relay.log-dir", source, f"the relay log works only with a mysql or "
                    f"tidb downstream, not db-type {db_type!r}; remove [syncer.relay] log-dir")
    to = _resolve_to(s.to, kind, db_type, cfg.data_dir, source, env)
    worker_count = s.worker_count if kind.sql_workers and s.enable_dispatch else 1
    lower = [TableName(t.db_name.lower(), t.tbl_name.lower()) for t in s.replicate_do_table]
    return replace(s, db_type=db_type, exactly_once=exactly_once, worker_count=worker_count,
                   replicate_do_db=tuple(d.lower() for d in s.replicate_do_db),
                   replicate_do_table=tuple(lower), to=to)  # fmt: skip


def _decrypted(sec, key: str, source: str, env) -> str:
    """``password``, or the decrypted ``encrypted_password`` when that is set (it wins,
    as in TiDB Binlog): binlogctl ``encrypt``'s format and key (``$BINLOG_SECRET_KEY``
    from ``env``, else TiDB's default), so a value TiDB's binlogctl made works here."""
    if not sec.encrypted_password:
        return sec.password
    where = f"{key}.encrypted_password"
    try:
        return decrypt(sec.encrypted_password, key=secret_key(env), where=where)
    except ConfigError as exc:
        raise _fail(where, source, str(exc).removeprefix(f"{where}: ")) from None


_CHECKPOINT_ADDRESS_KEYS = ("host", "port", "user", "password", "encrypted_password")


def _resolve_to(to: ToConfig, kind: SinkKind, db_type: str, data_dir: str, source: str,
                env) -> ToConfig:
    for key, sec in (("syncer.to", to), ("syncer.to.checkpoint", to.checkpoint)):
        _check_security(sec.security, f"{key}.security", source)
    to = replace(to, password=_decrypted(to, "syncer.to", source, env),
                 checkpoint=replace(to.checkpoint, password=_decrypted(
                     to.checkpoint, "syncer.to.checkpoint", source, env)))  # fmt: skip
    if kind.needs_downstream:
        port = to.port or int(env.get("MYSQL_PORT") or 0) or 3306
        to = replace(to, host=to.host or env.get("MYSQL_HOST") or "localhost", port=port,
                     user=to.user or env.get("MYSQL_USER") or "root",
                     password=to.password or env.get("MYSQL_PSWD", ""))  # fmt: skip
    else:  # a directory of its own (parquet: the manifest is its checkpoint)
        to = replace(to, dir=to.dir or data_dir)
        if kind.name == "parquet" and to.parquet.compression not in _PARQUET_CODECS:
            raise _fail("syncer.to.parquet.compression", source, f"{to.parquet.compression!r} "
                        f"is not a Parquet codec; use one of {', '.join(_PARQUET_CODECS)}")
    return replace(to, checkpoint=_resolve_checkpoint(to, kind, db_type, source))


def _resolve_checkpoint(to: ToConfig, kind: SinkKind, db_type: str,
                        source: str) -> CheckpointConfig:
    """``[syncer.to.checkpoint]`` checked against what the sink kind accepts, its type
    defaulted (TiDB Binlog's: the db-type's own), and for a MySQL/TiDB checkpoint an
    empty host/port/user/password taken from ``[syncer.to]`` (for a mysql/tidb
    downstream: the checkpoint table then lives in the downstream itself)."""
    cp = to.checkpoint
    if not kind.checkpoint_types:  # the sink keeps its checkpoint itself (the manifest)
        given = [k for k in ("type", *_CHECKPOINT_ADDRESS_KEYS)
                 if getattr(cp, k) != getattr(CheckpointConfig(), k)]
        if given or cp.security != SecurityConfig():
            named = ", ".join(given) or "security"
            raise _fail(f"syncer.to.checkpoint.{given[0] if given else 'security'}", source,
                        f"db-type {db_type} keeps its checkpoint in its own {kind.checkpoint} "
                        f"(set: {named}); remove [syncer.to.checkpoint] from the config")
        return cp
    cp_type = cp.type or (db_type if db_type in kind.checkpoint_types
                          else kind.checkpoint_types[0])
    if cp_type not in kind.checkpoint_types:
        raise _fail("syncer.to.checkpoint.type", source,
                    f"{cp.type!r} is not supported for db-type {db_type}; use "
                    f"{' or '.join(kind.checkpoint_types)}, or leave it empty")
    if cp_type in ("mysql", "tidb"):
        cp = replace(cp, host=cp.host or to.host, port=cp.port or to.port,
                     user=cp.user or to.user, password=cp.password or to.password)  # fmt: skip
        if not cp.host or not cp.port:
            raise _fail("syncer.to.checkpoint.host", source, f"a {cp_type} checkpoint needs "
                        f"host and port when db-type is {db_type}")  # fmt: skip
    else:
        given = [k for k in _CHECKPOINT_ADDRESS_KEYS
                 if getattr(cp, k) != getattr(CheckpointConfig(), k)]
        if given:
            raise _fail(f"syncer.to.checkpoint.{given[0]}", source,
                        f"a {cp_type} checkpoint is the savepoint file in data-dir: "
                        f"{', '.join(given)} would be ignored; remove them, or set "
                        "[syncer.to.checkpoint] type = \"mysql\" to keep it in a database")
    return replace(cp, type=cp_type)
