"""actors.process.tune_gc: only in Ray worker processes, opt-out by environment."""

from __future__ import annotations

import gc

from actors.process import GC_THRESHOLDS, tune_gc


def test_tune_gc_leaves_a_plain_process_alone(monkeypatch):
    monkeypatch.delenv("RAY_RAYLET_PID", raising=False)
    before = gc.get_threshold()
    assert tune_gc() is False and gc.get_threshold() == before


def test_tune_gc_in_a_ray_worker_and_its_opt_out(monkeypatch):
    before = gc.get_threshold()
    monkeypatch.setenv("RAY_RAYLET_PID", "1")
    monkeypatch.setenv("TIDB_BINLOG_GC_TUNING", "0")
    assert tune_gc() is False and gc.get_threshold() == before
    monkeypatch.setenv("TIDB_BINLOG_GC_TUNING", "1")
    try:
        assert tune_gc() is True and gc.get_threshold() == GC_THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
