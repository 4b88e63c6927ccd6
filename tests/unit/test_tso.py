"""TSO layout and the embedded timestamp oracle."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog import tso
from tidb_binlog.errors import TSOError
from tidb_binlog.tso import (
    LOGICAL_BITS,
    MAX_LOGICAL,
    TimestampOracle,
    compose,
    extract_logical,
    extract_physical,
)


class Clock:
    """A settable millisecond clock."""

    def __init__(self, now_ms: int):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


# -- layout -----------------------------------------------------------------


def test_layout_is_physical_shifted_by_18():
    assert LOGICAL_BITS == 18 and MAX_LOGICAL == 262144
    assert compose(1, 0) == 1 << 18
    assert compose(1, 5) == (1 << 18) | 5
    # 2019-05-07 05:51:52.155 UTC, logical 3: 1557208312155 * 2**18 + 3.
    assert compose(1557208312155, 3) == 408212815781560323
    assert extract_physical(408212815781560323) == 1557208312155
    assert extract_logical(408212815781560323) == 3


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # loaded hosts
@given(st.integers(0, (1 << 45) - 1), st.integers(0, MAX_LOGICAL - 1))
def test_compose_extract_round_trip(physical_ms, logical):
    ts = compose(physical_ms, logical)
    assert extract_physical(ts) == physical_ms
    assert extract_logical(ts) == logical


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # loaded hosts
@given(st.integers(0, 1 << 40), st.integers(0, MAX_LOGICAL - 1),
       st.integers(0, 1 << 40), st.integers(0, MAX_LOGICAL - 1))
def test_compose_orders_like_the_pair(p1, l1, p2, l2):
    assert (compose(p1, l1) < compose(p2, l2)) == ((p1, l1) < (p2, l2))


@pytest.mark.parametrize("physical_ms, logical", [(0, -1), (0, MAX_LOGICAL), (-1, 0)])
def test_compose_rejects_out_of_range(physical_ms, logical):
    with pytest.raises(ValueError):
        compose(physical_ms, logical)


def test_bounds_of_the_logical_part():
    assert extract_logical(compose(9, MAX_LOGICAL - 1)) == MAX_LOGICAL - 1
    assert compose(9, MAX_LOGICAL - 1) + 1 == compose(10, 0)


# -- oracle -----------------------------------------------------------------


def test_strictly_monotonic_across_eight_threads():
    oracle = TimestampOracle()
    per_thread: list[list[int]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def work(out: list[int], count: int) -> None:
        start.wait()
        for _ in range(1500):
            first = oracle.get_ts(count)
            out.extend(range(first, first + count))

    threads = [threading.Thread(target=work, args=(out, 1 + i % 3))
               for i, out in enumerate(per_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in per_thread:
        assert out == sorted(out) and len(set(out)) == len(out)
    everything = [ts for out in per_thread for ts in out]
    assert len(everything) == len(set(everything)) == 1500 * sum(1 + i % 3 for i in range(8))


def test_monotonic_within_one_frozen_millisecond_and_across_it():
    clock = Clock(1_000)
    oracle = TimestampOracle(clock_ms=clock)
    seen = [oracle.get_ts() for _ in range(10)]
    assert [extract_physical(ts) for ts in seen] == [1_000] * 10
    assert [extract_logical(ts) for ts in seen] == list(range(10))
    clock.now_ms = 500  # the clock goes backwards: keep counting in the old millisecond
    later = oracle.get_ts()
    assert later == seen[-1] + 1


def test_batched_get_ts_reserves_consecutive_timestamps():
    clock = Clock(2_000)
    oracle = TimestampOracle(clock_ms=clock)
    first = oracle.get_ts(100)
    second = oracle.get_ts(1)
    assert second == first + 100
    assert extract_physical(first) == extract_physical(second) == 2_000


def test_batch_that_does_not_fit_moves_to_the_next_millisecond():
    clock = Clock(3_000)
    oracle = TimestampOracle(clock_ms=clock)
    a = oracle.get_ts(MAX_LOGICAL - 10)
    b = oracle.get_ts(20)
    assert extract_physical(a) == 3_000 and extract_logical(a) == 0
    assert extract_physical(b) == 3_001 and extract_logical(b) == 0
    assert b > a + MAX_LOGICAL - 10 - 1


@pytest.mark.parametrize("count", [0, -1, MAX_LOGICAL])
def test_batch_size_out_of_range_is_a_tso_error(count):
    with pytest.raises(TSOError, match=str(count)):
        TimestampOracle().get_ts(count)


def test_restart_with_a_clock_that_went_backwards(tmp_path):
    path = tmp_path / "tso" / "mark"
    clock = Clock(50_000)
    first = TimestampOracle(path, window_ms=1_000, clock_ms=clock)
    handed_out = [first.get_ts() for _ in range(5)]
    clock.now_ms = 50_999  # just below the persisted mark 51_000
    handed_out.append(first.get_ts())
    del first  # a crash: nothing is flushed on the way out

    clock.now_ms = 10_000  # the machine's clock jumped back by 40 s
    second = TimestampOracle(path, window_ms=1_000, clock_ms=clock)
    after = second.get_ts()
    assert after > max(handed_out)
    assert extract_physical(after) > 51_000 - 1


def test_repeated_restarts_never_repeat(tmp_path):
    path = tmp_path / "mark"
    clock = Clock(7_000)
    seen: list[int] = []
    for _ in range(5):
        oracle = TimestampOracle(path, window_ms=50, clock_ms=clock)
        seen.extend(oracle.get_ts() for _ in range(3))
    assert seen == sorted(seen) and len(set(seen)) == len(seen)


def test_mark_is_persisted_ahead_of_every_handed_out_timestamp(tmp_path):
    path = tmp_path / "mark"
    clock = Clock(100_000)
    oracle = TimestampOracle(path, window_ms=200, clock_ms=clock)
    for step_ms in (0, 50, 199, 1, 500, 3, 10_000):
        clock.now_ms += step_ms
        ts = oracle.get_ts()
        assert extract_physical(ts) < int(path.read_text())
        assert int(path.read_text()) == oracle.high_water_mark_ms


def test_mark_is_written_only_when_the_window_is_used_up(tmp_path, monkeypatch):
    path = tmp_path / "mark"
    clock = Clock(100_000)
    oracle = TimestampOracle(path, window_ms=1_000, clock_ms=clock)
    writes = []
    real_replace = os.replace
    monkeypatch.setattr(tso.os, "replace", lambda a, b: (writes.append(b), real_replace(a, b)))
    for _ in range(100):
        oracle.get_ts()
        clock.now_ms += 5  # 500 ms in all: inside the window
    assert writes == []
    clock.now_ms = 101_000
    oracle.get_ts()
    assert len(writes) == 1


def test_no_timestamp_above_the_mark_when_persisting_fails(tmp_path, monkeypatch):
    path = tmp_path / "mark"
    clock = Clock(100_000)
    oracle = TimestampOracle(path, window_ms=1_000, clock_ms=clock)
    before = oracle.get_ts()
    mark_ms = int(path.read_text())

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tso.os, "fsync", broken_fsync)
    clock.now_ms = mark_ms + 10
    with pytest.raises((OSError, TSOError)):
        oracle.get_ts()
    assert int(path.read_text()) == mark_ms

    monkeypatch.undo()
    after = oracle.get_ts()
    assert after > before and extract_physical(after) < int(path.read_text())


@pytest.mark.parametrize("content", ["garbage\n", "", "12.5", "0x10"])
def test_corrupt_mark_file_is_a_clear_tso_error(tmp_path, content):
    path = tmp_path / "mark"
    path.write_text(content)
    with pytest.raises(TSOError) as info:
        TimestampOracle(path)
    assert str(path) in str(info.value)
    assert "corrupt" in str(info.value)
