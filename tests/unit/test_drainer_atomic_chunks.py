"""Large transactions in *atomic* chunks off the routed path: exactly-once with a relay
log, and ``txn-atomic`` with exactly-once off. The keeper's ``translate_more`` hands the
coordinator one chunk per call; the coordinator sends every chunk to one worker (a
flush before, a flush after), the chunks run there in one open downstream transaction
that the last one commits, and the checkpoint passes the transaction only then. The
relay log marks such chunks (record field 18), so recovery knows that an unfinished one
was never committed downstream.

Pure logic with fakes (the keeper over a scripted DDL history, worker calls that
acknowledge when the test says so)."""

from __future__ import annotations

import pytest
from test_drainer_chunks_unrouted import (
    HeldWorkers,
    commit,
    dmls,
    inserts,
    keeper,
    translate_all,
)
from test_pipeline_coordinator import Store
from test_relay import Applier
from test_relay import Store as RelayStore

from tidb_binlog.drainer.apply.causality import row_keys, stable_hash
from tidb_binlog.drainer.apply.dml import Txn
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay import RelayLog, recover, relay_records
from tidb_binlog.drainer.relay.record import RecordChunk, record_chunk, txn_record
from tidb_binlog.drainer.sinks.mysql.coordinator import Coordinator
from tidb_binlog.errors import ProtocolError
from tidb_binlog.reparo.decode import decode_binlog

MODES = {
    "exactly-once+relay": dict(exactly_once=True, relay=True),
    "txn-atomic": dict(exactly_once=False, txn_atomic=True),
}


def atomic_coordinator(tmp_path, mode: str, workers: int = 3):
    opts = dict(MODES[mode])
    relay = opts.pop("relay", False)
    calls = HeldWorkers(workers)
    settings = TaskSettings(cluster_id=1, worker_count=workers, txn_batch=1000,
                            initial_commit_ts=0, save_interval_s=0.0,
                            relay_dir=str(tmp_path) if relay else "", **opts)
    assert not settings.routed
    coord = Coordinator(settings, calls, Store(),
                        open_relay=(lambda: RelayLog(tmp_path)) if relay else None)
    coord.reset()
    return coord, calls


def worker_of(first) -> int:
    return stable_hash(row_keys(first)[0]) % 3


@pytest.mark.parametrize("mode", list(MODES))
def test_every_chunk_goes_to_one_worker_open_until_the_last_commits_it(tmp_path, mode):
    coord, calls = atomic_coordinator(tmp_path, mode)
    coord.apply(0, [(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    # a barrier first: 50 was sent and waited for before the first chunk went out
    assert [p[0] for p in calls.calls[0][1]] == [50]
    assert 1 in calls.finished
    worker = worker_of(dmls(2)[0])
    assert calls.calls[1] == (worker, [(60, dmls(2, 3), 1)])  # partial: run without COMMIT
    calls.release()
    assert coord.idle() == 50
    coord.apply(1, [(60, Txn.of_dmls(60, dmls(4, 5)), 0, 2)])
    assert calls.calls[2] == (worker, [(60, dmls(4, 5), 2)])
    calls.release()
    assert coord.idle() == 50  # the chunks are open downstream, not committed
    coord.apply(2, [(60, Txn.of_dmls(60, dmls(6)), 0), (70, Txn(70, dmls(7)), 0)])
    # the last chunk, on the same worker, whole part: it commits the transaction; a
    # flush after it (70 went out only once 60's COMMIT was acknowledged)
    assert calls.calls[3] == (worker, [(60, dmls(6))])
    assert 4 in calls.finished
    assert [p[0] for p in calls.calls[4][1]] == [70]
    calls.release()
    assert coord.idle() == 70
    st = coord.status()
    assert st.applied_rows == 7 and st.extra["txn_chunks"] == 2
    coord.close()


@pytest.mark.parametrize("mode", list(MODES))
def test_an_empty_last_chunk_still_commits_on_the_chunks_worker(tmp_path, mode):
    coord, calls = atomic_coordinator(tmp_path, mode)
    coord.apply(0, [(60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    coord.apply(1, [(60, None, 0)])  # every row of the last chunk filtered out
    worker = worker_of(dmls(2)[0])
    assert calls.calls[-1] == (worker, [(60, ())])
    calls.release()
    assert coord.idle() == 60


@pytest.mark.parametrize("mode", list(MODES))
def test_a_clean_stop_mid_transaction_is_consistent_below_it(tmp_path, mode):
    """The open chunks were never committed (their worker's connection rolls them
    back), so the checkpoint below the transaction is consistent."""
    coord, calls = atomic_coordinator(tmp_path, mode)
    coord.apply(0, [(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    cp = coord.close()
    assert cp.commit_ts == 50 and cp.consistent is True


def test_chunks_out_of_order_are_refused(tmp_path):
    coord, _ = atomic_coordinator(tmp_path, "txn-atomic")
    coord.apply(0, [(60, Txn.of_dmls(60, dmls(1)), 0, 1)])
    with pytest.raises(ProtocolError, match="not its last chunk"):
        coord.apply(1, [(70, Txn(70, dmls(2)), 0)])


@pytest.mark.parametrize("mode", list(MODES))
def test_keeper_and_coordinator_together_apply_every_row_once_on_one_worker(tmp_path, mode):
    opts = {k: v for k, v in MODES[mode].items() if k != "relay"}
    k = keeper(4, **opts)
    assert k.chunk_rows() == 4
    coord, calls = atomic_coordinator(tmp_path, mode)
    items = [(50, commit([inserts(100, 103)], 50)), (60, commit([inserts(0, 10)], 60)),
             (70, commit([inserts(200, 201)], 70))]
    for seq, out in enumerate(translate_all(k, items)):
        coord.apply(seq, out)
        calls.release()
    assert coord.idle() == 70
    big = [(w, part) for w, parts in calls.calls for part in parts if part[0] == 60]
    assert len({w for w, _ in big}) == 1  # one worker
    assert [len(part) for _, part in big] == [3, 3, 2]  # chunks 1, 2, then the last
    assert [part[2] for _, part in big[:-1]] == [1, 2]
    sent = sorted(d.values["id"] for _, parts in calls.calls for p in parts for d in p[1])
    assert sent == sorted([*range(100, 103), *range(10), 200])
    assert coord.status().applied_rows == 14
    coord.close()


# -- the relay log and its recovery ---------------------------------------------------------

def test_an_atomic_chunk_record_says_so_and_reads_as_its_rows():
    rec = txn_record(60, Txn.of_dmls(60, dmls(1, 2)), 3, chunk=2, more=True, atomic=True)
    assert record_chunk(rec) == RecordChunk(60, 2, True, True)
    assert [d.values["id"] for d in decode_binlog(rec).dmls] == [1, 2]  # other readers
    assert record_chunk(txn_record(60, Txn.of_dmls(60, dmls(3)), 3, chunk=3)) == \
        RecordChunk(60, 3, False, False)
    # a whole transaction is never marked
    assert record_chunk(txn_record(70, Txn(70, dmls(4)), 3, atomic=True)) == \
        RecordChunk(70, 0, False, False)


def test_the_coordinator_relays_atomic_chunks_marked_before_applying_them(tmp_path):
    coord, calls = atomic_coordinator(tmp_path, "exactly-once+relay")
    coord.apply(0, [(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    assert [record_chunk(r) for _, r in relay_records(tmp_path, 0)] == [
        RecordChunk(50, 0, False, False), RecordChunk(60, 1, True, True)]
    coord.close()


def _ids(applier):
    return [(t.commit_ts, [d.values["id"] for d in t.dmls]) for t in applier.txns]


def test_recovery_skips_an_unfinished_atomic_transaction_and_stays_consistent(tmp_path):
    relay = RelayLog(tmp_path)
    relay.append([(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)],
                 atomic=True)
    relay.append([(60, Txn.of_dmls(60, dmls(4)), 0, 2)], atomic=True)
    relay.close()
    store, applier = RelayStore(Checkpoint(40, consistent=False)), Applier()
    summary = recover(tmp_path, store, applier)
    # 60's chunks ran in one open downstream transaction its last chunk would have
    # committed; the last chunk never reached the log, so nothing of 60 is downstream
    assert _ids(applier) == [(50, [1])]
    assert (store.saved[-1].commit_ts, store.saved[-1].consistent) == (50, True)
    assert summary.skipped_ts == (60,) and summary.partial_ts == 0
    assert "skipped the unfinished transaction(s) at commit_ts 60" in summary.describe()
    assert summary.describe().endswith(", consistent")


def test_recovery_applies_only_the_last_attempt_of_a_rewritten_transaction(tmp_path):
    """A reset mid-transaction: the replay writes it again from chunk 1 (here cut
    elsewhere); recovery applies the complete attempt only, so no row is applied twice
    (a keyless table would get duplicates otherwise)."""
    relay = RelayLog(tmp_path)
    relay.append([(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)],
                 atomic=True)
    relay.append([(60, Txn.of_dmls(60, dmls(4)), 0, 2)], atomic=True)
    relay.close()
    relay = RelayLog(tmp_path)  # a restarted task: 60 again from its first chunk
    relay.append([(50, Txn(50, dmls(1)), 0), (60, Txn.of_dmls(60, dmls(2)), 0, 1)],
                 atomic=True)
    relay.append([(60, Txn.of_dmls(60, dmls(3, 4)), 0, 2)], atomic=True)
    relay.append([(60, Txn.of_dmls(60, dmls(5)), 0), (70, Txn(70, dmls(6)), 0),
                  (80, Txn.of_dmls(80, dmls(7)), 0, 1)], atomic=True)
    relay.close()
    assert [record_chunk(r)[:3] for _, r in relay_records(tmp_path, 0)] == [
        (50, 0, False), (60, 1, True), (60, 2, True), (60, 1, True), (60, 2, True),
        (60, 3, False), (70, 0, False), (80, 1, True)]
    store, applier = RelayStore(Checkpoint(40, consistent=False)), Applier()
    summary = recover(tmp_path, store, applier)
    assert _ids(applier) == [(50, [1]), (60, [2]), (60, [3, 4]), (60, [5]), (70, [6])]
    assert (store.saved[-1].commit_ts, store.saved[-1].consistent) == (70, True)
    assert summary.skipped_ts == (80,)


def test_a_non_atomic_rewritten_transaction_also_applies_its_last_attempt_only(tmp_path):
    relay = RelayLog(tmp_path)
    relay.append([(60, Txn.of_dmls(60, dmls(2, 3)), 0, 1)])
    relay.append([(60, Txn.of_dmls(60, dmls(2)), 0, 1)])  # the replay, chunk 1 again
    relay.append([(60, Txn.of_dmls(60, dmls(3)), 0)])
    relay.close()
    store, applier = RelayStore(Checkpoint(40, consistent=False)), Applier()
    recover(tmp_path, store, applier)
    assert _ids(applier) == [(60, [2]), (60, [3])]
    assert (store.saved[-1].commit_ts, store.saved[-1].consistent) == (60, True)
