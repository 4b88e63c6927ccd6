"""The SQL loader against a real MariaDB: modes agree, DDL rules, errors, exactly-once.

The reference for "correct" is the same row changes applied one by one with the
plain (non-safe) statements in autocommit, on a second database of the same
server; every loader mode must leave identical tables (ordered full rows).
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest

from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.apply.sql import dml_statements
from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig, RetryPolicy
from tidb_binlog.drainer.sinks.mysql.loader import Loader, LoaderConfig
from tidb_binlog.errors import DownstreamError, TransientDownstreamError

_cluster_ids = itertools.count(1000)  # progress rows of one test never meet another's
FAST_RETRY = RetryPolicy(initial_backoff_s=0.05, max_backoff_s=0.5, max_elapsed_s=60.0)


def cfg_of(server, **kw) -> DownstreamConfig:
    return DownstreamConfig(host=server.host, port=server.port, user=server.user,
                            password=server.password, read_timeout_s=10, **kw)


def run(server, db, *statements):
    conn = server.connect(db, autocommit=True)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


def rows(server, db, table, order="1"):
    conn = server.connect(db, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM `{table}` ORDER BY {order}")
            return cur.fetchall()
    finally:
        conn.close()


def scalar(server, sql):
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()[0]
    finally:
        conn.close()


def create_tables(server, db):
    run(server, db,
        "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(64) NOT NULL UNIQUE, "
        "score INT, note VARCHAR(32))",
        "CREATE TABLE events (kind VARCHAR(16), n INT)")


def schemas(db):
    users = TableSchema.build(db, "users", ["id", "email", "score", "note"], ["id"],
                              {"email": ("email",)})
    events = TableSchema.build(db, "events", ["kind", "n"])
    return users, events


def workload(db, n_txns, seed, start_ts=1000, *, max_rows=6):
    """Random valid upstream txns: inserts, updates (incl. PK changes and UK swaps), deletes."""
    rnd = random.Random(seed)
    users, events = schemas(db)
    state: dict[int, dict] = {}
    next_id = 1
    out = []
    ts = start_ts
    for _ in range(n_txns):
        dmls = []
        for _ in range(rnd.randint(1, max_rows)):
            op = rnd.random()
            if op < 0.35 or len(state) < 3:
                row = {"id": next_id, "email": f"u{next_id}@x", "score": rnd.randint(0, 99),
                       "note": rnd.choice([None, "a", "b"])}
                next_id += 1
                state[row["id"]] = row
                dmls.append(DML(db, "users", DMLType.INSERT, dict(row), None, users))
            elif op < 0.55:
                old = state[rnd.choice(sorted(state))]
                new = {**old, "score": rnd.randint(0, 99), "note": rnd.choice([None, "c"])}
                state[old["id"]] = new
                dmls.append(DML(db, "users", DMLType.UPDATE, dict(new), dict(old), users))
            elif op < 0.65:  # PK change
                old = state.pop(rnd.choice(sorted(state)))
                new = {**old, "id": next_id}
                next_id += 1
                state[new["id"]] = new
                dmls.append(DML(db, "users", DMLType.UPDATE, dict(new), dict(old), users))
            elif op < 0.72:  # swap two emails through a temporary value
                a, b = (state[i] for i in rnd.sample(sorted(state), 2))
                steps = [(a, "tmp@swap"), (b, a["email"]), (a, b["email"])]
                for row, email in steps:
                    old = state[row["id"]]
                    new = {**old, "email": email}
                    state[row["id"]] = new
                    dmls.append(DML(db, "users", DMLType.UPDATE, dict(new), dict(old), users))
            elif op < 0.82:
                old = state.pop(rnd.choice(sorted(state)))
                dmls.append(DML(db, "users", DMLType.DELETE, dict(old), None, users))
            else:
                dmls.append(DML(db, "events", DMLType.INSERT,
                                {"kind": rnd.choice(["x", "y"]), "n": rnd.randint(0, 3)},
                                None, events))
        ts += rnd.randint(1, 5)
        out.append(Txn(ts, tuple(dmls)))
    return out


def apply_one_by_one(server, db, txns):
    conn = server.connect(db, autocommit=True)
    try:
        with conn.cursor() as cur:
            for txn in txns:
                for dml in txn.dmls:
                    for stmt in dml_statements(dml):
                        cur.execute(stmt.sql, stmt.args)
    finally:
        conn.close()


def retarget(txns, db):
    """The same txns aimed at database ``db``."""
    users, events = schemas(db)
    by_table = {"users": users, "events": events}
    return [Txn(t.commit_ts, tuple(DML(db, d.table, d.tp, d.values, d.old_values,
                                       by_table[d.table]) for d in t.dmls)) for t in txns]


def make_loader(server, **kw) -> Loader:
    kw.setdefault("retry", FAST_RETRY)
    kw.setdefault("cluster_id", next(_cluster_ids))
    return Loader(Downstream(cfg_of(server)), LoaderConfig(**kw))


@pytest.mark.parametrize("merge,safe_mode,exactly_once,txn_batch", [
    (False, False, True, 20),
    (True, False, True, 20),
    (False, True, False, 7),
    (True, True, False, 3),
    (True, False, True, 1000),
])
def test_modes_match_one_by_one(mariadb, fresh_database, merge, safe_mode, exactly_once,
                                txn_batch):
    ref, got = fresh_database(), fresh_database()
    create_tables(mariadb, ref)
    create_tables(mariadb, got)
    txns = workload(ref, 120, seed=txn_batch + 2 * merge + safe_mode)
    apply_one_by_one(mariadb, ref, txns)
    loader = make_loader(mariadb, worker=1, merge=merge, safe_mode=safe_mode,
                         exactly_once=exactly_once, txn_batch=txn_batch)
    try:
        batch = retarget(txns, got)
        for i in range(0, len(batch), 25):
            ack = loader.execute_batch(batch[i:i + 25])
            assert ack.parts == len(batch[i:i + 25]) and ack.skipped == 0
            assert ack.max_commit_ts == batch[min(i + 25, len(batch)) - 1].commit_ts
    finally:
        loader.close()
    assert rows(mariadb, got, "users") == rows(mariadb, ref, "users")
    assert len(rows(mariadb, ref, "users")) > 10
    assert rows(mariadb, got, "events", "kind, n") == rows(mariadb, ref, "events", "kind, n")


def test_ddl_runs_with_use_and_ignores_replays(mariadb, fresh_database):
    db = fresh_database()
    loader = make_loader(mariadb, exactly_once=True)
    try:
        parts = [
            Txn(10, ddl=DDL(db, "t", "CREATE TABLE t (id INT PRIMARY KEY, v INT)", 10)),
            Txn(11, ddl=DDL(db, "t", "ALTER TABLE t ADD COLUMN w INT", 11)),
            Txn(12, ddl=DDL("", "", f"CREATE DATABASE `{db}`", 12)),          # 1007: exists
            Txn(13, ddl=DDL(db, "t", "CREATE TABLE t (id INT PRIMARY KEY)", 13)),  # 1050
            Txn(14, ddl=DDL(db, "t", "ALTER TABLE t ADD COLUMN w INT", 14)),   # 1060
            Txn(15, ddl=DDL(db, "t", "ALTER TABLE t DROP INDEX nope", 15)),    # 1091
            Txn(16, ddl=DDL(db, "gone", "DROP TABLE gone", 16)),               # 1051
        ]
        ack = loader.execute_batch(parts)
        assert ack.parts == 7 and ack.max_commit_ts == 16
        assert rows(mariadb, db, "t") == ()
        cols = scalar(mariadb, f"SELECT GROUP_CONCAT(column_name ORDER BY ordinal_position) "
                               f"FROM information_schema.columns WHERE table_schema='{db}'")
        assert cols == "id,v,w"
        with pytest.raises(DownstreamError) as info:
            loader.execute_batch([Txn(20, ddl=DDL(db, "t", "ALTER TABLE t ADD COLUMN x INT x x",
                                                  20))])
        msg = str(info.value)
        assert "commit_ts 20" in msg and "ignore-txn-commit-ts = [20]" in msg
        assert "ADD COLUMN x INT x x" in msg and info.value.code == 1064
        assert not isinstance(info.value, TransientDownstreamError)
    finally:
        loader.close()
    assert scalar(mariadb, f"SELECT commitTS FROM tidb_binlog.worker_progress WHERE "
                           f"clusterID = {loader.config.cluster_id} AND worker = 0") == 16


def test_permanent_error_names_statement_and_rolls_back(mariadb, fresh_database):
    db = fresh_database()
    create_tables(mariadb, db)
    users, _ = schemas(db)
    ok = DML(db, "users", DMLType.INSERT, {"id": 1, "email": "a", "score": 1, "note": None},
             None, users)
    dup = DML(db, "users", DMLType.INSERT, {"id": 2, "email": "a", "score": 1, "note": None},
              None, users)
    loader = make_loader(mariadb, merge=False, exactly_once=True, worker=3)
    try:
        with pytest.raises(DownstreamError) as info:
            loader.execute_batch([Txn(40, (ok,)), Txn(41, (dup,))])
        msg = str(info.value)
        assert info.value.code == 1062 and "commit_ts 41" in msg
        assert "INSERT INTO" in msg and "ignore-txn-commit-ts = [41]" in msg
        # the whole downstream transaction rolled back, progress included
        assert rows(mariadb, db, "users") == ()
        assert scalar(mariadb, f"SELECT COUNT(*) FROM tidb_binlog.worker_progress WHERE "
                               f"clusterID = {loader.config.cluster_id} AND worker = 3") == 0
    finally:
        loader.close()


def test_permanent_error_in_bulk_statement_names_the_exact_change(mariadb, fresh_database):
    db = fresh_database()
    create_tables(mariadb, db)
    users, _ = schemas(db)

    def user(k, note):
        return DML(db, "users", DMLType.INSERT, {"id": k, "email": f"{k}@x", "score": k,
                                                 "note": note}, None, users)

    batch = [Txn(50, (user(1, "a"),)), Txn(51, (user(2, "x" * 40),)), Txn(52, (user(3, "c"),))]
    loader = make_loader(mariadb, merge=True, exactly_once=True)
    try:
        with pytest.raises(DownstreamError) as info:  # note is VARCHAR(32): strict mode
            loader.execute_batch(batch)
        msg = str(info.value)
        assert info.value.code == 1406 and "commit_ts 51" in msg
        assert "ignore-txn-commit-ts = [51]" in msg
        assert rows(mariadb, db, "users") == ()
    finally:
        loader.close()


def test_session_params_and_sql_mode(mariadb):
    ds = Downstream(cfg_of(mariadb, params={"time_zone": "'+08:00'", "max_statement_time": "30"},
                           sql_mode="ANSI_QUOTES"))
    try:
        assert ds.query(_stmt("SELECT @@session.time_zone, @@session.sql_mode, "
                              "@@session.max_statement_time, @@autocommit, "
                              "@@character_set_client")) == [
            ("+08:00", "ANSI_QUOTES", 30.0, 0, "utf8mb4")]
    finally:
        ds.close()
    bad = Downstream(cfg_of(mariadb, params={"no_such_variable": "1"}))
    with pytest.raises(DownstreamError) as info:
        bad.connection()
    assert "[syncer.to.params]" in str(info.value) and info.value.code == 1193


def _stmt(sql):
    from tidb_binlog.drainer.apply.sql import Statement

    return Statement(sql, None)


def test_unreachable_downstream_is_transient(free_port):
    ds = Downstream(DownstreamConfig(host="127.0.0.1", port=free_port(), connect_timeout_s=2))
    with pytest.raises(TransientDownstreamError) as info:
        ds.connection()
    assert info.value.code == 2003


class KillingDownstream(Downstream):
    """A real downstream whose connection is KILLed by another session at chosen calls.

    ``kill_after``: numbers of ``execute_script`` calls (one per downstream
    transaction: statements, progress and COMMIT) before which the connection is
    killed.
    ``lose_commit_ok``: transaction numbers whose COMMIT succeeds on the server, after which the
    connection is killed and the client sees the lost connection (2013) pymysql
    raises when the OK packet never arrives: the ambiguous commit.
    """

    def __init__(self, config, server, kill_after, lose_commit_ok=()):
        super().__init__(config)
        self.server, self.kill_after, self.lose_commit_ok = server, kill_after, lose_commit_ok
        self.calls = self.commits = self.kills = 0

    def _kill(self):
        run(self.server, None, f"KILL {self.thread_id}")
        self.kills += 1

    def execute_script(self, statements, commit=False):
        self.calls += 1
        if self.calls in self.kill_after:
            self._kill()
        n = super().execute_script(statements, commit=commit)
        if commit:
            self.commits += 1
            if self.commits in self.lose_commit_ok:
                self._kill()
                self.reset()
                raise TransientDownstreamError("Lost connection to server during query",
                                               code=2013)
        return n


@pytest.mark.parametrize("exactly_once", [True, False])
def test_killed_connection_mid_batch_is_retried(mariadb, fresh_database, exactly_once):
    ref, got = fresh_database(), fresh_database()
    create_tables(mariadb, ref)
    create_tables(mariadb, got)
    txns = workload(ref, 60, seed=5)
    apply_one_by_one(mariadb, ref, txns)
    # an ambiguous commit duplicates key-less rows unless progress rows tell (exactly-once)
    lost = {2, 4} if exactly_once else ()
    ds = KillingDownstream(cfg_of(mariadb), mariadb, kill_after={3, 8, 9, 15},
                           lose_commit_ok=lost)
    loader = Loader(ds, LoaderConfig(merge=False, exactly_once=exactly_once, txn_batch=10,
                                     retry=FAST_RETRY, cluster_id=next(_cluster_ids)))
    try:
        loader.execute_batch(retarget(txns, got))
    finally:
        loader.close()
    assert ds.kills == 4 + len(lost) and loader.retries >= 4 + len(lost)
    assert rows(mariadb, got, "users") == rows(mariadb, ref, "users")
    assert rows(mariadb, got, "events", "kind, n") == rows(mariadb, ref, "events", "kind, n")


def add_insert_counter(server, db):
    """A trigger-based count of every row INSERT that committed on ``users``/``events``."""
    run(server, db, "CREATE TABLE insert_count (n INT NOT NULL)",
        "INSERT INTO insert_count VALUES (0)",
        "CREATE TRIGGER users_ins AFTER INSERT ON users FOR EACH ROW "
        "UPDATE insert_count SET n = n + 1",
        "CREATE TRIGGER events_ins AFTER INSERT ON events FOR EACH ROW "
        "UPDATE insert_count SET n = n + 1")


def test_exactly_once_replay_after_crash_writes_nothing_twice(mariadb, fresh_database):
    ref, got = fresh_database(), fresh_database()
    create_tables(mariadb, ref)
    create_tables(mariadb, got)
    add_insert_counter(mariadb, got)
    txns = retarget(workload(ref, 80, seed=9), got)
    apply_one_by_one(mariadb, ref, workload(ref, 80, seed=9))
    expected_inserts = sum(1 for t in txns for d in t.dmls if d.tp is DMLType.INSERT)
    # two workers, rows routed by table: worker 0 takes users, worker 1 takes events
    def part(txn, table):
        return Txn(txn.commit_ts, tuple(d for d in txn.dmls if d.table == table))

    per_worker = {w: [p for p in (part(t, table) for t in txns) if p.dmls]
                  for w, table in ((0, "users"), (1, "events"))}
    cluster_id = next(_cluster_ids)
    # run 1: worker 0 gets through 50 txns, worker 1 through 20, then "crash"
    for worker, upto in ((0, 50), (1, 20)):
        loader = make_loader(mariadb, worker=worker, merge=False, exactly_once=True,
                             txn_batch=10, cluster_id=cluster_id)
        loader.execute_batch(per_worker[worker][:upto])
        loader.downstream.reset()  # the process dies: nothing flushed, nothing said
    # run 2: replay everything after an old global checkpoint (txn 10), in other batch cuts
    checkpoint_ts = min(per_worker[0][9].commit_ts, per_worker[1][9].commit_ts)
    skipped = 0
    for worker in (0, 1):
        loader = make_loader(mariadb, worker=worker, merge=False, exactly_once=True,
                             txn_batch=10, cluster_id=cluster_id)
        replay = [p for p in per_worker[worker] if p.commit_ts > checkpoint_ts]
        for i in range(0, len(replay), 7):
            skipped += loader.execute_batch(replay[i:i + 7]).skipped
        loader.close()
    assert skipped == sum(1 for w, upto in ((0, 50), (1, 20))
                          for p in per_worker[w][:upto] if p.commit_ts > checkpoint_ts)
    assert skipped >= 40
    assert scalar(mariadb, f"SELECT n FROM `{got}`.insert_count") == expected_inserts
    assert rows(mariadb, got, "users") == rows(mariadb, ref, "users")
    assert rows(mariadb, got, "events", "kind, n") == rows(mariadb, ref, "events", "kind, n")


def test_without_exactly_once_replay_needs_safe_mode(mariadb, fresh_database):
    """The control: the same replay without progress rows duplicates the key-less table
    unless safe mode is forced, and the forced window is what makes the PK table converge."""
    ref, got = fresh_database(), fresh_database()
    create_tables(mariadb, ref)
    create_tables(mariadb, got)
    txns = retarget(workload(ref, 40, seed=3), got)
    apply_one_by_one(mariadb, ref, workload(ref, 40, seed=3))
    loader = make_loader(mariadb, exactly_once=False, merge=False, safe_mode_window_s=0)
    loader.execute_batch(txns[:30])
    loader.downstream.reset()
    loader = make_loader(mariadb, exactly_once=False, merge=False)  # forced safe mode window
    loader.execute_batch(txns[10:])
    loader.close()
    assert rows(mariadb, got, "users") == rows(mariadb, ref, "users")
    assert len(rows(mariadb, got, "events")) > len(rows(mariadb, ref, "events"))


def test_downstream_stopped_mid_load_converges(mariadb_factory):
    server = mariadb_factory("loader-stop")
    db = "stopdb"
    run(server, None, f"CREATE DATABASE {db}")
    create_tables(server, db)
    add_insert_counter(server, db)
    txns = workload(db, 400, seed=21, max_rows=3)
    expected_inserts = sum(1 for t in txns for d in t.dmls if d.tp is DMLType.INSERT)
    loader = make_loader(server, merge=False, exactly_once=True, txn_batch=5)
    start_outage, down = threading.Event(), threading.Event()

    def outage():
        start_outage.wait(60)
        server.stop()
        down.set()
        time.sleep(3)
        server.start()

    thread = threading.Thread(target=outage)
    thread.start()
    try:
        for i in range(0, len(txns), 10):
            loader.execute_batch(txns[i:i + 10])
            if i == 100:
                start_outage.set()
                assert down.wait(60)
    finally:
        start_outage.set()
        thread.join()
        loader.close()
    assert loader.retries >= 1
    # the reference: a fresh database on the same server, applied one by one
    run(server, None, "CREATE DATABASE refdb")
    create_tables(server, "refdb")
    apply_one_by_one(server, "refdb", workload("refdb", 400, seed=21, max_rows=3))
    assert rows(server, db, "users") == rows(server, "refdb", "users")
    assert rows(server, db, "events", "kind, n") == rows(server, "refdb", "events", "kind, n")
    # no downstream transaction committed twice: every INSERT ran exactly once
    assert scalar(server, f"SELECT n FROM {db}.insert_count") == expected_inserts


def _wait_until(predicate, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``predicate`` (a condition, never a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def _lock_waits(server) -> int:
    # InnoDB refreshes this view only when it was not read for 100 ms: poll slower than that.
    time.sleep(0.15)
    return scalar(server, "SELECT COUNT(*) FROM information_schema.INNODB_TRX "
                          "WHERE trx_state = 'LOCK WAIT'")


def _load_in_thread(loader, batch):
    box: dict = {}

    def target():
        try:
            box["ack"] = loader.execute_batch(batch)
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()

    def join():
        th.join(120)
        assert not th.is_alive(), "the batch never finished"
        if "error" in box:
            raise box["error"]
        return box["ack"]

    return join


@pytest.mark.parametrize("exactly_once", [True, False])
def test_lock_wait_timeout_downstream_is_retried_and_rows_land_once(mariadb, fresh_database,
                                                                    exactly_once):
    """A second connection holds a gap lock on ``users`` past the worker's
    innodb_lock_wait_timeout (1 s): the worker's transaction gets 1205, is rolled back
    and retried until the lock goes; the tables equal the reference, and with
    exactly-once every row lands exactly once (insert triggers count them) and the
    progress row is the batch's last commit_ts."""
    ref, got = fresh_database(), fresh_database()
    create_tables(mariadb, ref)
    create_tables(mariadb, got)
    add_insert_counter(mariadb, got)
    txns = workload(ref, 40, seed=21)
    apply_one_by_one(mariadb, ref, txns)
    batch = retarget(txns, got)
    expected_inserts = sum(1 for t in batch for d in t.dmls if d.tp is DMLType.INSERT)
    cluster_id = next(_cluster_ids)
    loader = Loader(Downstream(cfg_of(mariadb, params={"innodb_lock_wait_timeout": 1})),
                    LoaderConfig(worker=2, merge=False, exactly_once=exactly_once,
                                 txn_batch=15, retry=FAST_RETRY, cluster_id=cluster_id))
    blocker = mariadb.connect(got)
    try:
        with blocker.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM users WHERE id = 1 FOR UPDATE")  # empty: a gap lock
            join = _load_in_thread(loader, batch)
            _wait_until(lambda: loader.retries >= 1, "the worker hit a lock wait timeout")
            blocker.rollback()
        ack = join()
    finally:
        blocker.close()
        loader.close()
    assert ack.parts == len(batch) and loader.retries >= 1
    assert rows(mariadb, got, "users") == rows(mariadb, ref, "users")
    assert rows(mariadb, got, "events", "kind, n") == rows(mariadb, ref, "events", "kind, n")
    if exactly_once:  # without it a retry runs in safe mode: REPLACEs count as inserts
        assert scalar(mariadb, f"SELECT n FROM `{got}`.insert_count") == expected_inserts
        assert scalar(mariadb, f"SELECT commitTS FROM tidb_binlog.worker_progress WHERE "
                               f"clusterID = {cluster_id} AND worker = 2") == batch[-1].commit_ts


def test_deadlock_downstream_is_retried_and_rows_land_once(mariadb, fresh_database):
    """The worker's transaction is made a deadlock victim: it holds the rows it inserted
    and waits for a row a second connection locked; that connection (heavier: 2 000 rows
    of undo) then asks for one of the worker's rows. InnoDB rolls the worker back (1213),
    the worker retries the transaction, and every row lands once, progress included."""
    ref, got = fresh_database(), fresh_database()
    for db in (ref, got):
        create_tables(mariadb, db)
        run(mariadb, db, "INSERT INTO users VALUES (1000, 'keep@x', 1, NULL)")
    run(mariadb, got, "CREATE TABLE scratch (id INT PRIMARY KEY)")
    add_insert_counter(mariadb, got)
    users, _ = schemas(ref)
    txns = workload(ref, 40, seed=22)
    old = {"id": 1000, "email": "keep@x", "score": 1, "note": None}
    txns.append(Txn(txns[-1].commit_ts + 1, (
        DML(ref, "users", DMLType.UPDATE, {**old, "score": 2}, old, users),)))
    apply_one_by_one(mariadb, ref, txns)
    batch = retarget(txns, got)
    expected_inserts = sum(1 for t in batch for d in t.dmls if d.tp is DMLType.INSERT)
    cluster_id = next(_cluster_ids)
    # One downstream transaction for the whole batch, the update of row 1000 last.
    loader = Loader(Downstream(cfg_of(mariadb)),
                    LoaderConfig(worker=3, merge=False, exactly_once=True, txn_batch=10_000,
                                 retry=FAST_RETRY, cluster_id=cluster_id))
    blocker = mariadb.connect(got)
    try:
        with blocker.cursor() as cur:
            cur.execute("BEGIN")
            cur.executemany("INSERT INTO scratch VALUES (%s)", [(i,) for i in range(2000)])
            cur.execute("SELECT * FROM users WHERE id = 1000 FOR UPDATE")
            join = _load_in_thread(loader, batch)
            _wait_until(lambda: _lock_waits(mariadb) >= 1, "the worker waits for row 1000")
            # The cycle; the worker is the lighter transaction, so it is the victim and
            # this read gets the lock (were this connection the victim, it would raise).
            cur.execute("SELECT * FROM users WHERE id = 1 FOR UPDATE")
            blocker.rollback()
        ack = join()
    finally:
        blocker.close()
        loader.close()
    assert ack.parts == len(batch) and loader.retries >= 1
    assert rows(mariadb, got, "users") == rows(mariadb, ref, "users")
    assert rows(mariadb, got, "events", "kind, n") == rows(mariadb, ref, "events", "kind, n")
    assert scalar(mariadb, f"SELECT n FROM `{got}`.insert_count") == expected_inserts
    assert scalar(mariadb, f"SELECT commitTS FROM tidb_binlog.worker_progress WHERE "
                           f"clusterID = {cluster_id} AND worker = 3") == batch[-1].commit_ts
