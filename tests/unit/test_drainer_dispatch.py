"""The coordinator kernel: batches, flushes, DDL barriers and checkpoint accounting."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidb_binlog.drainer.causality import row_keys
from tidb_binlog.drainer.checkpoint import Advancer, Checkpoint
from tidb_binlog.drainer.dispatch import Dispatcher, Flush, RunDDL, Send
from tidb_binlog.drainer.dml import DDL, DML, DMLType, TableSchema, Txn

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
