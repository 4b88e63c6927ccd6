"""The k-way merge kernel: every test runs over every strategy."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.merge import STRATEGIES, MergedItem, Merger
from tidb_binlog.errors import ConfigError, StateError


@pytest.fixture(params=STRATEGIES)
def strategy(request):
    return request.param


def ts_of(items):
    return [i.commit_ts for i in items]


def test_merges_two_sources_in_commit_order(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.add_source("b")
    m.push("a", [(1, "a1"), (3, "a3"), (5, "a5")], watermark=5)
    m.push("b", [(2, "b2"), (4, "b4")], watermark=6)
    out = m.pop_ready()
    assert out == [MergedItem(1, "a", "a1"), MergedItem(2, "b", "b2"), MergedItem(3, "a", "a3"),
                   MergedItem(4, "b", "b4"), MergedItem(5, "a", "a5")]
    assert m.latest_ts == 5
    assert m.counters["emitted"] == 5


def test_waits_for_every_online_source(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.add_source("b")
    m.push("a", [(10, "x"), (20, "y")])
    assert m.pop_ready() == []  # b has shown nothing above 0
    m.push("b", [], watermark=15)
    assert ts_of(m.pop_ready()) == [10]
    assert m.safe_ts == 15
    m.push("b", [(17, "z")])
    assert ts_of(m.pop_ready()) == [17]  # a shown 20, b shown 17: 20 must wait
    assert m.buffered() == 1
    m.push("b", [], watermark=25)
    assert ts_of(m.pop_ready()) == [20]


def test_buffered_head_counts_as_shown(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.add_source("b")
    m.push("a", [(5, "a5")])
    m.push("b", [(7, "b7")])
    # b will send nothing <= 7, a nothing <= 5: 5 is safe, 7 is not (a may send 6)
    assert ts_of(m.pop_ready()) == [5]
    assert m.positions() == {"a": 5, "b": 7}


def test_duplicate_across_sources_is_emitted_once(strategy):
    m = Merger(0, strategy)
    m.add_source("p2")
    m.add_source("p1")
    m.push("p2", [(3, "from p2"), (4, "x")], watermark=9)
    m.push("p1", [(3, "from p1")], watermark=9)
    out = m.pop_ready()
    assert out == [MergedItem(3, "p1", "from p1"), MergedItem(4, "p2", "x")]
    assert m.counters["duplicates"] == 1


def test_item_equal_to_start_ts_is_a_duplicate(strategy):
    m = Merger(100, strategy)
    m.add_source("a", start_after_ts=99)
    m.push("a", [(100, "already applied"), (101, "new")], watermark=200)
    assert ts_of(m.pop_ready()) == [101]
    assert m.counters["duplicates"] == 1


def test_resent_and_regressing_items_are_stale(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.push("a", [(1, "x"), (2, "y")], watermark=5)
    m.push("a", [(2, "y again"), (4, "below watermark"), (6, "ok")])
    m.push("a", [(8, "p"), (7, "regress")], watermark=3)  # lower watermark is ignored
    assert ts_of(m.pop_ready()) == [1, 2, 6, 8]
    assert m.counters["stale"] == 3
    assert m.positions() == {"a": 8}


def test_source_added_below_position_counts_out_of_order(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.push("a", [(10, "x")], watermark=10)
    assert ts_of(m.pop_ready()) == [10]
    assert m.add_source("late", start_after_ts=5) == 5
    m.push("late", [(7, "too late"), (12, "fine")], watermark=20)
    m.push("a", [], watermark=20)
    assert ts_of(m.pop_ready()) == [12]
    assert m.counters["out_of_order"] == 1


def test_new_source_starts_at_latest_and_holds_the_merge(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.push("a", [(1, "x"), (2, "y")], watermark=2)
    assert ts_of(m.pop_ready()) == [1, 2]
    assert m.add_source("b") == 2  # the Notify handshake: b starts at the merge position
    m.push("a", [(3, "z")], watermark=9)
    assert m.pop_ready() == []  # b may still write 3..9
    m.push("b", [(1, "old"), (4, "w")], watermark=9)
    assert ts_of(m.pop_ready()) == [3, 4]
    assert m.counters["stale"] == 1


def test_offline_source_stops_gating_but_drains(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.add_source("b")
    m.push("a", [(5, "a5")], watermark=5)
    m.push("b", [(3, "b3"), (8, "b8")])
    assert ts_of(m.pop_ready()) == [3, 5]
    m.mark_offline("b")
    assert m.is_offline("b")
    assert m.pop_ready() == []  # a has shown only 5; b8 waits for a
    m.push("a", [], watermark=8)
    assert ts_of(m.pop_ready()) == [8]
    m.push("a", [(9, "a9")])
    assert ts_of(m.pop_ready()) == [9]  # b no longer gates
    m.mark_offline("a")
    assert m.safe_ts is None


def test_all_offline_emits_everything_buffered(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.push("a", [(4, "x")])
    m.add_source("b")
    m.push("b", [(2, "y")])
    m.mark_offline("a")
    m.mark_offline("b")
    assert ts_of(m.pop_ready()) == [2, 4]


def test_remove_source_discards_buffer_and_name_can_return(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.add_source("b")
    m.push("a", [(2, "a2"), (6, "a6")])
    m.push("b", [(1, "b1")])
    assert ts_of(m.pop_ready()) == [1]
    assert m.remove_source("a") == 2
    assert m.sources() == ["b"]
    assert m.pop_ready() == []  # b has shown 1
    m.add_source("a")  # starts after latest_ts = 1
    m.push("a", [(3, "new a3")], watermark=10)
    m.push("b", [], watermark=10)
    assert m.pop_ready() == [MergedItem(3, "a", "new a3")]


def test_limit(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.push("a", [(t, t) for t in range(1, 11)], watermark=10)
    assert ts_of(m.pop_ready(limit=3)) == [1, 2, 3]
    assert ts_of(m.pop_ready()) == list(range(4, 11))


def test_errors(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    with pytest.raises(StateError, match="already exists"):
        m.add_source("a")
    with pytest.raises(StateError, match=r"unknown; add_source\('nope'\)"):
        m.push("nope", [(1, "x")])
    with pytest.raises(StateError, match="unknown"):
        m.mark_offline("nope")
    with pytest.raises(StateError, match="unknown"):
        m.remove_source("nope")


def test_unknown_strategy():
    with pytest.raises(ConfigError, match="unknown merge strategy 'fast'"):
        Merger(0, "fast")


def test_no_sources_emits_nothing(strategy):
    assert Merger(0, strategy).pop_ready() == []


# -- property: sorted, deduplicated union, emitted only when safe --------------

@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 4))
    streams = [sorted(draw(st.sets(st.integers(1, 60), max_size=15))) for _ in range(n)]
    steps = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 4),
                                    st.integers(0, 10), st.booleans()), max_size=40))
    return streams, steps


def run_scenario(strategy, streams, steps):
    """Feed the merger; check safety at every pop; return everything emitted."""
    m = Merger(0, strategy)
    names = [f"s{i}" for i in range(len(streams))]
    for name in names:
        m.add_source(name)
    sent = [0] * len(streams)
    shown = [0] * len(streams)  # the test's own model of each source's promise
    out: list[MergedItem] = []

    def pop():
        got = m.pop_ready()
        for item in got:
            assert all(s >= item.commit_ts for s in shown), "emitted before it was safe"
        out.extend(got)

    for idx, k, extra, with_watermark in steps:
        stream = streams[idx]
        batch = stream[sent[idx]:sent[idx] + k]
        sent[idx] += len(batch)
        if batch:
            shown[idx] = batch[-1]
        watermark = None
        if with_watermark:
            nxt = stream[sent[idx]] if sent[idx] < len(stream) else 10**6
            watermark = min(shown[idx] + extra, nxt - 1)
            shown[idx] = max(shown[idx], watermark)
        m.push(names[idx], [(t, (names[idx], t)) for t in batch], watermark)
        pop()
    for idx, stream in enumerate(streams):
        m.push(names[idx], [(t, (names[idx], t)) for t in stream[sent[idx]:]], 10**6)
        shown[idx] = 10**6
    pop()
    return out, m


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_property_sorted_dedup_union_and_strategies_agree(scenario):
    streams, steps = scenario
    outputs = []
    for strategy in STRATEGIES:
        out, m = run_scenario(strategy, streams, steps)
        union = sorted({t for s in streams for t in s})
        assert ts_of(out) == union
        for item in out:  # a duplicate is taken from the first source by name
            holders = [f"s{i}" for i, s in enumerate(streams) if item.commit_ts in s]
            assert item.source == min(holders)
            assert item.payload == (item.source, item.commit_ts)
        total = sum(len(s) for s in streams)
        assert m.counters["duplicates"] == total - len(union)
        assert m.counters["out_of_order"] == 0 and m.counters["stale"] == 0
        assert m.buffered() == 0
        outputs.append(out)
    assert outputs[0] == outputs[1]
