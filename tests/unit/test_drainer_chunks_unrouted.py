"""Large transactions in chunks off the routed path: the causality mode (exactly-once
off: the keeper's ``translate_more`` and the coordinator's ``apply``) and loop control
(the loop verdict taken from the mark table's rows before the first chunk).

Pure logic with fakes: the keeper over a scripted DDL history, the coordinator over
worker calls that acknowledge only when the test says so."""

from __future__ import annotations

import pytest
from test_drainer_txn_chunks import _col, _job, _Meta, inserts
from test_pipeline_coordinator import Store
from test_relay import Applier
from test_relay import Store as RelayStore

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_old_row
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay import RelayLog, recover, relay_records
from tidb_binlog.drainer.relay.record import record_position, txn_record
from tidb_binlog.drainer.sinks.mysql.coordinator import Coordinator
from tidb_binlog.drainer.translate.keeper import RowKeeper
from tidb_binlog.errors import ProtocolError
from tidb_binlog.model import ActionType, CIStr, DBInfo, TableInfo
from tidb_binlog.packed import pack, unpack
from tidb_binlog.reparo.decode import decode_binlog

CHANNEL = 7


def _history():
    users = TableInfo(id=10, name=CIStr("users"), pk_is_handle=True, max_col_id=2, cols=[
        _col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary"),
        _col(2, "name", m.TYPE_VARCHAR, 0, 64, offset=1)])
    mark = TableInfo(id=30, name=CIStr("_drainer_repl_mark"), pk_is_handle=False,
                     max_col_id=4, cols=[
        _col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary"),
        _col(2, "channel_id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary",
             offset=1),
        _col(3, "val", m.TYPE_LONGLONG, 0, 20, "binary", offset=2),
        _col(4, "channel_info", m.TYPE_VARCHAR, 0, 64, offset=3)])
    retl = _job(3, ActionType.CREATE_SCHEMA, 3, db=DBInfo(id=4, db_name=CIStr("retl")))
    create_mark = _job(4, ActionType.CREATE_TABLE, 4, table=mark)
    create_mark.schema_id = 4
    return [_job(1, ActionType.CREATE_SCHEMA, 1, db=DBInfo(id=2, db_name=CIStr("shop"))),
            _job(2, ActionType.CREATE_TABLE, 2, table=users), retl, create_mark]


def _mark_row(worker: int, channel: int, val: int) -> bytes:
    return encode_old_row([1, 2, 3, 4], [Datum.int64(worker), Datum.int64(channel),
                                         Datum.int64(val), Datum.string("")])


def mark_update(channel: int, worker: int = 0):
    """The mark UPDATE a drainer of ``channel`` adds to each of its downstream txns."""
    return bl.new_table_mutation(30, updated_rows=[_mark_row(worker, channel, 1)
                                                   + _mark_row(worker, channel, 2)],
                                 sequence=[bl.MutationType.UPDATE])


def commit(mutations, commit_ts):
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(bl.new_prewrite_value(4, mutations))
    return bl.encode(b)


def keeper(chunk_rows: int, *, exactly_once=False, loopback=False, **kw) -> RowKeeper:
    k = RowKeeper(TaskSettings(cluster_id=1, worker_count=3, txn_chunk_rows=chunk_rows,
                               exactly_once=exactly_once, loopback_control=loopback,
                               channel_id=CHANNEL, **kw), _Meta(_history()), 4)
    k.reset(4)
    return k


def translate_all(k: RowKeeper, items) -> list[list]:
    """``translate_more`` until the keeper holds nothing: each call's items."""
    calls = [k.translate_more(pack(items))]
    while calls[-1][1]:
        calls.append(k.translate_more(pack([])))
    return [out for out, _ in calls]


def rows_of(calls) -> dict[int, list]:
    rows: dict[int, list] = {}
    for out in calls:
        for item in out:
            txn = item[1]
            rows.setdefault(item[0], []).extend(txn.dmls if txn is not None else ())
    return rows


def routed_rows(k: RowKeeper, items) -> dict[int, list]:
    """The rows each transaction sent to the workers on the routed path."""
    calls = [k.translate_routed(pack(items), 3)]
    while calls[-1][-1]:
        calls.append(k.translate_routed(pack([]), 3))
    rows: dict[int, list] = {}
    for call in calls:
        for payload in call[1:-1]:
            for part in unpack(payload):
                rows.setdefault(part[0], []).extend(part[1])
    return rows


def _key(dml: DML):
    return (dml.database, dml.table, sorted(dml.values.items()))


# -- the keeper: causality mode ---------------------------------------------------------------

def test_chunk_rows_per_mode():
    assert keeper(5, exactly_once=True).chunk_rows() == 5         # routed
    assert keeper(5).chunk_rows() == 5                            # causality mode
    assert keeper(5, loopback=True).chunk_rows() == 5             # loop control too
    assert keeper(5, txn_atomic=True).chunk_rows() == 5           # atomic chunks
    assert keeper(5, relay_dir="/tmp/r").chunk_rows() == 5        # a relay record a chunk
    assert keeper(5, exactly_once=True, relay_dir="/tmp/r").chunk_rows() == 5  # atomic
    assert keeper(0).chunk_rows() == 0


def test_causality_keeper_hands_a_large_transaction_out_one_chunk_per_call():
    k = keeper(4)
    items = [(50, commit([inserts(100, 101)], 50)), (60, commit([inserts(0, 10)], 60)),
             (70, commit([inserts(200, 201)], 70))]
    calls = translate_all(k, items)
    # small + chunk 1; chunk 2; the last chunk and the item queued behind it
    assert [[(i[0], len(i)) for i in out] for out in calls] == [
        [(50, 3), (60, 4)], [(60, 4)], [(60, 3), (70, 3)]]
    assert [out[-1][3] for out in calls[:2]] == [1, 2]
    whole = keeper(0).translate(pack(items))
    assert rows_of(calls) == {ts: list(t.dmls) for ts, t, _ in whole}


def test_causality_keeper_small_transactions_and_reset():
    k = keeper(10)
    out, more = k.translate_more(pack([(60, commit([inserts(0, 10)], 60))]))  # exactly 10
    assert more is False and [len(i) for i in out] == [3]
    k = keeper(3)
    assert k.translate_more(pack([(60, commit([inserts(0, 10)], 60))]))[1] is True
    k.reset(4)  # a half handed-out transaction is dropped: the replay brings it again
    assert k.translate_more(pack([])) == ([], False)


def test_ignored_transactions_are_skipped_in_chunks_too(caplog):
    """``ignore-txn-commit-ts``: a skipped transaction, small or one that would have been
    chunked, leaves only its ``(commit_ts, None, 0)`` marker (the checkpoint passes it),
    with the skip warning; the others come through whole or in chunks as usual."""
    items = [(50, commit([inserts(100, 101)], 50)), (60, commit([inserts(0, 10)], 60)),
             (70, commit([inserts(200, 201)], 70)), (80, commit([inserts(300, 310)], 80))]
    k = keeper(4, ignore_txn_commit_ts=(50, 60))
    with caplog.at_level("WARNING"):
        calls = translate_all(k, items)
    flat = [item for out in calls for item in out]
    assert [i for i in flat if i[0] in (50, 60)] == [(50, None, 0), (60, None, 0)]
    assert [r.getMessage() for r in caplog.records if "ignore-txn-commit-ts" in r.getMessage()] \
        == [f"skipping the transaction at commit_ts {ts} (ignore-txn-commit-ts)"
            for ts in (50, 60)]
    whole = keeper(0).translate(pack(items[2:]))
    assert {ts: rows for ts, rows in rows_of(calls).items() if rows} == \
        {ts: list(t.dmls) for ts, t, _ in whole}
    assert [len(i) for i in flat if i[0] == 80] == [4, 4, 3]  # 80: two chunks, then its last


# -- loop control with chunks: the same verdicts as the whole path ------------------------------

@pytest.mark.parametrize("routed", [False, True])
def test_loop_verdict_before_the_first_chunk_matches_the_whole_path(routed):
    items = [
        (60, commit([inserts(0, 10), mark_update(CHANNEL)], 60)),       # ours: dropped
        (70, commit([inserts(20, 30), mark_update(CHANNEL + 1)], 70)),  # other: mark removed
        (80, commit([mark_update(CHANNEL + 1), inserts(40, 50)], 80)),
        (90, commit([inserts(60, 70)], 90)),                            # no mark
        (95, commit([inserts(90, 91), mark_update(CHANNEL)], 95)),      # small, ours
    ]
    if routed:
        whole = routed_rows(keeper(0, exactly_once=True, loopback=True), items)
        chunked_keeper = keeper(4, exactly_once=True, loopback=True)
        chunked = routed_rows(chunked_keeper, items)
    else:
        whole = rows_of(translate_all(keeper(0, loopback=True), items))
        chunked_keeper = keeper(4, loopback=True)
        chunked = rows_of(translate_all(chunked_keeper, items))
    assert {ts: sorted(map(_key, r)) for ts, r in chunked.items() if r} == {
        ts: sorted(map(_key, r)) for ts, r in whole.items() if r}
    assert not chunked.get(60) and not chunked.get(95)
    assert [len(chunked[ts]) for ts in (70, 80, 90)] == [10, 10, 10]
    assert chunked_keeper._loopback.dropped == 2


def test_loop_verdict_decodes_only_the_mark_rows(monkeypatch):
    k = keeper(4, loopback=True)
    decoded: list[int] = []
    real = k.translator._mutation_slices

    def spy(commit_ts, version, mut, size):
        decoded.append(mut.table_id)
        return real(commit_ts, version, mut, size)

    monkeypatch.setattr(k.translator, "_mutation_slices", spy)
    out, more = k.translate_more(pack([(60, commit([inserts(0, 10), mark_update(CHANNEL)],
                                                   60))]))
    assert [(ts, txn) for ts, txn, _ in out] == [(60, None)] and more is False
    assert decoded == [30]  # the users rows were never decoded


# -- the coordinator: chunks applied, the checkpoint held until the last ------------------------

T = TableSchema.build("db", "t", ["id", "v"], ["id"])


def dmls(*ids: int) -> tuple[DML, ...]:
    return tuple(DML("db", "t", DMLType.INSERT, {"id": i, "v": i}, None, T) for i in ids)


class HeldWorkers:
    """Worker calls that finish only when :meth:`release` says so (``block``: at once)."""

    def __init__(self, count: int):
        self.count = count
        self.calls: list[tuple[int, list]] = []
        self.finished: set = set()

    def __len__(self):
        return self.count

    def begin(self, epoch):
        pass

    def execute(self, worker, parts, epoch):
        self.calls.append((worker, list(parts)))
        return len(self.calls)

    def execute_slice(self, worker, payload, lo, hi, epoch):  # pragma: no cover
        raise AssertionError("routed call in the causality mode")

    def execute_ddl(self, worker, ddl, epoch):  # pragma: no cover
        raise AssertionError("no DDL here")

    def release(self):
        self.finished.update(range(1, len(self.calls) + 1))

    def done(self, handles, block):
        if block:
            self.finished.update(handles)
        return [h for h in handles if h in self.finished]

    def result(self, handle):
        return None


def coordinator(workers=2) -> tuple[Coordinator, HeldWorkers]:
    calls = HeldWorkers(workers)
    coord = Coordinator(TaskSettings(cluster_id=1, worker_count=workers, txn_batch=1000,
                                     exactly_once=False, initial_commit_ts=0,
                                     save_interval_s=0.0), calls, Store())
    coord.reset()
    return coord, calls


def test_coordinator_applies_chunks_and_holds_the_checkpoint_until_the_last():
    coord, calls = coordinator()
    cp = coord.apply(0, [(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3, 4)), 0, 1)])
    assert cp == 0
    # the small txn's Send went before the chunk's: no call mixes them
    assert [p[0] for p in calls.calls[0][1]] == [50]
    assert all({p[0] for p in parts} == {60} for _, parts in calls.calls[1:])
    calls.release()
    assert coord.idle() == 50  # the chunk is applied, but not the transaction
    coord.apply(1, [(60, Txn.of_dmls(60, dmls(5, 6)), 0, 2)])
    calls.release()
    assert coord.idle() == 50
    coord.apply(2, [(60, Txn.of_dmls(60, dmls(7)), 0), (70, Txn(70, dmls(8)), 0)])
    calls.release()
    assert coord.idle() == 70
    sent = sorted(d.values["id"] for _, parts in calls.calls for _, ds in parts for d in ds)
    assert sent == list(range(1, 9))
    assert coord.status().applied_rows == 8
    assert coord.status().extra["txn_chunks"] == 2


def test_coordinator_flushes_every_chunk_before_registering_the_last():
    coord, calls = coordinator()
    coord.apply(0, [(60, Txn.of_dmls(60, dmls(1, 2, 3, 4)), 0, 1)])
    before = len(calls.calls)
    # the last chunk arrives while chunk 1 is still in flight: the coordinator waits for
    # it (a Flush) before the last chunk is registered, so the checkpoint cannot pass 60
    # with a chunk still unapplied
    coord.apply(1, [(60, Txn.of_dmls(60, dmls(5)), 0)])
    assert set(range(1, before + 1)) <= calls.finished
    calls.release()
    assert coord.idle() == 60


def test_coordinator_close_mid_transaction_is_not_consistent():
    coord, calls = coordinator()
    coord.apply(0, [(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    cp = coord.close()
    assert cp.commit_ts == 50 and cp.consistent is False


def test_coordinator_rejects_chunks_out_of_order():
    coord, _ = coordinator()
    coord.apply(0, [(60, Txn.of_dmls(60, dmls(1)), 0, 1)])
    with pytest.raises(ProtocolError, match="not its last chunk"):
        coord.apply(1, [(70, Txn(70, dmls(2)), 0)])
    coord, _ = coordinator()
    coord.apply(0, [(60, Txn.of_dmls(60, dmls(1)), 0, 1)])
    with pytest.raises(ProtocolError, match="had not ended"):
        coord.apply(1, [(70, Txn.of_dmls(70, dmls(2)), 0, 1)])


def test_keeper_and_coordinator_together_apply_every_row_once():
    k = keeper(4)
    coord, calls = coordinator(3)
    items = [(50, commit([inserts(100, 103)], 50)), (60, commit([inserts(0, 10)], 60)),
             (70, commit([inserts(200, 201)], 70))]
    for seq, out in enumerate(translate_all(k, items)):
        coord.apply(seq, out)
        calls.release()
    assert coord.idle() == 70
    sent = sorted(d.values["id"] for _, parts in calls.calls for _, ds in parts for d in ds)
    assert sent == sorted([*range(100, 103), *range(10), 200])
    assert coord.status().applied_rows == 14


# -- the relay log: one record per chunk, written before the chunk is applied -----------------

def test_a_chunk_record_carries_its_number_and_more_and_reads_as_its_rows():
    rec = txn_record(60, Txn.of_dmls(60, dmls(1, 2)), 3, chunk=2, more=True)
    assert record_position(rec) == (60, True)
    assert [d.values["id"] for d in decode_binlog(rec).dmls] == [1, 2]  # other readers
    assert record_position(txn_record(60, Txn.of_dmls(60, dmls(3)), 3, chunk=3)) == (60, False)
    assert record_position(txn_record(70, Txn(70, dmls(4)), 3)) == (70, False)
    with pytest.raises(ProtocolError, match="relay record"):
        record_position(rec[:-1] + b"\xff")


def relay_coordinator(tmp_path, workers: HeldWorkers) -> Coordinator:
    settings = TaskSettings(cluster_id=1, worker_count=2, txn_batch=1000, exactly_once=False,
                            initial_commit_ts=0, save_interval_s=0.0, relay_dir=str(tmp_path),
                            relay_max_file_size=1)
    seen = workers.execute

    def execute(worker, parts, epoch):  # what the relay log holds when a worker gets rows
        workers.relayed.append((parts, list(relay_records(tmp_path, 0))))
        return seen(worker, parts, epoch)

    workers.relayed = []
    workers.execute = execute
    coord = Coordinator(settings, workers, Store(),
                        open_relay=lambda: RelayLog(tmp_path, max_file_size_bytes=1))
    coord.reset()
    return coord


def test_each_chunk_is_relayed_before_it_is_applied_and_files_wait_for_the_last(tmp_path):
    workers = HeldWorkers(2)
    coord = relay_coordinator(tmp_path, workers)
    coord.apply(0, [(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    coord.apply(1, [(60, Txn.of_dmls(60, dmls(4)), 0, 2)])
    for parts, relayed in workers.relayed:
        ids = {d.values["id"] for _, ds in parts for d in ds}
        in_log = {d.values["id"] for _, rec in relayed for d in decode_binlog(rec).dmls}
        assert ids <= in_log
    workers.release()
    coord.idle()
    # saved at 50: the files of the open transaction's chunks stay (1-byte files: one
    # record each, the current one is never removed)
    assert [ts for ts, _ in relay_records(tmp_path, 0)] == [60, 60]
    coord.apply(2, [(60, Txn.of_dmls(60, dmls(5)), 0), (70, Txn(70, dmls(6)), 0)])
    workers.release()
    assert coord.idle() == 70
    assert [ts for ts, _ in relay_records(tmp_path, 0)] == []  # all applied: removed
    coord.close()


def test_a_replay_rewrites_the_open_transaction_and_skips_what_is_whole(tmp_path):
    relay = RelayLog(tmp_path)
    relay.append([(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    relay.close()
    relay = RelayLog(tmp_path)  # a restarted task: the log ends inside 60
    assert (relay.last_ts, relay.open_ts) == (60, 60)
    # the replay from the checkpoint (below 50): 50 is whole in the log, 60 comes again
    # from its first chunk (maybe cut elsewhere) and is written again, to its last chunk
    assert relay.append([(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2)), 0, 1)]) == 1
    assert relay.append([(60, Txn.of_dmls(60, dmls(3, 4)), 0, 2)]) == 1
    assert relay.append([(60, None, 0), (70, Txn(70, dmls(5)), 0)]) == 2  # last: all filtered
    assert relay.open_ts == 0
    assert relay.append([(60, Txn(60, dmls(9)), 0)]) == 0  # whole in the log now
    relay.close()
    positions = [record_position(rec) for _, rec in relay_records(tmp_path, 0)]
    assert positions == [(50, False), (60, True), (60, True), (60, True), (60, False),
                         (70, False)]


def test_recovery_applies_a_chunked_transaction_only_with_its_last_chunk(tmp_path):
    relay = RelayLog(tmp_path)
    relay.append([(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    relay.append([(60, Txn.of_dmls(60, dmls(4)), 0)])
    relay.append([(70, Txn(70, dmls(5)), 0), (80, Txn.of_dmls(80, dmls(6, 7)), 0, 1)])
    relay.close()
    from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint  # the test's only use
    store, applier = RelayStore(Checkpoint(40, consistent=False)), Applier()
    summary = recover(tmp_path, store, applier)
    # 60 is whole (its last chunk is there): applied chunk by chunk; 80 is not: left to
    # the replay, and the checkpoint stays below it, not consistent (the crashed run may
    # have applied its first chunk)
    assert [(t.commit_ts, [d.values["id"] for d in t.dmls]) for t in applier.txns] == [
        (50, [1]), (60, [2, 3]), (60, [4]), (70, [5])]
    assert (store.saved[-1].commit_ts, store.saved[-1].consistent) == (70, False)
    assert summary.partial_ts == 80 and "NOT consistent" in summary.describe()
    # a chunked transaction abandoned mid-log (a later run skipped it): recovery stops
    # before it, so the checkpoint never passes it
    relay = RelayLog(tmp_path)
    relay.append([(90, Txn(90, dmls(8)), 0)])
    relay.close()
    store, applier = RelayStore(Checkpoint(40, consistent=False)), Applier()
    assert recover(tmp_path, store, applier).partial_ts == 80
    assert store.saved[-1].commit_ts == 70
