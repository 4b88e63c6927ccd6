"""pump.toml / drainer.toml: defaults, strictness, value kinds, overrides, round trip."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tidb_binlog.config import (
    DrainerConfig,
    PumpConfig,
    TableName,
    load_drainer_config,
    load_pump_config,
    parse_bytes,
    parse_gc,
    parse_go_duration,
    split_registry,
)
from tidb_binlog.cpus import default_worker_count
from tidb_binlog.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
DAY = 86400.0


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


# TiDB Binlog's documented defaults (inventory §1.5, §2.13; pump/config.go, drainer/config.go).
PUMP_DEFAULTS = [
    ("addr", "127.0.0.1:8250"),
    ("advertise_addr", "127.0.0.1:8250"),
    ("socket", ""),
    ("pd_urls", "http://127.0.0.1:2379"),
    ("data_dir", "data.pump"),
    ("heartbeat_interval_s", 2.0),
    ("gc_s", 7 * DAY),
    ("gen_binlog_interval_s", 3.0),
    ("node_id", ""),
    ("log_file", ""),
    ("log_level", "info"),
    ("max_txn_timeout_s", 600.0),
    ("registry", ""),
    ("security.ssl_ca", ""),
    ("security.cert_allowed_cn", ()),
    ("storage.sync_log", True),
    ("storage.kv_chan_cap", 1 << 20),
    ("storage.slow_write_threshold_s", 1.0),
    ("storage.stop_write_at_available_space_bytes", 10 * 2**30),
    ("storage.value_log_file_size_bytes", 500 * 2**20),
    ("storage.kv.block_cache_bytes", 8 * 2**20),
    ("storage.kv.block_restart_interval", 16),
    ("storage.kv.block_size_bytes", 4096),
    ("storage.kv.compaction_l0_trigger", 8),
    ("storage.kv.compaction_table_size_bytes", 64 * 2**20),
    ("storage.kv.compaction_total_size_bytes", 512 * 2**20),
    ("storage.kv.compaction_total_size_multiplier", 8.0),
    ("storage.kv.write_buffer_bytes", 64 * 2**20),
    ("storage.kv.write_l0_pause_trigger", 24),
    ("storage.kv.write_l0_slowdown_trigger", 17),
]
DRAINER_DEFAULTS = [
    ("addr", "127.0.0.1:8249"),
    ("advertise_addr", "127.0.0.1:8249"),
    ("data_dir", "data.drainer"),
    ("detect_interval_s", 5.0),
    ("pd_urls", "http://127.0.0.1:2379"),
    ("initial_commit_ts", -1),
    ("synced_check_time_s", 300.0),
    ("compressor", ""),
    ("cache_binlog_count", 8),
    ("syncer.sql_mode", None),
    ("syncer.txn_batch", 20),
    ("syncer.worker_count", default_worker_count()),
    ("syncer.enable_dispatch", True),
    ("syncer.enable_detect", True),
    ("syncer.safe_mode", False),
    ("syncer.db_type", "mysql"),
    ("syncer.sync_ddl", True),
    ("syncer.loopback_control", False),
    ("syncer.channel_id", 0),
    ("syncer.ignore_schemas", ("INFORMATION_SCHEMA", "PERFORMANCE_SCHEMA", "mysql")),
    ("syncer.ignore_table", ()),
    ("syncer.replicate_do_db", ()),
    ("syncer.ignore_txn_commit_ts", ()),
    ("syncer.load_schema_snapshot", False),
    ("syncer.case_sensitive", False),
    ("syncer.exactly_once", True),
    ("syncer.relay.log_dir", ""),
    ("syncer.relay.max_file_size_bytes", 10485760),
    ("syncer.to.host", "localhost"),
    ("syncer.to.port", 3306),
    ("syncer.to.user", "root"),
    ("syncer.to.password", ""),
    ("syncer.to.sync_mode", 1),
    ("syncer.to.read_timeout_s", 60.0),
    ("syncer.to.params", {}),
    ("syncer.to.merge", True),
    ("syncer.to.retention_time_s", 0.0),
    ("syncer.to.checkpoint.type", "mysql"),
    ("syncer.to.checkpoint.schema", "tidb_binlog"),
    ("syncer.to.checkpoint.table", "checkpoint"),
    ("syncer.to.checkpoint.host", "localhost"),
    ("syncer.to.checkpoint.port", 3306),
]


@pytest.mark.parametrize(("dotted", "expected"), PUMP_DEFAULTS)
def test_pump_defaults(dotted, expected):
    assert get(load_pump_config(None), dotted) == expected


@pytest.mark.parametrize(("dotted", "expected"), DRAINER_DEFAULTS)
def test_drainer_defaults(dotted, expected):
    assert get(load_drainer_config(None, env={}), dotted) == expected


def test_empty_file_equals_defaults(tmp_path):
    empty = write(tmp_path, "")
    assert load_pump_config(empty) == load_pump_config(None)
    assert load_drainer_config(empty, env={}) == load_drainer_config(None, env={})


def test_example_files_load():
    pump = load_pump_config(REPO / "config" / "pump.toml")
    assert pump.storage.stop_write_at_available_space_bytes == 10 * 2**30
    drainer = load_drainer_config(REPO / "config" / "drainer.toml", env={})
    assert drainer.detect_interval_s == 10.0 and drainer.syncer.channel_id == 1
    assert drainer.syncer.to.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("loader", "text", "key"),
    [
        (load_pump_config, "adr = '1.2.3.4:1'\n", "adr"),
        (load_pump_config, "[security]\nssl-caa = ''\n", "security.ssl-caa"),
        (load_pump_config, "[storage]\nsync_log = true\n", "storage.sync_log"),
        (load_pump_config, "[storage.kv]\nblock-cache = 1\n", "storage.kv.block-cache"),
        (load_pump_config, "[storge]\n", "storge"),
        (load_drainer_config, "[syncer]\nworkers = 3\n", "syncer.workers"),
        (load_drainer_config, "[syncer.relay]\ndir = 'x'\n", "syncer.relay.dir"),
        (load_drainer_config, "[syncer.to]\nhots = 'x'\n", "syncer.to.hots"),
        (load_drainer_config, "[syncer.to.checkpoint]\nname = 'x'\n", "syncer.to.checkpoint.name"),
        (load_drainer_config, "[syncer.to.checkpoint.security]\nx = 1\n",
         "syncer.to.checkpoint.security.x"),
        (load_drainer_config, "[[syncer.ignore-table]]\ndb = 'a'\n", "syncer.ignore-table[0].db"),
        (load_drainer_config, "[syncer.binlog-filter-rule.r1]\nevents = []\n",
         "syncer.binlog-filter-rule.r1.events"),
        (load_drainer_config, "[[syncer.table-migrate-rule]]\nsource = {schema='a', tbl='b'}\n",
         "syncer.table-migrate-rule[0].source.tbl"),
    ],
)  # fmt: skip
def test_unknown_keys_name_key_and_file(tmp_path, loader, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        loader(path)
    assert info.value.key == key and info.value.path == str(path)
    assert f"`{key}`" in str(info.value) and str(path) in str(info.value)


def test_kafka_keys_say_the_sink_is_unsupported(tmp_path):
    path = write(tmp_path, "[syncer.to]\nkafka-addrs = '127.0.0.1:9092'\n")
    with pytest.raises(ConfigError, match="kafka/oracle sink.*mysql, tidb, file"):
        load_drainer_config(path, env={})


@pytest.mark.parametrize(
    ("loader", "text", "key", "expected"),
    [
        (load_pump_config, "addr = 8250\n", "addr", "a string"),
        (load_pump_config, "heartbeat-interval = '2'\n", "heartbeat-interval", "seconds"),
        (load_pump_config, "heartbeat-interval = 0\n", "heartbeat-interval", "> 0"),
        (load_pump_config, "gc = 0\n", "gc", "> 0"),
        (load_pump_config, "gc = '7x'\n", "gc", "Go duration"),
        (load_pump_config, "gc = true\n", "gc", "days"),
        (load_pump_config, "max-txn-timeout = 0.5\n", "max-txn-timeout", ">= 1"),
        (load_pump_config, "cluster-id = -3\n", "cluster-id", "integer"),
        (load_pump_config, "security = 3\n", "security", "a table"),
        (load_pump_config, "[security]\ncert-allowed-cn = 'x'\n", "security.cert-allowed-cn",
         "array of strings"),
        (load_pump_config, "[storage]\nsync-log = 'yes'\n", "storage.sync-log", "true or false"),
        (load_pump_config, "[storage]\nkv_chan_cap = 1.5\n", "storage.kv_chan_cap", "integer"),
        (load_pump_config, "[storage]\nstop-write-at-available-space = '10 zb'\n",
         "storage.stop-write-at-available-space", "size"),
        (load_drainer_config, "[syncer]\nworker-count = 0\n", "syncer.worker-count", ">= 1"),
        (load_drainer_config, "[syncer]\nignore-txn-commit-ts = [1, 'a']\n",
         "syncer.ignore-txn-commit-ts", "commit ts"),
        (load_drainer_config, "[syncer]\nignore-table = 3\n", "syncer.ignore-table",
         "array of tables"),
        (load_drainer_config, "[syncer.to]\nsync-mode = 3\n", "syncer.to.sync-mode", "[1, 2]"),
        (load_drainer_config, "[syncer.to]\nparams = {a = 1}\n", "syncer.to.params",
         "string values"),
        (load_drainer_config, "[syncer.to]\nport = 70000\n", "syncer.to.port", "65535"),
    ],
)  # fmt: skip
def test_bad_values_name_key_file_value_and_expectation(tmp_path, loader, text, key, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=expected) as info:
        loader(path)
    assert info.value.key == key and info.value.path == str(path)
    assert str(path) in str(info.value) and "is " in str(info.value)


@pytest.mark.parametrize(
    ("loader", "text", "key", "message"),
    [
        (load_pump_config, "addr = 'localhost'\n", "addr", "host:port"),
        (load_pump_config, "addr = '0.0.0.0:8250'\n", "advertise-addr", "peers can reach"),
        (load_pump_config, "log-level = 'loud'\n", "log-level", "not one of"),
        (load_pump_config, "registry = 'a/b/c'\n", "registry", "namespace"),
        (load_pump_config, "socket = 'pump.sock'\n", "socket", "unix socket"),
        (load_pump_config, "[security]\nssl-cert = 'a.pem'\n", "security.ssl-cert", "together"),
        (load_drainer_config, "compressor = 'zstd'\n", "compressor", "gzip"),
        (load_drainer_config, "[syncer]\ndb-type = 'kafka'\n", "syncer.db-type",
         "TiDB Binlog's but not supported here; supported: mysql, tidb, file"),
        (load_drainer_config, "[syncer]\ndb-type = 'oracle'\n", "syncer.db-type", "supported"),
        (load_drainer_config, "[syncer]\ndb-type = 'x'\n", "syncer.db-type", "unknown"),
        (load_drainer_config, "[syncer]\ndb-type = 'file'\nexactly-once = true\n",
         "syncer.exactly-once", "mysql or tidb"),
        (load_drainer_config, "[syncer]\nignore-schemas = 'a,,b'\n", "syncer.ignore-schemas",
         "empty"),
        (load_drainer_config, "[syncer]\nreplicate-do-db = ['']\n", "syncer.replicate-do-db",
         "empty"),
        (load_drainer_config, "[[syncer.ignore-table]]\ndb-name = 'a'\n",
         "syncer.ignore-table[0]", "tbl-name"),
        (load_drainer_config, "[[syncer.table-migrate-rule]]\nbinlog-filter-rule = ['r']\n"
         "source = {schema = 'a'}\n", "syncer.table-migrate-rule[0].binlog-filter-rule", "r]"),
        (load_drainer_config, "[syncer.to]\nencrypted_password = 'x'\n",
         "syncer.to.encrypted_password", "not valid base64"),
        (load_drainer_config, "[syncer]\ndb-type = 'file'\n[syncer.to.checkpoint]\ntype = "
         "'mysql'\n", "syncer.to.checkpoint.host", "host and port"),
        (load_drainer_config, "[syncer.to.checkpoint]\ntype = 'oracle'\n",
         "syncer.to.checkpoint.type", "not supported"),
    ],
)  # fmt: skip
def test_semantic_checks(tmp_path, loader, text, key, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        loader(path)
    assert info.value.key == key and info.value.path == str(path)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (7, 7 * DAY), ("7", 7 * DAY), (1, DAY), ("8h", 8 * 3600.0), ("30m", 1800.0),
        ("1h30m", 5400.0), ("1.5h", 5400.0), ("90s", 90.0), ("500ms", 0.5), ("2h45m30s", 9930.0),
        ("1m0.5s", 60.5), ("10us", 1e-5), ("0", 0.0),
    ],
)  # fmt: skip
def test_gc_parsing(value, seconds):
    assert parse_gc(value) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "h", "8", "8d", "1h30", "1.h.", "-", ".s", "8 h"])
def test_go_duration_rejects(text):
    with pytest.raises(ConfigError, match="Go duration"):
        parse_go_duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("8h", 28800.0), ("2h30m", 9000.0), (3, 3 * DAY)])
def test_gc_in_file_and_round_trip(tmp_path, text, seconds):
    value = f'"{text}"' if isinstance(text, str) else text
    cfg = load_pump_config(write(tmp_path, f"gc = {value}\n"))
    assert cfg.gc_s == seconds
    assert load_pump_config(write(tmp_path, cfg.to_toml(), "again.toml")).gc_s == seconds


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("10 gib", 10 * 2**30), ("512 MiB", 512 * 2**20), ("1GB", 10**9), ("42 MB", 42 * 10**6),
        ("42 mib", 44040192), ("1.5 KiB", 1536), ("100", 100), ("7b", 7), ("2k", 2000),
        ("3ti", 3 * 2**40), ("1,000 kb", 10**6), (0, 0), (4096, 4096),
    ],
)  # fmt: skip
def test_humanized_sizes(value, size):
    assert parse_bytes(value) == size


@pytest.mark.parametrize("value", ["10 zb", "gib", "", "-1", -1, True, 1.5, "1 2 mb"])
def test_humanized_sizes_reject(value):
    with pytest.raises(ConfigError, match="size in bytes"):
        parse_bytes(value)


def test_sizes_in_file(tmp_path):
    cfg = load_pump_config(write(tmp_path, "[storage]\nstop-write-at-available-space = 1024\n"
                                           "value-log-file-size = '64 MiB'\n"))  # fmt: skip
    assert cfg.storage.stop_write_at_available_space_bytes == 1024
    assert cfg.storage.value_log_file_size_bytes == 64 * 2**20


def test_fractional_intervals(tmp_path):
    cfg = load_pump_config(write(tmp_path, "heartbeat-interval = 0.2\ngen-binlog-interval = 0.05\n"
                                           "max-txn-timeout = 1.5\n"))  # fmt: skip
    assert (cfg.heartbeat_interval_s, cfg.gen_binlog_interval_s) == (0.2, 0.05)
    assert cfg.max_txn_timeout_s == 1.5


def test_pump_overrides_win_over_the_file(tmp_path):
    path = write(tmp_path, "addr = '127.0.0.1:9000'\ndata-dir = 'from-file'\ngc = 3\n")
    cfg = load_pump_config(path, {
        "addr": "127.0.0.1:9100", "gc": "8h", "heartbeat-interval": 0.5, "data_dir": None,
        "fake-binlog-interval": "1.5", "storage.sync-log": "false", "L": "debug",
        "storage.stop-write-at-available-space": "1 gib", "cluster-id": "42",
    })  # fmt: skip
    assert cfg.addr == cfg.advertise_addr == "127.0.0.1:9100"
    assert cfg.data_dir == "from-file"  # None = flag not given
    assert (cfg.gc_s, cfg.heartbeat_interval_s, cfg.gen_binlog_interval_s) == (28800.0, 0.5, 1.5)
    assert cfg.storage.sync_log is False and cfg.log_level == "debug" and cfg.cluster_id == 42
    assert cfg.storage.stop_write_at_available_space_bytes == 2**30


def test_drainer_flag_names(tmp_path):
    path = write(tmp_path, "[syncer]\nworker-count = 4\ndb-type = 'mysql'\n")
    cfg = load_drainer_config(path, {"c": 8, "txn-batch": "5", "relay-log-dir": "/r",
                                     "safe_mode": True, "syncer.to.port": 3307,
                                     "initial-commit-ts": 42}, env={})  # fmt: skip
    assert (cfg.syncer.worker_count, cfg.syncer.txn_batch) == (8, 5)
    assert cfg.syncer.relay.log_dir == "/r" and cfg.syncer.safe_mode is True
    assert cfg.syncer.to.port == 3307 and cfg.initial_commit_ts == 42
    file_cfg = load_drainer_config(path, {"dest-db-type": "file"}, env={})
    assert file_cfg.syncer.db_type == "file" and file_cfg.syncer.worker_count == 1


def test_unknown_and_bad_overrides(tmp_path):
    with pytest.raises(ConfigError, match="unknown flag") as info:
        load_pump_config(None, {"adr": "x:1"})
    assert info.value.key == "adr" and "command line" in info.value.path
    with pytest.raises(ConfigError, match="expected an integer") as info:
        load_drainer_config(None, {"c": "many"}, env={})
    assert info.value.key == "syncer.worker-count"


@pytest.mark.parametrize(
    ("file_text", "overrides", "expected"),
    [
        ("", {}, True),
        ("[syncer]\nenable-dispatch = false\n", {}, False),
        ("[syncer]\ndisable-dispatch = true\n", {}, False),
        ("[syncer]\ndisable-dispatch = true\nenable-dispatch = true\n", {}, False),
        ("[syncer]\ndisable-dispatch = false\n", {}, True),
        ("[syncer]\nenable-dispatch = false\n", {"enable-dispatch": True}, True),
        ("", {"disable-dispatch": True, "enable-dispatch": True}, False),
    ],
)
def test_enable_disable_pairs(tmp_path, file_text, overrides, expected):
    cfg = load_drainer_config(write(tmp_path, file_text), overrides, env={})
    assert cfg.syncer.enable_dispatch is expected
    assert cfg.syncer.worker_count == (default_worker_count() if expected else 1)


def test_detect_pair(tmp_path):
    cfg = load_drainer_config(write(tmp_path, "[syncer]\ndisable-detect = true\n"), env={})
    assert cfg.syncer.enable_detect is False


def test_downstream_defaults_from_env_and_checkpoint_resolution(tmp_path):
    env = {"MYSQL_HOST": "db1", "MYSQL_PORT": "3310", "MYSQL_USER": "u", "MYSQL_PSWD": "p"}
    cfg = load_drainer_config(None, env=env)
    to = cfg.syncer.to
    assert (to.host, to.port, to.user, to.password) == ("db1", 3310, "u", "p")
    cp = to.checkpoint
    assert (cp.type, cp.host, cp.port, cp.user, cp.password) == ("mysql", "db1", 3310, "u", "p")
    text = "[syncer]\ndb-type = 'tidb'\n[syncer.to]\nhost = 'd'\n[syncer.to.checkpoint]\n" \
           "host = 'c'\nport = 4000\nschema = 's'\n"
    cp = load_drainer_config(write(tmp_path, text), env=env).syncer.to.checkpoint
    assert (cp.type, cp.host, cp.port, cp.user, cp.schema) == ("tidb", "c", 4000, "u", "s")


def test_file_sink_resolution(tmp_path):
    cfg = load_drainer_config(write(tmp_path, "data-dir = 'dd'\n[syncer]\ndb-type = 'pb'\n"),
                              env={"MYSQL_HOST": "ignored"})  # fmt: skip
    s = cfg.syncer
    assert (s.db_type, s.exactly_once, s.worker_count) == ("file", False, 1)
    assert s.to.dir == "dd" and s.to.host == "" and s.to.checkpoint.type == "file"


def test_filters_and_rules(tmp_path):
    text = """
[syncer]
replicate-do-db = ["~^B.*", "S1"]
ignore-txn-commit-ts = [42, 43]
case-sensitive = true
[[syncer.ignore-table]]
db-name = "test"
tbl-name = "log"
[[syncer.replicate-do-table]]
db-name = "Test"
tbl-name = "~^A.*"
[syncer.binlog-filter-rule.skip-del]
ignore-event = ["delete"]
ignore-sql = ["^DROP"]
[[syncer.table-migrate-rule]]
binlog-filter-rule = ["skip-del"]
source = { schema = "shop*", table = "orders" }
target = { schema = "dw", table = "orders" }
[syncer.to]
params = { time_zone = "+08:00", "sql_mode" = "" }
"""
    cfg = load_drainer_config(write(tmp_path, text), env={})
    s = cfg.syncer
    assert s.replicate_do_db == ("~^b.*", "s1")
    assert s.replicate_do_table == (TableName("test", "~^a.*"),)
    assert s.ignore_table == (TableName("test", "log"),)
    assert s.ignore_txn_commit_ts == (42, 43)
    assert s.binlog_filter_rule["skip-del"].ignore_event == ("delete",)
    rule = s.table_migrate_rule[0]
    assert (rule.source.schema, rule.target.table, rule.binlog_filter_rule) == (
        "shop*", "orders", ("skip-del",))  # fmt: skip
    assert s.to.params == {"time_zone": "+08:00", "sql_mode": ""}
    again = load_drainer_config(write(tmp_path, cfg.to_toml(), "again.toml"), env={})
    assert again == cfg


def test_round_trip_of_non_default_configs(tmp_path):
    pump = load_pump_config(None, {
        "addr": "10.0.0.1:1", "advertise-addr": "pump-1:1", "gc": "1h30m", "socket": "/tmp/p.s",
        "heartbeat-interval": 0.25, "registry": "binlog", "node-id": 'we"ird\\id\x7f',
        "security.cert-allowed-cn": "a,b", "storage.kv.compaction-total-size-multiplier": 2.5,
        "storage.slow_write_threshold": 0.5, "max-txn-timeout": 1,
    })  # fmt: skip
    assert load_pump_config(write(tmp_path, pump.to_toml())) == pump
    assert pump.security.cert_allowed_cn == ("a", "b")
    drainer = load_drainer_config(None, {
        "syncer.sql-mode": "ANSI_QUOTES", "syncer.ignore-schemas": "a,b",
        "syncer.to.retention-time": 3, "syncer.to.read-timeout": "90s", "synced-check-time": 1.5,
        "dest-db-type": "file", "syncer.exactly-once": False, "syncer.to.merge": False,
    }, env={})  # fmt: skip
    assert load_drainer_config(write(tmp_path, drainer.to_toml(), "d.toml"), env={}) == drainer
    assert drainer.syncer.to.retention_time_s == 3 * DAY and drainer.synced_check_time_s == 90.0


def test_rendered_text_uses_tidb_units(tmp_path):
    text = load_pump_config(None, {"gc": 2, "storage.slow_write_threshold": 2}).to_toml()
    assert "\ngc = 2\n" in text and "\nheartbeat-interval = 2\n" in text
    assert "slow_write_threshold = 2.0" in text and "[storage.kv]" in text


def test_registry_split():
    assert split_registry("") is None
    assert split_registry("ns") == ("ns", "tidb-binlog-registry")
    assert split_registry("ns/reg") == ("ns", "reg")


def test_configs_are_frozen_and_pickle():
    cfg = load_drainer_config(None, env={})
    with pytest.raises(AttributeError):
        cfg.addr = "x"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert isinstance(cfg, DrainerConfig) and isinstance(load_pump_config(None), PumpConfig)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_pump_config(tmp_path / "nope.toml")
    assert info.value.path == str(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_pump_config(write(tmp_path, "addr = \n"))


# -- input checks a user meets first: secrets, bare-number durations -----------------------

@pytest.mark.parametrize(("text", "shown_type"), [
    ("[syncer.to]\npassword = 987654\n", "an integer"),
    ("[syncer.to]\npassword = 98.7654\n", "a float"),
    ("[syncer.to.checkpoint]\npassword = [987654]\n", "an array"),
    ("[syncer.to]\nencrypted_password = 987654\n", "an integer"),
])
def test_a_wrong_type_password_is_reported_without_its_value(tmp_path, text, shown_type):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_drainer_config(path, env={})
    message = str(info.value)
    assert "987654" not in message and "98.7654" not in message
    key = text.split("\n")[1].split(" =")[0]
    section = text.split("\n")[0].strip("[]")
    assert message == (f"`{section}.{key}` in {path} is {shown_type} (its value is not shown: "
                       "it is a secret); expected a string: put it in quotes, "
                       'password = "..."')


@pytest.mark.parametrize("value", ["5", '"5"', "5.0", '" 7 "'])
def test_a_bare_number_read_timeout_is_refused_with_the_accepted_forms(tmp_path, value):
    """TiDB Binlog would read ``read-timeout = 5`` as five *days*."""
    path = write(tmp_path, f"[syncer.to]\nread-timeout = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_drainer_config(path, env={})
    shown = {"5": "5", '"5"': "'5'", "5.0": "5.0", '" 7 "': "' 7 '"}[value]
    assert str(info.value) == (
        f"`syncer.to.read-timeout` in {path} is {shown}; expected a duration string like "
        '"1m", "30s", "1m30s" or "500ms"; a bare number is refused because TiDB Binlog '
        'would read it as days: write "5s" for five seconds')


@pytest.mark.parametrize(("value", "seconds"), [('"5s"', 5.0), ('"1m30s"', 90.0),
                                                ('"500ms"', 0.5), ('"2h"', 7200.0)])
def test_read_timeout_takes_go_durations_and_renders_back(tmp_path, value, seconds):
    cfg = load_drainer_config(write(tmp_path, f"[syncer.to]\nread-timeout = {value}\n"), env={})
    assert cfg.syncer.to.read_timeout_s == seconds
    assert load_drainer_config(write(tmp_path, cfg.to_toml(), "r.toml"), env={}) == cfg


def test_a_zero_read_timeout_is_refused(tmp_path):
    path = write(tmp_path, '[syncer.to]\nread-timeout = "0s"\n')
    with pytest.raises(ConfigError, match=r"is '0s'; expected a duration string .* \(must be > 0\)"):
        load_drainer_config(path, env={})


def test_passwords_never_show_in_a_repr(tmp_path):
    """A config or downstream object printed in a log, a status page or an error keeps
    its passwords out (the values stay readable as attributes)."""
    from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig

    path = tmp_path / "drainer.toml"
    path.write_text('[syncer.to]\npassword = "hunter2"\n[syncer.to.checkpoint]\n'
                    'password = "s3cret"\n')
    cfg = load_drainer_config(str(path))
    assert cfg.syncer.to.password == "hunter2"
    for text in (repr(cfg), str(cfg), repr(DownstreamConfig.from_drainer_config(cfg))):
        assert "hunter2" not in text and "s3cret" not in text


# -- [syncer.to.checkpoint]: taken as TiDB Binlog takes it, or refused -------------------------
def test_a_checkpoint_on_another_server_reaches_the_task_settings(tmp_path):
    from tidb_binlog.drainer.pipeline.settings import TaskSettings

    text = ("[syncer.to]\nhost = 'down'\nport = 3307\nuser = 'u'\npassword = 'p'\n"
            "[syncer.to.checkpoint]\nhost = 'ckpt'\nport = 3308\nuser = 'cu'\n"
            "password = 'cp'\nschema = 'cks'\n")
    cfg = load_drainer_config(write(tmp_path, text), env={})
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    db = settings.checkpoint_db
    assert (db.host, db.port, db.user, db.password) == ("ckpt", 3308, "cu", "cp")
    assert settings.downstream.address == "down:3307" and settings.exactly_once
    assert settings.checkpoint_address == "ckpt:3308" and settings.checkpoint_schema == "cks"
    # only the user differs: still its own connection, on the downstream's server
    cfg = load_drainer_config(write(tmp_path, "[syncer.to]\nhost = 'down'\n"
                                    "[syncer.to.checkpoint]\nuser = 'ck'\n"), env={})
    db = TaskSettings.from_config(cfg, upstream_meta={}).checkpoint_db
    assert (db.host, db.port, db.user) == ("down", 3306, "ck")
    # nothing set: the checkpoint lives in the downstream, on its connection
    cfg = load_drainer_config(write(tmp_path, "[syncer.to]\nhost = 'down'\n"), env={})
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    assert settings.checkpoint_db is None and settings.checkpoint_address == "down:3306"


@pytest.mark.parametrize("text, key, says", [
    # a MySQL sink commits its checkpoint with the data: no savepoint file
    ("[syncer.to.checkpoint]\ntype = 'file'\n", "syncer.to.checkpoint.type",
     "not supported for db-type mysql; use mysql or tidb"),
    # the Parquet lake's manifest is its checkpoint: nothing else to point at
    ("[syncer]\ndb-type = 'parquet'\n[syncer.to.checkpoint]\nhost = 'h'\n",
     "syncer.to.checkpoint.host", "keeps its checkpoint in its own manifest"),
    ("[syncer]\ndb-type = 'parquet'\n[syncer.to.checkpoint]\ntype = 'mysql'\n",
     "syncer.to.checkpoint.type", "keeps its checkpoint in its own manifest"),
    # a file sink's savepoint file takes no address
    ("[syncer]\ndb-type = 'file'\n[syncer.to.checkpoint]\nport = 3310\n",
     "syncer.to.checkpoint.port", "would be ignored"),
])
def test_checkpoint_settings_a_sink_cannot_use_are_refused(tmp_path, text, key, says):
    with pytest.raises(ConfigError) as info:
        load_drainer_config(write(tmp_path, text), env={})
    assert info.value.key == key and says in str(info.value), str(info.value)


def test_the_sink_table_answers_every_db_type():
    from tidb_binlog.drainer.pipeline.settings import TaskSettings
    from tidb_binlog.drainer.sinks.kinds import SINK_KINDS, SUPPORTED_DB_TYPES, sink_kind

    assert SUPPORTED_DB_TYPES == ("mysql", "tidb", "file", "parquet")
    assert sink_kind("pb") is sink_kind("file") and sink_kind("tidb").name == "mysql"
    with pytest.raises(ConfigError, match="kafka.*TiDB Binlog's but not supported"):
        sink_kind("kafka")
    repo = Path(__file__).resolve().parents[2]
    for kind in SINK_KINDS.values():  # each shell exists and has the one entry point
        shell = repo.joinpath(*kind.shell.split(".")).with_suffix(".py")
        assert "def start_sink_actors(" in shell.read_text(), shell
        settings = TaskSettings(cluster_id=1, sink=kind.name)
        assert settings.exactly_once is kind.exactly_once and settings.kind is kind
    with pytest.raises(ConfigError, match="cannot be exactly-once"):
        TaskSettings(cluster_id=1, sink="file", exactly_once=True)
