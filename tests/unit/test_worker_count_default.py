"""``[syncer] worker-count`` defaults to this machine's CPUs (at least 1, at most TiDB
Binlog's 16); an explicit value is kept, 16 included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidb_binlog.config import load_drainer_config
from tidb_binlog.cpus import TIDB_BINLOG_WORKER_COUNT, available_cpus, default_worker_count
from tidb_binlog.drainer.pipeline.settings import TaskSettings

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("cpus", "workers"), [(0, 1), (1, 1), (2, 2), (8, 8), (16, 16),
                                               (17, 16), (96, 16)])
def test_sized_to_the_cpus_within_1_to_16(cpus, workers):
    assert default_worker_count(cpus) == workers


def test_the_config_default_is_this_machines():
    expected = min(available_cpus(), TIDB_BINLOG_WORKER_COUNT)
    assert default_worker_count() == expected >= 1
    assert load_drainer_config(None, env={}).syncer.worker_count == expected
    assert TaskSettings(cluster_id=1).worker_count == expected


def test_an_explicit_worker_count_is_kept(tmp_path):
    path = tmp_path / "drainer.toml"
    path.write_text("[syncer]\nworker-count = 16\n")
    assert load_drainer_config(path, env={}).syncer.worker_count == 16
    assert load_drainer_config(None, {"syncer.worker-count": 3}, env={}).syncer.worker_count == 3


def test_the_example_config_leaves_it_to_the_default():
    cfg = load_drainer_config(REPO / "config" / "drainer.toml", env={})
    assert cfg.syncer.worker_count == default_worker_count()
