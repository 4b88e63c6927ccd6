"""Sorter / pairing kernel: hand-written cases and random TiDB-like interleavings."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.errors import ProtocolError
from tidb_binlog.pump.storage.sorter import COMMIT, PREWRITE, ROLLBACK, Sorter


def test_waits_for_earlier_prewrite():
    s = Sorter()
    s.push(10, 0, PREWRITE, pos=1)
    s.push(12, 0, PREWRITE, pos=2)
    s.push(12, 13, COMMIT, pos=3)
    assert s.pop_ready() is None and s.max_commit_ts == 0  # P10 still waits
    s.push(10, 14, COMMIT, pos=4)
    assert s.pop_ready() == 14
    assert s.handle_pos == 4 and s.all_matched() and len(s) == 0


def test_rollback_and_fake_binlogs():
    s = Sorter()
    s.push(10, 0, PREWRITE)
    s.push(20, 20, ROLLBACK)  # fake binlog: start == commit
    assert s.pop_ready() is None
    s.push(10, 0, ROLLBACK)
    assert s.pop_ready() == 20
    s.push(30, 30, ROLLBACK)
    assert s.pop_ready() == 30


def test_never_emits_at_or_below_previous():
    s = Sorter(max_commit_ts=100)
    s.push(5, 50, COMMIT)
    assert s.pop_ready() is None and s.max_commit_ts == 100
    s.push(6, 100, COMMIT)
    assert s.pop_ready() is None
    s.push(7, 101, COMMIT)
    assert s.pop_ready() == 101


def test_pending_ages_and_resolve():
    s = Sorter()
    s.push(10, 0, PREWRITE, now_s=1.0)
    s.push(11, 0, PREWRITE, now_s=3.0)
    s.push(11, 15, COMMIT)
    assert [(p.start_ts, p.age_s) for p in s.pending(now_s=5.0)] == [(10, 4.0)]
    assert s.resolve(10, 14)
    assert not s.resolve(10, 14)  # already settled
    assert s.pop_ready() == 15
    s.push(20, 0, PREWRITE, now_s=6.0)
    s.push(21, 22, COMMIT)
    assert s.resolve(20, None)  # rolled back: dropped
    assert s.pop_ready() == 22


def test_resolved_commit_counts_at_prewrite_position():
    s = Sorter()
    s.push(10, 0, PREWRITE)
    s.resolve(10, 40)
    assert s.pop_ready() == 40


def test_unsupported_type_is_rejected():
    import pytest

    with pytest.raises(ProtocolError, match="unsupported binlog type 3"):
        Sorter().push(1, 2, 3)


# -- random interleavings ---------------------------------------------------------------
# A TiDB-like world: a shared TSO; a transaction's prewrite is stored before it asks
# for its commit_ts, and its commit binlog is stored some time later (or never:
# then the resolver settles it). Actions are drawn at random.

ACTIONS = st.lists(st.tuples(st.sampled_from(["begin", "get_commit_ts", "write_commit",
                                              "rollback", "fake", "pop", "resolve"]),
                             st.integers(0, 1000)), max_size=120)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_random_interleavings_keep_served_order_stable(actions):
    s = Sorter()
    tso = iter(range(1, 10**6))
    open_txns: list[int] = []            # prewrite stored, no commit_ts yet
    committing: dict[int, int] = {}      # start_ts -> commit_ts, commit binlog not yet stored
    commits: set[int] = set()            # commit_ts of every commit/fake the sorter knows
    emitted: list[tuple[int, frozenset[int]]] = []  # (max, commits <= max at that time)
    outcome: dict[int, int | None] = {}  # start_ts -> commit_ts or None (rolled back)

    def pop():
        m = s.pop_ready()
        if m is not None:
            emitted.append((m, frozenset(c for c in commits if c <= m)))

    for action, pick in actions:
        if action == "begin":
            ts = next(tso)
            s.push(ts, 0, PREWRITE, now_s=0.0)
            open_txns.append(ts)
        elif action == "get_commit_ts" and open_txns:
            start = open_txns.pop(pick % len(open_txns))
            committing[start] = next(tso)
        elif action == "write_commit" and committing:
            start = sorted(committing)[pick % len(committing)]
            c = committing.pop(start)
            s.push(start, c, COMMIT)
            commits.add(c)
            outcome[start] = c
        elif action == "rollback" and open_txns:
            start = open_txns.pop(pick % len(open_txns))
            s.push(start, 0, ROLLBACK)
            outcome[start] = None
        elif action == "fake":
            ts = next(tso)
            s.push(ts, ts, ROLLBACK)
            commits.add(ts)
        elif action == "resolve":
            # The resolver (TiKV) knows the truth; the storage writes the commit binlog
            # itself, so the sorter sees resolve + the commit push.
            pend = [p.start_ts for p in s.pending(1.0)]
            if pend:
                start = pend[pick % len(pend)]
                if start in committing:
                    c = committing.pop(start)
                    s.push(start, c, COMMIT)
                    commits.add(c)
                    outcome[start] = c
                elif start in open_txns:  # TiKV rolls an expired lock back
                    open_txns.remove(start)
                    assert s.resolve(start, None)
                    outcome[start] = None
        pop()

    # Finish every transaction, then everything must be out.
    for start, c in sorted(committing.items()):
        s.push(start, c, COMMIT)
        commits.add(c)
    for start in open_txns:
        s.push(start, 0, ROLLBACK)
    pop()

    maxes = [m for m, _ in emitted]
    assert maxes == sorted(set(maxes)), "max_commit_ts must strictly increase"
    for m, seen in emitted:
        # Everything at or below an emitted watermark had already arrived then:
        # a reader that served up to m never misses a commit later.
        assert seen == frozenset(c for c in commits if c <= m)
    assert s.all_matched()
    assert s.max_commit_ts == (max(commits) if commits else 0)
    assert len(s) == 0
