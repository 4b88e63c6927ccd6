"""Drainer.start refuses task overrides that the SQL workers would not see."""

from __future__ import annotations

import pytest

from cluster.drainer import Drainer
from tidb_binlog.config import load_drainer_config
from tidb_binlog.errors import ConfigError


@pytest.mark.parametrize("key", ["exactly_once", "worker_count", "txn_batch", "safe_mode"])
def test_worker_settings_cannot_be_overridden_past_the_workers(key):
    cfg = load_drainer_config(None, {"syncer.to.port": 3306})
    with pytest.raises(ConfigError, match=key):
        Drainer.start(cfg, pumps={"pump-0": object()}, upstream_meta={}, **{key: 1})
