"""The coordinator kernel: batches, flushes, DDL barriers and checkpoint accounting."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.causality import row_keys
from tidb_binlog.drainer.checkpoint import Advancer, Checkpoint
from tidb_binlog.drainer.dispatch import Dispatcher, Flush, RunDDL, Send
from tidb_binlog.drainer.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.routing import route_batch

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


def routed_stream(d: Dispatcher, items, workers: int):
    """The keeper-routed path: route_batch + add_routed; Sends resolved to their DMLs
    through the payload slices (what each worker would execute), acked as they go."""
    summary, payloads = route_batch([(ts, txn, 0) for ts, txn in items], workers)
    cursor = [0] * workers
    stream = []

    def resolve(actions):
        for a in actions:
            if isinstance(a, Send):
                lo = cursor[a.worker]
                cursor[a.worker] = hi = lo + len(a.parts)
                parts = tuple(payloads[a.worker][lo:hi])
                assert [ts for ts, _ in parts] == [ts for ts, _ in a.parts]
                assert [len(dmls) for _, dmls in parts] == [n for _, n in a.parts]
                d.acked(a)
                stream.append(Send(a.worker, parts))
            else:
                if isinstance(a, RunDDL):
                    d.acked_ddl(a.ddl)
                stream.append(a)

    for routed in summary:
        resolve(d.add_routed(routed))
    resolve(d.drain())
    assert cursor == [len(p) for p in payloads]  # every part handed out exactly once
    return stream


def worker_parts(stream):
    """{(commit_ts, worker): dmls} and the commit_ts each Flush came before."""
    parts, flushed_before, pending_flush = {}, [], False
    for a in stream:
        if isinstance(a, Flush):
            pending_flush = True
        elif isinstance(a, Send):
            for ts, dmls in a.parts:
                parts[(ts, a.worker)] = dmls
                if pending_flush:
                    flushed_before.append(ts)
                    pending_flush = False
    return parts, flushed_before


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(rows, min_size=1, max_size=4), min_size=1, max_size=25),
       st.integers(1, 5))
def test_keeper_routing_sends_every_row_where_the_coordinator_would(txns, workers):
    """route_batch + add_routed == add: same rows on the same workers, and a flush
    before the same transactions; the checkpoint passes everything."""
    items = [(ts, Txn(ts, tuple(upd(pk, uk, old_uk=old) for pk, uk, old in rows_)))
             for ts, rows_ in enumerate(txns, start=1)]
    items.insert(len(items) // 2, (len(txns) + 1, None))
    items.sort(key=lambda item: item[0])
    direct = dispatcher(workers=workers, batch=10_000)
    routed = dispatcher(workers=workers, batch=10_000)
    expected = worker_parts(run(direct, items))
    got = worker_parts(routed_stream(routed, items, workers))
    assert got == expected
    assert routed.flushes == direct.flushes
    assert routed.advancer.commit_ts == direct.advancer.commit_ts == len(txns) + 1


def test_routed_ddl_is_a_barrier_after_every_pending_part():
    d = dispatcher(workers=3)
    items = [(1, Txn(1, (ins(1, "a"), ins(2, "b")))),
             (2, Txn(2, ddl=DDL("db", "t", "ALTER TABLE t ADD c INT", 2))),
             (3, Txn(3, (ins(3, "c"),)))]
    stream = routed_stream(d, items, 3)
    kinds = [type(a) for a in stream]
    first_flush = kinds.index(Flush)
    assert set(kinds[:first_flush]) == {Send} and kinds[first_flush + 1] is RunDDL
    assert kinds[-1] is Send and d.advancer.commit_ts == 3


def test_route_batch_keeps_commit_order_per_worker_and_one_part_per_worker():
    items = [(ts, Txn(ts, tuple(ins(ts * 10 + i, f"u{ts}{i}") for i in range(5))), 0)
             for ts in range(1, 30)]
    summary, payloads = route_batch(items, 4)
    for payload in payloads:
        assert [ts for ts, _ in payload] == sorted({ts for ts, _ in payload})
    for (ts, _, ddl, parts), (item_ts, txn, _) in zip(summary, items, strict=True):
        assert ts == item_ts and ddl is None and sum(n for _, n, _ in parts) == len(txn.dmls)
        assert [w for w, _, _ in parts] == sorted({w for w, _, _ in parts})
    with pytest.raises(ValueError, match="worker_count"):
        route_batch(items, 0)
