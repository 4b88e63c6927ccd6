"""Loader logic without a database: error classification, planning, rendering, retries,
the replay guard, and the worker shell without Ray."""

from __future__ import annotations

import pickle

import pymysql
import pytest

from actors.ray_calls import RayCalls
from actors.syncer_workers import SqlWorkerActor
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.sinks.mysql.downstream import (
    DownstreamConfig,
    RetryPolicy,
    backoff_delays,
    shorten_sql,
    translate_error,
)
from tidb_binlog.drainer.sinks.mysql.loader import (
    Loader,
    LoaderConfig,
    as_part,
    plan_units,
    render_unit,
)
from tidb_binlog.drainer.sinks.mysql.metrics import LoaderMetrics
from tidb_binlog.drainer.sinks.mysql.plan import Part
from tidb_binlog.drainer.sinks.mysql.progress import (
    ReplayGuard,
    progress_create_statements,
    progress_load_statement,
    progress_upsert_statement,
)
from tidb_binlog.errors import (
    ConfigError,
    DownstreamError,
    ProtocolError,
    TransientDownstreamError,
)

T = TableSchema.build("d", "t", ["id", "v"], ["id"])
LOG = TableSchema.build("d", "log", ["msg"])


def ins(k, schema=T):
    values = {"id": k, "v": k} if schema is T else {"msg": f"m{k}"}
    return DML("d", schema.table, DMLType.INSERT, values, None, schema)


def upd(k, v):
    return DML("d", "t", DMLType.UPDATE, {"id": k, "v": v}, {"id": k, "v": k}, T)


# -- error boundary -----------------------------------------------------------------------

@pytest.mark.parametrize("exc,transient", [
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), True),
    (pymysql.err.OperationalError(2006, "MySQL server has gone away"), True),
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server"), True),
    (pymysql.err.OperationalError(1213, "Deadlock found"), True),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), True),
    (pymysql.err.OperationalError(1053, "Server shutdown in progress"), True),
    (pymysql.err.OperationalError(1040, "Too many connections"), True),
    (pymysql.err.OperationalError(1927, "Connection was killed"), True),
    (pymysql.err.InternalError(1290, "running with the --read-only option"), True),
    (pymysql.err.InterfaceError(0, ""), True),
    (ConnectionResetError(104, "Connection reset by peer"), True),
    (pymysql.err.IntegrityError(1062, "Duplicate entry '1' for key 'PRIMARY'"), False),
    (pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), False),
    (pymysql.err.OperationalError(1054, "Unknown column 'x'"), False),
    (pymysql.err.DataError(1406, "Data too long for column 'v'"), False),
    (pymysql.err.ProgrammingError(1146, "Table 'd.t' doesn't exist"), False),
])
def test_translate_error(exc, transient):
    err = translate_error(exc, "INSERT INTO `d`.`t` (`id`) VALUES (%s)", "downstream h:1")
    assert isinstance(err, DownstreamError)
    assert isinstance(err, TransientDownstreamError) is transient
    code = exc.args[0] if isinstance(exc.args[0], int) and exc.args[0] else None
    if isinstance(exc, pymysql.err.MySQLError) and exc.args[0]:
        assert err.code == code and f"error {code}" in str(err)
    assert err.sql == "INSERT INTO `d`.`t` (`id`) VALUES (%s)"
    assert pickle.loads(pickle.dumps(err)).code == err.code


def test_long_sql_is_shortened():
    sql = "REPLACE INTO t VALUES " + ",\n".join(["(%s,%s)"] * 500)
    short = shorten_sql(sql, 50)
    assert len(short) < 80 and short.endswith(f"({len(' '.join(sql.split()))} chars)")
    assert "\n" not in short
    err = translate_error(pymysql.err.ProgrammingError(1064, "syntax"), sql, "x")
    assert len(err.sql) < 400


def test_session_params():
    cfg = DownstreamConfig(params={"time_zone": "'+08:00'", "max_statement_time": "30",
                                   "foreign_key_checks": 0, "tidb_txn_mode": "optimistic"},
                           sql_mode="STRICT_TRANS_TABLES")
    got = [(s.sql, s.args) for s in cfg.session_statements()]
    assert got == [("SET SESSION sql_mode = %s", ("STRICT_TRANS_TABLES",)),
                   ("SET SESSION time_zone = %s", ("+08:00",)),
                   ("SET SESSION max_statement_time = %s", (30,)),
                   ("SET SESSION foreign_key_checks = %s", (0,)),
                   ("SET SESSION tidb_txn_mode = %s", ("optimistic",))]
    with pytest.raises(ConfigError) as info:
        DownstreamConfig(params={"x; DROP TABLE y": "1"})
    assert "syncer.to.params" in info.value.key


def test_backoff_doubles_to_the_cap():
    delays = backoff_delays(RetryPolicy(initial_backoff_s=0.1, max_backoff_s=0.5))
    assert [round(next(delays), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    with pytest.raises(ConfigError):
        RetryPolicy(initial_backoff_s=1.0, max_backoff_s=0.5)


def test_default_backoff_retries_at_least_every_second():
    """A 2 s cap left a restarted downstream idle for up to 2 s before the workers came
    back to it (chaos soak, kill9-downstream-db); TiDB's loader retries every 1 s."""
    delays = backoff_delays(RetryPolicy())
    assert [round(next(delays), 2) for _ in range(8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0,
                                                          1.0, 1.0]


# -- replay guard and progress statements ---------------------------------------------------

def test_replay_guard_exactly_once():
    g = ReplayGuard(exactly_once=True, started_at_s=0.0)
    g.loaded(100)
    assert g.should_skip(100) and g.should_skip(50) and not g.should_skip(101)
    g.committed(150)
    g.loaded(120)  # a stale read never moves the guard back
    assert g.applied_ts == 150
    assert not g.safe_mode(0.0) and not g.safe_mode(0.0, retry=True)
    g.set_safe_mode(True)
    assert g.safe_mode(1000.0)


def test_replay_guard_without_exactly_once_forces_safe_mode_at_start_and_on_retry():
    g = ReplayGuard(exactly_once=False, started_at_s=10.0, safe_mode_window_s=300.0)
    g.committed(500)
    assert not g.should_skip(1)  # nothing tells what was applied: replay everything
    assert g.safe_mode(10.0) and g.safe_mode(309.9) and not g.safe_mode(310.0)
    assert g.safe_mode(1000.0, retry=True)


def test_progress_statements():
    create = progress_create_statements("tidb_binlog")
    assert create[1].sql.startswith("CREATE TABLE IF NOT EXISTS `tidb_binlog`.`worker_progress`")
    assert "PRIMARY KEY (clusterID, worker)" in create[1].sql
    up = progress_upsert_statement(7, 3, 42)
    assert up.args == (7, 3, 42) and "GREATEST(commitTS, VALUES(commitTS))" in up.sql
    assert progress_load_statement(7, 3).args == (7, 3)


# -- planning and rendering -----------------------------------------------------------------

def test_plan_groups_parts_up_to_txn_batch_and_never_splits_with_exactly_once():
    parts = [Txn(1, (ins(1), ins(2))), Txn(2, (ins(3),)), Txn(3, tuple(ins(k) for k in
                                                                       range(10, 16))),
             Txn(4, ()), Txn(5, (ins(20),)), Txn(6, ddl=DDL("d", "t", "ALTER TABLE t", 6)),
             Txn(7, (ins(21),))]
    units = plan_units(parts, 4, split_parts=False)
    shape = [("ddl", u.ddl.commit_ts) if u.ddl else [ts for ts, _ in u.rows] for u in units]
    assert shape == [[1, 1, 2], [3] * 6, [5], ("ddl", 6), [7]]
    split = plan_units(parts, 4, split_parts=True)
    shape = [("ddl", u.ddl.commit_ts) if u.ddl else [ts for ts, _ in u.rows] for u in split]
    assert shape == [[1, 1, 2], [3] * 4, [3, 3, 5], ("ddl", 6), [7]]


def test_render_merges_pk_tables_and_keeps_rows_for_keyless_tables():
    rows = [(1, ins(1)), (1, ins(1, LOG)), (2, upd(1, 5)), (3, ins(2)), (3, ins(2, LOG))]
    merged = render_unit(rows, merge=True, safe_mode=False)
    assert [(s.sql.split()[0], lo, hi) for s, lo, hi in merged] == [
        ("REPLACE", 1, 3), ("INSERT", 1, 3)]  # the keyless rows as one 2-row INSERT
    assert merged[0][0].args == (1, 5, 2, 2)
    plain = render_unit(rows, merge=False, safe_mode=True)
    assert [(s.sql.split()[0], s.sql.count("),("), lo, hi) for s, lo, hi in plain] == [
        ("REPLACE", 0, 1, 1), ("REPLACE", 0, 1, 1), ("DELETE", 0, 2, 2),
        ("REPLACE", 1, 2, 3), ("REPLACE", 0, 3, 3)]
    # runs of same-shaped single-row INSERTs become one multi-row INSERT
    runs = render_unit([(1, ins(1)), (1, ins(2)), (2, ins(3)), (2, ins(1, LOG)), (3, ins(4))],
                       merge=False, safe_mode=False, rows_per_statement=2)
    assert [(s.sql.count("),(") + 1, lo, hi) for s, lo, hi in runs] == [
        (2, 1, 1), (1, 2, 2), (1, 2, 2), (1, 3, 3)]
    assert runs[0][0].args == (1, 1, 2, 2)
    precise = render_unit([(1, ins(1)), (1, ins(2))], merge=True, safe_mode=False,
                          coalesce=False)
    assert len(precise) == 1  # merge wins; precise means merge=False as well


def test_batch_items_and_order():
    assert as_part((5, [ins(1)])) == Part(5, (ins(1),))
    assert as_part(Txn(5, (ins(1),))) == Part(5, (ins(1),))
    ddl = DDL("d", "t", "DROP TABLE t", 9)
    assert as_part(ddl) == Part(9, (), ddl)
    assert as_part(as_part(ddl)).is_ddl
    with pytest.raises(ProtocolError, match="batch item"):
        as_part("INSERT 1")
    loader = Loader(ScriptedDownstream(), LoaderConfig(exactly_once=False))
    with pytest.raises(ProtocolError, match="ascending commit_ts; item 1 has 5 after 5"):
        loader.execute_batch([(5, [ins(1)]), (5, [ins(2)])])


# -- the loader's retry logic over a scripted downstream ------------------------------------

class ScriptedDownstream:
    """Records statements; raises the scripted errors at given call numbers."""

    config = DownstreamConfig(host="scripted", port=1)

    def __init__(self, failures=None, progress=0):
        self.failures = dict(failures or {})
        self.calls = 0
        self.log: list[str] = []
        self.committed: list[list[str]] = []
        self.pending: list[str] = []
        self.progress = progress

    def _step(self, what):
        self.calls += 1
        exc = self.failures.pop(self.calls, None)
        if exc is not None:
            self.log.append(f"FAIL {what}")
            raise exc
        self.log.append(what)

    def execute(self, stmt):
        self._step(stmt.sql.split()[0])
        if "worker_progress" in stmt.sql and stmt.sql.startswith("INSERT"):
            self.pending_progress = stmt.args[2]
        self.pending.append(stmt.sql)
        return 1

    def execute_script(self, statements, commit=False):
        """Statement by statement, as Downstream does without multi-statements."""
        steps = [lambda s=s: self.execute(s) for s in statements]
        for i, step in enumerate(steps + ([self.commit] if commit else [])):
            try:
                step()
            except DownstreamError as exc:
                exc.statement_index = i
                raise

    def query(self, stmt):
        self._step("SELECT")
        return [(self.progress,)] if self.progress else []

    def commit(self):
        self._step("COMMIT")
        self.committed.append(self.pending)
        self.pending = []
        if hasattr(self, "pending_progress"):
            self.progress = self.pending_progress

    def rollback(self):
        self.pending = []

    def close(self):
        pass


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def lost():
    return TransientDownstreamError("lost", code=2013)


def test_transient_error_rolls_back_backs_off_and_retries():
    clock = Clock()
    ds = ScriptedDownstream(failures={2: lost(), 3: lost()})
    cfg = LoaderConfig(exactly_once=False, merge=False, safe_mode_window_s=0,
                       retry=RetryPolicy(initial_backoff_s=0.1, max_backoff_s=1.0))
    loader = Loader(ds, cfg, clock=clock, sleep=clock.sleep)
    ack = loader.execute_batch([Txn(1, (ins(1), ins(2)))])
    assert clock.sleeps == [0.1, 0.2] and loader.retries == 2
    assert ack.rows == 2 and ack.parts == 1
    # the retry after a failure may follow a commit that landed: it runs in safe mode
    # (and the two single-row REPLACEs travel as one two-row statement)
    assert ds.committed == [["REPLACE INTO `d`.`t` (`id`,`v`) VALUES (%s,%s),(%s,%s)"]]


def test_gives_up_after_max_elapsed():
    clock = Clock()
    ds = ScriptedDownstream(failures={i: lost() for i in range(1, 100)})
    cfg = LoaderConfig(exactly_once=False, retry=RetryPolicy(initial_backoff_s=1.0,
                                                             max_backoff_s=4.0,
                                                             max_elapsed_s=10.0))
    loader = Loader(ds, cfg, clock=clock, sleep=clock.sleep)
    with pytest.raises(TransientDownstreamError) as info:
        loader.execute_batch([Txn(1, (ins(1),))])
    assert clock.sleeps == [1.0, 2.0, 4.0, 4.0]
    assert "gave up applying rows after retrying for 11.0 s" in str(info.value)
    assert info.value.code == 2013


def test_ambiguous_commit_is_resolved_by_the_progress_row():
    clock = Clock()
    ds = ScriptedDownstream(progress=0)
    cfg = LoaderConfig(exactly_once=True, merge=False, txn_batch=1)
    loader = Loader(ds, cfg, clock=clock, sleep=clock.sleep)
    real_commit = ds.commit
    lost_once = []

    def commit_then_lose():
        real_commit()
        if ds.progress == 1 and not lost_once:  # txn 1 committed, then the OK packet is lost
            lost_once.append(True)
            raise lost()

    ds.commit = commit_then_lose
    ack = loader.execute_batch([Txn(1, (ins(1),)), Txn(2, (ins(2),))])
    data = [txn for txn in ds.committed if any(s.startswith("INSERT INTO `d`") for s in txn)]
    assert len(data) == 2  # txn 1 once (skipped on retry after re-reading progress), txn 2
    assert ack.max_commit_ts == 2 and ds.progress == 2 and loader.retries == 1


def test_permanent_error_names_the_statement_and_commit_ts():
    # call 1: the three INSERTs as one statement fails; the row-by-row re-run then fails
    # at its second INSERT (call 3), which belongs to commit_ts 11
    ds = ScriptedDownstream(failures={1: DownstreamError("Duplicate entry", code=1062),
                                      3: DownstreamError("Duplicate entry", code=1062)})
    loader = Loader(ds, LoaderConfig(exactly_once=False, merge=False, safe_mode_window_s=0))
    with pytest.raises(DownstreamError) as info:
        loader.execute_batch([Txn(10, (ins(1),)), Txn(11, (ins(2), ins(3)))])
    msg = str(info.value)
    assert "commit_ts 11" in msg and "ignore-txn-commit-ts = [11]" in msg
    assert "INSERT INTO `d`.`t`" in msg and info.value.code == 1062
    assert not isinstance(info.value, TransientDownstreamError)


def test_metrics_names():
    m = LoaderMetrics()
    m.observe_execute(0.01)
    m.observe_query("exec", 0.001)
    m.count_event("Insert", 3)
    m.count_error("transient")
    text = m.exposition().decode()
    for line in ('binlog_drainer_event_total{type="Insert"} 3.0',
                 'binlog_drainer_error_count_total{type="transient"} 1.0',
                 'binlog_drainer_query_duration_time_count{type="exec"} 1.0',
                 "binlog_drainer_execute_duration_time_count 1.0"):
        assert line in text


def test_worker_shell_without_ray():
    assert RayCalls.resolve([(1, ())]) == [(1, ())]
    worker = SqlWorkerActor(DownstreamConfig(port=1), LoaderConfig(worker=4, exactly_once=False),
                            load_progress=False)
    with pytest.raises(PipelineReset, match="worker 4: a call of pipeline epoch 5 arrived "
                                            "before this process was told of a reset"):
        worker.execute([], 5)  # (what a restarted worker meets first)
    assert worker.begin(5) == 0
    ack = worker.execute([], 5)
    assert ack.worker == 4 and ack.parts == 0 and worker.flush() == 0
    with pytest.raises(PipelineReset, match="epoch 4 arrived in epoch 5"):
        worker.execute([], 4)  # sent before the reset
    worker.close()


def test_replay_guard_safe_mode_until_ts_covers_rows_starting_in_the_window():
    g = ReplayGuard(exactly_once=True, safe_mode_until_ts=100)
    assert g.safe_mode(0.0, first_ts=50) and g.safe_mode(0.0, first_ts=100)
    assert not g.safe_mode(0.0, first_ts=101) and not g.safe_mode(0.0)
    assert not ReplayGuard(exactly_once=True).safe_mode(0.0, first_ts=1)


def test_safe_mode_until_ts_ends_safe_mode_after_the_replay_window():
    """A worker-count change after a crash replays (checkpoint, until] in safe mode; the
    transactions above it run as usual (they were never applied under the old count)."""
    ds = ScriptedDownstream(progress=0)
    cfg = LoaderConfig(exactly_once=True, merge=False, txn_batch=1, safe_mode_until_ts=20)
    loader = Loader(ds, cfg)
    loader.execute_batch([Txn(10, (ins(1),)), Txn(20, (ins(2),)), Txn(30, (ins(3),))])
    statements = [s for txn in ds.committed for s in txn if "`d`.`t`" in s]
    assert [s.split(" ", 1)[0] for s in statements] == ["REPLACE", "REPLACE", "INSERT"]
