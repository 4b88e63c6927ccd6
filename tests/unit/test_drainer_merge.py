"""The k-way merge kernel: every test runs over every strategy."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.source.merge import STRATEGIES, MergedItem, Merger
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
    assert all(out == outputs[0] for out in outputs)


# -- pairs, limits, the push fast path and the runs strategy -------------------

def test_strategies_and_default():
    assert STRATEGIES == ("heap", "linear", "runs")
    assert Merger().strategy == "runs"


def test_pop_ready_pairs_returns_the_pushed_pairs(strategy):
    m = Merger(0, strategy)
    m.add_source("b")
    m.add_source("a")
    a = [(1, "a1"), (4, "a4")]
    b = [(2, "b2"), (4, "b4"), (5, "b5")]
    m.push("a", a, watermark=9)
    m.push("b", b, watermark=9)
    out = m.pop_ready_pairs()
    assert out == [(1, "a1"), (2, "b2"), (4, "a4"), (5, "b5")]
    assert out[0] is a[0] and out[2] is a[1] and out[3] is b[2]  # no copies
    assert m.counters == {"emitted": 4, "duplicates": 1, "out_of_order": 0, "stale": 0}
    assert m.buffered() == 0


def test_limit_caps_emitted_items_not_dropped_ones(strategy):
    m = Merger(0, strategy)
    for name in ("a", "b", "c"):
        m.add_source(name)
    m.push("a", [(t, f"a{t}") for t in range(1, 30, 2)], watermark=40)
    m.push("b", [(t, f"b{t}") for t in range(1, 30, 3)], watermark=40)
    m.push("c", [(t, f"c{t}") for t in range(2, 30, 2)], watermark=40)
    expected = sorted({t for t in range(1, 30, 2)} | set(range(1, 30, 3)) | set(range(2, 30, 2)))
    got = []
    while True:
        out = m.pop_ready_pairs(limit=4)
        assert len(out) <= 4
        if not out:
            break
        got += [t for t, _ in out]
    assert got == expected
    assert m.buffered() == 0
    assert m.counters["duplicates"] == 15 + 10 + 14 - len(expected)


def test_duplicate_split_across_two_pops_is_still_dropped(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.add_source("b")
    m.push("a", [(1, "a1"), (2, "a2"), (3, "a3")], watermark=9)
    m.push("b", [(2, "b2"), (3, "b3")], watermark=9)
    # the limit ends the first pop at a2; b2 is still buffered and a duplicate of it
    assert m.pop_ready(limit=2) == [MergedItem(1, "a", "a1"), MergedItem(2, "a", "a2")]
    assert m.counters["duplicates"] == 0 and m.buffered() == 3
    assert m.pop_ready_pairs(limit=1) == [(3, "a3")]
    assert m.counters["duplicates"] == 1 and m.buffered("b") == 1  # b3 waits: 1 emitted
    assert m.pop_ready() == []
    assert m.counters == {"emitted": 3, "duplicates": 2, "out_of_order": 0, "stale": 0}


def test_duplicate_pushed_after_its_pop_by_an_offline_source(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    m.add_source("b")
    m.push("a", [(5, "a5")], watermark=9)
    m.mark_offline("b")
    assert ts_of(m.pop_ready()) == [5]
    m.push("b", [(4, "late"), (5, "retried"), (6, "b6")])
    assert m.pop_ready_pairs() == [(6, "b6")]
    assert m.counters == {"emitted": 2, "duplicates": 1, "out_of_order": 1, "stale": 0}


def test_non_ascending_batch_falls_back_and_counts_stale(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    assert m.push("a", [(3, "x"), (5, "y"), (4, "back"), (5, "again"), (7, "z")]) == 3
    assert m.counters["stale"] == 2
    assert m.push("a", iter([(7, "resent"), (8, "w")]), watermark=6) == 1  # any iterable
    assert m.push("a", [(9, "v"), (10, "u")]) == 2  # ascending above shown: the fast path
    assert m.counters["stale"] == 3 and m.positions() == {"a": 10}
    assert m.pop_ready_pairs() == [(3, "x"), (5, "y"), (7, "z"), (8, "w"), (9, "v"), (10, "u")]
    with pytest.raises(ValueError):
        m.push("a", [(11, "a", "triple")])


def test_consumed_items_are_compacted(strategy):
    m = Merger(0, strategy)
    m.add_source("a")
    for start in range(1, 10_001, 1000):
        m.push("a", [(t, None) for t in range(start, start + 1000)], watermark=start + 999)
        assert len(m.pop_ready_pairs(limit=700)) == 700
    assert m.buffered("a") == 3000
    assert len(m._sources["a"].items) < 2 * 3000 + 1000  # the head does not keep them all
    assert [t for t, _ in m.pop_ready_pairs()] == list(range(7001, 10_001))


# -- property: every strategy, both pop flavours, identical after every step ---

def build_ops(rnd: random.Random, steps: int, max_batch: int, max_ts: int):
    """A random run of the merger: pushes (ascending or not, overlapping other sources,
    some stale), watermarks, pops with and without limits, sources added (sometimes
    below the merge position), marked offline and removed."""
    ops = []
    for _ in range(steps):
        r = rnd.random()
        if r < 0.55:
            k = rnd.randrange(max_batch + 1)
            ts = [rnd.randrange(1, max_ts) for _ in range(k)]
            if rnd.random() < 0.8:
                ts = sorted(set(ts))
            wm = rnd.choice([None, rnd.randrange(1, max_ts)])
            ops.append(("push", rnd.randrange(6), ts, wm))
        elif r < 0.85:
            ops.append(("pop", rnd.choice([None, 0, 1, 2, 3, 7, rnd.randrange(1, 3 * max_batch + 2)])))
        elif r < 0.93:
            ops.append(("add", rnd.randrange(6), rnd.choice([None, rnd.randrange(0, max_ts)])))
        elif r < 0.97:
            ops.append(("offline", rnd.randrange(6)))
        else:
            ops.append(("remove", rnd.randrange(6)))
    ops.append(("offline_all",))
    ops.append(("pop", None))
    return ops


def replay(ops, strategy: str, pairs: bool):
    """Apply ``ops``; return the observable state after every step."""
    m = Merger(0, strategy)
    for name in ("s0", "s1"):
        m.add_source(name)
    trace = []
    serial = 0
    for op in ops:
        kind = op[0]
        result = None
        if kind == "push":
            name = f"s{op[1]}"
            if name in m.sources():
                serial += 1
                result = m.push(name, [(t, (name, t, serial)) for t in op[2]], op[3])
        elif kind == "pop":
            if pairs:
                result = m.pop_ready_pairs(op[1])
            else:
                items = m.pop_ready(op[1])
                assert all(i.source == i.payload[0] for i in items)
                result = [(i.commit_ts, i.payload) for i in items]
            if op[1] is not None:
                assert len(result) <= op[1]
            ts = [t for t, _ in result]
            assert ts == sorted(set(ts))
        elif kind == "add":
            name = f"s{op[1]}"
            if name not in m.sources():
                result = m.add_source(name, op[2])
        elif kind == "offline":
            name = f"s{op[1]}"
            if name in m.sources():
                m.mark_offline(name)
        elif kind == "remove":
            name = f"s{op[1]}"
            if name in m.sources():
                result = m.remove_source(name)
        elif kind == "offline_all":
            for name in m.sources():
                m.mark_offline(name)
        trace.append((result, dict(m.counters), m.latest_ts, m.safe_ts, m.positions(),
                      {name: m.buffered(name) for name in m.sources()}))
    return trace


def check_replays_agree(ops):
    reference = replay(ops, "heap", pairs=False)
    for strategy in STRATEGIES:
        for pairs in (False, True):
            trace = replay(ops, strategy, pairs)
            for step, (got, want) in enumerate(zip(trace, reference, strict=True)):
                assert got == want, (strategy, pairs, step, ops[step])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32))
def test_property_strategies_and_pop_flavours_agree_small(seed):
    check_replays_agree(build_ops(random.Random(seed), steps=40, max_batch=8, max_ts=40))


@pytest.mark.parametrize("seed", range(12))
def test_strategies_and_pop_flavours_agree_big_batches(seed):
    check_replays_agree(build_ops(random.Random(seed), steps=60, max_batch=400, max_ts=3000))
