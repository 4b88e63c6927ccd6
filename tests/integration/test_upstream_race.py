"""Row images are read under the row lock, whatever another session committed meanwhile.

Session A takes its InnoDB read view first (a plain read), then session B commits a
change to the row A is about to update. A snapshot read in A would not see B's row
(an IndexError / KeyError in the capture, or a stale "new" image); a locking read
(``FOR UPDATE``) sees the latest committed version, as the UPDATE itself does.
"""

from __future__ import annotations

import itertools

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.codec import decode_old_and_new_row, decode_old_row, split_insert_row
from tidb_binlog.testing.collector import BinlogCollector
from tidb_binlog.tso import TimestampOracle
from tidb_binlog.upstream import Raw, Upstream

_names = itertools.count()


@pytest.fixture
def env(mariadb):
    col = BinlogCollector()
    db = f"uprace{next(_names)}"
    up = Upstream(mariadb.params(), col, TimestampOracle().get_ts, database=db)
    up.ddl(f"CREATE DATABASE {db}")
    up.ddl("CREATE TABLE t (id INT PRIMARY KEY, k INT, c VARCHAR(20))")
    up.flush()
    col.clear()
    yield up, col
    up.flush()
    up.ddl(f"DROP DATABASE {db}")
    up.close()


def _with_read_view(up):
    """Session A with an open transaction whose snapshot predates what B does next."""
    a = up.session()
    ta = a.begin()
    ta.query("SELECT COUNT(*) FROM t")  # InnoDB takes the read view at the first plain read
    return a, ta


def _commit_in_b(up, fn) -> None:
    with up.session() as b, b.begin() as tb:
        fn(tb)


def _mutation(up, col, start_ts: int):
    up.flush()
    [pre] = [b for b in col.binlogs() if b.tp == bl.BinlogType.PREWRITE and b.start_ts == start_ts]
    [m] = bl.decode_prewrite_value(pre.prewrite_value).mutations
    return m


def _rows(up) -> list[tuple]:
    with up.session() as s:
        t = s.begin()
        rows = t.query("SELECT id, k, c FROM t ORDER BY id")
        t.rollback()
    return rows


def test_pk_update_by_expression_of_a_row_committed_after_the_read_view(env):
    up, col = env
    a, ta = _with_read_view(up)
    try:
        _commit_in_b(up, lambda tb: tb.insert("t", [{"id": 5, "k": 1, "c": "b"}]))
        assert ta.update("t", {"id": Raw("id + 100")}, "id = %s", (5,)) == 1
        ta.commit()
    finally:
        a.close()
    assert _rows(up) == [(105, 1, "b")]
    m = _mutation(up, col, ta.start_ts)
    info = up.table("t")
    # TiDB's updateRecord for a changed int handle: DeleteRow(old) + Insert(new)
    assert list(m.sequence) == [bl.MutationType.DELETE_ROW, bl.MutationType.INSERT]
    deleted = decode_old_row(m.deleted_rows[0])
    assert deleted[info.column_by_name("id").id].value == 5
    [handle], _ = split_insert_row(m.inserted_rows[0])
    assert handle.value == 105


def test_update_to_the_committed_value_reads_the_committed_row(env):
    """B already set c='x'; A sets c='x' too: MariaDB changes nothing (0 rows), and a
    snapshot re-read would miss the row B inserted after A's read view."""
    up, col = env
    a, ta = _with_read_view(up)
    try:
        _commit_in_b(up, lambda tb: tb.insert("t", [{"id": 7, "k": 1, "c": "x"}]))
        assert ta.update("t", {"c": "x"}, "id = %s", (7,)) == 0
        assert ta.commit() == 0  # nothing changed: no binlog
    finally:
        a.close()
    assert _rows(up) == [(7, 1, "x")]


def test_update_image_is_the_latest_committed_version(env):
    """B changed k after A's read view; A's UPDATE sets c to what it already is on one
    row and changes the other: the old and new images carry B's k, never the snapshot's."""
    up, col = env
    _commit_in_b(up, lambda tb: tb.insert("t", [{"id": 1, "k": 1, "c": "same"},
                                                 {"id": 2, "k": 1, "c": "old"}]))
    a, ta = _with_read_view(up)
    try:
        _commit_in_b(up, lambda tb: tb.update("t", {"k": 9}, "id IN (1, 2)"))
        assert ta.update("t", {"c": "same"}, "id IN (1, 2)") == 1
        ta.commit()
    finally:
        a.close()
    assert _rows(up) == [(1, 9, "same"), (2, 9, "same")]
    m = _mutation(up, col, ta.start_ts)
    info = up.table("t")
    k, c = info.column_by_name("k").id, info.column_by_name("c").id
    [row] = m.updated_rows
    old, new = decode_old_and_new_row(row, {col.id: col.type.to_codec() for col in info.cols})
    assert (old[k].value, old[c].value) == (9, b"old")
    assert (new[k].value, new[c].value) == (9, b"same")


def test_pk_update_of_a_row_deleted_after_the_read_view_changes_nothing(env):
    up, col = env
    _commit_in_b(up, lambda tb: tb.insert("t", [{"id": 3, "k": 1, "c": "a"}]))
    a, ta = _with_read_view(up)
    try:
        _commit_in_b(up, lambda tb: tb.delete("t", "id = %s", (3,)))
        assert ta.update("t", {"id": Raw("id + 100")}, "id = %s", (3,)) == 0
        assert ta.commit() == 0
    finally:
        a.close()
    assert _rows(up) == []
