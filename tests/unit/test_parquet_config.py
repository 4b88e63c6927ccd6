"""db-type parquet in drainer.toml: the [syncer.to.parquet] section and its checks."""

from __future__ import annotations

import pytest

from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.errors import ConfigError


def load(tmp_path, text: str):
    path = tmp_path / "drainer.toml"
    path.write_text('data-dir = "d"\n' + text)
    return load_drainer_config(str(path))


def test_example_config_loads():
    cfg = load_drainer_config("config/drainer-parquet.toml")
    s = cfg.syncer
    assert (s.db_type, s.exactly_once, s.worker_count) == ("parquet", False, 1)
    assert s.to.dir == "data.drainer/lake" and s.to.checkpoint.type == ""  # the manifest
    assert (s.to.parquet.flush_rows, s.to.parquet.flush_bytes) == (100_000, 64 << 20)
    assert TaskSettings(cluster_id=1, sink="parquet").sink == "parquet"


def test_defaults_and_humanized_sizes(tmp_path):
    cfg = load(tmp_path, '[syncer]\ndb-type = "parquet"\n[syncer.to.parquet]\n'
                         'flush-bytes = "1 MiB"\nflush-interval = 0.5\n')
    p = cfg.syncer.to.parquet
    assert (p.flush_rows, p.flush_bytes, p.flush_interval_s, p.compression) == (
        100_000, 1 << 20, 0.5, "zstd")
    assert cfg.syncer.to.dir == "d"


def test_bad_values_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="syncer.to.parquet.compression"):
        load(tmp_path, '[syncer]\ndb-type = "parquet"\n[syncer.to.parquet]\ncompression = "x"\n')
    with pytest.raises(ConfigError, match="syncer.exactly-once"):
        load(tmp_path, '[syncer]\ndb-type = "parquet"\nexactly-once = true\n')
    with pytest.raises(ConfigError, match="flush-rows"):
        load(tmp_path, '[syncer]\ndb-type = "parquet"\n[syncer.to.parquet]\nflush-rows = 0\n')
