"""The SQL worker's side of a large transaction applied in chunks: partial parts run
without COMMIT; the last part commits every chunk with the progress row."""

from __future__ import annotations

import pytest

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
from tidb_binlog.drainer.sinks.mysql.plan import as_part, plan_units
from tidb_binlog.errors import DownstreamError, TransientDownstreamError

T = TableSchema.build("d", "t", ["id", "v"], ["id"])


def ins(k):
    return DML("d", "t", DMLType.INSERT, {"id": k, "v": k}, None, T)


class Downstream:
    """Records what each COMMIT covered; fails the scripted statement numbers."""

    config = DownstreamConfig(host="scripted", port=1)

    def __init__(self, failures=None):
        self.failures = dict(failures or {})
        self.calls = 0
        self.pending: list[str] = []
        self.committed: list[list[str]] = []
        self.rollbacks = 0

    def execute(self, stmt):
        self.calls += 1
        exc = self.failures.pop(self.calls, None)
        if exc is not None:
            raise exc
        self.pending.append(stmt.sql.split()[0] + (" progress" if "worker_progress" in
                                                   stmt.sql else ""))
        return 1

    def execute_script(self, statements, commit=False):
        for i, stmt in enumerate(statements):
            try:
                self.execute(stmt)
            except DownstreamError as exc:
                exc.statement_index = i
                raise
        if commit:
            self.commit()

    def query(self, stmt):
        return []

    def commit(self):
        self.committed.append(self.pending)
        self.pending = []

    def rollback(self):
        self.rollbacks += 1
        self.pending = []

    def close(self):
        pass


def loader(ds):
    w = Loader(ds, LoaderConfig(exactly_once=True, merge=False, txn_batch=100),
               sleep=lambda s: None)
    failures, ds.failures = ds.failures, {}
    w.load_progress()  # the progress table created and read: counted from here
    ds.committed.clear()
    ds.calls, ds.failures = 0, failures
    return w


def test_a_partial_part_is_a_unit_of_its_own():
    parts = [as_part((5, (ins(1),))), as_part((9, (ins(2), ins(3)), 1))]
    units = plan_units(parts, 100, split_parts=False)
    assert [(len(u.rows), u.partial) for u in units] == [(1, 0), (2, 1)]


def test_chunks_commit_together_with_the_last_one():
    ds = Downstream()
    w = loader(ds)
    w.execute_batch([(5, (ins(1),)), (9, (ins(2), ins(3)), 1)])
    assert ds.committed == [["INSERT", "INSERT progress"]]  # txn 5 only
    assert ds.pending == ["INSERT"] and w.applied_ts == 5  # the chunk is open
    w.execute_batch([(9, (ins(4),), 2)])
    assert len(ds.committed) == 1 and w.applied_ts == 5
    w.execute_batch([(9, (ins(5),))])  # the last chunk commits all of them
    assert ds.committed[1] == ["INSERT", "INSERT", "INSERT", "INSERT progress"]
    assert w.applied_ts == 9


def test_an_empty_last_chunk_still_commits():
    ds = Downstream()
    w = loader(ds)
    w.execute_batch([(9, (ins(2),), 1)])
    w.execute_batch([(9, ())])
    assert ds.committed == [["INSERT", "INSERT progress"]] and w.applied_ts == 9


def test_a_lost_connection_while_chunks_are_open_replays_the_transaction():
    ds = Downstream(failures={2: TransientDownstreamError("lost", code=2013)})
    w = loader(ds)
    w.execute_batch([(9, (ins(2),), 1)])
    with pytest.raises(PipelineReset, match="commit_ts 9 was applied in chunks"):
        w.execute_batch([(9, (ins(3),))])
    assert ds.committed == [] and ds.rollbacks == 1
    # the replay: every chunk again, committed once
    w.execute_batch([(9, (ins(2),), 1)])
    w.execute_batch([(9, (ins(3),))])  # (after re-reading the progress row)
    assert ds.committed[-1] == ["INSERT", "INSERT", "INSERT progress"]
    assert [c for c in ds.committed if c[0] == "INSERT"] == [ds.committed[-1]]


def test_a_failing_chunk_is_not_re_run_row_by_row():
    ds = Downstream(failures={2: DownstreamError("Duplicate entry", code=1062)})
    w = loader(ds)
    w.execute_batch([(9, (ins(2),), 1)])
    with pytest.raises(DownstreamError, match="commit_ts 9"):
        w.execute_batch([(9, (ins(3),))])
    assert ds.committed == [] and ds.rollbacks >= 1 and ds.pending == []


def test_a_replay_while_chunks_are_open_rolls_them_back_first():
    """The pipeline reset for another actor's failure: this worker still holds chunks
    1..2 open when the replay sends chunk 1 again; they are rolled back, not doubled."""
    ds = Downstream()
    w = loader(ds)
    w.execute_batch([(9, (ins(2),), 1)])
    w.execute_batch([(9, (ins(3),), 2)])
    w.execute_batch([(9, (ins(2),), 1)])  # the replay
    assert ds.rollbacks == 1 and ds.pending == ["INSERT"]
    w.execute_batch([(9, (ins(3),), 2)])
    w.execute_batch([(9, (ins(4),))])
    assert ds.committed == [["INSERT", "INSERT", "INSERT", "INSERT progress"]]


def test_a_replay_of_an_earlier_transaction_also_rolls_open_chunks_back():
    ds = Downstream()
    w = loader(ds)
    w.execute_batch([(9, (ins(2),), 1)])
    w.execute_batch([(7, (ins(1),))])  # the replay starts before the transaction
    assert ds.rollbacks == 1 and ds.committed == [["INSERT", "INSERT progress"]]


def test_a_chunk_out_of_order_is_refused_with_every_later_part_until_chunk_1():
    """A chunk k > 1 that does not continue the open chunks (a restarted worker, or a
    call from before a pipeline reset meeting the replay's chunks) must not run, and
    neither may the transaction's last part: that would commit it without the chunks
    before. Everything of it is refused as a reset until the replay's chunk 1."""
    ds = Downstream()
    w = loader(ds)
    w.execute_batch([(9, (ins(2),), 1)])
    w.execute_batch([(9, (ins(3),), 2)])
    with pytest.raises(PipelineReset, match="chunk 4 of the transaction at commit_ts 9 "
                                            "arrived without chunks 1..3"):
        w.execute_batch([(9, (ins(5),), 4)])
    assert ds.rollbacks == 1 and ds.pending == [] and ds.committed == []
    with pytest.raises(PipelineReset, match="after its chunks went out of order"):
        w.execute_batch([(9, (ins(6),), 5)])
    with pytest.raises(PipelineReset, match="after its chunks went out of order"):
        w.execute_batch([(9, (ins(7),))])  # its last part: not committed alone
    assert ds.committed == []
    # a fresh worker meeting chunk 2 first: the same
    w2 = loader(Downstream())
    with pytest.raises(PipelineReset, match="chunk 2 of the transaction at commit_ts 9"):
        w2.execute_batch([(9, (ins(3),), 2)])
    # the replay from chunk 1 is applied whole, once
    for chunk, k in ((1, 2), (2, 3), (3, 4), (4, 5), (5, 6)):
        w.execute_batch([(9, (ins(k),), chunk)])
    w.execute_batch([(9, (ins(7),))])
    assert ds.committed == [["INSERT"] * 6 + ["INSERT progress"]] and w.applied_ts == 9


def test_a_restarted_worker_refuses_the_calls_sent_before_the_reset_that_follows():
    """The race the epochs close: the worker held chunks 1..2 open and Ray restarted it;
    the coordinator, not knowing yet, sent chunk 3 and the transaction's last part,
    which Ray hands the new process. Run there, they would commit the transaction
    without chunks 1..2 (and its progress row would make the replay skip them). The
    new process knows no epoch: both are refused before the downstream sees them. The
    coordinator's reset opens a new epoch; the replay is applied whole, once, and a
    call of the old epoch arriving later is refused by its epoch."""
    ds = Downstream()
    w = loader(ds)
    w.begin_epoch(11)
    w.execute_batch([(9, (ins(2),), 1)], 11)
    w.execute_batch([(9, (ins(3),), 2)], 11)
    # the crash: the open downstream transaction is gone; Ray reruns the constructor
    ds2 = Downstream()
    w2 = loader(ds2)
    with pytest.raises(PipelineReset, match="epoch 11 arrived before this process was told"):
        w2.execute_batch([(9, (ins(4),), 3)], 11)
    with pytest.raises(PipelineReset, match="epoch 11 arrived before this process was told"):
        w2.execute_batch([(9, (ins(5),))], 11)  # the last part: never committed alone
    assert ds2.calls == 0 and ds2.committed == [] and w2.applied_ts == 0
    assert w2.begin_epoch(12) == 0  # the coordinator's reset
    for chunk, k in ((1, 2), (2, 3), (3, 4)):
        w2.execute_batch([(9, (ins(k),), chunk)], 12)
    with pytest.raises(PipelineReset, match="epoch 11 arrived in epoch 12"):
        w2.execute_batch([(9, (ins(5),))], 11)
    w2.execute_batch([(9, (ins(5),))], 12)
    assert ds2.committed == [["INSERT"] * 4 + ["INSERT progress"]] and w2.applied_ts == 9


def test_a_new_epoch_rolls_back_the_chunks_a_live_worker_holds_open():
    """A reset for another actor's failure: this worker lives on with chunks 1..2 open;
    the new epoch rolls them back at once (the replay brings them again from chunk 1)."""
    ds = Downstream()
    w = loader(ds)
    w.begin_epoch(21)
    w.execute_batch([(9, (ins(2),), 1)], 21)
    w.execute_batch([(9, (ins(3),), 2)], 21)
    assert w.begin_epoch(22) == 0
    assert ds.rollbacks == 1 and ds.pending == [] and ds.committed == []
    w.execute_batch([(9, (ins(2),), 1)], 22)
    w.execute_batch([(9, (ins(3),))], 22)
    assert ds.committed == [["INSERT", "INSERT", "INSERT progress"]] and ds.rollbacks == 1


def test_txn_atomic_without_exactly_once_commits_the_chunks_with_the_last_one_uncut():
    """txn-atomic with exactly-once off (the coordinator's atomic chunks): the same open
    downstream transaction, no progress row, and the last part is never cut into
    ``txn-batch`` pieces (exactly-once off would cut a whole part otherwise)."""
    ds = Downstream()
    w = Loader(ds, LoaderConfig(exactly_once=False, txn_atomic=True, merge=False, txn_batch=1),
               sleep=lambda s: None)
    w.execute_batch([(9, (ins(1), ins(2)), 1)])
    w.execute_batch([(9, (ins(3),), 2)])
    open_statements = list(ds.pending)
    assert ds.committed == [] and open_statements  # (REPLACE: the start's safe mode)
    w.execute_batch([(9, (ins(4), ins(5)))])
    assert len(ds.committed) == 1 and ds.pending == []  # one COMMIT for every chunk
    assert ds.committed[0][:len(open_statements)] == open_statements
    assert not any("progress" in s for s in ds.committed[0])
    assert w.applied_ts == 9
