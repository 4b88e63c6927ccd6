"""The coordinator's apply-lag samples (no Ray)."""

from __future__ import annotations

import tidb_binlog.drainer.sinks.mysql.coordinator as drainer_mod
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.coordinator import Coordinator


class _Store:
    def load(self):
        return None

    def save(self, cp):
        pass


def _coordinator() -> Coordinator:
    return Coordinator(TaskSettings(cluster_id=1, worker_count=1, initial_commit_ts=0),
                       [object()], _Store())


def test_samples_expand_per_part_in_ack_order():
    c = _coordinator()
    c._sample((10, 11), 1.5)
    c._sample((12,), 2.5)
    c._sample((), 3.5)  # a call that applied nothing: no sample
    assert c.apply_samples() == [(10, 1.5), (11, 1.5), (12, 2.5)]
    assert c.apply_samples() == []  # taken


def test_samples_keep_only_the_newest(monkeypatch):
    monkeypatch.setattr(drainer_mod, "APPLY_SAMPLES", 5)
    c = _coordinator()
    for i in range(0, 12, 3):
        c._sample((i, i + 1, i + 2), float(i))
    out = c.apply_samples()
    assert [ts for ts, _ in out] == [7, 8, 9, 10, 11]
    assert c._sampled == 0
