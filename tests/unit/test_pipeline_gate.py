"""The sequence gate every sink applies batches through, the sink status, the names and
the settings of the drainer pipeline (no Ray)."""

from __future__ import annotations

import pytest

from tidb_binlog.drainer.pipeline.gate import EpochFence, PipelineReset, SequenceGate, new_epoch
from tidb_binlog.drainer.pipeline.names import (
    check_task_name,
    pump_actor_name,
    sink_role,
    task_actor_name,
    worker_actor_name,
)
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.pipeline.sink import SinkStatus
from tidb_binlog.errors import ConfigError


def test_a_gate_refuses_every_batch_before_its_first_reset():
    gate = SequenceGate("file sink")
    with pytest.raises(PipelineReset, match="before a reset, before the checkpoint was loaded"):
        gate.check(0)
    assert not gate.loaded and not gate.is_open


def test_a_gate_takes_batches_in_sequence_from_each_reset():
    gate = SequenceGate("coordinator")
    gate.open()
    for seq in range(3):
        gate.check(seq)
        gate.passed()
    with pytest.raises(PipelineReset, match="coordinator expected batch 3, got 5"):
        gate.check(5)
    gate.open()
    gate.check(0)


def test_a_failed_batch_closes_the_gate_until_the_next_reset():
    gate = SequenceGate("coordinator")
    gate.open()
    gate.check(0)
    gate.failed()
    with pytest.raises(PipelineReset, match="batch 1 follows a failed batch"):
        gate.check(1)
    assert gate.loaded and not gate.is_open
    gate.open()
    gate.check(0)


def test_an_epoch_fence_refuses_every_call_before_a_reset_then_other_epochs():
    """A restarted SQL worker knows no epoch: Ray hands it the calls submitted while it
    restarted, and each is refused until the coordinator's reset opens a new epoch;
    from then on a call from before that reset is refused by its epoch."""
    fence = EpochFence("worker 2")
    with pytest.raises(PipelineReset, match="worker 2: a call of pipeline epoch 7 arrived "
                                            "before this process was told of a reset"):
        fence.check(7)
    fence.open(8)
    fence.check(8)
    with pytest.raises(PipelineReset, match="epoch 7 arrived in epoch 8: it was sent "
                                            "before the pipeline's last reset"):
        fence.check(7)
    for bad in (0, -1, None, "8", True):
        with pytest.raises(ValueError, match="a pipeline epoch is a positive int"):
            fence.open(bad)
    assert fence.epoch == 8


def test_new_epochs_are_positive_and_do_not_repeat():
    epochs = {new_epoch() for _ in range(1000)}
    assert len(epochs) == 1000 and min(epochs) > 0


def test_sink_status_is_one_flat_dict_and_leaves_out_uncounted_resets():
    st = SinkStatus(commit_ts=5, applied_rows=2, extra={"saved_commit_ts": 4})
    d = st.as_dict()
    assert d["commit_ts"] == 5 and d["saved_commit_ts"] == 4 and "extra" not in d
    assert "resets" not in d  # the merger's own count stands
    assert SinkStatus(commit_ts=5, resets=2).as_dict()["resets"] == 2


def test_names_and_sink_kinds():
    # the names the Ray dashboard's actor list shows
    assert pump_actor_name("node-1") == "pump-node-1"
    assert pump_actor_name("pump-1") == "pump-1"
    assert task_actor_name("t1", "merger") == "t1-merger"
    assert task_actor_name("t1", "coordinator") == "t1-coordinator"
    assert worker_actor_name("t1", 3) == "t1-worker-3"
    assert task_actor_name("t1", sink_role("file")) == "t1-file-sink"
    assert sink_role("mysql") == "coordinator"
    with pytest.raises(ValueError, match="unknown task actor role"):
        task_actor_name("t1", "nope")
    assert check_task_name("orders-to-dw.2") == "orders-to-dw.2"
    for bad in ("", "Upper", "-lead", "sp ace", "x" * 64, "a/b"):
        with pytest.raises(ConfigError, match="invalid replication task name") as info:
            check_task_name(bad)
        assert info.value.key == "name"
    assert TaskSettings(cluster_id=1).routed
    assert not TaskSettings(cluster_id=1, exactly_once=False).routed
    assert not TaskSettings(cluster_id=1, sink="file").routed
    with pytest.raises(ConfigError, match="unknown sink"):
        TaskSettings(cluster_id=1, sink="kafka")
