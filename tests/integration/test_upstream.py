"""The TiDB-behaving upstream against a real MariaDB: binlogs decode to the rows MariaDB holds."""

from __future__ import annotations

import itertools
import threading

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.codec import (
    Kind,
    datum_for_column,
    decode_old_and_new_row,
    decode_old_row,
    decode_value,
    split_insert_row,
    unflatten,
)
from tidb_binlog.errors import SchemaError, UnsupportedDDL, UpstreamError
from tidb_binlog.model import EXTRA_HANDLE_ID, ActionType, SchemaState
from tidb_binlog.node import TxnStatus
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import Raw, SimulatedCrash, Upstream

_names = itertools.count()

ALL_TYPES = """CREATE TABLE all_types (
  id BIGINT PRIMARY KEY AUTO_INCREMENT, b BOOL, t TINYINT, tu TINYINT UNSIGNED, s SMALLINT,
  m MEDIUMINT, i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED, f FLOAT, d DOUBLE,
  de DECIMAL(38,19), bt BIT(64), da DATE, dt DATETIME(6), ts TIMESTAMP NULL, tm TIME(3),
  y YEAR, c CHAR(10), vc VARCHAR(40), bn BINARY(4), bl BLOB, tx TEXT, e ENUM('a','b','c'),
  st SET('x','y','z'), j JSON, dflt INT NOT NULL DEFAULT 7)"""

ALL_TYPES_ROWS = [
    dict(b=True, t=-128, tu=255, s=-32768, m=8388607, i=-2147483648, iu=4294967295,
         bi=-9223372036854775808, bu=18446744073709551615, f=3.14, d=-2.5e300,
         de="-1234567890123456789.1234567890123456789", bt=b"\xff" * 8, da="2024-02-29",
         dt="2023-01-02 03:04:05.000678", ts="2020-06-01 12:00:00", tm="-838:59:59.000",
         y=2155, c="中文", vc="日本語 text", bn=b"\x00\x01", bl=b"\x00\xffbin", tx="長い text",
         e="b", st="x,z", j='{"a": [1, "2", null], "b": true}'),
    dict(b=None, t=127, tu=0, s=None, m=-8388608, i=None, iu=0, bi=9223372036854775807, bu=0,
         f=None, d=0.0, de="0", bt=b"\x00", da="1000-01-01", dt="9999-12-31 23:59:59.999999",
         ts=None, tm="00:00:00", y=1901, c="", vc=None, bn=None, bl=None, tx="", e=None, st="",
         j="[]"),
]


@pytest.fixture
def env(mariadb):
    col = BinlogCollector()
    tso = TimestampOracle()
    db = f"up{next(_names)}"
    up = Upstream(mariadb.params(), col, tso.get_ts, database=db)
    up.ddl(f"CREATE DATABASE {db}")
    settle(up, col)
    yield up, col, db
    up.flush()
    up.ddl(f"DROP DATABASE {db}")
    up.close()


def settle(up: Upstream, col: BinlogCollector) -> None:
    """Forget what ``col`` collected so far. Commit/Rollback binlogs (a DDL's too) reach
    the collector from the upstream's background finish sender, so the queue is drained
    first: a late Commit of an earlier transaction must not land after the clear."""
    up.flush()
    col.clear()


def _prewrites(col: BinlogCollector) -> list[bl.Binlog]:
    return [b for b in col.binlogs() if b.tp == bl.BinlogType.PREWRITE and not b.ddl_job_id]


def _mariadb_row(up, db, info, codec, handle_sql, args):
    with up.session(db) as s:
        t = s.begin()
        rows = t.query(f"SELECT {codec.select_list} FROM `{info.name.O}` WHERE {handle_sql}", args)
        t.rollback()
    return rows


def _update_ids(row: bytes) -> list[int]:
    return [d.value for d in decode_value(row)[::2]]


def _same(a, b) -> bool:
    """Datum equality; string and bytes datums encode alike (``02`` compact bytes)."""
    if {a.kind, b.kind} <= {Kind.STRING, Kind.BYTES}:
        return a.value == b.value
    return a == b


def _check_inserts_match_mariadb(up, db, table, mutation):
    """Decode every inserted row (our codec + the model) and compare with MariaDB's row."""
    info = up.table(table, db)
    codec = up.codec(info)
    fts = {c.id: c.type.to_codec() for c in info.cols}
    pk = codec.pk_offsets
    for raw in mutation.inserted_rows:
        handle, rest = split_insert_row(raw, len(pk) or 1)
        got = decode_old_row(rest)
        if codec.kind == "rowid":
            rows = _mariadb_row(up, db, info, codec, "_tidb_rowid = %s", [handle[0].value])
        else:
            where = " AND ".join(f"`{info.cols[i].name.O}` = %s" for i in pk)
            rows = _mariadb_row(up, db, info, codec, where,
                                [unflatten(h, fts[info.cols[i].id]).value
                                 if codec.kind == "int" else h.value
                                 for h, i in zip(handle, pk, strict=True)])
        assert len(rows) == 1, (table, handle)
        for c, value in zip(info.cols, rows[0], strict=False):
            want = datum_for_column(value, fts[c.id])
            if c.id in got:
                assert _same(unflatten(got[c.id], fts[c.id]), want), (table, c.name.O)
            elif c.offset in pk:
                continue  # carried by the handle prefix
            else:
                assert value is None and c.default is None, (table, c.name.O)  # CanSkip rule 3


def test_all_types_insert_update_delete_round_trip(env):
    up, col, db = env
    up.ddl(ALL_TYPES)
    with up.session() as s, s.begin() as t:
        assert t.insert("all_types", ALL_TYPES_ROWS) == 2
    up.flush()
    [pre] = _prewrites(col)
    pv = bl.decode_prewrite_value(pre.prewrite_value)
    info = up.table("all_types")
    assert pv.schema_version == up.snapshot.version
    [m] = pv.mutations
    assert m.table_id == info.id and list(m.sequence) == [0, 0]
    _check_inserts_match_mariadb(up, db, "all_types", m)
    with up.session() as s, s.begin() as t:
        assert t.update("all_types", {"vc": "更新", "i": Raw("COALESCE(i, 0) + 1")}, "id = 2") == 1
        assert t.update("all_types", {"tx": ""}, "id = 2") == 0  # unchanged: no mutation
    up.flush()
    [m] = bl.decode_prewrite_value(_prewrites(col)[-1].prewrite_value).mutations
    assert list(m.sequence) == [1]
    old_new = m.updated_rows[0]
    ids = [c.id for c in info.cols]
    assert _update_ids(old_new) == ids + ids  # old ‖ new, every column, no _tidb_rowid
    old, new = decode_old_and_new_row(old_new, {c.id: c.type.to_codec() for c in info.cols})
    assert new[info.column_by_name("vc").id].value == "更新".encode()
    with up.session() as s, s.begin() as t:
        assert t.delete("all_types", "id = 1") == 1
    up.flush()
    m2 = bl.decode_prewrite_value(_prewrites(col)[-1].prewrite_value).mutations[0]
    deleted = decode_old_row(m2.deleted_rows[0])
    assert deleted[info.column_by_name("c").id].value == "中文".encode()
    assert list(m2.sequence) == [bl.MutationType.DELETE_ROW]
    commits = [b for b in col.binlogs() if b.tp == bl.BinlogType.COMMIT and not b.ddl_job_id]
    assert [c.start_ts for c in commits] == [b.start_ts for b in _prewrites(col)]
    assert all(c.prewrite_key == p.prewrite_key for c, p in zip(commits, _prewrites(col),
                                                                   strict=True))


@pytest.mark.parametrize("clustered", ["on", "int_only"])
def test_handle_kinds_and_pk_updates(mariadb, clustered):
    col, tso, db = BinlogCollector(), TimestampOracle(), f"uph{next(_names)}"
    with Upstream(mariadb.params(), col, tso.get_ts, database=db, clustered_index=clustered) as up:
        up.ddl(f"CREATE DATABASE {db}")
        up.ddl("CREATE TABLE ck (a VARCHAR(10), b INT, v INT, PRIMARY KEY (a, b))")
        up.ddl("CREATE TABLE nopk (a INT, u VARCHAR(8) NULL, UNIQUE KEY uu (u))")
        up.ddl("CREATE TABLE pt (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
               "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)")
        ck = up.table("ck")
        assert ck.handle_kind == ("common" if clustered == "on" else "rowid")
        assert up.table("nopk").handle_kind == "rowid" and up.table("pt").handle_kind == "int"
        assert len(up.table("pt").partition.definitions) == 2
        settle(up, col)
        with up.session() as s, s.begin() as t:
            t.insert("ck", [{"a": "x", "b": 1, "v": 1}, {"a": "y", "b": 2, "v": 2}])
            t.update("ck", {"a": "z"}, "b = 1")
            t.insert("nopk", [{"a": 1, "u": None}, {"a": 2, "u": None}, {"a": 3, "u": "k"}])
            t.update("nopk", {"u": "m"}, "a = 1")
            t.insert("pt", [{"id": 1, "v": 0}, {"id": 50, "v": 0}])
            t.update("pt", {"id": Raw("id + 100")}, "id = 1")
        up.flush()
        [pre] = _prewrites(col)
        muts = {m.table_id: m for m in bl.decode_prewrite_value(pre.prewrite_value).mutations}
        pt = up.table("pt")
        # partitioned: the logical id; a handle change is DeleteRow + Insert
        assert list(muts[pt.id].sequence) == [0, 0, 4, 0]
        if clustered == "on":
            assert list(muts[ck.id].sequence) == [0, 0, 4, 0]
        else:
            assert list(muts[ck.id].sequence) == [0, 0, 1]
            assert EXTRA_HANDLE_ID in _update_ids(muts[ck.id].updated_rows[0])
        nopk = up.table("nopk")
        assert _update_ids(muts[nopk.id].updated_rows[0]).count(EXTRA_HANDLE_ID) == 2
        for name, m in (("ck", muts[ck.id]), ("nopk", muts[nopk.id]), ("pt", muts[pt.id])):
            live = type(m)()
            live.inserted_rows.extend(r for r in m.inserted_rows[-1:])
            _check_inserts_match_mariadb(up, db, name, live)
        up.ddl(f"DROP DATABASE {db}")


def test_conflicting_transactions_get_commit_ts_in_mariadb_commit_order(env):
    up, col, db = env
    up.ddl("CREATE TABLE c (id INT PRIMARY KEY, v VARCHAR(200))")
    with up.session() as s, s.begin() as t:
        t.insert("c", [{"id": 1, "v": ""}])
    commit_ts: dict[str, int] = {}
    barrier = threading.Barrier(4)

    def worker(tag: str):
        with up.session() as s:
            barrier.wait()
            for i in range(5):
                t = s.begin()
                t.update("c", {"v": Raw(f"CONCAT(v, '{tag}{i},')")}, "id = 1")
                commit_ts[f"{tag}{i}"] = t.commit()

    threads = [threading.Thread(target=worker, args=(tag,)) for tag in "abcd"]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    with up.session() as s:
        t = s.begin()
        order = t.query("SELECT v FROM c WHERE id = 1")[0][0].rstrip(",").split(",")
        t.rollback()
    assert len(order) == 20
    assert [commit_ts[k] for k in order] == sorted(commit_ts.values())


def test_fault_drop_commit_binlog_is_resolved_as_committed(env):
    up, col, db = env
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY)")
    settle(up, col)
    up.faults.arm(drop_commit_binlog=1)
    with up.session() as s, s.begin() as t:
        t.insert("f", [{"id": 1}])
    up.flush()
    assert [b.tp for b in col.binlogs()] == [bl.BinlogType.PREWRITE]
    status = up.meta().txn_status(t.start_ts, col.binlogs()[0].prewrite_key)
    assert status == TxnStatus(TxnStatus.COMMITTED, t.commit_ts)


def _wait_until_unlocked(up, start_ts: int) -> None:
    """Block on the status row's lock until its transaction has ended: MariaDB rolls a
    dropped connection's transaction back once it has read the client's COM_QUIT, which
    happens after the client returned; the lock wait wakes exactly then."""
    with up.session() as s:
        t = s.begin()
        t.query("SET SESSION innodb_lock_wait_timeout = 300")
        t.query("SELECT commit_ts FROM tidb_binlog_upstream.txn_status WHERE start_ts=%s "
                "FOR UPDATE", (start_ts,))
        t.rollback()


def test_fault_crash_after_prewrite_leaves_a_rolled_back_prewrite(env):
    up, col, db = env
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY)")
    settle(up, col)
    up.faults.arm(crash_after_prewrite=1)
    s = up.session()
    t = s.begin()
    t.insert("f", [{"id": 1}])
    with pytest.raises(SimulatedCrash):
        t.commit()
    s.close()
    up.flush()
    assert [b.tp for b in col.binlogs()] == [bl.BinlogType.PREWRITE]
    _wait_until_unlocked(up, t.start_ts)
    assert up.meta().txn_status(t.start_ts).state == TxnStatus.ROLLED_BACK
    with up.session() as s2:
        assert s2.begin().query("SELECT COUNT(*) FROM f")[0][0] == 0


@pytest.mark.parametrize("how", ["knob", "writer"])
def test_fault_fail_prewrite_does_not_commit_and_sends_rollback(env, how):
    up, col, db = env
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY)")
    settle(up, col)
    if how == "knob":
        up.faults.arm(fail_prewrite=1)
    else:
        col.fail_next(1)
    with up.session() as s:
        t = s.begin()
        t.insert("f", [{"id": 1}])
        with pytest.raises(UpstreamError, match="prewrite"):
            t.commit()
        up.flush()
        assert [(b.tp, b.start_ts) for b in col.binlogs()] == [(bl.BinlogType.ROLLBACK,
                                                                 t.start_ts)]
        assert s.begin().query("SELECT COUNT(*) FROM f")[0][0] == 0
    assert up.meta().txn_status(t.start_ts).state == TxnStatus.ROLLED_BACK


def test_txn_status_unknown_while_the_transaction_runs(env):
    up, col, db = env
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY)")
    seen = []

    class Probe:
        def write_binlog(self, b):
            if b.tp == bl.BinlogType.PREWRITE:
                seen.append(up.meta().txn_status(b.start_ts, b.prewrite_key))
            col.write_binlog(b)

    up.writer = Probe()
    with up.session() as s, s.begin() as t:
        t.insert("f", [{"id": 1}])
    assert seen == [TxnStatus(TxnStatus.UNKNOWN)]


def test_ddl_jobs_history_and_binlogs(env):
    up, col, db = env
    meta = up.meta()
    create = up.ddl("CREATE TABLE d (id INT PRIMARY KEY, a INT, c INT)")
    t_id = create.table_id
    add = up.ddl("ALTER TABLE d ADD COLUMN e VARCHAR(5) DEFAULT 'q'")
    drop = up.ddl("ALTER TABLE d DROP COLUMN c")
    add2 = up.ddl("ALTER TABLE d ADD COLUMN f INT")
    idx = up.ddl("ALTER TABLE d ADD UNIQUE INDEX ua (a)")
    mod = up.ddl("ALTER TABLE d MODIFY COLUMN a BIGINT")
    ren = up.ddl("RENAME TABLE d TO d2")
    trunc = up.ddl("TRUNCATE TABLE d2")
    dropi = up.ddl("DROP INDEX ua ON d2")
    assert up.ddl("CREATE TABLE IF NOT EXISTS d2 (x INT)") is None
    jobs = [create, add, drop, add2, idx, mod, ren, trunc, dropi]
    assert [j.type for j in jobs] == [ActionType.CREATE_TABLE, ActionType.ADD_COLUMN,
                                      ActionType.DROP_COLUMN, ActionType.ADD_COLUMN,
                                      ActionType.ADD_INDEX, ActionType.MODIFY_COLUMN,
                                      ActionType.RENAME_TABLE, ActionType.TRUNCATE_TABLE,
                                      ActionType.DROP_INDEX]
    versions = [j.schema_version for j in jobs]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    info = add2.binlog.table_info
    assert [c.name.O for c in info.cols] == ["id", "a", "e", "f"]
    assert [c.id for c in info.cols] == [1, 2, 4, 5]  # c's id 3 is never reused
    assert info.max_col_id == 5
    assert ren.binlog.table_info.name.O == "d2" and ren.table_id == t_id
    assert trunc.table_id == t_id and trunc.binlog.table_info.id != t_id
    assert idx.binlog.table_info.index_by_name("ua").is_unique
    stored = meta.job(drop.id)
    assert stored.to_json() == drop.to_json() and stored.state == 6
    history = [j.id for j in meta.history_jobs() if j.schema_name == db]
    assert history[-9:] == [j.id for j in jobs]
    up.flush()
    # DROP COLUMN: the DeleteOnly round first, then the final one. Prewrites are written
    # in line and Commits by the finish sender, so only each kind's own order is fixed.
    drop_rounds = {tp: [(b.start_ts, b.ddl_schema_state) for b in col.binlogs()
                        if b.ddl_job_id == drop.id and b.tp == tp]
                   for tp in (bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT)}
    assert [state for _, state in drop_rounds[bl.BinlogType.PREWRITE]] == [
        SchemaState.DELETE_ONLY, SchemaState.NONE]
    assert drop_rounds[bl.BinlogType.COMMIT] == drop_rounds[bl.BinlogType.PREWRITE]
    assert [b.ddl_job_id for b in col.binlogs() if b.tp == bl.BinlogType.PREWRITE][:5] == [
        create.id, add.id, drop.id, drop.id, add2.id]
    assert all(b.ddl_query for b in col.binlogs())
    tables = {t.name.O for d, ts in meta.snapshot_tables() if d.db_name.O == db for t in ts}
    assert tables == {"d2"}


def test_partition_ddl_keeps_logical_id_and_renews_truncated_partition(env):
    up, col, db = env
    up.ddl("CREATE TABLE p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
           "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20))")
    before = up.table("p").partition
    add = up.ddl("ALTER TABLE p ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))")
    trunc = up.ddl("ALTER TABLE p TRUNCATE PARTITION p0")
    drop = up.ddl("ALTER TABLE p DROP PARTITION p1")
    assert (add.type, trunc.type, drop.type) == (19, 23, 20)
    after = drop.binlog.table_info.partition
    assert [d.name.O for d in after.definitions] == ["p0", "p2"]
    assert after.definitions[0].id != before.definitions[0].id
    assert after.definitions[1].id == add.binlog.table_info.partition.definitions[2].id
    assert drop.binlog.table_info.id == up.table("p").id


def test_unsupported_ddl_touches_nothing(env):
    up, col, db = env
    version = up.snapshot.version
    with pytest.raises(UnsupportedDDL):
        up.ddl("CREATE TABLE x (a INT) SELECT 1 AS a")
    with pytest.raises(UnsupportedDDL):
        up.ddl("ALTER TABLE x ADD COLUMN a INT, ADD COLUMN b INT")
    with up.session() as s:
        t = s.begin()
        assert t.query(f"SHOW TABLES FROM `{db}`") == []
        t.rollback()
    assert up.reload().version == version
    with pytest.raises(SchemaError):
        up.table("x")


def test_execute_and_replace(env):
    up, col, db = env
    up.ddl("CREATE TABLE r (id INT PRIMARY KEY, u INT, v VARCHAR(10), UNIQUE KEY uu (u))")
    settle(up, col)
    with up.session() as s, s.begin() as t:
        assert t.execute("INSERT INTO r (id, u, v) VALUES (%s, %s, %s), (%s, %s, %s)",
                         [1, 10, "a", 2, 20, "b"]) == 2
        assert t.execute("UPDATE r SET v = %s WHERE id = %s", ["c", 1]) == 1
        assert t.execute("REPLACE INTO r (id, u, v) VALUES (%s, %s, %s)", [3, 20, "z"]) == 1
        assert t.execute("REPLACE INTO r (id, u, v) VALUES (%s, %s, %s)", [3, 20, "z"]) == 1
        assert t.execute("DELETE FROM r WHERE u = %s", [10]) == 1
    up.flush()
    [m] = bl.decode_prewrite_value(_prewrites(col)[0].prewrite_value).mutations
    # insert, insert, update, replace = delete(2) + insert(3), identical replace: nothing, delete
    assert list(m.sequence) == [0, 0, 1, 4, 0, 4]


@pytest.mark.parametrize("kind", ["insert", "update_index", "delete", "mixed", "random_dml",
                                  "all_types", "no_pk", "ddl", "large"])
def test_workloads_write_paired_decodable_binlogs(env, kind):
    from tidb_binlog.upstream import workload

    up, col, db = env
    if kind in ("update_index", "delete", "mixed"):
        workload.run(up, "insert", sessions=1, ops=50, database=db)
    settle(up, col)
    stats = workload.run(up, kind, sessions=2, ops=1 if kind == "large" else 40, seed=7,
                         rows_per_txn=3000, database=db)
    assert stats.txns == (1 if kind == "large" else 40)
    binlogs = [b for b in col.binlogs() if not b.ddl_job_id]
    pre = {b.start_ts for b in binlogs if b.tp == bl.BinlogType.PREWRITE}
    com = {b.start_ts for b in binlogs if b.tp == bl.BinlogType.COMMIT}
    assert pre == com and pre
    rows = 0
    for b in binlogs:
        if b.tp != bl.BinlogType.PREWRITE:
            continue
        for m in bl.decode_prewrite_value(b.prewrite_value).mutations:
            info = next(t for t in up.snapshot.tables.values() if t.id == m.table_id)
            pk_len = len(info.common_handle_columns()) or 1
            for r in m.inserted_rows:
                decode_old_row(split_insert_row(r, pk_len)[1])
            for r in list(m.updated_rows) + list(m.deleted_rows):
                decode_value(r)
            rows += len(m.sequence)
    assert rows >= stats.rows > 0
    if kind == "large":
        assert rows == 3000


def _status_rows(up, start_ts: int) -> list[tuple]:
    with up.session() as s:
        t = s.begin()
        rows = t.query("SELECT commit_ts FROM tidb_binlog_upstream.txn_status WHERE start_ts=%s",
                       (start_ts,))
        t.rollback()
    return rows


def test_a_transaction_without_changes_leaves_no_status_row_and_no_binlog(env):
    up, col, db = env
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY, v INT)")
    settle(up, col)
    with up.session() as s, s.begin() as t:
        assert t.update("f", {"v": 1}, "id = 1") == 0  # locks nothing, changes nothing
    assert t.commit_ts == 0 and _status_rows(up, t.start_ts) == []
    up.flush()
    assert col.binlogs() == []


def test_a_stale_catalog_snapshot_is_caught_by_the_prologue(env, mariadb):
    up, col, db = env
    up.ddl("CREATE TABLE f (id INT PRIMARY KEY, v INT)")
    up.ddl("CREATE TABLE g (id INT PRIMARY KEY, v INT)")
    other = Upstream(mariadb.params(), BinlogCollector(), TimestampOracle().get_ts, database=db)
    try:
        other.ddl("ALTER TABLE g ADD COLUMN w INT")  # `up` has not seen this version
        stale = up.snapshot.version
        with up.session() as s, s.begin() as t:
            t.insert("f", [{"id": 1, "v": 1}])   # untouched by the DDL: commits
        assert up.snapshot.version == stale + 1
        assert _status_rows(up, t.start_ts) == [(t.commit_ts,)]
        other.ddl("ALTER TABLE f ADD COLUMN w INT")
        with up.session() as s, s.begin() as t:
            t.insert("f", [{"id": 2, "v": 2}])   # encoded with f's old TableInfo
            with pytest.raises(SchemaError, match="information schema is changed"):
                t.commit()
        assert _status_rows(up, t.start_ts) == []
    finally:
        other.close()
