"""Collector: plan() for every pump state transition, and the driver over a real Merger."""

from __future__ import annotations

import pytest

from tidb_binlog.drainer.source.collector import (
    AddSource,
    Collector,
    DrainSource,
    MergerSources,
    MoveSource,
    PauseSource,
    RemoveSource,
    ResumeSource,
    RetireSource,
    SourceView,
    plan,
)
from tidb_binlog.drainer.source.merge import Merger
from tidb_binlog.errors import UnavailableError
from tidb_binlog.node import CLOSING, OFFLINE, ONLINE, PAUSED, PAUSING, NodeStatus

HOST = "10.0.0.1:8250"


def rec(state, node="p1", host=HOST, max_commit_ts=0):
    return NodeStatus(node_id=node, host=host, state=state, max_commit_ts=max_commit_ts)


def view(position_ts=100, paused=False, retired=False, buffered=0, host=HOST, until=0):
    return SourceView(host, position_ts, paused, retired, buffered, until)


# -- plan: a pump without a source -------------------------------------------------------
@pytest.mark.parametrize("state, expected", [
    (ONLINE, [AddSource("p1", HOST, 77)]),
    (PAUSING, [AddSource("p1", HOST, 77)]),
    (CLOSING, [AddSource("p1", HOST, 77)]),
    (PAUSED, [AddSource("p1", HOST, 77), PauseSource("p1")]),
    (OFFLINE, []),
])
def test_new_pump(state, expected):
    assert plan([rec(state)], {}, latest_ts=77) == expected


# -- plan: an offline pump the drainer does not merge (start, restart) ----------------------
def test_a_pump_offline_since_before_the_checkpoint_is_not_added():
    # Everything it holds is at or below the merge position: adding it would make
    # the merge wait for a pump that never sends anything.
    assert plan([rec(OFFLINE, max_commit_ts=77)], {}, latest_ts=77) == []
    assert plan([rec(OFFLINE, max_commit_ts=50)], {}, latest_ts=77) == []
    assert plan([rec(OFFLINE)], {}, latest_ts=0) == []


def test_a_pump_offline_since_after_the_checkpoint_is_pulled_up_to_its_final_ts():
    # The drainer restarts from checkpoint 77; the pump went offline later, holding
    # binlogs up to 200 that were never applied.
    assert plan([rec(OFFLINE, max_commit_ts=200)], {}, latest_ts=77) == \
        [AddSource("p1", HOST, 77), DrainSource("p1", 200)]
    # ... unless this run already drained it to that ts and removed it
    assert plan([rec(OFFLINE, max_commit_ts=200)], {}, 150, drained={"p1": 200}) == []
    assert plan([rec(OFFLINE, max_commit_ts=200)], {}, 150, drained={"p2": 200}) == \
        [AddSource("p1", HOST, 150), DrainSource("p1", 200)]


# -- plan: a pump with a live source ------------------------------------------------------
@pytest.mark.parametrize("state, paused, expected", [
    (ONLINE, False, []),
    (ONLINE, True, [ResumeSource("p1")]),
    (PAUSING, False, []),
    (PAUSING, True, []),
    (PAUSED, False, [PauseSource("p1")]),
    (PAUSED, True, []),
    (CLOSING, False, []),
    (CLOSING, True, [ResumeSource("p1")]),   # a closing pump waits for us: keep pulling
])
def test_existing_source(state, paused, expected):
    assert plan([rec(state)], {"p1": view(paused=paused)}, latest_ts=500) == expected


# -- plan: the offline rule -----------------------------------------------------------------
def test_offline_pump_is_pulled_until_its_final_max_commit_ts():
    r = rec(OFFLINE, max_commit_ts=200)
    assert plan([r], {"p1": view(position_ts=199)}, 0) == [DrainSource("p1", 200)]
    assert plan([r], {"p1": view(position_ts=199, until=200)}, 0) == []
    assert plan([r], {"p1": view(position_ts=199, paused=True, until=200)}, 0) == \
        [ResumeSource("p1")]
    assert plan([r], {"p1": view(position_ts=200, buffered=3)}, 0) == [RetireSource("p1")]
    assert plan([r], {"p1": view(position_ts=250)}, 0) == [RetireSource("p1"),
                                                           RemoveSource("p1")]


def test_offline_without_max_commit_ts_retires_at_once():
    assert plan([rec(OFFLINE)], {"p1": view(position_ts=0, buffered=1)}, 0) == \
        [RetireSource("p1")]


def test_retired_source_is_removed_once_drained():
    r = rec(OFFLINE, max_commit_ts=200)
    assert plan([r], {"p1": view(position_ts=200, retired=True, buffered=2)}, 0) == []
    assert plan([r], {"p1": view(position_ts=200, retired=True)}, 0) == [RemoveSource("p1")]


@pytest.mark.parametrize("state, tail", [
    (ONLINE, []), (PAUSED, [PauseSource("p1")]),
])
def test_readded_pump_is_removed_then_added_at_the_merge_position(state, tail):
    sources = {"p1": view(position_ts=200, retired=True)}
    assert plan([rec(state)], sources, latest_ts=300) == \
        [RemoveSource("p1"), AddSource("p1", HOST, 300)] + tail
    sources = {"p1": view(position_ts=200, retired=True, buffered=1)}
    assert plan([rec(state)], sources, latest_ts=300) == []


def test_moved_pump_reconnects():
    assert plan([rec(ONLINE, host="10.0.0.2:8250")], {"p1": view()}, 0) == \
        [MoveSource("p1", "10.0.0.2:8250")]
    assert plan([rec(PAUSED, host="h2")], {"p1": view()}, 0) == \
        [MoveSource("p1", "h2"), PauseSource("p1")]


def test_source_without_record_is_left_alone_and_order_is_by_node_id():
    records = [rec(ONLINE, node="p3"), rec(PAUSED, node="p2"), rec(ONLINE, node="p1")]
    sources = {"p2": view(), "gone": view()}
    assert plan(records, sources, latest_ts=9) == [
        AddSource("p1", HOST, 9), PauseSource("p2"), AddSource("p3", HOST, 9)]


# -- the driver over a real Merger ---------------------------------------------------------
class FakeSource:
    def __init__(self, node_id, host, since):
        self.node_id, self.host, self.since = node_id, host, since
        self.closed = False

    def close(self):
        self.closed = True


class Clock:
    def __init__(self):
        self.now_s = 1000.0

    def __call__(self):
        return self.now_s


class Registry:
    def __init__(self, *records):
        self.records = {r.node_id: r for r in records}
        self.fail = False

    def set(self, node, state, **kw):
        self.records[node] = self.records.get(node, rec(state, node=node)).copy(state=state, **kw)

    def list(self):
        if self.fail:
            raise UnavailableError("registry unreachable")
        return list(self.records.values())


def make(*records, start_ts=0):
    reg = Registry(*records)
    merger = Merger(start_ts=start_ts)
    opened = []

    def open_source(node_id, host, since):
        opened.append(FakeSource(node_id, host, since))
        return opened[-1]

    target = MergerSources(merger, open_source)
    clock = Clock()
    collector = Collector(reg.list, target, detect_interval_s=5.0, clock=clock)
    return reg, merger, target, collector, clock, opened


def test_refreshes_at_start_then_every_detect_interval():
    reg, merger, target, collector, clock, opened = make(rec(ONLINE, node="a"))
    assert not collector.started and collector.due_in_s() == 0
    assert collector.step() == [AddSource("a", HOST, 0)]
    assert collector.started and merger.sources() == ["a"] and list(target.pullable()) == ["a"]
    reg.set("b", ONLINE)
    clock.now_s += 4.9
    assert collector.due_in_s() == pytest.approx(0.1)
    assert collector.step() == []
    clock.now_s += 0.1
    assert collector.step() == [AddSource("b", HOST, 0)]
    assert [(s.node_id, s.since) for s in opened] == [("a", 0), ("b", 0)]


def test_notify_refreshes_now_and_serves_the_ticket():
    reg, merger, target, collector, clock, _ = make(rec(ONLINE, node="a"), start_ts=10)
    collector.step()
    merger.push("a", [(11, "x"), (12, "y")], watermark=12)
    assert [i.commit_ts for i in merger.pop_ready()] == [11, 12]
    reg.set("b", ONLINE)
    ticket = collector.notify()
    assert not collector.served(ticket) and collector.due_in_s() == 0
    assert collector.step() == [AddSource("b", HOST, 12)]
    assert collector.served(ticket) and collector.wait(ticket, 0)
    # the new pump is merged from the current position: the merge now waits for it
    merger.push("a", [(20, "a20")], watermark=30)
    assert merger.pop_ready() == []
    merger.push("b", [(15, "b15")], watermark=25)
    assert [i.commit_ts for i in merger.pop_ready()] == [15, 20]


def test_a_failed_refresh_keeps_the_notify_pending():
    reg, merger, target, collector, clock, _ = make(rec(ONLINE, node="a"))
    reg.fail = True
    ticket = collector.notify()
    with pytest.raises(UnavailableError):
        collector.step()
    assert not collector.served(ticket) and not collector.started
    reg.fail = False
    collector.step()
    assert collector.served(ticket)


def test_pause_and_resume_stop_and_restart_pulling():
    reg, merger, target, collector, clock, opened = make(rec(ONLINE, node="a"),
                                                         rec(ONLINE, node="b"))
    collector.step()
    reg.set("b", PAUSED)
    assert collector.refresh() == [PauseSource("b")]
    assert list(target.pullable()) == ["a"] and merger.sources() == ["a", "b"]
    reg.set("b", ONLINE)
    assert collector.refresh() == [ResumeSource("b")]
    assert list(target.pullable()) == ["a", "b"]


def test_while_a_source_is_paused_the_pump_list_is_read_every_second():
    """A pump back online from paused sends no Notify; the merge waited for it until the
    next detect interval (up to 5 s after its restart, the chaos soak's pause-pump)."""
    reg, merger, target, collector, clock, opened = make(rec(ONLINE, node="a"),
                                                         rec(PAUSED, node="b"))
    assert collector.step() == [AddSource("a", HOST, 0), AddSource("b", HOST, 0),
                                PauseSource("b")]
    assert collector.due_in_s() == pytest.approx(1.0)  # not the 5 s detect interval
    reg.set("b", ONLINE)  # restarted: online again, no Notify
    clock.now_s += 1.0
    assert collector.step() == [ResumeSource("b")]
    assert list(target.pullable()) == ["a", "b"]
    assert collector.due_in_s() == pytest.approx(5.0)  # nothing paused: the detect interval
    clock.now_s += 1.0
    assert collector.step() == []


def test_offline_pump_is_drained_then_removed():
    reg, merger, target, collector, clock, opened = make(rec(ONLINE, node="a"),
                                                         rec(ONLINE, node="b"))
    collector.step()
    merger.push("a", [(10, "a10"), (60, "a60")], watermark=100)
    merger.push("b", [(20, "b20")], watermark=40)
    assert [i.commit_ts for i in merger.pop_ready()] == [10, 20]
    reg.set("b", OFFLINE, max_commit_ts=50)
    assert collector.refresh() == [DrainSource("b", 50)]  # b showed only 40 of its final 50
    assert merger.pop_ready() == []             # and still holds the merge back
    assert collector.step() == []               # not due: b has not reached 50
    merger.push("b", [(45, "b45")], watermark=50)
    assert collector.due_in_s() == 0            # b reached its final ts: retire it now
    assert collector.step() == [RetireSource("b")]    # 45 still buffered
    assert opened[1].closed and list(target.pullable()) == ["a"]
    assert [i.commit_ts for i in merger.pop_ready()] == [45, 60]
    assert collector.refresh() == [RemoveSource("b")]
    assert merger.sources() == ["a"]
    reg.set("b", ONLINE, max_commit_ts=50)     # re-added with the same id
    assert collector.refresh() == [AddSource("b", HOST, 60)]
    assert opened[-1].since == 60


def test_moved_pump_reopens_at_its_position():
    reg, merger, target, collector, clock, opened = make(rec(ONLINE, node="a"))
    collector.step()
    merger.push("a", [(5, "x")], watermark=8)
    reg.set("a", ONLINE, host="10.9.9.9:8250")
    assert collector.refresh() == [MoveSource("a", "10.9.9.9:8250")]
    assert opened[0].closed
    assert (opened[1].host, opened[1].since) == ("10.9.9.9:8250", 8)
    assert target.views()["a"].host == "10.9.9.9:8250"


def test_a_restarted_drainer_drains_a_pump_that_went_offline_after_its_checkpoint():
    # Checkpoint 100; pump b went offline at 180, pump c before the checkpoint (at 90).
    reg, merger, target, collector, clock, opened = make(
        rec(ONLINE, node="a"), rec(OFFLINE, node="b", max_commit_ts=180),
        rec(OFFLINE, node="c", max_commit_ts=90), start_ts=100)
    assert collector.step() == [AddSource("a", HOST, 100), AddSource("b", HOST, 100),
                                DrainSource("b", 180)]
    assert [(s.node_id, s.since) for s in opened] == [("a", 100), ("b", 100)]
    merger.push("a", [(120, "a120"), (200, "a200")], watermark=300)
    merger.push("b", [(110, "b110")], watermark=150)
    assert [i.commit_ts for i in merger.pop_ready()] == [110, 120]  # b holds the merge back
    assert collector.step() == []
    merger.push("b", [(170, "b170"), (180, "b180")], watermark=180)
    assert collector.step() == [RetireSource("b")]          # retired as soon as drained
    assert [i.commit_ts for i in merger.pop_ready()] == [170, 180, 200]
    clock.now_s += 5
    assert collector.step() == [RemoveSource("b")]
    assert target.drained() == {"b": 180}
    clock.now_s += 5
    assert collector.step() == []               # drained: not added again
    assert merger.sources() == ["a"]


def test_a_draining_source_whose_record_vanished_does_not_refresh_every_step():
    reg, merger, target, collector, clock, opened = make(
        rec(ONLINE, node="a"), rec(OFFLINE, node="b", max_commit_ts=50), start_ts=10)
    collector.step()
    del reg.records["b"]
    merger.push("b", [], watermark=50)
    assert collector.step() == []               # the one refresh: nothing to retire
    assert collector.due_in_s() > 0
