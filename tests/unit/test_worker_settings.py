"""The SQL workers' settings come from the task's TaskSettings, the one place the
drainer config is derived: a task override (``Drainer.start(..., txn_batch=...)``)
reaches the workers as it reaches the coordinator and keeper (it used to be refused,
because the workers read drainer.toml a second time)."""

from __future__ import annotations

import pytest

from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.loader import LoaderConfig


@pytest.mark.parametrize("key, value", [("exactly_once", False), ("txn_batch", 7),
                                        ("safe_mode", True), ("merge", False),
                                        ("cluster_id", 42)])
def test_task_overrides_reach_every_worker(key, value):
    cfg = load_drainer_config(None, {"syncer.to.port": 3306})
    settings = TaskSettings.from_config(cfg, upstream_meta={}, **{key: value})
    for worker in range(settings.worker_count):
        loader = LoaderConfig.from_settings(settings, worker)
        assert loader.worker == worker and getattr(loader, key) == value


def test_the_workers_agree_with_the_config_without_overrides():
    cfg = load_drainer_config(None, {"syncer.to.port": 3306, "syncer.txn-batch": 11,
                                     "syncer.to.checkpoint.schema": "cp"})
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    loader = LoaderConfig.from_settings(settings, 2, safe_mode_until_ts=99)
    assert (loader.txn_batch, loader.exactly_once, loader.progress_schema,
            loader.safe_mode_until_ts) == (11, True, "cp", 99)
    assert loader.cluster_id == settings.cluster_id
