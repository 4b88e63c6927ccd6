"""pump.toml: :class:`PumpConfig` and :func:`load_pump_config`.

TiDB Binlog's ``cmd/pump/pump.toml`` / ``pump/config.go`` keys and defaults, plus
ours (``cluster-id``, ``max-txn-timeout``, ``registry``, ``value-log-file-size``).
After loading, ``advertise-addr`` defaults to ``addr`` and must be reachable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tidb_binlog.config._common import SecurityConfig, _check_common, _fail
from tidb_binlog.config._kinds import (
    _BOOL,
    _DAY_S,
    _MIB,
    _STR,
    _UINT64,
    _bytes_kind,
    _duration_kind,
    _float_kind,
    _int_kind,
    _list_kind,
    _opt,
    _section,
)
from tidb_binlog.config._toml import _load, _to_toml

__all__ = ["KVConfig", "StorageConfig", "PumpConfig", "load_pump_config"]

# TiDB Binlog's command-line flag names that are not the dotted TOML key.
_PUMP_FLAGS = {"L": "log-level", "fake-binlog-interval": "gen-binlog-interval"}


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
    # ts of damaged binlogs an operator gives up (named by the DamagedBinlog error); a
    # pull skips them instead of stopping there. Their transactions miss downstream.
    skip_damaged_ts: tuple[int, ...] = _opt(
        "skip-damaged-ts", _list_kind(_UINT64, "an array of ts integers"), ())
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
    # gRPC receive and send limit of the pump server: the largest Prewrite it takes and
    # the largest Commit (carrying its Prewrite's value) it serves; 2 GiB - 1 is gRPC's
    # int32 ceiling. The pump client's max_message_size_bytes should not exceed it.
    max_message_size_bytes: int = _opt("max-message-size", _int_kind(1, (1 << 31) - 1),
                                       (1 << 31) - 1)  # fmt: skip
    cluster_id: int = _opt("cluster-id", _int_kind(1, (1 << 64) - 1), 1)
    max_txn_timeout_s: float = _opt("max-txn-timeout", _float_kind(minimum=1.0), 600.0)
    registry: str = _opt("registry", _STR, "")
    security: SecurityConfig = _section("security", SecurityConfig)
    storage: StorageConfig = _section("storage", StorageConfig)

    def to_toml(self) -> str:
        return _to_toml(self)


def load_pump_config(path: str | Path | None, overrides: dict | None = None) -> PumpConfig:
    """Load pump.toml (``None``: defaults only), apply flag ``overrides``, validate."""
    cfg, source = _load(PumpConfig, path, overrides, _PUMP_FLAGS)
    return _resolve_pump(cfg, source)


def _resolve_pump(cfg: PumpConfig, source: str) -> PumpConfig:
    advertise = _check_common(cfg, source)
    if cfg.socket and "/" not in cfg.socket:
        raise _fail("socket", source, f"{cfg.socket!r} is not a unix socket path")
    return replace(cfg, advertise_addr=advertise)
