"""Pump client pure parts: selection strategies and available/unavailable bookkeeping."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tidb_binlog.node import OFFLINE, ONLINE, PAUSED, NodeStatus
from tidb_binlog.pump_client import (
    HASH,
    LOCAL,
    RANGE,
    SCORE,
    STRATEGIES,
    PumpBook,
    new_selector,
)
from tidb_binlog.pump_client.transport import grpc_target

THREE = [("p1", 0), ("p2", 0), ("p3", 0)]


def selector(strategy, pumps=THREE, seed=7):
    s = new_selector(strategy, rng=random.Random(seed))
    s.set_pumps(pumps)
    return s


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_pump_selects_none(strategy):
    assert new_selector(strategy).select(1) is None


@pytest.mark.parametrize("strategy", [RANGE, HASH, SCORE])
def test_every_strategy_picks_only_known_pumps_and_moves_off_tried_ones(strategy):
    s = selector(strategy)
    first = s.select(42)
    assert first in {"p1", "p2", "p3"}
    second = s.select(42, attempt=1, tried={first})
    assert second in {"p1", "p2", "p3"} - {first}


def test_unknown_strategy_names_the_supported_ones():
    with pytest.raises(ValueError, match="range, hash, score, local"):
        new_selector("random")


def test_range_is_round_robin():
    s = selector(RANGE)
    assert [s.select(ts) for ts in range(7)] == ["p1", "p2", "p3", "p1", "p2", "p3", "p1"]


def test_range_keeps_rotating_when_the_pump_list_changes():
    s = selector(RANGE)
    assert [s.select(0), s.select(0)] == ["p1", "p2"]
    s.set_pumps([("p1", 0), ("p3", 0), ("p4", 0)])
    assert [s.select(0), s.select(0), s.select(0)] == ["p3", "p4", "p1"]


def test_range_retry_skips_tried_pumps():
    s = selector(RANGE)
    assert s.select(0) == "p1"
    assert s.select(0, attempt=1, tried={"p2"}) == "p3"
    assert s.select(0, attempt=3, tried={"p1", "p2", "p3"}) == "p1"  # all tried: carry on


def test_hash_is_start_ts_mod_n_and_retries_move_one_on():
    s = selector(HASH)
    assert s.select(3) == "p1" and s.select(4) == "p2" and s.select(5) == "p3"
    assert s.select(4) == "p2"  # stable for the same start_ts
    assert s.select(4, attempt=1) == "p3" and s.select(4, attempt=2) == "p1"


def test_score_weights_by_reported_score():
    s = selector(SCORE, [("p1", 100), ("p2", 300), ("p3", 0)], seed=1)
    counts = Counter(s.select(ts) for ts in range(20_000))
    assert counts["p2"] / counts["p1"] == pytest.approx(3.0, rel=0.1)
    assert 0 < counts["p3"] < counts["p1"] / 20  # weight 1 of 401: rare but never starved


def test_score_with_all_zero_scores_is_uniform():
    s = selector(SCORE, seed=3)
    counts = Counter(s.select(ts) for ts in range(9_000))
    for node in ("p1", "p2", "p3"):
        assert counts[node] == pytest.approx(3_000, rel=0.1)


def test_local_always_picks_the_one_pump():
    s = selector(LOCAL, [("localPump", 0)])
    assert {s.select(ts, attempt=ts % 3) for ts in range(10)} == {"localPump"}


def test_grpc_targets():
    assert grpc_target("127.0.0.1:8250") == "127.0.0.1:8250"
    assert grpc_target("/tmp/pump.sock") == "unix:/tmp/pump.sock"
    assert grpc_target("unix:/tmp/pump.sock") == "unix:/tmp/pump.sock"


# -- bookkeeping ------------------------------------------------------------------


def status(node_id, state=ONLINE, score=0, host=None):
    return NodeStatus(node_id, host or f"127.0.0.1:{8250 + int(node_id[-1])}", state=state,
                      score=score)


def book(threshold=3):
    b = PumpBook(new_selector(RANGE), unavailable_after_errors=threshold)
    b.apply_statuses([status("p1"), status("p2"), status("p3", state=PAUSED)])
    return b


def test_only_online_pumps_start_available():
    b = book()
    assert b.available() == ["p1", "p2"] and b.unavailable() == ["p3"]
    assert {b.select(ts).node_id for ts in range(6)} == {"p1", "p2"}


def test_repeated_failures_move_a_pump_to_unavailable_and_success_resets_the_count():
    b = book(threshold=3)
    assert not b.record_failure("p1") and not b.record_failure("p1")
    b.record_success("p1")
    assert not b.record_failure("p1") and not b.record_failure("p1")
    assert b.record_failure("p1")  # third in a row
    assert b.available() == ["p2"]
    assert {b.select(ts).node_id for ts in range(4)} == {"p2"}
    assert [e.node_id for e in b.probe_candidates()] == ["p1"]  # p3 is paused: not probed
    assert not b.record_failure("p1")  # already unavailable: reported once


def test_probe_success_brings_a_pump_back():
    b = book(threshold=1)
    b.record_failure("p1")
    assert b.mark_available("p1")
    assert b.available() == ["p1", "p2"] and b.entry("p1").errors == 0
    assert not b.mark_available("p3")  # paused pumps are not brought back by a probe


def test_registry_state_changes_drive_availability():
    b = book(threshold=1)
    b.record_failure("p2")
    events = b.apply_statuses([status("p1", state=PAUSED), status("p2"), status("p3"),
                               status("p4")])
    assert b.available() == ["p3", "p4"]  # p2 stays unavailable until a probe answers
    assert any("p1 is paused" in e for e in events) and any("new pump p4" in e for e in events)
    b.apply_statuses([status("p1"), status("p2"), status("p3"), status("p4", state=OFFLINE)])
    assert b.available() == ["p1", "p3"]


def test_missing_pump_counts_as_offline_but_keeps_its_entry():
    b = book()
    b.remember(100, "p2")
    b.apply_statuses([status("p1")])
    assert b.available() == ["p1"]
    assert b.owner(100).node_id == "p2" and b.entry("p2").state == OFFLINE
    assert b.probe_candidates() == []


def test_address_and_score_follow_the_registry():
    b = book()
    b.apply_statuses([status("p1", host="10.0.0.9:1", score=5), status("p2"), status("p3")])
    assert (b.entry("p1").addr, b.entry("p1").score) == ("10.0.0.9:1", 5)


def test_ownership_follows_start_ts_until_forgotten():
    b = book()
    b.remember(7, "p1")
    b.remember(8, "p2")
    assert b.owner(7).node_id == "p1" and b.pending_count == 2
    b.forget(7)
    assert b.owner(7) is None and b.pending_count == 1
