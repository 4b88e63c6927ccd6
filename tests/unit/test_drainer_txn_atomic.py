"""Transaction-atomic mode (``[syncer] txn-atomic``): transaction-granularity assignment in
the coordinator's dispatcher and the keeper's planner, the loader never splitting a
transaction, and the config key's way into every part of the task."""

from __future__ import annotations

import argparse
import random

import pytest

from tidb_binlog.cli import drainer as drainer_cli
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.apply.causality import CONFLICT, TxnCausality, row_keys, stable_hash
from tidb_binlog.drainer.apply.dispatch import Dispatcher, Flush, RunDDL, Send
from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.apply.routing import FLUSH, ROWS, BatchPlanner
from tidb_binlog.drainer.checkpoint.checkpoint import Advancer, Checkpoint
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.mysql.downstream import DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
from tidb_binlog.errors import ConfigError

ACCOUNTS = TableSchema.build("bank", "accounts", ["id", "balance"], primary_key=["id"])


def move(a: int, b: int, amount: int = 1) -> tuple[DML, DML]:
    """A transfer's two row changes (balances are irrelevant to the routing)."""
    return tuple(DML("bank", "accounts", DMLType.UPDATE, {"id": k, "balance": 100 + d},
                     {"id": k, "balance": 100}, schema=ACCOUNTS)
                 for k, d in ((a, -amount), (b, amount)))


def worker_of(pk: int, workers: int) -> int:
    return stable_hash(row_keys(move(pk, pk + 1)[0])[0]) % workers


def pks_on(worker: int, workers: int, count: int, start: int = 1) -> list[int]:
    """``count`` account ids whose key hashes to ``worker``."""
    return [pk for pk in range(start, 10_000) if worker_of(pk, workers) == worker][:count]


def dispatcher(workers=4, batch=3, exactly_once=False):
    return Dispatcher(workers, Advancer(Checkpoint(0)), batch_dmls=batch,
                      exactly_once=exactly_once, txn_atomic=True)


def run(d: Dispatcher, items) -> list:
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


def bank_txns(count: int, accounts: int = 12, seed: int = 7) -> list[tuple[int, Txn]]:
    rng = random.Random(seed)
    return [(ts, Txn(ts, move(*rng.sample(range(1, accounts + 1), 2))))
            for ts in range(1, count + 1)]


# -- the kernel ------------------------------------------------------------------------------

def test_txn_causality_joins_the_one_worker_holding_its_keys():
    k = TxnCausality(4)
    first = k.assign(["a", "b"])
    assert first == stable_hash("a") % 4  # nothing held: the first key's hash
    assert k.assign(["c", "b"]) == first  # shares b: the same worker, whatever c hashes to
    assert k.assign(["c", "d"]) == first  # c is held by it now
    assert len(k) == 4


def test_txn_causality_conflict_on_two_workers_records_nothing_until_reset():
    k = TxnCausality(2)
    a, b = pks_on(0, 2, 1)[0], pks_on(1, 2, 1)[0]
    key_a, key_b = (row_keys(move(pk, pk)[0])[0] for pk in (a, b))
    assert k.assign([key_a]) == 0 and k.assign([key_b]) == 1
    assert k.assign([key_a, key_b, "new"]) is CONFLICT
    assert k.conflicts == 1 and len(k) == 2  # "new" was not recorded
    k.reset()
    assert k.assign([key_a, key_b, "new"]) == 0
    with pytest.raises(ValueError, match="at least one key"):
        k.assign([])
    with pytest.raises(ValueError, match="worker_count"):
        TxnCausality(0)


# -- the dispatcher --------------------------------------------------------------------------

def assert_whole_and_apart(stream, txns: dict[int, Txn]):
    """Every txn is one part of one Send (all its rows), and between flushes no key sits
    with two workers."""
    seen: dict[int, int] = {}
    holder: dict[str, int] = {}
    for action in stream:
        if isinstance(action, Flush):
            holder.clear()
            continue
        if not isinstance(action, Send):
            continue
        for ts, dmls in action.parts:
            assert ts not in seen, f"txn {ts} split over workers {seen[ts]}, {action.worker}"
            seen[ts] = action.worker
            assert dmls == txns[ts].dmls
            for dml in dmls:
                for key in row_keys(dml):
                    assert holder.setdefault(key, action.worker) == action.worker, key
    assert set(seen) == set(txns)


@pytest.mark.parametrize("exactly_once", [True, False])
def test_dispatcher_keeps_each_bank_transfer_whole(exactly_once):
    items = bank_txns(300)
    d = dispatcher(exactly_once=exactly_once)
    stream = run(d, items)
    assert_whole_and_apart(stream, dict(items))
    assert d.advancer.commit_ts == 300 and d.advancer.pending == 0
    assert len({a.worker for a in stream if isinstance(a, Send)}) > 1  # still parallel


def test_default_mode_splits_the_same_transfers():
    """The contrast: without txn-atomic a transfer's two rows go to two workers."""
    items = bank_txns(50)
    d = Dispatcher(4, Advancer(Checkpoint(0)), batch_dmls=3, exactly_once=True)
    stream = run(d, items)
    parts = [ts for a in stream if isinstance(a, Send) for ts, _ in a.parts]
    assert len(parts) > len(items)


def test_exactly_once_worker_is_the_first_rows_whatever_came_before():
    """Exactly-once replays skip per worker, so a txn's worker must not depend on the
    window: it is its first row's routing key's worker."""
    items = bank_txns(100)
    stream = run(dispatcher(exactly_once=True), items)
    for action in stream:
        if isinstance(action, Send):
            for _, dmls in action.parts:
                assert action.worker == stable_hash(row_keys(dmls[0])[0]) % 4


def test_causality_mode_follows_the_holder_without_a_flush():
    """T2 shares an account with T1 but its first row hashes elsewhere: it joins T1's
    worker (no flush); T3 ties two workers' accounts together: a flush first."""
    a, b = pks_on(0, 2, 2)
    c, e, f = pks_on(1, 2, 3)
    d = dispatcher(workers=2, batch=100)
    acts = d.add(1, Txn(1, move(a, b)))
    acts += d.add(2, Txn(2, move(c, b)))  # c hashes to 1, b is held by 0
    assert d.flushes == 0 and not any(isinstance(x, Flush) for x in acts)
    acts += d.add(3, Txn(3, move(e, f)))  # both unheld, hash to 1: on 1
    acts += d.add(4, Txn(4, move(a, e)))  # a on 0, e on 1: conflict
    acts += d.drain()
    kinds = [type(x).__name__ for x in acts]
    assert d.flushes == 1 and kinds.index("Flush") < len(kinds) - 1
    sends_before = [x for x in acts[:kinds.index("Flush")] if isinstance(x, Send)]
    assert [ts for s in sends_before for ts, _ in s.parts] == [1, 2, 3]
    assert all(s.worker == 0 for s in sends_before if s.parts[0][0] in (1, 2))


# -- the keeper's planner ------------------------------------------------------------------

def test_planner_puts_each_transaction_on_one_worker_like_the_dispatcher():
    items = bank_txns(200)
    planner = BatchPlanner(4, txn_atomic=True)
    steps, payloads = planner.plan([(ts, txn, 0) for ts, txn in items[:120]])
    steps2, payloads2 = planner.plan([(ts, txn, 0) for ts, txn in items[120:]])
    txns = dict(items)
    for w, payload in enumerate(payloads + payloads2):
        for ts, dmls in payload:
            assert dmls == txns[ts].dmls  # whole
            assert w % 4 == stable_hash(row_keys(dmls[0])[0]) % 4
    assert sum(len(p) for p in payloads + payloads2) == 200
    direct = dispatcher(exactly_once=True, batch=10_000)
    run(direct, items)
    assert planner.flushes == direct.flushes > 0
    assert FLUSH in [s[0] for s in steps + steps2] and ROWS in [s[0] for s in steps]


def test_planner_default_splits_a_transfer_over_two_workers():
    a, b = pks_on(0, 2, 1)[0], pks_on(1, 2, 1)[0]
    _, payloads = BatchPlanner(2).plan([(1, Txn(1, move(a, b)), 0)])
    assert [len(p) for p in payloads] == [1, 1]
    _, payloads = BatchPlanner(2, txn_atomic=True).plan([(1, Txn(1, move(a, b)), 0)])
    assert [len(p) for p in payloads] == [1, 0] and len(payloads[0][0][1]) == 2


# -- the loader: one upstream txn is one downstream txn ---------------------------------------

class CommitCounter:
    """A downstream that counts COMMITs (the loader's only other calls are no-ops)."""

    config = DownstreamConfig(host="fake", port=1)

    def __init__(self):
        self.commits = 0

    def execute_script(self, statements, commit=False):
        self.commits += commit

    def rollback(self):
        pass


@pytest.mark.parametrize("txn_atomic, commits", [(True, 1), (False, 3)])
def test_loader_never_splits_a_transaction_in_txn_atomic_mode(txn_atomic, commits):
    ds = CommitCounter()
    config = LoaderConfig(txn_batch=2, merge=False, exactly_once=False, txn_atomic=txn_atomic)
    rows = tuple(DML("bank", "accounts", DMLType.INSERT, {"id": i, "balance": 1},
                     schema=ACCOUNTS) for i in range(5))
    Loader(ds, config).execute_batch([(7, rows)])
    assert ds.commits == commits


# -- the config key --------------------------------------------------------------------------

def test_config_key_reaches_settings_and_workers():
    cfg = load_drainer_config(None, {"syncer.to.port": 3306, "syncer.txn-atomic": True})
    assert cfg.syncer.txn_atomic is True
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    assert settings.txn_atomic and LoaderConfig.from_settings(settings, 1).txn_atomic
    default = load_drainer_config(None, {"syncer.to.port": 3306})
    assert TaskSettings.from_config(default, upstream_meta={}).txn_atomic is False


def test_config_key_refused_for_a_file_sink():
    with pytest.raises(ConfigError, match="txn-atomic"):
        load_drainer_config(None, {"syncer.db-type": "file", "syncer.txn-atomic": True})


def test_drainer_command_flag_sets_the_key():
    parser = argparse.ArgumentParser()
    drainer_cli.register(parser.add_subparsers())
    args = parser.parse_args(["drainer", "--txn-atomic"])
    assert drainer_cli.load_config(args).syncer.txn_atomic is True
    args = parser.parse_args(["drainer"])
    assert drainer_cli.load_config(args).syncer.txn_atomic is False
