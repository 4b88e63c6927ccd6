"""pump.toml and drainer.toml: TiDB Binlog's option names and defaults, strictly.

A config is a frozen dataclass tree. Every TOML key is declared on a field
(``metadata["key"]``) with a *kind* that parses and renders it; the Python
field names are the snake_case keys with units (``gc_s``, ``*_bytes``), and
every duration is in seconds whatever unit the file uses (days for ``gc`` and
``retention-time``, minutes for ``synced-check-time``). ``tidb_binlog/CONFIG.md``
lists every key with its default.

Loading rules (:func:`load_pump_config`, :func:`load_drainer_config`):

1. Strict: a key that is not declared, at any nesting level, raises
   :class:`~tidb_binlog.errors.ConfigError` naming the dotted key and the file;
   a value of the wrong type or range names the key, the file, the value and
   what is expected.
2. ``overrides`` are the command-line flags and win over the file. Keys are
   dotted TOML keys (``"syncer.worker-count"``) or TiDB Binlog's flag names
   (``"c"``, ``"dest-db-type"``, ``"fake-binlog-interval"``, ``"L"``); ``_`` may
   stand for ``-``; ``None`` means "flag not given". Strings are accepted for
   numbers and booleans. Within one source ``disable-*`` beats ``enable-*``.
3. Then TiDB Binlog's adjustments: ``advertise-addr`` defaults to ``addr``;
   db-type ``pb`` means ``file``; ``worker-count`` is 1 for ``file`` or when
   dispatch is off; ``replicate-do-*`` names are lower-cased; ``[syncer.to]``
   host/port/user/password default to ``$MYSQL_HOST``/``$MYSQL_PORT``/
   ``$MYSQL_USER``/``$MYSQL_PSWD`` or localhost/3306/root/"" for mysql/tidb, and
   ``dir`` to ``data-dir`` for file; the checkpoint type follows db-type and an
   empty checkpoint host/port/user/password is taken from ``[syncer.to]``.

``to_toml()`` renders a config back; loading that text gives an equal config.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from tidb_binlog.errors import ConfigError

__all__ = [
    "SecurityConfig",
    "KVConfig",
    "StorageConfig",
    "PumpConfig",
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
    "load_pump_config",
    "load_drainer_config",
    "parse_gc",
    "parse_go_duration",
    "parse_bytes",
    "split_registry",
]

SUPPORTED_DB_TYPES = ("mysql", "tidb", "file")
_TIDB_ONLY_DB_TYPES = ("kafka", "oracle")
_LOG_LEVELS = ("debug", "info", "warn", "warning", "error", "fatal")
_DAY_S = 86400
_MIB = 1 << 20
DEFAULT_REGISTRY_NAME = "tidb-binlog-registry"


# ------------------------------------------------------------------ value kinds


class _Bad(Exception):
    """A value is wrong; the message says what was expected."""


@dataclass(frozen=True)
class _Kind:
    expected: str
    parse: Any  # (toml value) -> python value, raises _Bad
    render: Any = None  # python value -> toml value (None: identity)
    from_text: Any = None  # str flag value -> toml value, for non-string kinds


def _check(ok: bool, expected: str) -> None:
    if not ok:
        raise _Bad(expected)


def _str_kind() -> _Kind:
    def parse(v):
        _check(isinstance(v, str), "a string")
        return v

    return _Kind("a string", parse)


def _int_kind(low: int | None = None, high: int | None = None) -> _Kind:
    span = f" in [{low}, {high}]" if high is not None else f" >= {low}" if low is not None else ""

    def parse(v):
        _check(isinstance(v, int) and not isinstance(v, bool), f"an integer{span}")
        _check((low is None or v >= low) and (high is None or v <= high), f"an integer{span}")
        return v

    return _Kind(f"an integer{span}", parse, from_text=int)


def _bool_parse(v):
    _check(isinstance(v, bool), "true or false")
    return v


def _bool_text(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise _Bad("true or false")


def _float_kind(unit: str = "seconds", minimum: float = 0.0, unit_s: float = 1.0,
                allow_zero: bool = False, as_float: bool = False) -> _Kind:
    """A number in ``unit``, stored times ``unit_s`` (seconds); rendered as an int when
    integral unless ``as_float`` (TiDB declares the key as a float64)."""
    floor = f">= {minimum / unit_s:g}" if minimum else ">= 0" if allow_zero else "> 0"
    what = f"a number of {unit} {floor} (fractions allowed)"

    def parse(v):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        _check(ok and v * unit_s >= minimum and (v > 0 or (allow_zero and v == 0)), what)
        return float(v) * unit_s

    render = (lambda s: s / unit_s) if as_float else (lambda s: _plain(s / unit_s))
    return _Kind(what, parse, render, float)


def _plain(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


_GO_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
               "m": 60.0, "h": 3600.0}  # fmt: skip
_GO_PART = re.compile(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` in seconds: ``"8h"``, ``"1h30m"``, ``"1.5s"``, ``"0"``."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _GO_PART.match(body, pos)
        if not match or match.group(1) in ("", "."):
            raise _Bad(f'a Go duration like "8h", "30m" or "1h30m", not {text!r}')
        total += float(match.group(1)) * _GO_UNITS_S[match.group(2)]
        pos = match.end()
    if not body:
        raise _Bad('a Go duration like "8h", "30m" or "1h30m"')
    return -total if text.startswith("-") else total


def parse_gc(value: int | str) -> float:
    """TiDB Binlog's ``util.Duration`` in seconds: an int number of days or a Go duration."""
    if isinstance(value, int) and not isinstance(value, bool):
        _check(value >= 0, "a number of days >= 0 or a duration string like \"8h\"")
        return float(value * _DAY_S)
    _check(isinstance(value, str), 'an int number of days or a duration string like "8h"')
    if value.isdigit():
        return float(int(value) * _DAY_S)
    return parse_go_duration(value)


def _render_duration(seconds: float) -> int | str:
    if seconds % _DAY_S == 0:
        return int(seconds // _DAY_S)
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{_plain(seconds)}s"


def _duration_kind(allow_zero: bool = False) -> _Kind:
    what = 'an int number of days or a Go duration string like "8h", "30m", "1h30m"'
    what += "" if allow_zero else " (must be > 0)"

    def parse(v):
        seconds = parse_gc(v)
        _check(seconds > 0 or (allow_zero and seconds == 0), what)
        return seconds

    return _Kind(what, parse, _render_duration)


_SIZE_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtpe", start=1):
    _SIZE_UNITS.update({_p: 1000**_i, _p + "b": 1000**_i, _p + "i": 1024**_i,
                        _p + "ib": 1024**_i})  # fmt: skip
_SIZE = re.compile(r"([0-9.,]+)\s*([A-Za-z]*)\s*$")


def parse_bytes(value: int | str) -> int:
    """go-humanize ParseBytes: ``"10 gib"``, ``"512 MiB"``, ``"1GB"`` (SI), or an int."""
    expected = 'a size in bytes: an integer or a string like "10 gib", "512 MiB", "1GB"'
    if isinstance(value, int) and not isinstance(value, bool):
        _check(value >= 0, expected)
        return value
    _check(isinstance(value, str), expected)
    match = _SIZE.match(value.strip())
    _check(match is not None and match.group(2).lower() in _SIZE_UNITS, expected)
    try:
        number = float(match.group(1).replace(",", ""))
    except ValueError:
        raise _Bad(expected) from None
    return int(number * _SIZE_UNITS[match.group(2).lower()])


def _bytes_kind() -> _Kind:
    return _Kind('an integer or a size like "10 gib"', parse_bytes, from_text=lambda t: t)


def _list_kind(item: _Kind, what: str) -> _Kind:
    def parse(v):
        _check(isinstance(v, list), what)
        try:
            return tuple(item.parse(x) for x in v)
        except _Bad:
            raise _Bad(what) from None

    def from_text(text: str):
        return [item.from_text(x) if item.from_text else x for x in text.split(",") if x]

    return _Kind(what, parse, list, from_text)


def _csv_kind() -> _Kind:
    def parse(v):
        _check(isinstance(v, str), "a comma-separated string")
        return tuple(part.strip() for part in v.split(","))

    return _Kind("a comma-separated string", parse, ",".join)


def _str_map_kind() -> _Kind:
    def parse(v):
        ok = isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
        _check(ok, "a table of string values")
        return dict(v)

    return _Kind("a table of string values", parse, dict)


_STR, _BOOL = _str_kind(), _Kind("true or false", _bool_parse, from_text=_bool_text)
_INT, _UINT64 = _int_kind(), _int_kind(0, (1 << 64) - 1)


def _opt(key: str, kind: _Kind, default: Any, **extra: Any):
    meta = {"key": key, "kind": kind, **extra}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def _section(key: str, cls: type, *, shape: str = "table", default: Any = MISSING):
    meta = {"key": key, "section": cls, "shape": shape}
    if default is not MISSING:
        return field(default=default, metadata=meta)
    factory = {"table": cls, "array": tuple, "map": dict}[shape]
    return field(default_factory=factory, metadata=meta)


# ------------------------------------------------------------------ dataclasses


@dataclass(frozen=True)
class SecurityConfig:
    """``[security]``: TLS for gRPC/HTTP (and, in TiDB, for PD/TiKV)."""

    ssl_ca: str = _opt("ssl-ca", _STR, "")
    ssl_cert: str = _opt("ssl-cert", _STR, "")
    ssl_key: str = _opt("ssl-key", _STR, "")
    cert_allowed_cn: tuple[str, ...] = _opt(
        "cert-allowed-cn", _list_kind(_STR, "an array of strings"), ())


@dataclass(frozen=True)
class KVConfig:
    """``[storage.kv]``: LevelDB tuning of the pump index (TiDB Binlog's goleveldb knobs)."""

    block_cache_bytes: int = _opt("block-cache-capacity", _int_kind(1), 8 * _MIB)
    block_restart_interval: int = _opt("block-restart-interval", _int_kind(1), 16)
    block_size_bytes: int = _opt("block-size", _int_kind(1), 4096)
    compaction_l0_trigger: int = _opt("compaction-L0-trigger", _int_kind(1), 8)
    compaction_table_size_bytes: int = _opt("compaction-table-size", _int_kind(1), 64 * _MIB)
    compaction_total_size_bytes: int = _opt("compaction-total-size", _int_kind(1), 512 * _MIB)
    compaction_total_size_multiplier: float = _opt(
        "compaction-total-size-multiplier", _float_kind("units", as_float=True), 8.0)
    write_buffer_bytes: int = _opt("write-buffer", _int_kind(1), 64 * _MIB)
    write_l0_pause_trigger: int = _opt("write-L0-pause-trigger", _int_kind(1), 24)
    write_l0_slowdown_trigger: int = _opt("write-L0-slowdown-trigger", _int_kind(1), 17)


@dataclass(frozen=True)
class StorageConfig:
    """``[storage]``: the pump's value log and index."""

    sync_log: bool = _opt("sync-log", _BOOL, True)
    kv_chan_cap: int = _opt("kv_chan_cap", _int_kind(1), 1 << 20)
    slow_write_threshold_s: float = _opt("slow_write_threshold", _float_kind(as_float=True), 1.0)
    stop_write_at_available_space_bytes: int = _opt(
        "stop-write-at-available-space", _bytes_kind(), 10 << 30)
    value_log_file_size_bytes: int = _opt("value-log-file-size", _bytes_kind(), 500 * _MIB)
    kv: KVConfig = _section("kv", KVConfig)


@dataclass(frozen=True)
class PumpConfig:
    """pump.toml (``cmd/pump/pump.toml``, ``pump/config.go``) plus our keys."""

    addr: str = _opt("addr", _STR, "127.0.0.1:8250")
    advertise_addr: str = _opt("advertise-addr", _STR, "")
    socket: str = _opt("socket", _STR, "")
    pd_urls: str = _opt("pd-urls", _STR, "http://127.0.0.1:2379")
    data_dir: str = _opt("data-dir", _STR, "data.pump")
    heartbeat_interval_s: float = _opt("heartbeat-interval", _float_kind(), 2.0)
    gc_s: float = _opt("gc", _duration_kind(), 7.0 * _DAY_S)
    gen_binlog_interval_s: float = _opt("gen-binlog-interval", _float_kind(), 3.0)
    node_id: str = _opt("node-id", _STR, "")
    log_file: str = _opt("log-file", _STR, "")
    log_level: str = _opt("log-level", _STR, "info")
    max_message_size_bytes: int = _opt("max-message-size", _int_kind(1, (1 << 31) - 1),
                                       (1 << 31) - 1)  # fmt: skip
    cluster_id: int = _opt("cluster-id", _int_kind(1, (1 << 64) - 1), 1)
    max_txn_timeout_s: float = _opt("max-txn-timeout", _float_kind(minimum=1.0), 600.0)
    registry: str = _opt("registry", _STR, "")
    security: SecurityConfig = _section("security", SecurityConfig)
    storage: StorageConfig = _section("storage", StorageConfig)

    def to_toml(self) -> str:
        return _to_toml(self)


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
    password: str = _opt("password", _STR, "")
    encrypted_password: str = _opt("encrypted_password", _STR, "")
    security: SecurityConfig = _section("security", SecurityConfig)


@dataclass(frozen=True)
class ToConfig:
    """``[syncer.to]``: the downstream (mysql/tidb connection, or the file sink dir)."""

    host: str = _opt("host", _STR, "")
    port: int = _opt("port", _int_kind(0, 65535), 0)
    user: str = _opt("user", _STR, "")
    password: str = _opt("password", _STR, "")
    encrypted_password: str = _opt("encrypted_password", _STR, "")
    sync_mode: int = _opt("sync-mode", _int_kind(1, 2), 1)
    read_timeout_s: float = _opt("read-timeout", _duration_kind(), 60.0)
    params: dict = _opt("params", _str_map_kind(), {})
    merge: bool = _opt("merge", _BOOL, True)
    dir: str = _opt("dir", _STR, "")
    retention_time_s: float = _opt("retention-time", _float_kind("days", unit_s=_DAY_S, allow_zero=True),
                                   0.0)  # fmt: skip
    security: SecurityConfig = _section("security", SecurityConfig)
    checkpoint: CheckpointConfig = _section("checkpoint", CheckpointConfig)


@dataclass(frozen=True)
class SyncerConfig:
    """``[syncer]``: translation, filters, workers and the downstream."""

    sql_mode: str | None = _opt("sql-mode", _STR, None)
    txn_batch: int = _opt("txn-batch", _int_kind(1), 20)
    worker_count: int = _opt("worker-count", _int_kind(1), 16)
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


# ------------------------------------------------------------------ loading

# TiDB Binlog's command-line flag names that are not the dotted TOML key.
_PUMP_FLAGS = {"L": "log-level", "fake-binlog-interval": "gen-binlog-interval"}
_DRAINER_FLAGS = {
    "L": "log-level", "c": "syncer.worker-count", "dest-db-type": "syncer.db-type",
    "relay-log-dir": "syncer.relay.log-dir", "relay-max-file-size": "syncer.relay.max-file-size",
    **{k: f"syncer.{k}" for k in (
        "txn-batch", "loopback-control", "sync-ddl", "channel-id", "ignore-schemas", "safe-mode",
        "enable-dispatch", "disable-dispatch", "enable-detect", "disable-detect",
        "load-schema-snapshot", "exactly-once", "sql-mode")},
}  # fmt: skip
# Keys TiDB Binlog knows in [syncer.to] / [syncer.to.checkpoint] for sinks we do not have.
_TIDB_ONLY_KEYS = {"zookeeper-addrs", "kafka-addrs", "kafka-version", "kafka-max-messages",
                   "kafka-client-id", "kafka-max-message-size", "topic-name",
                   "oracle-service-name", "oracle-connect-string"}  # fmt: skip


class _Partial(dict):
    """Values of one table section, by field name, before defaults are filled in."""


def load_pump_config(path: str | Path | None, overrides: dict | None = None) -> PumpConfig:
    """Load pump.toml (``None``: defaults only), apply flag ``overrides``, validate."""
    cfg, source = _load(PumpConfig, path, overrides, _PUMP_FLAGS)
    return _resolve_pump(cfg, source)


def load_drainer_config(path: str | Path | None, overrides: dict | None = None, *,
                        env: dict | None = None) -> DrainerConfig:  # fmt: skip
    """Load drainer.toml, apply flag ``overrides``, then TiDB Binlog's adjustments.

    ``env`` (default ``os.environ``) supplies ``MYSQL_HOST/PORT/USER/PSWD``.
    """
    cfg, source = _load(DrainerConfig, path, overrides, _DRAINER_FLAGS)
    return _resolve_drainer(cfg, source, os.environ if env is None else env)


def _load(cls, path, overrides, flag_aliases):
    source, values = "defaults", _Partial()
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as fh:
                table = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {source}: {exc.strerror}",
                              path=source) from exc  # fmt: skip
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source} is not valid TOML: {exc}", path=source) from exc
        values = _parse_table(cls, table, "", source)
    if overrides:
        _apply_overrides(cls, values, overrides, flag_aliases, source)
    return _build(cls, values), source


def _bad_value(dotted: str, source: str, value, expected: str) -> ConfigError:
    return ConfigError(f"`{dotted}` in {source} is {value!r}; expected {expected}",
                       key=dotted, path=source)  # fmt: skip


def _parse_table(cls, table, prefix: str, source: str) -> _Partial:
    if not isinstance(table, dict):
        raise _bad_value(prefix.rstrip("."), source, table, "a table")
    by_key = {f.metadata["key"]: f for f in fields(cls)}
    inverse = {f.metadata["inverse"]: f for f in fields(cls) if "inverse" in f.metadata}
    out = _Partial()
    for key in sorted(table, key=lambda k: k in inverse):  # disable-* after enable-*
        dotted, value = prefix + key, table[key]
        if key in inverse:
            out[inverse[key].name] = not _parse_value(inverse[key], value, dotted, source)
        elif key in by_key:
            out[by_key[key].name] = _parse_value(by_key[key], value, dotted, source)
        else:
            hint = ""
            if key in _TIDB_ONLY_KEYS:
                hint = (" (it configures TiDB Binlog's kafka/oracle sink, which is not supported"
                        f" here: db-type may be {', '.join(SUPPORTED_DB_TYPES)})")
            raise ConfigError(f"unknown key `{dotted}` in {source}{hint}; remove it or check "
                              "its spelling against tidb_binlog/CONFIG.md",
                              key=dotted, path=source)  # fmt: skip
    return out


def _parse_value(f, value, dotted: str, source: str, *, from_flag: bool = False):
    meta = f.metadata
    if "section" not in meta:
        kind: _Kind = meta["kind"]
        try:
            if from_flag and isinstance(value, str) and kind.from_text is not None:
                try:
                    value = kind.from_text(value)
                except ValueError:
                    raise _Bad(kind.expected) from None
            return kind.parse(value)
        except _Bad as exc:
            raise _bad_value(dotted, source, value, str(exc)) from None
    cls, shape = meta["section"], meta["shape"]
    if shape == "table":
        return _parse_table(cls, value, dotted + ".", source)
    if shape == "array":
        if not isinstance(value, list):
            raise _bad_value(dotted, source, value, f"an array of tables ([[{dotted}]])")
        return tuple(_build(cls, _parse_table(cls, item, f"{dotted}[{i}].", source))
                     for i, item in enumerate(value))  # fmt: skip
    if not isinstance(value, dict):
        raise _bad_value(dotted, source, value, f"a table of named tables ([{dotted}.<name>])")
    return {name: _build(cls, _parse_table(cls, item, f"{dotted}.{name}.", source))
            for name, item in value.items()}  # fmt: skip


def _build(cls, values: _Partial):
    kwargs = {}
    for f in fields(cls):
        if f.name in values:
            value = values[f.name]
            kwargs[f.name] = _build(f.metadata["section"], value) if isinstance(
                value, _Partial) else value
    return cls(**kwargs)


def _flag_index(cls, prefix: str = "", path: tuple = ()) -> dict:
    """Dotted TOML key → (field path, field, inverted) for every scalar option."""
    index = {}
    for f in fields(cls):
        key = prefix + f.metadata["key"]
        if "section" in f.metadata:
            if f.metadata["shape"] == "table" and f.default is MISSING:
                index.update(_flag_index(f.metadata["section"], key + ".", path + (f,)))
            continue
        index[key] = (path, f, False)
        if "inverse" in f.metadata:
            index[prefix + f.metadata["inverse"]] = (path, f, True)
    return index


def _apply_overrides(cls, values: _Partial, overrides: dict, aliases: dict, source: str):
    index = _flag_index(cls)
    flags_source = f"the command line (over {source})"
    resolved = []
    for key, value in overrides.items():
        if value is None:
            continue
        candidates = (key, key.replace("_", "-"))
        dotted = next((aliases.get(c, c) for c in candidates if aliases.get(c, c) in index), None)
        if dotted is None:
            raise ConfigError(f"unknown flag or override `{key}`; use a dotted config key "
                              "such as `syncer.worker-count` (see tidb_binlog/CONFIG.md)",
                              key=key, path=flags_source)  # fmt: skip
        resolved.append((dotted, value))
    for dotted, value in sorted(resolved, key=lambda kv: index[kv[0]][2]):
        path, f, inverted = index[dotted]
        parsed = _parse_value(f, value, dotted, flags_source, from_flag=True)
        target = values
        for section in path:
            target = target.setdefault(section.name, _Partial())
        target[f.name] = (not parsed) if inverted else parsed


# ------------------------------------------------------------------ validation


def split_registry(value: str) -> tuple[str, str] | None:
    """``registry``: "" → None (standalone); ``"ns"`` or ``"ns/name"`` → (namespace, name)."""
    if not value:
        return None
    namespace, _, name = value.partition("/")
    name = name or DEFAULT_REGISTRY_NAME
    if not namespace or "/" in name:
        raise _Bad('"<ray namespace>" or "<ray namespace>/<actor name>", or "" for standalone')
    return namespace, name


def _fail(key: str, source: str, message: str) -> ConfigError:
    return ConfigError(f"`{key}` in {source}: {message}", key=key, path=source)


def _host_of(addr: str, key: str, source: str) -> str:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535 or host.count(":") and not (
            host.startswith("[") and host.endswith("]")):  # fmt: skip
        raise _fail(key, source, f"{addr!r} is not host:port (e.g. 127.0.0.1:8250, [::1]:8250)")
    return host.strip("[]")


def _check_common(cfg, source: str) -> str:
    """Checks pump and drainer share; returns the effective advertise address."""
    _host_of(cfg.addr, "addr", source)
    advertise = cfg.advertise_addr or cfg.addr
    host = _host_of(advertise, "advertise-addr", source)
    if host in ("", "0.0.0.0", "::"):
        raise _fail("advertise-addr", source, f"{advertise!r} is not an address peers can reach;"
                    " set advertise-addr to this host's IP or name")  # fmt: skip
    if cfg.log_level.lower() not in _LOG_LEVELS:
        raise _fail("log-level", source, f"{cfg.log_level!r} is not one of {_LOG_LEVELS}")
    try:
        split_registry(cfg.registry)
    except _Bad as exc:
        raise _bad_value("registry", source, cfg.registry, str(exc)) from None
    _check_security(cfg.security, "security", source)
    return advertise


def _check_security(sec: SecurityConfig, key: str, source: str) -> None:
    if bool(sec.ssl_cert) != bool(sec.ssl_key):
        raise _fail(f"{key}.ssl-cert", source, "ssl-cert and ssl-key must be set together")


def _resolve_pump(cfg: PumpConfig, source: str) -> PumpConfig:
    advertise = _check_common(cfg, source)
    if cfg.socket and "/" not in cfg.socket:
        raise _fail("socket", source, f"{cfg.socket!r} is not a unix socket path")
    return replace(cfg, advertise_addr=advertise)


def _resolve_drainer(cfg: DrainerConfig, source: str, env) -> DrainerConfig:
    advertise = _check_common(cfg, source)
    if cfg.compressor not in ("", "gzip"):
        raise _fail("compressor", source, f"{cfg.compressor!r} is not supported; use \"gzip\" "
                    "or \"\" (no compression)")  # fmt: skip
    return replace(cfg, advertise_addr=advertise, syncer=_resolve_syncer(cfg, source, env))


def _resolve_syncer(cfg: DrainerConfig, source: str, env) -> SyncerConfig:
    s = cfg.syncer
    db_type = "file" if s.db_type == "pb" else s.db_type
    if db_type not in SUPPORTED_DB_TYPES:
        known = "is TiDB Binlog's but not supported here" if db_type in _TIDB_ONLY_DB_TYPES \
            else "is unknown"
        raise _fail("syncer.db-type", source, f"{s.db_type!r} {known}; supported: "
                    f"{', '.join(SUPPORTED_DB_TYPES)}")  # fmt: skip
    exactly_once = db_type in ("mysql", "tidb") if s.exactly_once is None else s.exactly_once
    if exactly_once and db_type == "file":
        raise _fail("syncer.exactly-once", source, "needs a mysql or tidb downstream; set it "
                    "to false for db-type file")  # fmt: skip
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
    to = _resolve_to(s.to, db_type, cfg.data_dir, source, env)
    worker_count = 1 if db_type == "file" or not s.enable_dispatch else s.worker_count
    lower = [TableName(t.db_name.lower(), t.tbl_name.lower()) for t in s.replicate_do_table]
    return replace(s, db_type=db_type, exactly_once=exactly_once, worker_count=worker_count,
                   replicate_do_db=tuple(d.lower() for d in s.replicate_do_db),
                   replicate_do_table=tuple(lower), to=to)  # fmt: skip


def _resolve_to(to: ToConfig, db_type: str, data_dir: str, source: str, env) -> ToConfig:
    for key, sec in (("syncer.to", to), ("syncer.to.checkpoint", to.checkpoint)):
        if sec.encrypted_password:
            raise _fail(f"{key}.encrypted_password", source, "encrypted passwords are not "
                        "supported; put the plain password in `password`")  # fmt: skip
        _check_security(sec.security, f"{key}.security", source)
    if db_type == "file":
        to = replace(to, dir=to.dir or data_dir)
    else:
        port = to.port or int(env.get("MYSQL_PORT") or 0) or 3306
        to = replace(to, host=to.host or env.get("MYSQL_HOST") or "localhost", port=port,
                     user=to.user or env.get("MYSQL_USER") or "root",
                     password=to.password or env.get("MYSQL_PSWD", ""))  # fmt: skip
    cp = to.checkpoint
    cp_type = cp.type or ("file" if db_type == "file" else db_type)
    if cp_type not in ("mysql", "tidb", "file"):
        raise _fail("syncer.to.checkpoint.type", source,
                    f"{cp.type!r} is not supported; use mysql, tidb or leave it empty")
    if cp_type != "file":
        cp = replace(cp, host=cp.host or to.host, port=cp.port or to.port,
                     user=cp.user or to.user, password=cp.password or to.password)  # fmt: skip
        if not cp.host or not cp.port:
            raise _fail("syncer.to.checkpoint.host", source, "a mysql/tidb checkpoint needs "
                        "host and port when db-type is file")  # fmt: skip
    return replace(to, checkpoint=replace(cp, type=cp_type))


# ------------------------------------------------------------------ rendering

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_value(key)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if is_dataclass(value):
        return _toml_value(dict(_scalar_items(value, inline=True)))
    raise TypeError(f"cannot render {value!r} as TOML")


def _scalar_items(obj, *, inline: bool):
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None or ("section" in f.metadata and not inline):
            continue
        kind = f.metadata.get("kind")
        yield f.metadata["key"], kind.render(value) if kind and kind.render else value


def _to_toml(cfg) -> str:
    lines = [f"# {type(cfg).__name__} rendered by tidb_binlog.config"]
    _emit_table(cfg, "", lines)
    return "\n".join(lines) + "\n"


def _emit_table(obj, dotted: str, lines: list[str]) -> None:
    if dotted:
        lines += ["", f"[{dotted}]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in _scalar_items(obj, inline=False)]
    for f in fields(obj):
        value, meta = getattr(obj, f.name), f.metadata
        if "section" not in meta or value is None:
            continue
        child = f"{dotted}.{_toml_key(meta['key'])}" if dotted else _toml_key(meta["key"])
        if meta["shape"] == "table":
            _emit_table(value, child, lines)
        elif meta["shape"] == "array":
            for item in value:
                lines += ["", f"[[{child}]]"]
                lines += [f"{_toml_key(k)} = {_toml_value(v)}"
                          for k, v in _scalar_items(item, inline=True)]  # fmt: skip
        else:
            for name, item in value.items():
                _emit_table(item, f"{child}.{_toml_key(name)}", lines)
