"""The coordinator's fault rules, driven step by step without Ray.

:class:`~tidb_binlog.drainer.sinks.mysql.coordinator.Coordinator` takes its SQL worker
calls as an object; here :class:`ScriptedWorkers`, whose workers apply nothing and
whose calls fail when the script says so, and the checkpoint store is an in-memory one
that can be "down". (The end-to-end versions of these faults are in
tests/ray/test_drainer_faults.py; these pin the exact rule.)
"""

from __future__ import annotations

import pytest

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.coordinator import Coordinator
from tidb_binlog.errors import TransientDownstreamError

T = TableSchema.build("db", "t", ["id", "v"], ["id"])


def txn(commit_ts: int, *ids: int) -> Txn:
    return Txn(commit_ts, tuple(DML("db", "t", DMLType.INSERT, {"id": i, "v": i}, None, T)
                                for i in ids))


class Store:
    def __init__(self):
        self.saved: list[Checkpoint] = []
        self.down = False

    def load(self):
        if self.down:
            raise TransientDownstreamError("downstream down")
        return self.saved[-1] if self.saved else None

    def save(self, cp):
        if self.down:
            raise TransientDownstreamError("downstream down")
        self.saved.append(cp)

    def close(self):
        pass


class ScriptedWorkers:
    """Worker calls return at once; ``fail_on_call`` makes the n-th call die. ``calls``
    records ``(worker name, args)``; ``epochs`` the epoch of each ``begin``, and every
    call must carry the last one."""

    def __init__(self, count: int):
        self.names = [f"w{i}" for i in range(count)]
        self.calls: list[tuple[str, tuple]] = []
        self.epochs: list[int] = []
        self.fail_on_call: int | None = None
        self.failed_results: set[int] = set()  # calls (1, 2, ...) whose result is an error

    def __len__(self):
        return len(self.names)

    def begin(self, epoch):
        self.epochs.append(epoch)

    def _call(self, worker, epoch, *args):
        assert self.epochs and epoch == self.epochs[-1], (epoch, self.epochs)
        if self.fail_on_call is not None and len(self.calls) + 1 == self.fail_on_call:
            raise PipelineReset("worker died")
        self.calls.append((self.names[worker], args))
        return ("ref", len(self.calls))

    def execute(self, worker, parts, epoch):
        return self._call(worker, epoch, parts)

    def execute_slice(self, worker, payload, lo, hi, epoch):
        return self._call(worker, epoch, payload, lo, hi)

    def execute_ddl(self, worker, ddl, epoch):
        self._call(worker, epoch, ddl)

    def done(self, handles, block):
        return list(handles)

    def result(self, handle):
        if handle[1] in self.failed_results:
            raise PipelineReset("a pipeline actor is unavailable: the actor was restarted")
        return None


class Calls:
    """The workers of the coordinators a test built (what the tests inspect)."""

    workers: ScriptedWorkers | None = None

    @property
    def calls(self):
        return self.workers.calls

    @property
    def fail_on_call(self):
        return self.workers.fail_on_call

    @fail_on_call.setter
    def fail_on_call(self, value):
        self.workers.fail_on_call = value


CALLS = Calls()


@pytest.fixture
def script() -> Calls:
    """The worker calls of the coordinators the test builds."""
    CALLS.workers = None
    return CALLS


def coordinator(store, workers=2, **kw) -> Coordinator:
    settings = TaskSettings(cluster_id=1, worker_count=workers, txn_batch=1,
                            initial_commit_ts=0, **kw)
    CALLS.workers = ScriptedWorkers(workers)
    coord = Coordinator(settings, CALLS.workers, store)
    coord.reset()  # what the merger does first: the constructor never reads the downstream
    return coord


def test_a_half_dispatched_batch_blocks_later_batches_until_reset(script):
    store = Store()
    coord = coordinator(store)
    coord.apply(0, [(10, txn(10, 1, 2, 3, 4), 0)])
    script.fail_on_call = len(script.calls) + 2  # the 2nd send of the next batch dies
    with pytest.raises(PipelineReset):
        coord.apply(1, [(20, txn(20, 5), 0), (30, txn(30, 6, 7, 8, 9), 0)])
    script.fail_on_call = None
    sent = len(script.calls)
    # The merger had already queued batch 2: it must not reach any worker.
    with pytest.raises(PipelineReset, match="follows a failed batch"):
        coord.apply(2, [(40, txn(40, 10), 0)])
    assert len(script.calls) == sent
    # After the reset the pipeline restarts at batch 0 from the checkpoint.
    assert coord.reset().commit_ts <= 10
    coord.apply(0, [(40, txn(40, 10), 0)])
    assert len(script.calls) == sent + 1


def test_a_worker_call_found_failed_after_its_batch_passed_closes_the_gate(script):
    """Batch 0 was handed out whole and passed the gate; a call of it fails (Ray
    restarted the worker) and the coordinator finds out collecting acks after it. The
    batches the merger had queued meanwhile must not reach a worker: the restarted one
    would commit them without batch 0's parts and move its progress row past them."""
    coord = coordinator(Store())
    script.workers.failed_results = {len(script.calls) + 1}
    with pytest.raises(PipelineReset, match="the actor was restarted"):
        coord.apply(0, [(10, txn(10, 1, 2), 0)])
    sent = len(script.calls)
    with pytest.raises(PipelineReset, match="follows a failed batch"):
        coord.apply(1, [(20, txn(20, 3, 4), 0)])
    assert len(script.calls) == sent
    coord.reset()
    coord.apply(0, [(10, txn(10, 1, 2), 0)])
    assert len(script.calls) == sent + 2


def test_idle_closes_the_gate_on_a_failed_worker_call(script):
    coord = coordinator(Store())
    coord.apply(0, [(10, txn(10, 1), 0)])
    script.workers.failed_results = {len(script.calls) + 1}
    script.workers.done = lambda handles, block: []  # in flight until idle() looks
    coord.apply(1, [(20, txn(20, 2), 0)])
    del script.workers.done
    with pytest.raises(PipelineReset, match="the actor was restarted"):
        coord.idle()
    with pytest.raises(PipelineReset, match="follows a failed batch"):
        coord.apply(2, [(30, txn(30, 3), 0)])


def test_each_reset_starts_a_new_epoch_on_every_worker_and_every_call_carries_it(script):
    """The workers refuse calls of another epoch (a restarted one: every call until the
    next reset), so each reset tells every worker the new one before any batch; the
    fake workers assert that each call carries the last one."""
    from tidb_binlog.drainer.apply.dml import DDL
    from tidb_binlog.drainer.apply.routing import FLUSH, ROWS, RUN_DDL

    coord = coordinator(Store(), workers=2)
    assert script.workers.epochs == [coord.epoch] and coord.epoch > 0
    coord.apply(0, [(10, txn(10, 1, 2), 0)])
    coord.idle()
    first = coord.epoch
    coord.reset(replay=True)
    assert script.workers.epochs == [first, coord.epoch] and coord.epoch != first
    ddl = DDL("db", "t", "ALTER TABLE t ADD c INT", 30)
    plan = [(ROWS, 20, 0, (1, 1), 2), (FLUSH,), (RUN_DDL, 30, 5, ddl)]
    coord.apply_routed(0, plan, ["payload-0", "payload-1"])
    coord.apply(1, [(40, txn(40, 3), 0)])
    assert len(script.calls) == 2 + 2 + 1 + 1  # each checked against the epoch


def test_a_reset_that_cannot_reach_a_worker_leaves_batches_refused(script):
    coord = coordinator(Store())
    coord.apply(0, [(10, txn(10, 1), 0)])

    def unavailable(epoch):
        raise PipelineReset("a pipeline actor is unavailable: the actor is restarting")

    script.workers.begin = unavailable
    with pytest.raises(PipelineReset, match="restarting"):
        coord.reset(replay=True)
    with pytest.raises(PipelineReset, match="follows a failed batch"):
        coord.apply(1, [(20, txn(20, 2), 0)])
    del script.workers.begin
    coord.reset(replay=True)
    coord.apply(0, [(20, txn(20, 2), 0)])


def test_a_downstream_outage_delays_the_checkpoint_save_without_failing(script):
    store = Store()
    coord = coordinator(store, save_interval_s=0.0)
    coord.apply(0, [(10, txn(10, 1), 0)])
    assert coord.idle() == 10 and store.saved[-1].commit_ts == 10
    store.down = True
    coord.apply(1, [(20, txn(20, 2), 0)])  # acked; the save fails and stays due
    assert coord.idle() == 20
    assert store.saved[-1].commit_ts == 10
    with pytest.raises(PipelineReset, match="cannot read the checkpoint"):
        coord.reset()  # the merger retries the reset while the downstream is down
    store.down = False
    coord.reset()
    coord.apply(0, [(30, txn(30, 3), 0)])
    coord.idle()
    assert store.saved[-1].commit_ts == 30


def test_one_worker_call_per_worker_and_batch(script):
    """txn-batch 1 would cut a Send per row; the coordinator still makes one call per
    worker for the whole merged batch (the loader cuts the downstream transactions)."""
    coord = coordinator(Store(), workers=2)
    coord.apply(0, [(ts, txn(ts, ts), 0) for ts in range(1, 41)])
    workers = [w for w, _ in script.calls]
    assert sorted(workers) == ["w0", "w1"]
    assert sum(len(args[0]) for _, args in script.calls) == 40
    assert coord.idle() == 40


def test_routed_batch_hands_each_worker_its_payload_slice(script):
    from tidb_binlog.drainer.apply.routing import BatchPlanner
    from tidb_binlog.packed import pack

    coord = coordinator(Store(), workers=2)
    items = [(ts, txn(ts, ts, ts + 100), 0) for ts in range(1, 21)] + [(21, None, 0)]
    plan, payloads = BatchPlanner(2).plan(items)
    refs = [f"payload-{w}" for w in range(2)]
    assert coord.apply_routed(0, pack(plan), refs) <= 21
    calls = {w: args for w, args in script.calls}
    assert set(calls) == {"w0", "w1"} and len(script.calls) == 2
    for w in range(2):
        assert calls[f"w{w}"] == (refs[w], 0, len(payloads[w]))
    assert coord.idle() == 21 and coord.status().as_dict()["applied_rows"] == 40
    with pytest.raises(Exception, match="routed over 3 workers"):
        coord.apply_routed(1, plan, refs + ["payload-2"])


def test_routed_plan_flushes_runs_ddl_alone_and_advances_per_run(script):
    from tidb_binlog.drainer.apply.dml import DDL
    from tidb_binlog.drainer.apply.routing import FLUSH, ROWS, RUN_DDL

    coord = coordinator(Store(), workers=2)
    ddl = DDL("db", "t", "ALTER TABLE t ADD c INT", 30)
    plan = [(ROWS, 10, 0, (2, 1), 3), (FLUSH,), (ROWS, 20, 0, (0, 1), 1),
            (RUN_DDL, 30, 5, ddl), (ROWS, 40, 5, (0, 0), 0)]
    refs = ["payload-0", "payload-1"]
    assert coord.apply_routed(0, plan, refs) == 40
    assert script.calls == [("w0", (refs[0], 0, 2)), ("w1", (refs[1], 0, 1)),
                               ("w1", (refs[1], 1, 2)), ("w0", (ddl,))]
    st = coord.status().as_dict()
    assert st["applied_rows"] == 4 and st["flushes"] == 2 and st["ddl_jobs"] == 1
    assert st["schema_version"] == 5 and st["pending"] == 0



def test_status_counters_survive_a_coordinator_restart_and_count_the_replay_once(script):
    """An e2e run once ended with ``applied_rows=685`` of 12k after the coordinator
    restarted: the counts lived only in the actor. They are saved with the checkpoint."""
    store = Store()
    first = coordinator(store, save_interval_s=0.0)
    first.apply(0, [(10, txn(10, 1, 2, 3, 4), 0)])
    assert first.idle() == 10 and store.saved[-1].applied_rows == 4
    store.down = True  # rows at 20 are committed, but the checkpoint past them is not saved
    first.apply(1, [(20, txn(20, 5, 6), 0)])
    assert first.status().as_dict()["applied_rows"] == 6
    store.down = False

    restarted = Coordinator(first.settings, first.workers, store)  # Ray restart
    cp = restarted.reset(replay=True)
    assert (cp.commit_ts, cp.applied_rows, cp.resets) == (10, 4, 1)
    assert store.saved[-1].resets == 1  # saved at once: a second crash keeps it
    restarted.apply(0, [(20, txn(20, 5, 6), 0)])  # the replay above the checkpoint
    restarted.idle()
    st = restarted.status().as_dict()
    assert (st["applied_rows"], st["resets"], st["commit_ts"]) == (6, 1, 20)
    assert (store.saved[-1].applied_rows, store.saved[-1].resets) == (6, 1)


def test_a_coordinator_never_reset_refuses_batches_and_saves_nothing_on_close(script):
    """The constructor does not touch the downstream (a constructor that raises leaves
    an actor Ray never restarts): until reset() it refuses batches, and close() keeps
    the saved checkpoint instead of overwriting it with an empty one."""
    store = Store()
    store.saved.append(Checkpoint(50, True, 3, applied_rows=9))
    settings = TaskSettings(cluster_id=1, worker_count=1, initial_commit_ts=0)
    CALLS.workers = ScriptedWorkers(1)
    coord = Coordinator(settings, CALLS.workers, store)
    with pytest.raises(PipelineReset, match="before the checkpoint was loaded"):
        coord.apply(0, [(60, txn(60, 1), 0)])
    assert coord.close() == Checkpoint(50, True, 3)
    assert len(store.saved) == 1 and script.calls == []
