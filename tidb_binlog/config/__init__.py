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

Layout: ``pump.py`` and ``drainer.py`` declare each file's dataclasses, loader and
adjustments; ``_common.py`` what both share (``[security]``, address, log-level and
registry checks); ``_kinds.py`` the value kinds (durations, sizes, lists) and the
field declarations; ``_toml.py`` the strict reader, flag overrides and rendering.
Import the public names from ``tidb_binlog.config``.
"""

from tidb_binlog.config._common import DEFAULT_REGISTRY_NAME as DEFAULT_REGISTRY_NAME
from tidb_binlog.config._common import SecurityConfig, split_registry
from tidb_binlog.config._kinds import parse_bytes, parse_gc, parse_go_duration
from tidb_binlog.config.drainer import (
    SUPPORTED_DB_TYPES,
    BinlogFilterRule,
    CheckpointConfig,
    DrainerConfig,
    RelayConfig,
    SyncerConfig,
    TableMigrateRule,
    TableName,
    TableRef,
    ToConfig,
    load_drainer_config,
)
from tidb_binlog.config.pump import KVConfig, PumpConfig, StorageConfig, load_pump_config

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
