"""The coordinator kernel: batches, flushes, DDL barriers and checkpoint accounting."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.apply.causality import row_keys, stable_hash
from tidb_binlog.drainer.apply.dispatch import Dispatcher, Flush, RunDDL, Send
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.apply.routing import FLUSH, ROWS, RUN_DDL, BatchPlanner
from tidb_binlog.drainer.checkpoint.checkpoint import Advancer, Checkpoint

SCHEMA = TableSchema.build("db", "t", ["id", "uk", "v"], primary_key=["id"],
                           unique_keys={"uk": ["uk"]})


def upd(pk, uk, v=0, old_uk=None):
    old = {"id": pk, "uk": uk if old_uk is None else old_uk, "v": v}
    return DML("db", "t", DMLType.UPDATE, {"id": pk, "uk": uk, "v": v + 1}, old, schema=SCHEMA)


def ins(pk, uk, v=0):
    return DML("db", "t", DMLType.INSERT, {"id": pk, "uk": uk, "v": v}, schema=SCHEMA)


def dispatcher(workers=4, batch=2, exactly_once=True):
    return Dispatcher(workers, Advancer(Checkpoint(0)), batch_dmls=batch,
                      exactly_once=exactly_once)


def run(d: Dispatcher, items):
    """Drive the kernel; return the action stream, acking everything as it goes."""
    stream = []
    for ts, txn in items:
        stream += d.add(ts, txn)
    stream += d.drain()
    for a in stream:
        if isinstance(a, Send):
            d.acked(a)
        elif isinstance(a, RunDDL):
            d.acked_ddl(a.ddl)
    return stream


@pytest.mark.parametrize("exactly_once", [True, False])
def test_batches_by_worker_and_checkpoint_passes_everything(exactly_once):
    d = dispatcher(exactly_once=exactly_once)
    items = [(ts, Txn(ts, (ins(ts, f"u{ts}"),))) for ts in range(1, 21)] + [(21, None)]
    stream = run(d, items)
    sends = [a for a in stream if isinstance(a, Send)]
    assert sum(s.dml_count for s in sends) == 20
    assert all(s.dml_count <= 2 for s in sends)
    assert d.advancer.commit_ts == 21 and d.advancer.pending == 0


def test_ddl_is_a_barrier_that_runs_alone():
    d = dispatcher()
    acts = d.add(1, Txn(1, (ins(1, "a"),)))
    acts += d.add(2, Txn(2, ddl=DDL("db", "t", "ALTER TABLE t ADD c INT", 2)), 7)
    kinds = [type(a) for a in acts]
    assert kinds == [Send, Flush, RunDDL]
    assert acts[2].schema_version == 7
    d.acked(acts[0])
    assert d.advancer.commit_ts == 1
    d.acked_ddl(acts[2].ddl)
    assert d.advancer.commit_ts == 2 and d.advancer.schema_version == 7


def test_fake_binlog_moves_checkpoint_only_after_earlier_acks():
    d = dispatcher(batch=100)
    d.add(1, Txn(1, (ins(1, "a"),)))
    d.add(2, None)
    assert d.advancer.commit_ts == 0
    (send,) = d.drain()
    d.acked(send)
    assert d.advancer.commit_ts == 2


def test_unique_key_swap_inside_one_txn_goes_to_one_worker():
    d = dispatcher(workers=8, batch=100)
    # Two rows with different PKs swap their unique key values in one transaction.
    swap = Txn(5, (upd(1, "b", old_uk="a"), upd(2, "a", old_uk="b")))
    d.add(5, swap)
    sends = d.drain()
    assert len(sends) == 1 and sends[0].dml_count == 2


def test_conflict_across_txns_flushes_before_the_later_txn():
    d = dispatcher(workers=16, batch=100)
    # Find two PKs routed to different workers; the second row takes the first's uk.
    router_worker = d._router.worker_for_key
    a, b = 1, next(pk for pk in range(2, 200)
                   if router_worker(row_keys(ins(pk, "x"))[0]) != router_worker(
                       row_keys(ins(1, "k"))[0]))
    d.add(1, Txn(1, (ins(a, "k"),)))
    acts = d.add(2, Txn(2, (upd(b, "k", old_uk="z"),)))
    assert [type(x) for x in acts][:2] == [Send, Flush]
    assert d.flushes == 1


def test_routing_is_a_function_of_the_txn_in_exactly_once_mode():
    """Replaying a suffix of the stream routes every txn to the same workers."""
    items = [(ts, Txn(ts, (ins(ts % 7, f"u{ts % 5}"), upd(ts % 11, f"w{ts % 3}"))))
             for ts in range(1, 60)]

    def placement(start):
        d = dispatcher(workers=4, batch=1)
        out = {}
        for a in run(d, items[start:]):
            if isinstance(a, Send):
                for ts, dmls in a.parts:
                    out.setdefault(ts, set()).add((a.worker, len(dmls)))
        return out

    full, suffix = placement(0), placement(30)
    assert all(full[ts] == suffix[ts] for ts in suffix)


rows = st.tuples(st.integers(0, 6), st.sampled_from("abcde"), st.sampled_from("abcde"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(rows, min_size=1, max_size=4), min_size=1, max_size=25),
       st.integers(1, 5), st.integers(1, 4), st.booleans())
def test_no_key_runs_on_two_workers_between_flushes(txns, workers, batch, exactly_once):
    d = dispatcher(workers=workers, batch=batch, exactly_once=exactly_once)
    items = [(ts, Txn(ts, tuple(upd(pk, uk, old_uk=old) for pk, uk, old in rows_)))
             for ts, rows_ in enumerate(txns, start=1)]
    stream = run(d, items)
    owner: dict[str, int] = {}
    seen_parts = []
    for a in stream:
        if isinstance(a, Flush):
            owner.clear()
        elif isinstance(a, Send):
            for ts, dmls in a.parts:
                seen_parts.append(ts)
                for dml in dmls:
                    for key in row_keys(dml):
                        assert owner.setdefault(key, a.worker) == a.worker
    assert d.advancer.commit_ts == len(txns)
    assert sorted(set(seen_parts)) == list(range(1, len(txns) + 1))
    if exactly_once:  # one part per worker per txn: progress by commit_ts is sound
        per = {}
        for a in stream:
            if isinstance(a, Send):
                for ts, _ in a.parts:
                    assert (ts, a.worker) not in per
                    per[(ts, a.worker)] = True


def planned(planner: BatchPlanner, items, cuts=()):
    """The keeper-routed path: items planned in batches cut at ``cuts`` (the window lives
    across them); every run resolved to the parts it hands each worker."""
    out_steps, parts, cursor = [], [], []
    bounds = [0, *sorted(set(cuts)), len(items)]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        if lo >= hi:
            continue
        steps, payloads = planner.plan([(ts, txn, v) for ts, txn, v in items[lo:hi]])
        cursor = [0] * planner.worker_count
        for step in steps:
            if step[0] == ROWS:
                run = {}
                for w, n in enumerate(step[3]):
                    run[w] = payloads[w][cursor[w]:cursor[w] + n]
                    cursor[w] += n
                out_steps.append(step)
                parts.append(run)
            else:
                out_steps.append(step)
                parts.append(None)
        assert cursor == [len(p) for p in payloads]  # every part handed out exactly once
    return out_steps, parts


def runs_between_flushes(kinds_and_parts):
    """{(commit_ts, worker): dmls} and, per flush, the lowest commit_ts after it."""
    got, flushed_before, pending = {}, [], False
    for kind, per_worker in kinds_and_parts:
        if kind == "flush":
            pending = True
            continue
        for w, parts in per_worker.items():
            for ts, dmls in parts:
                got[(ts, w)] = tuple(dmls)
        if pending:
            low = min((ts for parts in per_worker.values() for ts, _ in parts), default=None)
            if low is not None:
                flushed_before.append(low)
                pending = False
    return got, flushed_before


def direct_runs(stream):
    out = []
    for a in stream:
        if isinstance(a, Flush):
            out.append(("flush", None))
        elif isinstance(a, Send):
            out.append(("rows", {a.worker: list(a.parts)}))
    merged, run = [], {}
    for kind, per_worker in out:  # sends between two flushes form one run
        if kind == "flush":
            merged += [("rows", run), ("flush", None)]
            run = {}
        else:
            for w, parts in per_worker.items():
                run.setdefault(w, []).extend(parts)
    return [*merged, ("rows", run)]


def plan_runs(steps, parts):
    out = []
    for step, run in zip(steps, parts, strict=True):
        if step[0] == FLUSH:
            out.append(("flush", None))
        elif step[0] == ROWS:
            out.append(("rows", run))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(rows, min_size=1, max_size=4), min_size=1, max_size=25),
       st.integers(1, 5), st.lists(st.integers(0, 26), max_size=4))
def test_keeper_plan_sends_every_row_where_the_coordinator_would(txns, workers, cuts):
    """BatchPlanner (the keeper, batches cut anywhere) == Dispatcher.add: the same rows on
    the same workers, a flush before the same transactions, the same flush count."""
    items = [(ts, Txn(ts, tuple(upd(pk, uk, old_uk=old) for pk, uk, old in rows_)), 0)
             for ts, rows_ in enumerate(txns, start=1)]
    items.insert(len(items) // 2, (len(txns) + 1, None, 0))
    items.sort(key=lambda item: item[0])
    direct = dispatcher(workers=workers, batch=10_000)
    expected = runs_between_flushes(direct_runs(run(direct, [(ts, t) for ts, t, _ in items])))
    planner = BatchPlanner(workers)
    steps, parts = planned(planner, items, cuts)
    assert runs_between_flushes(plan_runs(steps, parts)) == expected
    assert planner.flushes == direct.flushes
    rows_steps = [s for s in steps if s[0] == ROWS]
    assert [s[1] for s in rows_steps] == sorted({s[1] for s in rows_steps})  # ascending runs
    assert rows_steps[-1][1] == len(txns) + 1  # the last run covers every commit_ts
    assert sum(s[4] for s in rows_steps) == sum(len(r) for r in txns)


def test_plan_ddl_is_a_barrier_and_runs_cover_fakes_and_versions():
    planner = BatchPlanner(3)
    ddl = DDL("db", "t", "ALTER TABLE t ADD c INT", 2)
    items = [(1, Txn(1, (ins(1, "a"), ins(2, "b"))), 5), (2, Txn(2, ddl=ddl), 6),
             (3, Txn(3, (ins(3, "c"),)), 6), (4, None, 7), (5, None, 0)]
    steps, payloads = planner.plan(items)
    assert [s[0] for s in steps] == [ROWS, RUN_DDL, ROWS]
    first, ddl_step, last = steps
    assert first[1] == 1 and first[2] == 5 and sum(first[3]) == 2 and first[4] == 2
    assert ddl_step == (RUN_DDL, 2, 6, ddl)
    assert last[1] == 5 and last[2] == 7 and sum(last[3]) == 1 and last[4] == 1
    assert sum(len(p) for p in payloads) == 3
    assert planner.plan([(6, None, 0)])[0] == [(ROWS, 6, 0, (0, 0, 0), 0)]  # fakes only


def test_plan_window_lives_across_batches_until_reset():
    planner = BatchPlanner(2)
    a = upd(1, "x")
    # find a second row whose PK routes elsewhere and which takes over uk "x"
    other = next(pk for pk in range(2, 100)
                 if stable_hash(row_keys(upd(pk, "x"))[0]) % 2
                 != stable_hash(row_keys(a)[0]) % 2)
    b = upd(other, "x")
    planner.plan([(1, Txn(1, (a,)), 0)])
    steps, _ = planner.plan([(2, Txn(2, (b,)), 0)])
    assert [s[0] for s in steps] == [FLUSH, ROWS] and planner.flushes == 1
    planner.plan([(3, Txn(3, (a,)), 0)])  # conflicts again: flush
    assert planner.flushes == 2
    planner.reset()
    steps, _ = planner.plan([(4, Txn(4, (b,)), 0)])
    assert [s[0] for s in steps] == [ROWS]


def test_plan_keeps_commit_order_per_worker_and_one_part_per_worker():
    items = [(ts, Txn(ts, tuple(ins(ts * 10 + i, f"u{ts}{i}") for i in range(5))), 0)
             for ts in range(1, 30)]
    steps, payloads = BatchPlanner(4).plan(items)
    for payload in payloads:
        assert [ts for ts, _ in payload] == sorted({ts for ts, _ in payload})
    assert sum(len(dmls) for p in payloads for _, dmls in p) == 29 * 5
    assert sum(sum(s[3]) for s in steps if s[0] == ROWS) == sum(len(p) for p in payloads)
    with pytest.raises(ValueError, match="worker_count"):
        BatchPlanner(0)
