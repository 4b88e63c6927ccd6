"""What pump.toml and drainer.toml share: ``[security]``, the address, log-level and registry checks.

:func:`split_registry` reads the ``registry`` option (ours): "" is standalone,
``"<ray namespace>[/<actor name>]"`` names the registry actor.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidb_binlog.config._kinds import _STR, _Bad, _bad_value, _list_kind, _opt
from tidb_binlog.drainer.sinks.kinds import SUPPORTED_DB_TYPES  # the drainer's db-types
from tidb_binlog.errors import ConfigError

__all__ = ["SecurityConfig", "split_registry", "DEFAULT_REGISTRY_NAME", "SUPPORTED_DB_TYPES"]

# Keys TiDB Binlog knows in [syncer.to] / [syncer.to.checkpoint] for sinks we do not have;
# an unknown key among them (in either file) is rejected with a hint naming SUPPORTED_DB_TYPES.
_TIDB_ONLY_KEYS = {"zookeeper-addrs", "kafka-addrs", "kafka-version", "kafka-max-messages",
                   "kafka-client-id", "kafka-max-message-size", "topic-name",
                   "oracle-service-name", "oracle-connect-string"}  # fmt: skip
_LOG_LEVELS = ("debug", "info", "warn", "warning", "error", "fatal")
DEFAULT_REGISTRY_NAME = "tidb-binlog-registry"


@dataclass(frozen=True)
class SecurityConfig:
    """``[security]``: TLS for gRPC/HTTP (and, in TiDB, for PD/TiKV)."""

    ssl_ca: str = _opt("ssl-ca", _STR, "")
    ssl_cert: str = _opt("ssl-cert", _STR, "")
    ssl_key: str = _opt("ssl-key", _STR, "")
    cert_allowed_cn: tuple[str, ...] = _opt(
        "cert-allowed-cn", _list_kind(_STR, "an array of strings"), ())


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
