"""The pure parts of ``tidb-binlog chaos``: the seeded schedule and the end checks."""

from __future__ import annotations

import argparse

import pytest

from tidb_binlog.chaos import (
    ACTOR_KINDS,
    FAULT_KINDS,
    RecoveryRecord,
    Verdict,
    audit_duplicates,
    audit_trigger_sql,
    bank_violation,
    make_schedule,
    parse_kinds,
    percentile,
    recovery_table,
    result_line,
    schedule_from_json,
    schedule_to_json,
)
from tidb_binlog.errors import ConfigError


def test_same_seed_same_schedule_other_seed_other_schedule():
    a = make_schedule(7, 40)
    assert a == make_schedule(7, 40)
    assert a != make_schedule(8, 40)
    assert make_schedule(7, 10) == a[:10]  # a longer run extends, never reshuffles


def test_every_kind_is_dealt_once_per_round():
    faults = make_schedule(3, 3 * len(FAULT_KINDS))
    for r in range(3):
        round_ = faults[r * len(FAULT_KINDS):(r + 1) * len(FAULT_KINDS)]
        assert sorted(f.kind for f in round_) == sorted(FAULT_KINDS)
    assert [f.no for f in faults] == list(range(1, len(faults) + 1))


def test_targets_and_holds_fit_the_kind():
    for f in make_schedule(11, 200, pumps=3, workers=2):
        assert 2.0 <= f.gap_s <= 6.0
        if f.kind.endswith("-db"):
            assert f.target in ("upstream", "downstream") and f.kind.split("-")[1] == f.target
            assert f.hold_s > 0
        elif f.kind.endswith("-pump") or f.kind == "kill9-pump":
            assert f.target in ("pump-0", "pump-1", "pump-2")
        elif f.kind == "kill9-worker":
            assert f.target in ("worker-0", "worker-1")
        elif f.kind == "restart-actor":
            kind = f.target.split("-")[0]
            assert kind in ACTOR_KINDS
        else:
            assert f.target == f.kind.removeprefix("kill9-")
        if f.kind == "sigstop-pump":
            assert f.hold_s > 10.0  # past the registry's alive timeout
        if f.kind.startswith("kill9-") and not f.kind.endswith("-db") or f.kind == "restart-actor":
            assert f.hold_s == 0.0


def test_only_the_kinds_asked_for():
    kinds = parse_kinds("kill9-pump, pause-pump")
    assert kinds == ("kill9-pump", "pause-pump")
    assert {f.kind for f in make_schedule(1, 30, kinds=kinds)} == set(kinds)
    assert parse_kinds(None) == FAULT_KINDS
    with pytest.raises(ConfigError, match=r"unknown fault kind\(s\) \['kill9-db'\]; choose from"):
        parse_kinds("kill9-db")


def test_schedule_round_trips_through_json():
    faults = make_schedule(5, 12)
    assert schedule_from_json(schedule_to_json(faults)) == faults


def test_audit_duplicates_are_images_logged_twice():
    rows = [("accounts", "U", 1, 10), ("accounts", "U", 1, 11), ("transfers", "I", 4, 12),
            ("accounts", "U", 1, 10), ("accounts", "D", 1, 10)]
    assert audit_duplicates(rows) == [("accounts", "U", 1, 10, 2)]
    assert audit_duplicates([]) == []


def test_bank_violation_names_what_is_off():
    assert bank_violation("upstream", [10, 20, 70], 100, 3) is None
    assert bank_violation("downstream", [10, 20, 69], 100, 3) == (
        "downstream: sum of balances 99, expected 100")
    assert bank_violation("downstream", [30, 70], 100, 3) == (
        "downstream: 2 accounts instead of 3 (sum 100, expected 100)")


def test_audit_triggers_log_the_new_image_and_the_deleted_one():
    sql = audit_trigger_sql("chaos", "accounts", "id")
    assert len(sql) == 3
    assert "AFTER INSERT ON `chaos`.`accounts`" in sql[0] and "NEW.`id`, NEW.`token`" in sql[0]
    assert "AFTER UPDATE" in sql[1] and "'U'" in sql[1]
    assert "AFTER DELETE" in sql[2] and "OLD.`id`, OLD.`token`" in sql[2]


def test_percentile_and_recovery_table():
    assert percentile([], 99) == 0.0
    assert percentile([3.0], 50) == 3.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    records = [RecoveryRecord("kill9-pump", "pump-0", 1.0, 2.0, outage_s=2.0),
               RecoveryRecord("kill9-pump", "pump-1", 9.0, 4.0, outage_s=4.0),
               RecoveryRecord("sigstop-pump", "pump-1", 15.0, 1.5, outage_s=14.5),
               RecoveryRecord("pause-pump", "pump-0", 20.0, None)]
    # recovery from the fault's end; the outage (the hold included) beside it
    assert recovery_table(records) == [("kill9-pump", 2, 0, 2.0, 4.0, 4.0),
                                       ("pause-pump", 1, 1, 0.0, 0.0, 0.0),
                                       ("sigstop-pump", 1, 0, 1.5, 1.5, 14.5)]


def test_verdict_and_result_line():
    v = Verdict(faults=3, recoveries=[1.0, 2.5, 0.5])
    assert v.ok
    assert result_line(v) == "RESULT chaos faults=3 diff=0 lost=0 dup=0 recovery_p99_s=2.50"
    for field in ("diff", "lost", "dup", "unrecovered"):
        assert not Verdict(**{field: 1}).ok
    assert not Verdict(problems=["downstream: sum of balances 99, expected 100"]).ok


def test_cli_refuses_bad_arguments(capsys):
    from tidb_binlog.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["chaos", "--seed", "4", "--duration", "30",
                              "--faults", "kill9-pump,pause-pump"])
    assert args.faults == ("kill9-pump", "pause-pump") and args.duration == 30.0
    for argv, message in ((["chaos", "--seed", "1", "--duration", "-5"],
                           "argument --duration: must be more than 0 seconds, got -5"),
                          (["chaos", "--seed", "1", "--faults", "nope"],
                           "argument --faults: unknown fault kind(s) ['nope']"),
                          (["chaos", "--duration", "10"],
                           "the following arguments are required: --seed")):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err
    assert isinstance(parser, argparse.ArgumentParser)


def test_a_restarting_pipeline_is_recovering_not_failed():
    """A status call during a merger restart raised PipelineReset, which ended the whole
    run as if the task had failed (seed 2, kill9-merger)."""
    from actors.ray_calls import PipelineReset
    from cluster.chaos import _lag_s

    class Drainer:
        def __init__(self, answer):
            self.answer = answer

        def status(self):
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    class Stack:
        def __init__(self, answer):
            self.drainer = Drainer(answer)

    lag, state = _lag_s(Stack(PipelineReset("a pipeline actor is unavailable")), 0)
    assert lag is None and state == "unavailable: PipelineReset"
    lag, state = _lag_s(Stack({"state": "failed", "error": "boom",
                               "checkpoint_commit_ts": 5}), 0)
    assert lag is None and state == "failed: boom"
    running = {"state": "running", "error": "", "checkpoint_commit_ts": 1 << 40}
    assert _lag_s(Stack(running), 1 << 41) == (None, "running")  # not past the fault yet
    lag, state = _lag_s(Stack(running), 0)
    assert lag is not None and lag >= 0 and state == "running"


def test_recovery_is_timed_from_the_end_of_a_held_fault():
    """The recovery clock started at the injection, so a held fault's hold counted as
    recovery: a pump SIGSTOPped for 12-15 s (past the registry's alive timeout, by
    design) could never recover "within 10 s". It now starts when the fault is lifted;
    the restart that lifts it (the database's here) counts as recovery."""
    import time

    from cluster.chaos import inject, wait_recovered
    from tidb_binlog.chaos import Fault

    calls: list[tuple[str, float]] = []

    class DB:
        port = 1

        def kill(self):
            calls.append(("kill", time.monotonic()))

        def start(self):
            calls.append(("start", time.monotonic()))

    class Cluster:
        def get_ts(self):
            return 0

    class Drainer:
        def status(self):
            return {"state": "running", "error": "", "checkpoint_commit_ts": 1 << 18}

    class Stack:
        up_db, down_db = DB(), DB()
        cluster, drainer = Cluster(), Drainer()

    started = time.monotonic()
    ended = inject(Stack(), Fault(1, "kill9-downstream-db", "downstream", 0.0, 0.05),
                   lambda text: None)
    (_, killed), (_, restarted) = calls
    assert started <= killed < ended <= restarted  # the hold is not part of the recovery
    assert ended - killed >= 0.05
    took = wait_recovered(Stack(), ended, threshold_s=1e12, timeout_s=5)
    assert took is not None and took >= 0
