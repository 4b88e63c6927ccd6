"""DDL in the upstream emulator is atomic under concurrent DML (real MariaDB).

A DDL either happens completely (MariaDB changed, the job in the history, its binlogs
written) or not at all. The tests force the lock conflicts the catalog transaction of a
DDL round can meet with second connections holding the conflicting locks, so they do
not depend on timing: they wait (polling information_schema) until the expected lock
waits exist, then make the next move.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import DDLNotRecorded, PumpUnavailable, TxnConflict, UpstreamError
from tidb_binlog.model import SchemaState
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import Upstream, workload
from tidb_binlog.upstream import ddl as ddl_module
from tidb_binlog.upstream.catalog import CATALOG_DB

_names = itertools.count()


@pytest.fixture(autouse=True)
def _fast_round_backoff(monkeypatch):
    """Retries without the production backoff (about 5 s per DDL that fails every
    attempt); the attempts and their order are the same."""
    monkeypatch.setattr(ddl_module, "DDL_ROUND_BACKOFF_S", 0.001)


@pytest.fixture
def env(mariadb):
    col = BinlogCollector()
    db = f"atom{next(_names)}"
    up = Upstream(mariadb.params(), col, TimestampOracle().get_ts, database=db)
    up.ddl(f"CREATE DATABASE {db}")
    yield up, col, db
    up.faults.clear()
    up.flush()
    up.ddl(f"DROP DATABASE IF EXISTS {db}")
    up.close()


def _run_in_thread(fn):
    """Start ``fn`` on a thread; ``join()`` returns its result or raises its error."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the joining test
            box["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()

    def join(timeout: float = 120):
        th.join(timeout)
        assert not th.is_alive(), "thread did not finish"
        if "error" in box:
            raise box["error"]
        return box.get("result")

    return join


def _wait_for_lock_waits(mariadb, n: int, timeout_s: float = 60) -> None:
    """Poll until ``n`` transactions wait for a lock (never a timing assertion)."""
    conn = mariadb.connect()
    try:
        deadline = time.monotonic() + timeout_s
        with conn.cursor() as cur:
            while True:
                cur.execute("SELECT COUNT(*) FROM information_schema.INNODB_TRX "
                            "WHERE trx_state = 'LOCK WAIT'")
                if cur.fetchone()[0] >= n:
                    return
                assert time.monotonic() < deadline, f"{n} lock waits never appeared"
                # InnoDB refreshes its information_schema cache only when it was not read
                # for 100 ms: polling faster would read a stale cache for ever.
                time.sleep(0.15)
    finally:
        conn.close()


def _mariadb_columns(mariadb, db: str, table: str) -> list[str]:
    conn = mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                        "AND TABLE_NAME=%s AND EXTRA NOT LIKE '%%INVISIBLE%%' "
                        "ORDER BY ORDINAL_POSITION", (db, table))
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()


def _mariadb_tables(mariadb, db: str) -> set[str]:
    conn = mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s",
                        (db,))
            return {r[0] for r in cur.fetchall()}
    finally:
        conn.close()


def _assert_catalog_matches_mariadb(up, mariadb, db: str) -> None:
    """MariaDB's tables and columns are exactly what the upstream catalog records."""
    snap = up.reload()
    tables = {name: info for (d, name), info in snap.tables.items() if d == db}
    assert set(tables) == _mariadb_tables(mariadb, db)
    for name, info in tables.items():
        catalog_cols = [c.name.O for c in info.cols if c.name.O != "_tidb_rowid"]
        assert catalog_cols == _mariadb_columns(mariadb, db, name), name


def _assert_every_job_has_its_binlogs(up, col, db: str, since_version: int = 0) -> list:
    """Every job of ``db`` in the history (after ``since_version``, when ``col`` was
    cleared) has a Prewrite and a Commit binlog per round; a DDL binlog of a job that
    is not in the history was rolled back."""
    up.flush()
    jobs = {j.id: j for j in up.meta().history_jobs()
            if j.schema_name == db and j.binlog.schema_version > since_version}
    by_ts: dict[int, list] = {}
    for b in col.binlogs():
        if b.ddl_job_id:
            by_ts.setdefault(b.start_ts, []).append(b)
    committed_jobs = set()
    for start_ts, group in by_ts.items():
        tps = sorted(b.tp for b in group)
        if bl.BinlogType.COMMIT in tps:
            assert tps == sorted([bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT]), start_ts
            committed_jobs.add(group[0].ddl_job_id)
        else:
            assert bl.BinlogType.ROLLBACK in tps, (start_ts, tps)
    assert set(jobs) <= committed_jobs, sorted(set(jobs) - committed_jobs)
    assert committed_jobs <= set(jobs), sorted(committed_jobs - set(jobs))
    return list(jobs.values())


def test_locking_query_before_the_first_change_cannot_deadlock_a_ddl_round(env, mariadb):
    """The three-way deadlock behind the demo's ``diff: 1``: A locked a row with a plain
    ``query(... FOR UPDATE)`` (no schema-version share lock yet), B holds the share lock
    and waits for A's row, the DDL round waits for the exclusive lock behind B; A's first
    change then asked for the share lock behind the round: a cycle, and InnoDB rolled
    back one of them, the round's catalog transaction included, after MariaDB had run
    the DDL. Now A's locking query takes the share lock first, so nothing deadlocks."""
    up, col, db = env
    up.ddl("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    up.ddl("CREATE TABLE d (id INT PRIMARY KEY)")
    with up.session() as s, s.begin() as t:
        t.insert("t", [{"id": 1, "v": 0}, {"id": 2, "v": 0}])
    with up.session() as sa, up.session() as sb:
        a, b = sa.begin(), sb.begin()
        assert a.query("SELECT id FROM t WHERE id = 1 FOR UPDATE") == [(1,)]
        b.update("t", {"v": 2}, "id = %s", (2,))
        b_waits = _run_in_thread(lambda: b.update("t", {"v": 2}, "id = %s", (1,)))
        _wait_for_lock_waits(mariadb, 1)  # B waits for A's row
        ddl = _run_in_thread(lambda: up.ddl("ALTER TABLE d ADD COLUMN c INT"))
        _wait_for_lock_waits(mariadb, 2)  # the round waits for the schema-version row
        a.insert("t", [{"id": 3, "v": 1}])  # used to deadlock here
        a.commit()
        assert b_waits() == 1
        b.commit()
    job = ddl()
    assert job is not None and job.binlog.table_info.column_by_name("c") is not None
    _assert_catalog_matches_mariadb(up, mariadb, db)
    _assert_every_job_has_its_binlogs(up, col, db)


def test_a_ddl_round_chosen_as_deadlock_victim_is_retried(env, mariadb):
    """A second connection makes the round's catalog transaction a deadlock victim
    (it holds the global-id row the round needs, then asks for the schema-version row
    the round holds; it has more undo, so InnoDB rolls the round back). The round is
    retried as a whole: the column exists in MariaDB and in the catalog, once."""
    up, col, db = env
    up.ddl("CREATE TABLE d (id INT PRIMARY KEY)")
    up.ddl("CREATE TABLE scratch (id INT PRIMARY KEY)")
    up.flush()
    col.clear()
    since = up.snapshot.version
    other = mariadb.connect()
    try:
        with other.cursor() as cur:
            cur.execute("BEGIN")
            cur.executemany(f"INSERT INTO {db}.scratch VALUES (%s)", [(i,) for i in range(50)])
            cur.execute(f"SELECT value FROM {CATALOG_DB}.meta WHERE name='global_id' FOR UPDATE")
            ddl = _run_in_thread(lambda: up.ddl("ALTER TABLE d ADD COLUMN c INT"))
            _wait_for_lock_waits(mariadb, 1)  # the round waits for global_id
            # The cycle: InnoDB rolls back the lighter transaction, the round's, and this
            # statement gets the lock (were this connection the victim, it would raise).
            cur.execute(f"SELECT value FROM {CATALOG_DB}.meta WHERE name='schema_version' "
                        "FOR UPDATE")
            other.rollback()
    finally:
        other.close()
    job = ddl()
    assert job is not None
    _assert_catalog_matches_mariadb(up, mariadb, db)
    jobs = _assert_every_job_has_its_binlogs(up, col, db, since)
    assert [j.query for j in jobs] == ["ALTER TABLE d ADD COLUMN c INT"]


def test_a_lock_wait_timeout_in_a_ddl_round_is_retried(mariadb_factory, caplog):
    """The schema-version row held by another connection past innodb_lock_wait_timeout
    (1 s on this private server): the round gets 1205, is rolled back and retried, and
    succeeds once the lock is released."""
    server = mariadb_factory(name="lockwait")
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL innodb_lock_wait_timeout = 1")
    conn.close()
    col = BinlogCollector()
    up = Upstream(server.params(), col, TimestampOracle().get_ts, database="lw")
    up.ddl("CREATE DATABASE lw")
    up.ddl("CREATE TABLE d (id INT PRIMARY KEY)")
    holder = server.connect()
    caplog.set_level(logging.WARNING, logger="tidb_binlog.upstream.ddl")
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT value FROM {CATALOG_DB}.meta WHERE name='schema_version' "
                        "FOR UPDATE")
            ddl = _run_in_thread(lambda: up.ddl("ALTER TABLE d ADD COLUMN c INT"))
            deadline = time.monotonic() + 60
            while not any("1205" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the round never hit a lock wait timeout"
                time.sleep(0.05)
            holder.rollback()
        assert ddl() is not None
        _assert_catalog_matches_mariadb(up, server, "lw")
        _assert_every_job_has_its_binlogs(up, col, "lw")
    finally:
        holder.close()
        up.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_ddl_rounds_racing_dml_sessions_stay_atomic(env, mariadb, seed):
    """The demo's mix: ADD/DROP COLUMN rounds among DML sessions that lock rows with
    FOR UPDATE reads (random_dml) and write the altered table (ddl). Every DDL either
    happened completely or not at all. (Before the fix, each run left a column in
    MariaDB that the catalog did not have about every other time.)"""
    up, col, db = env
    errors: list[BaseException] = []

    def run(kind: str, seed: int):
        try:
            workload.run(up, kind, sessions=4, ops=400, seed=seed, database=db)
        except BaseException as exc:  # reported below, with the catalog check
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k, seed * 10 + i)) for i, k in
               enumerate(["ddl", "random_dml", "random_dml"])]
    up.ddl("CREATE TABLE IF NOT EXISTS ddlt (id INT PRIMARY KEY, v INT)")
    up.ddl("CREATE TABLE IF NOT EXISTS rnd (id INT PRIMARY KEY, u INT, v VARCHAR(20), "
           "UNIQUE KEY uu (u))")
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    _assert_catalog_matches_mariadb(up, mariadb, db)
    jobs = _assert_every_job_has_its_binlogs(up, col, db)
    assert not errors, errors
    # The DDL session shares the workload's op budget with three DML sessions, so how
    # many DDLs it reaches depends on the machine's speed: at least one must have raced.
    assert sum("ADD COLUMN" in j.query for j in jobs) >= 1


def test_a_ddl_that_cannot_be_recorded_is_undone_in_mariadb(env, mariadb):
    """Every attempt of the round loses a lock conflict (fault knob): the statement is
    undone where an inverse exists, and DDLNotRecorded says so (retryable as a whole)."""
    up, col, db = env
    up.ddl("CREATE TABLE d (id INT PRIMARY KEY)")
    before = up.reload()
    up.flush()
    col.clear()
    up.faults.arm(ddl_round_conflict=-1)
    for sql in ("ALTER TABLE d ADD COLUMN c INT", "ALTER TABLE d ADD INDEX iv (id)",
                "CREATE TABLE n (id INT PRIMARY KEY)", "RENAME TABLE d TO d2"):
        with pytest.raises(DDLNotRecorded, match="undone in MariaDB") as err:
            up.ddl(sql)
        assert err.value.undone is True and not err.value.retryable
        assert isinstance(err.value.__cause__, Exception)
    up.faults.clear()
    assert up.reload().version == before.version  # nothing recorded
    _assert_catalog_matches_mariadb(up, mariadb, db)
    up.flush()
    assert [b for b in col.binlogs() if b.ddl_job_id] == []  # no round got to a Prewrite
    # The same statements run once the conflicts are gone.
    up.ddl("ALTER TABLE d ADD COLUMN c INT")
    _assert_catalog_matches_mariadb(up, mariadb, db)


def test_a_ddl_without_inverse_fails_loudly_and_names_the_repair(env, mariadb):
    up, col, db = env
    up.ddl("CREATE TABLE d (id INT PRIMARY KEY)")
    up.faults.arm(ddl_round_conflict=-1)
    with pytest.raises(DDLNotRecorded) as err:
        up.ddl("DROP TABLE d")
    up.faults.clear()
    assert err.value.undone is False
    assert err.value.table == f"`{db}`.`d`"
    assert "no inverse" in str(err.value) and "DROP TABLE IF EXISTS" in str(err.value)
    assert "d" not in _mariadb_tables(mariadb, db) and (db, "d") in up.reload().tables
    up.ddl("DROP TABLE IF EXISTS d")  # the repair the message names
    _assert_catalog_matches_mariadb(up, mariadb, db)
    _assert_every_job_has_its_binlogs(up, col, db)


def test_failed_round_attempts_are_retried_and_leave_one_job(env, mariadb):
    """Two lost conflicts and two failed Prewrites: four attempts rolled back (the
    written-off Prewrites each followed by a Rollback binlog), then one job, one id."""
    up, col, db = env
    up.ddl("CREATE TABLE d (id INT PRIMARY KEY)")
    up.flush()
    col.clear()
    up.faults.arm(ddl_round_conflict=2, fail_prewrite=2)
    job = up.ddl("ALTER TABLE d ADD COLUMN c INT")
    up.flush()
    rounds = [b for b in col.binlogs() if b.ddl_job_id]
    assert [b.tp for b in rounds] == [bl.BinlogType.ROLLBACK, bl.BinlogType.ROLLBACK,
                                      bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT]
    assert {b.ddl_job_id for b in rounds} == {job.id}
    # The job id allocated by a rolled-back attempt is not kept: the next DDL's is new.
    assert up.ddl("ALTER TABLE d ADD COLUMN e INT").id > job.id
    _assert_catalog_matches_mariadb(up, mariadb, db)


def _fail_final_round_after_delete_only(up, col) -> None:
    """Once the DeleteOnly Prewrite of a DROP COLUMN is written, every later round attempt
    loses a conflict: the final round fails as it did when MariaDB was killed between
    the two rounds (the chaos soak), while the DeleteOnly round commits."""
    write = col.write_binlog

    def hooked(binlog):
        write(binlog)
        if (binlog.tp == bl.BinlogType.PREWRITE
                and binlog.ddl_schema_state == SchemaState.DELETE_ONLY):
            up.faults.arm(ddl_round_conflict=-1)

    col.write_binlog = hooked


def _drop_column_left_queued(up, col, table: str) -> int:
    """Run ``ALTER TABLE table DROP COLUMN c`` with its final round failing; return the
    job id its (committed) DeleteOnly binlog carries."""
    up.ddl(f"CREATE TABLE {table} (id INT PRIMARY KEY, c INT, k INT)")
    _fail_final_round_after_delete_only(up, col)
    with pytest.raises(DDLNotRecorded, match="stays queued") as err:
        up.ddl(f"ALTER TABLE {table} DROP COLUMN c")
    up.faults.clear()
    assert err.value.undone is False and not err.value.retryable
    assert "resume_ddl_jobs()" in str(err.value) and "same job id" in str(err.value)
    up.flush()
    delete_only = [b for b in col.binlogs() if b.ddl_schema_state == SchemaState.DELETE_ONLY]
    assert [b.tp for b in delete_only] == [bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT]
    job_id = delete_only[0].ddl_job_id
    assert job_id and up.meta().job(job_id) is None  # what the drainer waits for
    return job_id


def _assert_queued_job_finished(up, col, mariadb, db: str, table: str, job_id: int,
                                columns: list[str]) -> None:
    up.flush()
    job = up.meta().job(job_id)
    assert job is not None and job.query == f"ALTER TABLE {table} DROP COLUMN c"
    final = [b for b in col.binlogs() if b.ddl_job_id == job_id
             and b.ddl_schema_state == SchemaState.NONE]
    assert [b.tp for b in final] == [bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT]
    assert final[1].commit_ts > 0
    assert _mariadb_columns(mariadb, db, table) == columns
    _assert_catalog_matches_mariadb(up, mariadb, db)
    _assert_every_job_has_its_binlogs(up, col, db)


def test_a_drop_column_whose_final_round_failed_is_resumed_with_its_job_id(env, mariadb):
    """The DeleteOnly round of job J committed (its binlog is with the pumps), the final
    round failed every attempt: J stays queued in the catalog, and resume_ddl_jobs(),
    here from another Upstream as after a restart, records J with the final round."""
    up, col, db = env
    job_id = _drop_column_left_queued(up, col, "q")
    # As if MariaDB had died before dropping the column: the resume drops it itself.
    conn = mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"ALTER TABLE `{db}`.q ADD COLUMN c INT AFTER id")
    finally:
        conn.close()
    again = Upstream(up.params, col, up.get_ts, database=db)
    try:
        resumed = again.resume_ddl_jobs()
        again.flush()
    finally:
        again.close()
    assert [j.id for j in resumed] == [job_id]
    _assert_queued_job_finished(up, col, mariadb, db, "q", job_id, ["id", "k"])
    assert up.resume_ddl_jobs() == []  # nothing is left queued


def test_the_next_ddl_finishes_a_queued_drop_column_first(env, mariadb):
    up, col, db = env
    job_id = _drop_column_left_queued(up, col, "q2")
    job = up.ddl("ALTER TABLE q2 ADD COLUMN e INT")
    _assert_queued_job_finished(up, col, mariadb, db, "q2", job_id, ["id", "k", "e"])
    history = [j.id for j in up.meta().history_jobs()]
    assert history.index(job_id) < history.index(job.id)  # in queue order


def test_errors_are_typed_and_retryable_where_a_retry_helps(env):
    up, col, db = env
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY)")
    col.fail_next(1)  # the pump outage as the pump client reports it
    with up.session() as s:
        t = s.begin()
        t.insert("f", [{"id": 1}])
        with pytest.raises(PumpUnavailable) as err:
            t.commit()
        assert err.value.retryable and isinstance(err.value, UpstreamError)
    with up.session() as sa, up.session() as sb:
        a = sa.begin()
        a.insert("f", [{"id": 2}])
        b = sb.begin()
        b.query("SET SESSION innodb_lock_wait_timeout = 1")
        with pytest.raises(TxnConflict) as err:
            b.insert("f", [{"id": 2}])
        assert err.value.retryable and err.value.code == 1205 and not b.open
        a.commit()


def test_the_workload_retries_through_a_pump_outage(env):
    up, col, db = env
    up.ddl(workload.SBTEST_DDL)
    up.faults.arm(fail_prewrite=3)
    stats = workload.run(up, "insert", sessions=2, ops=20, database=db)
    assert stats.txns == 20 and stats.retries >= 3
