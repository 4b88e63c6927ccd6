"""The pure planning of the Spark restore: stretches at DDLs, key-hash partitions that keep
every row of one upstream row (old and new keys, unique-key swaps) in one partition in
commit order, and transactions rebuilt per partition."""

from __future__ import annotations

from spark_on_ray.restore_plan import group_txns, partition_rows, split_stretches
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn

T = TableSchema.build("db", "t", ("id", "u", "v"), ("id",), {"uk": ("u",)})
NOKEY = TableSchema.build("db", "n", ("a", "b"))


def ins(id_, u, v=0, schema=T):
    return DML(schema.database, schema.table, DMLType.INSERT, {"id": id_, "u": u, "v": v},
               None, schema)


def upd(old, new, schema=T):
    return DML(schema.database, schema.table, DMLType.UPDATE, new, old, schema)


def part_of(parts, dml):
    return [i for i, p in enumerate(parts) for _, d in p if d is dml]


def test_split_stretches_cuts_at_each_ddl():
    a, b = ins(1, 1), ins(2, 2)
    ddl = DDL("db", "t", "ALTER TABLE t ADD c INT", 3)
    out = split_stretches([Txn(1, (a,)), Txn(2, (b,)), Txn(3, ddl=ddl),
                           Txn(4, ddl=DDL("db", "", "CREATE DATABASE x", 4)), Txn(5, (a,))])
    assert [len(s.rows) for s in out] == [2, 0, 1]
    assert out[0].ddl is ddl and out[0].last_ts == 3 and out[2].ddl is None
    assert out[2].first_ts == out[2].last_ts == 5
    assert split_stretches([]) == [split_stretches([])[0]] and not split_stretches([])[0].rows


def test_key_change_and_unique_swap_stay_in_one_partition():
    rows = []
    for i in range(200):
        rows.append((i, ins(i, 1000 + i)))
    # a primary-key move 5 -> 500, then a unique-key swap between rows 7 and 9
    move = upd({"id": 5, "u": 1005, "v": 0}, {"id": 500, "u": 1005, "v": 1})
    s1 = upd({"id": 7, "u": 1007, "v": 0}, {"id": 7, "u": -1, "v": 0})
    s2 = upd({"id": 9, "u": 1009, "v": 0}, {"id": 9, "u": 1007, "v": 0})
    s3 = upd({"id": 7, "u": -1, "v": 0}, {"id": 7, "u": 1009, "v": 0})
    rows += [(300, move), (301, s1), (301, s2), (301, s3), (302, ins(5, 5))]
    parts = partition_rows(rows, 8)
    assert sum(len(p) for p in parts) == len(rows)
    assert sum(1 for p in parts if p) > 4  # spread, not one partition
    (p_move,) = part_of(parts, move)
    assert part_of(parts, rows[5][1]) == [p_move] and part_of(parts, rows[-1][1]) == [p_move]
    (p_swap,) = part_of(parts, s1)
    assert part_of(parts, s2) == part_of(parts, s3) == [p_swap]
    assert part_of(parts, rows[7][1]) == part_of(parts, rows[9][1]) == [p_swap]
    for p in parts:  # commit order kept inside each partition
        assert [ts for ts, _ in p] == sorted(ts for ts, _ in p)
    # deterministic: the same input gives the same partitions
    assert [[d for _, d in p] for p in partition_rows(rows, 8)] == [[d for _, d in p]
                                                                     for p in parts]


def test_keyless_rows_keyed_by_whole_image():
    a = DML("db", "n", DMLType.INSERT, {"a": 1, "b": 1}, None, NOKEY)
    dup = DML("db", "n", DMLType.INSERT, {"a": 1, "b": 1}, None, NOKEY)
    change = DML("db", "n", DMLType.UPDATE, {"a": 2, "b": 2}, {"a": 1, "b": 1}, NOKEY)
    gone = DML("db", "n", DMLType.DELETE, {"a": 2, "b": 2}, None, NOKEY)
    parts = partition_rows([(1, a), (2, dup), (3, change), (4, gone)], 16)
    assert len({p for d in (a, dup, change, gone) for p in part_of(parts, d)}) == 1


def test_group_txns_rebuilds_transactions_in_order():
    a, b, c = ins(1, 1), ins(2, 2), ins(3, 3)
    txns = group_txns([(1, a), (1, b), (2, c), (3, a)])
    assert [(t.commit_ts, t.dmls) for t in txns] == [(1, (a, b)), (2, (c,)), (3, (a,))]
    assert group_txns([]) == []
