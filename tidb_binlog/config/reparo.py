"""reparo.toml: :class:`ReparoConfig` and :func:`load_reparo_config` (``tidb-binlog reparo``).

TiDB Binlog's ``reparo/config.go`` keys and defaults (``data-dir``, ``log-file``,
``log-level``, ``dest-type`` = print, ``txn-batch`` = 20, ``worker-count`` = 16,
``safe-mode``, ``start-datetime`` / ``stop-datetime``, ``start-tso`` / ``stop-tso``,
``replicate-do-db``, ``[[replicate-do-table]]``, ``replicate-ignore-db``,
``[[replicate-ignore-table]]`` with ``db-name`` / ``tbl-name``, ``[dest-db]`` host,
port, user, password), plus ours: ``skip-corrupt``, ``allow-torn-tail``, ``large-record-bytes``,
``[dest-db] time-zone`` and ``[dest-db.security]`` ``ssl-ca`` / ``ssl-cert`` / ``ssl-key``
(TLS to the MySQL/TiDB restored into, read as drainer.toml's ``[syncer.to.security]``;
TiDB's reparo has none). The same strict rules as the other files: an unknown key is an
error naming the key and the file;
``overrides`` (the command-line flags, dotted keys or TiDB's flag names ``c`` and ``L``)
win over the file.

After loading (the checks TiDB makes, and a few it does not):

- ``data-dir`` must be set; ``dest-type`` is ``print`` or ``mysql``;
- a datetime (``"2006-01-02 15:04:05"``, the host's local time zone, as TiDB) becomes the
  TSO of that second (``ms << 18``) in ``start_ts`` / ``stop_ts``; giving both a datetime
  and a tso for the same end is refused (TiDB silently lets the datetime win);
- a stop below the start is refused, naming both;
- the do/ignore names are lower-cased (TiDB) and every ``~regex`` must compile.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from tidb_binlog.config._common import SecurityConfig
from tidb_binlog.config._kinds import (
    _BOOL,
    _STR,
    _bytes_kind,
    _int_kind,
    _list_kind,
    _opt,
    _section,
)
from tidb_binlog.config._toml import _load, _to_toml
from tidb_binlog.errors import ConfigError
from tidb_binlog.security import mysql_ssl

__all__ = ["ReparoConfig", "DestDBConfig", "ReparoTableName", "load_reparo_config",
           "DEST_TYPES", "DEST_DB_TLS_SECTION", "DATETIME_FORMAT", "datetime_to_tso"]

DEST_TYPES = ("print", "mysql")
DEST_DB_TLS_SECTION = "dest-db.security"
DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_LOG_LEVELS = ("debug", "info", "warn", "warning", "error", "fatal")
_REPARO_FLAGS = {"c": "worker-count", "L": "log-level"}
_NAMES = _list_kind(_STR, "an array of strings")


@dataclass(frozen=True)
class ReparoTableName:
    """An entry of ``[[replicate-do-table]]`` / ``[[replicate-ignore-table]]``."""

    db_name: str = _opt("db-name", _STR, "")
    tbl_name: str = _opt("tbl-name", _STR, "")


@dataclass(frozen=True)
class DestDBConfig:
    """``[dest-db]``: the MySQL / TiDB to restore into (``dest-type = "mysql"``)."""

    host: str = _opt("host", _STR, "127.0.0.1")
    port: int = _opt("port", _int_kind(1, 65535), 3306)
    user: str = _opt("user", _STR, "root")
    password: str = _opt("password", _STR, "", secret=True)
    # Ours: the session time zone the rows are written in. TIMESTAMP values are stored in
    # the files as text in the drainer's [syncer.to.params] time_zone (default UTC), so
    # this must name the same zone.
    time_zone: str = _opt("time-zone", _STR, "+00:00")
    # Ours: [dest-db.security], TLS as drainer.toml's [syncer.to.security] (on when ssl-ca
    # is set; ssl-cert/ssl-key for accounts created REQUIRE X509); see tidb_binlog.security.
    security: SecurityConfig = _section("security", SecurityConfig)

    def where(self) -> str:
        """``user@host:port`` for messages (never the password)."""
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True)
class ReparoConfig:
    """reparo.toml (see the module doc). ``start_ts`` / ``stop_ts`` are resolved from
    the datetimes or the tsos (0 = from the first record / to the last)."""

    data_dir: str = _opt("data-dir", _STR, "")
    log_file: str = _opt("log-file", _STR, "")
    log_level: str = _opt("log-level", _STR, "info")
    dest_type: str = _opt("dest-type", _STR, "print")
    txn_batch: int = _opt("txn-batch", _int_kind(1), 20)
    worker_count: int = _opt("worker-count", _int_kind(1, 1024), 16)
    safe_mode: bool = _opt("safe-mode", _BOOL, False)
    start_datetime: str = _opt("start-datetime", _STR, "")
    stop_datetime: str = _opt("stop-datetime", _STR, "")
    start_tso: int = _opt("start-tso", _int_kind(0, (1 << 63) - 1), 0)
    stop_tso: int = _opt("stop-tso", _int_kind(0, (1 << 63) - 1), 0)
    # Ours: skip damaged records (reported with file and offset) instead of stopping.
    skip_corrupt: bool = _opt("skip-corrupt", _BOOL, False)
    # Ours: a record cut short at the end of the newest file, with no drainer writing
    # there, is reported and the run still succeeds (else it stops with TornTail).
    allow_torn_tail: bool = _opt("allow-torn-tail", _BOOL, False)
    # Ours: a record of this many bytes or more is read in place, never whole (0 = off).
    large_record_bytes: int = _opt("large-record-bytes", _bytes_kind(), 8 << 20)
    replicate_do_db: tuple[str, ...] = _opt("replicate-do-db", _NAMES, ())
    replicate_ignore_db: tuple[str, ...] = _opt("replicate-ignore-db", _NAMES, ())
    replicate_do_table: tuple[ReparoTableName, ...] = _section(
        "replicate-do-table", ReparoTableName, shape="array")
    replicate_ignore_table: tuple[ReparoTableName, ...] = _section(
        "replicate-ignore-table", ReparoTableName, shape="array")
    dest_db: DestDBConfig = _section("dest-db", DestDBConfig)
    # The range, resolved from the datetimes or the tsos by load_reparo_config (set on the
    # instance; not TOML keys, so to_toml() renders only what the file said).
    start_ts: ClassVar[int] = 0
    stop_ts: ClassVar[int] = 0

    def to_toml(self) -> str:
        return _to_toml(self)


def datetime_to_tso(text: str, tz: datetime.tzinfo | None = None) -> int:
    """``"2006-01-02 15:04:05"`` in ``tz`` (None: the host's local zone) → its TSO.

    ValueError when the text is not in that form."""
    moment = datetime.datetime.strptime(text.strip(), DATETIME_FORMAT)
    moment = moment.replace(tzinfo=tz) if tz is not None else moment.astimezone()
    return int(moment.timestamp()) * 1000 << 18


def _fail(key: str, source: str, message: str) -> ConfigError:
    return ConfigError(f"`{key}` in {source}: {message}", key=key, path=source)


def _resolve_end(cfg: ReparoConfig, end: str, source: str, tz) -> int:
    text, tso = getattr(cfg, f"{end}_datetime"), getattr(cfg, f"{end}_tso")
    if text and tso:
        raise _fail(f"{end}-datetime", source, f"both {end}-datetime ({text!r}) and "
                    f"{end}-tso ({tso}) are set; keep one")
    if not text:
        return tso
    try:
        return datetime_to_tso(text, tz)
    except ValueError:
        raise _fail(f"{end}-datetime", source, f"{text!r} is not a datetime like "
                    "\"2006-01-02 15:04:05\" (the host's local time)") from None


def load_reparo_config(path: str | Path | None, overrides: dict | None = None, *,
                       tz: datetime.tzinfo | None = None) -> ReparoConfig:
    """Load reparo.toml (``None``: defaults only), apply ``overrides``, check, resolve
    the range. ``tz`` is the zone of the datetimes (None: the host's, as TiDB)."""
    cfg, source = _load(ReparoConfig, path, overrides, _REPARO_FLAGS)
    if any(v is not None for v in (overrides or {}).values()):  # a value may be a flag's
        source = "the command line" if path is None else f"{source} or the command line"
    if not cfg.data_dir:
        raise _fail("data-dir", source, "is empty; set it to the directory of the drainer's "
                    "file sink (drainer.toml [syncer.to] dir) or pass --data-dir")
    if cfg.dest_type not in DEST_TYPES:
        raise _fail("dest-type", source, f"{cfg.dest_type!r} is not supported; use one of "
                    f"{', '.join(DEST_TYPES)}")
    if cfg.log_level.lower() not in _LOG_LEVELS:
        raise _fail("log-level", source, f"{cfg.log_level!r} is not one of {_LOG_LEVELS}")
    if cfg.dest_type == "mysql" and not cfg.dest_db.host:
        raise _fail("dest-db.host", source, "is empty; name the MySQL/TiDB to restore into")
    if cfg.dest_type == "mysql":  # a wrong TLS file fails here, before any file is read
        mysql_ssl(cfg.dest_db.security, DEST_DB_TLS_SECTION)
    start_ts = _resolve_end(cfg, "start", source, tz)
    stop_ts = _resolve_end(cfg, "stop", source, tz)
    if stop_ts and stop_ts < start_ts:
        raise _fail("stop-tso" if not cfg.stop_datetime else "stop-datetime", source,
                    f"the stop ({stop_ts}) is below the start ({start_ts}); nothing would be "
                    "restored")
    do_tables, ignore_tables = [], []
    for key, entries, out in (("replicate-do-table", cfg.replicate_do_table, do_tables),
                              ("replicate-ignore-table", cfg.replicate_ignore_table,
                               ignore_tables)):
        for i, t in enumerate(entries):
            if not t.db_name or not t.tbl_name:
                raise _fail(f"{key}[{i}]", source, "needs both db-name and tbl-name")
            out.append(ReparoTableName(t.db_name.lower(), t.tbl_name.lower()))
    names = {"replicate-do-db": [n.lower() for n in cfg.replicate_do_db],
             "replicate-ignore-db": [n.lower() for n in cfg.replicate_ignore_db]}
    patterns = [(k, p) for k, v in names.items() for p in v]
    patterns += [(f"{k}.{f}", getattr(t, f.replace("-", "_")))
                 for k, ts in (("replicate-do-table", do_tables),
                               ("replicate-ignore-table", ignore_tables))
                 for t in ts for f in ("db-name", "tbl-name")]
    for key, pattern in patterns:
        if not pattern.startswith("~"):
            continue
        try:  # the matcher (tidb_binlog.reparo.filter) compiles it the same way
            re.compile(pattern[1:], re.IGNORECASE)
        except re.error as exc:
            raise _fail(key, source, f"{pattern!r} is not a valid regular expression: "
                        f"{exc}") from None
    out = replace(cfg, replicate_do_db=tuple(names["replicate-do-db"]),
                  replicate_ignore_db=tuple(names["replicate-ignore-db"]),
                  replicate_do_table=tuple(do_tables),
                  replicate_ignore_table=tuple(ignore_tables))
    object.__setattr__(out, "start_ts", start_ts)
    object.__setattr__(out, "stop_ts", stop_ts)
    return out
