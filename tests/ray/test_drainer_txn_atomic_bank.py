"""Transaction-atomic mode end to end on a real local Ray with real MariaDB servers: a
bank-transfer workload upstream (each txn moves money between two accounts and logs the
transfer), a drainer with 4 SQL workers and ``[syncer] txn-atomic = true`` applying it
while it runs, and a reader polling the downstream's ``COUNT(*), SUM(balance)`` each in
its own REPEATABLE READ snapshot: it must only ever see no accounts at all or every
account with the initial total (the accounts are created in one upstream txn of 40 rows,
more than ``txn-batch``, so it also shows that txn is not cut into pieces).

Both ways in are covered: exactly-once (the keeper routes whole txns to their first
row's worker) and without it (the coordinator's transaction-granularity causality).
Without it ``txn-chunk-rows`` is 3 as well, so the 40-row insert is a large transaction
handed over in 14 chunks (the coordinator's atomic chunks: one worker, one open
downstream transaction committed with the last chunk) while the reader polls, and the
3-row transfers are not chunked.
"""

from __future__ import annotations

import random
import threading

import pymysql
import pytest

from cluster.drainer import Drainer
from tidb_binlog.config import load_drainer_config
from tidb_binlog.errors import UpstreamError
from tidb_binlog.testing.stack import StackSpec

pytestmark = pytest.mark.timeout(600)

ACCOUNTS = 40
INITIAL = 1000
TRANSFERS_PER_THREAD = 150


STACK = StackSpec(pumps=1)


def transfers(upstream, seed: int, count: int) -> int:
    """``count`` transfers between random accounts (lock conflicts retried)."""
    rng = random.Random(seed)
    done = 0
    with upstream.session("bank") as s:
        while done < count:
            a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
            try:
                with s.begin() as t:
                    got = dict(t.query("SELECT id, balance FROM accounts WHERE id IN (%s, %s) "
                                       "FOR UPDATE", (a, b)))
                    amount = min(rng.randint(1, 50), got[a])
                    t.update("accounts", {"balance": got[a] - amount}, "id = %s", (a,))
                    t.update("accounts", {"balance": got[b] + amount}, "id = %s", (b,))
                    t.insert("transfers", [{"id": seed * 100_000 + done, "src": a, "dst": b,
                                            "amount": amount}])
            except UpstreamError as exc:
                if exc.code in (1213, 1205):  # lock conflict between the two threads
                    continue
                raise
            done += 1
    return done


class SumReader(threading.Thread):
    """Polls ``(COUNT(*), SUM(balance))`` of the downstream accounts, one consistent
    snapshot per poll, until stopped; every distinct observation is kept."""

    def __init__(self, down_db):
        super().__init__(name="sum-reader", daemon=True)
        self.down_db = down_db
        self.stop_event = threading.Event()
        self.seen: dict[tuple[int, int], int] = {}
        self.polls = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = self.down_db.connect()
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                while not self.stop_event.is_set():
                    try:
                        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                        cur.execute("SELECT COUNT(*), COALESCE(SUM(balance), 0) "
                                    "FROM bank.accounts")
                        count, total = cur.fetchone()
                        conn.commit()
                    except pymysql.err.MySQLError as exc:
                        conn.rollback()
                        # not created yet (1146, 1049), or created after this snapshot
                        # began (1412 "Table definition has changed")
                        if exc.args[0] not in (1146, 1049, 1412):
                            raise
                        self.stop_event.wait(0.05)
                        continue
                    key = (int(count), int(total))
                    self.seen[key] = self.seen.get(key, 0) + 1
                    self.polls += 1
            conn.close()
        except BaseException as exc:  # re-raised by the test
            self.error = exc


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "causality"])
def test_reader_never_sees_the_balance_sum_change(stack, exactly_once):
    up_db, down_db, cluster, upstream = stack
    upstream.ddl("CREATE DATABASE bank")
    upstream.ddl("CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)", "bank")
    upstream.ddl("CREATE TABLE transfers (id BIGINT PRIMARY KEY, src INT NOT NULL, "
                 "dst INT NOT NULL, amount INT NOT NULL)", "bank")
    cfg = load_drainer_config(None, {
        "syncer.to.host": down_db.host, "syncer.to.port": down_db.port,
        "syncer.to.user": down_db.user, "syncer.to.password": down_db.password,
        "syncer.worker-count": 4, "syncer.txn-batch": 8, "syncer.txn-atomic": True,
        "syncer.exactly-once": exactly_once, "initial-commit-ts": stack.start_ts,
        "syncer.txn-chunk-rows": 50_000 if exactly_once else 3,
        "addr": "127.0.0.1:0"})
    reader = SumReader(down_db)
    reader.start()
    drainer = Drainer.start(cfg, registry=cluster.registry)
    try:
        with upstream.session("bank") as s, s.begin() as t:
            t.insert("accounts", [{"id": i, "balance": INITIAL}
                                  for i in range(1, ACCOUNTS + 1)])
        results: list[int] = []
        threads = [threading.Thread(target=lambda n=n: results.append(
            transfers(upstream, n + 1, TRANSFERS_PER_THREAD))) for n in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert results == [TRANSFERS_PER_THREAD] * 2
        upstream.flush()
        drainer.wait_for_checkpoint(cluster.get_ts(), timeout_s=300)
        status = drainer.status()
        assert status["state"] == "running" and status["resets"] == 0
        if not exactly_once:  # the 40 inserts: 13 chunks before the last
            assert status["txn_chunks"] == 13, status
    finally:
        reader.stop_event.set()
        reader.join(30)
        final = drainer.stop()
    assert reader.error is None, reader.error
    assert final["consistent"] is True
    # the only states the downstream may ever show: nothing yet, or all accounts and the
    # initial total (a transfer half applied, or the 40 inserts in pieces, would differ)
    assert set(reader.seen) <= {(0, 0), (ACCOUNTS, ACCOUNTS * INITIAL)}, reader.seen
    assert reader.seen.get((ACCOUNTS, ACCOUNTS * INITIAL), 0) > 0, reader.seen
    # and the downstream ends equal to the upstream
    sql = "SELECT id, balance FROM bank.accounts ORDER BY id"
    with up_db.connect() as up, down_db.connect() as down:
        with up.cursor() as a, down.cursor() as b:
            a.execute(sql)
            b.execute(sql)
            assert a.fetchall() == b.fetchall()
            b.execute("SELECT COUNT(*) FROM bank.transfers")
            assert b.fetchone()[0] == 2 * TRANSFERS_PER_THREAD
