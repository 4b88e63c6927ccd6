"""Large transactions in the Parquet sink: the keeper hands them out in chunks, the lake
appends the chunks to temp files and lists them only with the last one, so a crash
mid-transaction leaves nothing in the manifest and the replay writes every row once."""

from __future__ import annotations

import pyarrow.parquet as pq

from tidb_binlog import binlog as bl
from tidb_binlog.codec import Datum, encode_old_row, encode_value
from tidb_binlog.codec import mysql as m
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.parquet.arrow import ColumnSpec, TableSpec
from tidb_binlog.drainer.sinks.parquet.keeper import Changes, ParquetKeeper
from tidb_binlog.drainer.sinks.parquet.manifest import committed_files, read_manifest
from tidb_binlog.drainer.sinks.parquet.sink import ParquetLake
from tidb_binlog.model import (
    ActionType,
    CIStr,
    ColumnInfo,
    DBInfo,
    FieldType,
    HistoryInfo,
    Job,
    JobState,
    SchemaState,
    TableInfo,
)
from tidb_binlog.model.consts import TypeCode
from tidb_binlog.packed import pack

TS0 = (1_764_000_000_000 << 18)
SPEC = TableSpec("db", "t", (ColumnSpec("id", TypeCode.LONGLONG),))


def row(ts: int, i: int) -> tuple:
    return SPEC, "insert", None, {"id": i}


def whole(ts: int, *ids: int) -> tuple:
    return ts, Changes(rows=tuple(row(ts, i) for i in ids)), 1


def chunk(ts: int, *ids: int, more: bool = True) -> tuple:
    return ts, Changes(rows=tuple(row(ts, i) for i in ids), more=more), 1


def ids_of(directory) -> list[int]:
    return [r["after"]["id"] for p in committed_files(directory)
            for r in pq.read_table(p).to_pylist()]


def temp_files(directory) -> list:
    return sorted(p.name for p in directory.rglob("*.tmp"))


def test_chunks_spill_to_temp_files_and_are_listed_only_with_the_last(tmp_path):
    now = [0.0]
    lk = ParquetLake(tmp_path / "lake", flush_rows=3, flush_interval_s=1.0,
                     clock=lambda: now[0])
    lk.reset()
    lk.apply([whole(TS0 + 1, 1)])
    lk.apply([chunk(TS0 + 2, 10, 11)])           # the first chunk flushes what came before
    m1 = read_manifest(lk.directory)
    assert m1.commit_ts == TS0 + 1 and ids_of(lk.directory) == [1]
    lk.apply([chunk(TS0 + 2, 12, 13), chunk(TS0 + 2, 14, 15)])   # over flush_rows: spilled
    assert temp_files(lk.directory) and lk.status()["spilled_rows"] >= 3
    now[0] = 5.0
    lk.idle()                                    # no time-based flush with the txn open
    assert read_manifest(lk.directory).commit_ts == TS0 + 1
    lk.apply([chunk(TS0 + 2, 16, more=False), whole(TS0 + 3, 20)])
    lk.close()
    m2 = read_manifest(lk.directory)
    assert m2.commit_ts == TS0 + 3 and ids_of(lk.directory) == [1, 10, 11, 12, 13, 14, 15,
                                                                16, 20]
    big = m2.files[-2]  # its last chunk made 3 rows pending: flushed at once
    assert (big["min_commit_ts"], big["max_commit_ts"], big["rows"]) == (TS0 + 2, TS0 + 2, 7)
    assert pq.ParquetFile(lk.directory / big["path"]).metadata.num_row_groups >= 2
    assert temp_files(lk.directory) == []


def test_a_crash_mid_transaction_lists_nothing_of_it_and_the_replay_writes_it_once(tmp_path):
    items = [whole(TS0 + 1, 1), chunk(TS0 + 2, 10, 11, 12), chunk(TS0 + 2, 13, 14, 15),
             chunk(TS0 + 2, 16, more=False), whole(TS0 + 3, 20)]
    lk = ParquetLake(tmp_path / "lake", flush_rows=2, clock=lambda: 0.0)
    lk.reset()
    lk.apply(items[:3])                          # killed here: spilled, not listed
    assert temp_files(lk.directory)
    assert read_manifest(lk.directory).commit_ts == TS0 + 1
    again = ParquetLake(tmp_path / "lake", flush_rows=2, clock=lambda: 0.0)
    assert again.reset().commit_ts == TS0 + 1
    assert temp_files(lk.directory) == [] and again.status()["removed_files"] >= 1
    again.apply(items)                           # the replay: 1 skipped
    again.close()
    assert ids_of(lk.directory) == [1, 10, 11, 12, 13, 14, 15, 16, 20]


def test_close_with_a_transaction_open_commits_what_came_before_it(tmp_path):
    lk = ParquetLake(tmp_path / "lake", flush_rows=2, clock=lambda: 0.0)
    lk.reset()
    lk.apply([whole(TS0 + 1, 1), chunk(TS0 + 2, 10, 11, 12)])
    assert lk.close().commit_ts == TS0 + 1
    assert ids_of(lk.directory) == [1] and temp_files(lk.directory) == []


# -- the keeper ---------------------------------------------------------------------------

def _col(cid, name, tp, flag=0, flen=-1, charset="utf8mb4", offset=0):
    return ColumnInfo(id=cid, name=CIStr(name), offset=offset,
                      type=FieldType(tp=tp, flag=flag, flen=flen, decimal=0, charset=charset,
                                     collate="utf8mb4_bin"))


class _Meta:
    def __init__(self):
        users = TableInfo(id=10, name=CIStr("users"), pk_is_handle=True, max_col_id=2, cols=[
            _col(1, "id", m.TYPE_LONGLONG, m.PRI_KEY_FLAG | m.NOT_NULL_FLAG, 20, "binary"),
            _col(2, "name", m.TYPE_VARCHAR, 0, 64, offset=1)])
        self.jobs = [
            Job(id=1, type=ActionType.CREATE_SCHEMA, schema_id=2, table_id=0,
                state=JobState.SYNCED, schema_state=SchemaState.PUBLIC, query="",
                binlog=HistoryInfo(schema_version=1, db_info=DBInfo(id=2,
                                                                    db_name=CIStr("shop")))),
            Job(id=2, type=ActionType.CREATE_TABLE, schema_id=2, table_id=10,
                state=JobState.SYNCED, schema_state=SchemaState.PUBLIC, query="",
                binlog=HistoryInfo(schema_version=2, table_info=users))]

    def history_jobs(self, up_to_schema_version=None):
        return list(self.jobs)

    def job(self, job_id):
        return next((j for j in self.jobs if j.id == job_id), None)


def _inserts(commit_ts: int, lo: int, hi: int) -> tuple[int, bytes]:
    rows = [encode_value([Datum.int64(i)]) + encode_old_row([2], [Datum.string(f"u{i}")])
            for i in range(lo, hi)]
    b = bl.commit(commit_ts - 1, commit_ts)
    b.prewrite_value = bl.encode(bl.new_prewrite_value(2, [bl.new_table_mutation(
        10, inserted_rows=rows, sequence=[bl.MutationType.INSERT] * len(rows))]))
    return commit_ts, bl.encode(b)


def _keeper(chunk_rows: int) -> ParquetKeeper:
    keeper = ParquetKeeper(TaskSettings(cluster_id=1, txn_chunk_rows=chunk_rows), _Meta(), 2)
    keeper.reset(2)
    return keeper


def test_keeper_hands_a_large_transaction_out_in_chunks_and_the_lake_gets_it_whole(tmp_path):
    keeper = _keeper(chunk_rows=4)
    items = [_inserts(50, 100, 101), _inserts(60, 0, 10), _inserts(70, 200, 201)]
    calls = [keeper.translate_more(pack(items))]
    while calls[-1][1]:
        calls.append(keeper.translate_more(pack([])))
    out = [item for batch, _ in calls for item in batch]
    assert len(calls) == 3  # small + chunk 1; chunk 2; the last chunk + the item after it
    assert [(ts, len(c.rows), c.more) for ts, c, _ in out] == [
        (50, 1, False), (60, 4, True), (60, 4, True), (60, 2, False), (70, 1, False)]
    whole_out = _keeper(chunk_rows=0).translate(pack(items))
    assert [r[3] for _, c, _ in out for r in c.rows] == [
        r[3] for _, c, _ in whole_out for r in c.rows]
    lk = ParquetLake(tmp_path / "lake", flush_rows=3, clock=lambda: 0.0)
    lk.reset()
    for batch, _ in calls:
        lk.apply(batch)
    lk.close()
    assert ids_of(lk.directory) == [100, *range(10), 200]


def test_keeper_reset_drops_a_half_handed_out_transaction():
    keeper = _keeper(chunk_rows=3)
    out, more = keeper.translate_more(pack([_inserts(60, 0, 10)]))
    assert more and out[-1][1].more
    keeper.reset(2)
    assert keeper.translate_more(pack([])) == ([], False)
    assert _keeper(chunk_rows=0).translate_more(pack([_inserts(60, 0, 10)]))[1] is False
