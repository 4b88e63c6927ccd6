"""Large transactions translated in chunks: the same rows, in the same order, as whole."""

from __future__ import annotations

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_old_row, encode_value
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.translate.schema import SchemaKeeper
from tidb_binlog.drainer.translate.txn import Translator
from tidb_binlog.model import (
    ActionType,
    CIStr,
    ColumnInfo,
    DBInfo,
    FieldType,
    HistoryInfo,
    Job,
    JobState,
    SchemaState,
    TableInfo,
)


def _col(cid, name, tp, flag=0, flen=-1, charset="utf8mb4", offset=0):
    return ColumnInfo(id=cid, name=CIStr(name), offset=offset,
                      type=FieldType(tp=tp, flag=flag, flen=flen, decimal=0, charset=charset,
                                     collate="utf8mb4_bin"))


def _job(job_id, tp, version, *, db=None, table=None):
    return Job(id=job_id, type=tp, schema_id=2, table_id=table.id if table else 0,
               state=JobState.SYNCED, schema_state=SchemaState.PUBLIC, query="",
               binlog=HistoryInfo(schema_version=version, db_info=db, table_info=table))


def translator() -> Translator:
    users = TableInfo(id=10, name=CIStr("users"), pk_is_handle=True, max_col_id=2, cols=[
        _col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary"),
        _col(2, "name", m.TYPE_VARCHAR, 0, 64, offset=1)])
    other = TableInfo(id=20, name=CIStr("other"), pk_is_handle=True, max_col_id=1, cols=[
        _col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary")])
    jobs = [_job(1, ActionType.CREATE_SCHEMA, 1, db=DBInfo(id=2, db_name=CIStr("shop"))),
            _job(2, ActionType.CREATE_TABLE, 2, table=users),
            _job(3, ActionType.CREATE_TABLE, 3, table=other)]
    by_id = {j.id: j for j in jobs}
    return Translator(SchemaKeeper.from_history(jobs, 3), by_id.get)


def commit_with(mutations, commit_ts=100):
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(bl.new_prewrite_value(3, mutations))
    return b


def user(i: int, name: str) -> bytes:
    return encode_old_row([1, 2], [Datum.int64(i), Datum.string(name)])


def inserts(lo: int, hi: int):
    rows = [encode_value([Datum.int64(i)]) + encode_old_row([2], [Datum.string(f"u{i}")])
            for i in range(lo, hi)]
    return bl.new_table_mutation(10, inserted_rows=rows,
                                 sequence=[bl.MutationType.INSERT] * len(rows))


def mixed(n: int):
    """A mutation of inserts, updates and deletes interleaved (the general walk)."""
    seq, ins, upd, dele = [], [], [], []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            ins.append(encode_value([Datum.int64(1000 + i)]) + encode_old_row(
                [2], [Datum.string(f"m{i}")]))
            seq.append(bl.MutationType.INSERT)
        elif kind == 1:
            upd.append(user(i, "old") + user(i, f"new{i}"))
            seq.append(bl.MutationType.UPDATE)
        else:
            dele.append(user(i, f"gone{i}"))
            seq.append(bl.MutationType.DELETE_ROW)
    return bl.new_table_mutation(10, inserted_rows=ins, updated_rows=upd, deleted_rows=dele,
                                 sequence=seq)


def chunked(binlog, max_rows):
    return list(translator().translate_chunks(binlog, max_rows))


@pytest.mark.parametrize("max_rows", [1, 2, 3, 7, 10, 11, 25, 1000])
def test_chunks_hold_the_same_rows_in_the_same_order(max_rows):
    # three mutations: chunk boundaries fall inside each of them and across them
    binlog = commit_with([inserts(0, 10), mixed(11), inserts(50, 54)])
    whole = translator().translate(binlog).dmls
    chunks = chunked(binlog, max_rows)
    assert [dml for dmls, _ in chunks for dml in dmls] == list(whole)
    assert [last for _, last in chunks] == [False] * (len(chunks) - 1) + [True]
    assert all(0 < len(dmls) <= max_rows for dmls, _ in chunks)
    assert len(chunks) == -(-len(whole) // max_rows)


def test_a_boundary_inside_a_mutation():
    chunks = chunked(commit_with([inserts(0, 5)]), 2)
    assert [[d.values["id"] for d in dmls] for dmls, _ in chunks] == [[0, 1], [2, 3], [4]]


def test_exact_multiple_never_ends_with_an_empty_chunk():
    chunks = chunked(commit_with([inserts(0, 4), inserts(4, 8)]), 4)
    assert [len(d) for d, _ in chunks] == [4, 4]
    assert chunks[-1][1] is True


def test_a_transaction_without_rows_is_one_empty_last_chunk():
    assert chunked(commit_with([]), 3) == [((), True)]


def test_dropped_rows_never_leave_an_empty_last_chunk():
    t = translator()
    t.keeper.truncated.add(20)  # the clustered table's rows are dropped
    dropped = bl.new_table_mutation(20, inserted_rows=[b"x"] * 5,
                                    sequence=[bl.MutationType.INSERT] * 5)
    chunks = list(t.translate_chunks(commit_with([inserts(0, 4), dropped]), 2))
    assert [(len(d), last) for d, last in chunks] == [(2, False), (2, True)]


def test_may_exceed_is_a_size_bound_only():
    small = commit_with([inserts(0, 3)])
    big = commit_with([inserts(0, 400)])
    assert not translator().may_exceed(small, 100)
    assert translator().may_exceed(big, 10)
    assert not translator().may_exceed(big, 0)  # chunking off
    fake = bl.commit(7, 7)
    assert not translator().may_exceed(fake, 1)


def test_max_rows_must_be_positive():
    with pytest.raises(ValueError, match="max_rows"):
        chunked(commit_with([inserts(0, 3)]), 0)


# -- the keeper: a large transaction routed one chunk per call ---------------------------

class _Meta:
    def __init__(self, jobs):
        self.jobs = jobs

    def history_jobs(self, up_to_schema_version=None):
        return list(self.jobs)

    def job(self, job_id):
        return next((j for j in self.jobs if j.id == job_id), None)


def _keeper(chunk_rows, workers=3):
    from tidb_binlog.drainer.pipeline.settings import TaskSettings
    from tidb_binlog.drainer.translate.keeper import RowKeeper

    meta = _Meta(_history())
    keeper = RowKeeper(TaskSettings(cluster_id=1, worker_count=workers,
                                    txn_chunk_rows=chunk_rows), meta, 3)
    keeper.reset(3)
    return keeper


def _history():
    users = TableInfo(id=10, name=CIStr("users"), pk_is_handle=True, max_col_id=2, cols=[
        _col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary"),
        _col(2, "name", m.TYPE_VARCHAR, 0, 64, offset=1)])
    return [_job(1, ActionType.CREATE_SCHEMA, 1, db=DBInfo(id=2, db_name=CIStr("shop"))),
            _job(2, ActionType.CREATE_TABLE, 2, table=users)]


def _call(keeper, items, workers=3):
    from tidb_binlog.packed import pack, unpack

    out = keeper.translate_routed(pack(items), workers)
    return unpack(out[0]), [unpack(p) for p in out[1:-1]], out[-1]


def test_keeper_hands_a_large_transaction_out_one_chunk_per_call():
    from tidb_binlog.drainer.apply.routing import FLUSH, ROWS

    keeper = _keeper(chunk_rows=4)
    small = commit_with([inserts(100, 101)], commit_ts=50)
    big = commit_with([inserts(0, 10)], commit_ts=60)
    after = commit_with([inserts(200, 201)], commit_ts=70)
    whole = translator().translate(big).dmls
    items = [(50, bl.encode(small)), (60, bl.encode(big)), (70, bl.encode(after))]
    calls = [_call(keeper, items)]
    while calls[-1][2]:
        calls.append(_call(keeper, []))
    assert len(calls) == 4  # small + chunk 1; chunk 2; last chunk; the item after it
    (plan1, pay1, _), (plan2, pay2, _), (plan3, pay3, _), (plan4, pay4, _) = calls
    # call 1: the small transaction's run, FLUSH, the first chunk (nothing for the checkpoint)
    assert [s[0] for s in plan1] == [ROWS, FLUSH, ROWS]
    assert plan1[0].end_ts == 50 and plan1[2].end_ts == 0 and plan1[2].rows == 0
    worker = plan1[2].counts.index(1)
    parts = [p for w in pay1 for p in w if p[0] == 60]
    assert len(parts) == 1 and parts[0][2] == 1 and len(parts[0][1]) == 4
    assert pay1[worker][-1] is parts[0]
    # call 2: the second chunk, partial, on the same worker
    assert [s[0] for s in plan2] == [ROWS] and plan2[0].end_ts == 0
    assert pay2[worker] == [(60, pay2[worker][0][1], 2)]
    # call 3: the last chunk, committed: the checkpoint may pass 60, then FLUSH
    assert [s[0] for s in plan3] == [ROWS, FLUSH]
    assert plan3[0].end_ts == 60 and plan3[0].rows == 10 and plan3[0].counts[worker] == 1
    assert len(pay3[worker]) == 1 and len(pay3[worker][0]) == 2  # (commit_ts, dmls)
    chunks = [pay1[worker][-1][1], pay2[worker][0][1], pay3[worker][0][1]]
    assert [d for c in chunks for d in c] == list(whole)
    # call 4: the transaction queued behind it
    assert plan4[-1].end_ts == 70 and sum(len(p) for p in pay4) == 1


def test_keeper_without_chunking_or_small_transactions_answers_no_more():
    keeper = _keeper(chunk_rows=0)
    big = commit_with([inserts(0, 10)], commit_ts=60)
    plan, payloads, more = _call(keeper, [(60, bl.encode(big))])
    assert more is False and plan[-1].end_ts == 60
    assert sum(len(d) for w in payloads for _, d in w) == 10
    keeper = _keeper(chunk_rows=10)  # exactly the limit: whole
    plan, payloads, more = _call(keeper, [(60, bl.encode(big))])
    assert more is False and [s.end_ts for s in plan if s[0] == 0] == [60]


def test_keeper_reset_drops_a_half_handed_out_transaction():
    keeper = _keeper(chunk_rows=3)
    big = commit_with([inserts(0, 10)], commit_ts=60)
    assert _call(keeper, [(60, bl.encode(big))])[2] is True
    keeper.reset(3)
    plan, payloads, more = _call(keeper, [])
    assert (plan, more) == ([], False)
