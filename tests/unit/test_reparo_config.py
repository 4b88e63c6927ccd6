"""reparo.toml: TiDB's keys and defaults, the range resolution, and exact error messages;
the command line (--help, unknown option, bad data-dir) as a user meets it."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from tidb_binlog.cli.main import main
from tidb_binlog.config.reparo import (
    ReparoConfig,
    ReparoTableName,
    datetime_to_tso,
    load_reparo_config,
)
from tidb_binlog.errors import ConfigError

UTC = datetime.UTC


def write(tmp_path, text: str):
    p = tmp_path / "reparo.toml"
    p.write_text(text)
    return p


def test_defaults_are_tidbs():
    cfg = load_reparo_config(None, {"data-dir": "d"})
    assert (cfg.dest_type, cfg.txn_batch, cfg.worker_count, cfg.safe_mode) == \
        ("print", 20, 16, False)
    assert (cfg.start_ts, cfg.stop_ts, cfg.log_level) == (0, 0, "info")
    assert (cfg.dest_db.host, cfg.dest_db.port, cfg.dest_db.user) == ("127.0.0.1", 3306, "root")


def test_sample_file_loads():
    cfg = load_reparo_config("config/reparo.toml")
    assert cfg.dest_type == "mysql" and cfg.data_dir


def test_full_file(tmp_path):
    p = write(tmp_path, """
data-dir = "/backup"
dest-type = "mysql"
txn-batch = 50
worker-count = 4
safe-mode = true
start-tso = 100
stop-tso = 200
replicate-do-db = ["Shop", "~^b.*"]
replicate-ignore-db = ["tmp"]
[[replicate-do-table]]
db-name = "Test"
tbl-name = "Log"
[[replicate-ignore-table]]
db-name = "shop"
tbl-name = "~^audit"
[dest-db]
host = "10.0.0.1"
port = 4000
user = "restore"
password = "s3cret"
""")
    cfg = load_reparo_config(p, {"c": 2})
    assert (cfg.worker_count, cfg.txn_batch, cfg.safe_mode) == (2, 50, True)
    assert (cfg.start_ts, cfg.stop_ts) == (100, 200)
    assert cfg.replicate_do_db == ("shop", "~^b.*")  # lower-cased, as TiDB
    assert cfg.replicate_do_table == (ReparoTableName("test", "log"),)
    assert cfg.replicate_ignore_table == (ReparoTableName("shop", "~^audit"),)
    assert cfg.dest_db.port == 4000 and "s3cret" not in repr(cfg)
    assert isinstance(load_reparo_config(None, {"data-dir": "d"}), ReparoConfig)


def test_datetimes_become_tsos():
    assert datetime_to_tso("2024-01-02 03:04:05", UTC) == \
        int(datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()) * 1000 << 18
    cfg = load_reparo_config(None, {"data-dir": "d", "start-datetime": "2024-01-02 03:04:05",
                                    "stop-datetime": "2024-01-02 03:04:06"}, tz=UTC)
    assert cfg.stop_ts - cfg.start_ts == 1000 << 18


@pytest.mark.parametrize("overrides, message", [
    ({"data-dir": None}, "`data-dir` in defaults: is empty; set it to the directory of the drainer's file sink "
         "(drainer.toml [syncer.to] dir) or pass --data-dir"),
    ({"data-dir": "d", "dest-type": "kafka"},
     "`dest-type` in the command line: 'kafka' is not supported; use one of "
     "print, mysql"),
    ({"data-dir": "d", "start-tso": 20, "stop-tso": 10},
     "`stop-tso` in the command line: the stop (10) is below the start (20); "
     "nothing would be restored"),
    ({"data-dir": "d", "start-tso": 5, "start-datetime": "2024-01-02 03:04:05"},
     "`start-datetime` in the command line: both start-datetime "
     "('2024-01-02 03:04:05') and start-tso (5) are set; keep one"),
    ({"data-dir": "d", "stop-datetime": "yesterday"},
     "`stop-datetime` in the command line: 'yesterday' is not a datetime like "
     "\"2006-01-02 15:04:05\" (the host's local time)"),
    ({"data-dir": "d", "replicate-do-db": "~("},
     "`replicate-do-db` in the command line: '~(' is not a valid regular "
     "expression: missing ), unterminated subpattern at position 0"),
    ({"data-dir": "d", "txn-batch": 0},
     "`txn-batch` in the command line (over defaults) is 0; expected an integer >= 1"),
    ({"data-dir": "d", "bogus": 1},
     "unknown flag or override `bogus`; use a dotted config key such as "
     "`syncer.worker-count` (see tidb_binlog/CONFIG.md)"),
])
def test_errors_name_key_and_fix(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_reparo_config(None, overrides, tz=UTC)
    assert str(info.value) == message


def test_file_errors(tmp_path):
    p = write(tmp_path, 'data-dir = "d"\nworker_count = 3\n')
    with pytest.raises(ConfigError) as info:
        load_reparo_config(p)
    assert str(info.value) == (f"unknown key `worker_count` in {p}; remove it or check its "
                               "spelling against tidb_binlog/CONFIG.md")
    p = write(tmp_path, 'data-dir = "d"\n[[replicate-do-table]]\ndb-name = "x"\n')
    with pytest.raises(ConfigError) as info:
        load_reparo_config(p)
    assert str(info.value) == f"`replicate-do-table[0]` in {p}: needs both db-name and tbl-name"
    p = write(tmp_path, 'data-dir = "d"\n[dest-db]\npassword = 12345\n')
    with pytest.raises(ConfigError) as info:
        load_reparo_config(p)
    assert "12345" not in str(info.value) and "dest-db.password" in str(info.value)


def test_to_toml_round_trip(tmp_path):
    cfg = load_reparo_config("config/reparo.toml")
    again = load_reparo_config(write(tmp_path, cfg.to_toml()))
    assert again == cfg and (again.start_ts, again.stop_ts) == (cfg.start_ts, cfg.stop_ts)


def test_cli_help_and_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["reparo", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--stop-tso TSO" in out and "dest-type" in out and "[dest-db]" in out
    assert main(["reparo", "--data-dir", str(tmp_path / "missing")]) == 1
    assert f"data-dir {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert main(["reparo", "--data-dir", str(tmp_path), "--start-tso", "9",
                 "--stop-tso", "3"]) == 1
    assert "the stop (3) is below the start (9)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["reparo", "--data-dir", str(tmp_path), "--no-such-option"])
    assert info.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_command_lists_reparo():
    out = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "reparo" in out
