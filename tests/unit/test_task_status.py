"""TaskStatus: the task API's typed status, built from the actors' report."""

from tidb_binlog.drainer.pipeline.task_status import ActorRestart, TaskStatus, lag_seconds
from tidb_binlog.tso import compose


def test_from_report_reads_the_merged_status_dict():
    ts = compose(1_000_000, 3)
    st = TaskStatus.from_report("t", {"state": "running", "error": None,
                                      "checkpoint_commit_ts": ts, "pumps": ["pump-0"],
                                      "pump_positions": {"pump-0": ts}, "applied_rows": 7,
                                      "ddl_jobs": 2, "resets": 1, "node_id": "d1"},
                                worker_count=4, now_s=1_005.5)
    assert (st.state, st.checkpoint_ts, st.pumps, st.applied_rows, st.worker_count) == (
        "running", ts, ("pump-0",), 7, 4)
    assert st.lag_s == 5.5 and st.ok


def test_states_and_lag_edges():
    assert TaskStatus.from_report("t", {"state": "failed", "error": "boom"}).state == "failed"
    assert not TaskStatus.from_report("t", {"state": "failed", "error": "boom"}).ok
    assert TaskStatus.from_report("t", {}).state == "unreachable"
    assert TaskStatus.not_running("t", "paused", checkpoint_ts=9).checkpoint_ts == 9
    assert lag_seconds(0) is None
    assert lag_seconds(compose(2_000_000, 0), now_s=1_000.0) == 0.0  # clock skew: never < 0


def test_a_restarting_actor_keeps_the_state_and_says_which():
    """Drainer.status() while Ray restarts an actor: a typed ``restarting`` state naming the
    actor (it read ``running`` before, and the status call raised)."""
    restart = ActorRestart("coordinator", "orders-coordinator", since_s=12.5)
    st = TaskStatus.from_report("t", {"state": "restarting", "error": None,
                                      "restarting": restart, "checkpoint_commit_ts": 0})
    assert (st.state, st.restarting, st.ok, st.lag_s) == ("restarting", restart, False, None)
    assert TaskStatus.from_report("t", {"state": "merging"}).restarting is None
