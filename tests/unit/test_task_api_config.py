"""The task API's config handling without Ray: ``Cluster.submit``'s ``config=`` as a
drainer.toml path combined with ``to=``/``filters=``/``worker_count=``, and
``ReplicationTask.update(worker_count=...)``'s refusal on a file or Parquet task."""

from __future__ import annotations

import pytest

from cluster.api import _load_config
from tidb_binlog.drainer.pipeline.settings import check_worker_count_update
from tidb_binlog.errors import ConfigError


def test_a_drainer_toml_path_with_to_filters_and_worker_count(tmp_path):
    path = tmp_path / "drainer.toml"
    path.write_text('initial-commit-ts = 5\n[syncer]\ntxn-batch = 7\n'
                    'ignore-schemas = "mysql"\n[syncer.to]\nhost = "10.0.0.9"\nport = 3306\n')
    cfg = _load_config(str(path), to={"port": 4000, "user": "copier"},
                       filters={"ignore-schemas": "noise,mysql",
                                "replicate-do-db": ["shop", "noise"]},
                       worker_count=3, initial_commit_ts=None, overrides=None)
    s = cfg.syncer
    assert (s.to.host, s.to.port, s.to.user) == ("10.0.0.9", 4000, "copier")
    assert s.ignore_schemas == ("noise", "mysql") and s.replicate_do_db == ("shop", "noise")
    assert (s.txn_batch, s.worker_count, cfg.initial_commit_ts) == (7, 3, 5)


def test_a_missing_path_and_an_unknown_filter_key_say_what(tmp_path):
    with pytest.raises(ConfigError, match="no drainer config file at") as info:
        _load_config(str(tmp_path / "nope.toml"), to=None, filters=None, worker_count=None,
                     initial_commit_ts=None, overrides=None)
    assert info.value.key == "config"
    with pytest.raises(ConfigError) as info:
        _load_config({}, to=None, filters={"ignore-schema": "x"}, worker_count=None,
                     initial_commit_ts=None, overrides=None)
    assert info.value.key == "syncer.ignore-schema"


@pytest.mark.parametrize("db_type", ["file", "parquet"])  # (pb is loaded as file)
def test_update_worker_count_is_refused_on_a_file_or_parquet_task(db_type):
    with pytest.raises(ConfigError, match=f"task 'backup' writes to a {db_type} sink, which "
                       "has one writer and no SQL workers") as info:
        check_worker_count_update("backup", db_type, 4)
    assert info.value.key == "syncer.worker-count" and "mysql/tidb" in str(info.value)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True, None])
def test_update_worker_count_must_be_a_whole_number_of_at_least_1(bad):
    with pytest.raises(ConfigError, match="at least 1"):
        check_worker_count_update("orders", "mysql", bad)
    check_worker_count_update("orders", "tidb", 1)
