"""Parquet lake compaction: small files of a run merged, the manifest replaced atomically,
what the lake jobs read (snapshot-at's events, through the manifest) unchanged."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from spark_on_ray.lake_plan import change_txns, lake_files, row_events
from tidb_binlog.cli import parquet_compact
from tidb_binlog.cli.main import main as cli_main
from tidb_binlog.drainer.sinks.parquet import compact as compact_mod
from tidb_binlog.drainer.sinks.parquet.arrow import ColumnSpec, TableSpec
from tidb_binlog.drainer.sinks.parquet.compact import compact, plan_runs
from tidb_binlog.drainer.sinks.parquet.keeper import Changes
from tidb_binlog.drainer.sinks.parquet.manifest import read_manifest
from tidb_binlog.drainer.sinks.parquet.sink import ParquetLake
from tidb_binlog.errors import StorageError
from tidb_binlog.model.consts import TypeCode

DAY = 86_400_000 << 18
TS0 = (1_764_000_000_000 << 18)
T = TypeCode
T1 = TableSpec("db", "t", (ColumnSpec("id", T.LONGLONG), ColumnSpec("v", T.VARCHAR)))
T2 = TableSpec("db", "t", (*T1.columns, ColumnSpec("w", T.LONG)))  # after an ALTER
U = TableSpec("db", "u", (ColumnSpec("id", T.LONGLONG),))


def build_lake(directory) -> list[int]:
    """A lake of many one-transaction flushes: two tables interleaved, two dates, an
    ALTER of t in between; inserts, updates and deletes. Returns the commit_tss."""
    lake = ParquetLake(directory, flush_rows=1, clock=lambda: 0.0)
    lake.reset()
    tss = []
    ts = TS0
    for i in range(12):
        ts += 10 if i != 6 else DAY  # a new date from the 7th transaction
        rows = [(T1, "insert", None, {"id": i, "v": f"a{i}"})]
        if i >= 2:
            rows.append((T1, "update", {"id": i - 2, "v": f"a{i - 2}"},
                         {"id": i - 2, "v": f"b{i - 2}"}))
        lake.apply([(ts, Changes(rows=tuple(rows)), 1)])
        tss.append(ts)
        ts += 1
        lake.apply([(ts, Changes(rows=((U, "insert", None, {"id": i}),)), 1)])
        tss.append(ts)
    ts += 10
    lake.apply([(ts, Changes(ddl=("db", "t", "ALTER TABLE t ADD w INT")), 2)])
    for i in range(12, 16):
        ts += 10
        rows = [(T2, "insert", None, {"id": i, "v": f"a{i}", "w": i}),
                (T2, "delete", {"id": i - 12, "v": f"b{i - 12}", "w": None}, None)]
        lake.apply([(ts, Changes(rows=tuple(rows)), 2)])
        tss.append(ts)
    lake.close()
    return tss


def events_at(directory, at: int) -> dict:
    """What snapshot-at reads (spark_on_ray/lake.py's _lake_events, pure Python): the
    manifest's files of the tables that may hold a change up to ``at``, their rows."""
    manifest = read_manifest(directory)
    keys = {("db", "t"): ("id",), ("db", "u"): ("id",)}

    def txns():
        for f in lake_files(manifest.files, keys, 0, at):
            rows = pq.ParquetFile(os.path.join(directory, f["path"])).read().to_pylist()
            yield from change_txns(rows, f["database"], f["table"], 0, at)

    events = row_events(txns(), keys)
    # _seq orders the events of one table (snapshot-at keeps each key's latest by _seq);
    # numbered across tables it depends on how the tables' files interleave: rank it
    for rows in events.values():
        for rank, row in enumerate(sorted(rows, key=lambda r: r["_seq"])):
            row["_seq"] = rank
    return events


def snapshot(events: dict) -> dict:
    """snapshot-at's image: per table, each key's latest event by _seq, if a put."""
    out = {}
    for name, rows in events.items():
        latest: dict = {}
        for row in sorted(rows, key=lambda r: r["_seq"]):
            latest[row["_key"]] = row
        out[name] = {k: {c: v for c, v in r.items() if not c.startswith("_")}
                     for k, r in latest.items() if r["_op"] == "put"}
    return out


def test_compaction_merges_runs_and_the_lake_reads_the_same(tmp_path):
    lake = tmp_path / "lake"
    tss = build_lake(lake)
    before = read_manifest(lake)
    points = [tss[0], tss[5], tss[13], tss[20], tss[-1]]
    want = {at: events_at(lake, at) for at in points}
    assert len(before.files) == 28

    dry = compact(lake, dry_run=True)
    assert read_manifest(lake).files == before.files and dry.new_files == 5
    result = compact(lake, grace_s=60, clock=lambda: 1000.0)
    after = read_manifest(lake)
    # t: date 1, date 2 (v1), v2; u: date 1, date 2
    assert (result.merged_files, result.new_files, len(after.files)) == (28, 5, 5)
    assert (after.commit_ts, after.schema_version, after.schemas, after.ddls) == (
        before.commit_ts, before.schema_version, before.schemas, before.ddls)
    assert {at: events_at(lake, at) for at in points} == want
    image = snapshot(events_at(lake, tss[-1]))
    assert image == snapshot(want[tss[-1]])
    assert sorted(r["id"] for r in image[("db", "t")].values()) == list(range(4, 16))
    assert image[("db", "t")]["(5,)"] == {"id": 5, "v": "b5"}
    assert image[("db", "t")]["(15,)"] == {"id": 15, "v": "a15", "w": 15}
    assert sum(f["rows"] for f in after.files) == sum(f["rows"] for f in before.files)
    for table in ("t", "u"):  # ranges of one table never overlap, in commit order
        ranges = [(f["min_commit_ts"], f["max_commit_ts"]) for f in after.files
                  if f["table"] == table]
        assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    # the replaced files stay for readers of the old manifest, then go
    assert len(after.retired) == 28 and all((lake / r["path"]).exists() for r in after.retired)
    assert compact(lake, grace_s=60, clock=lambda: 1030.0).kept_retired == 28
    again = compact(lake, grace_s=60, clock=lambda: 1061.0)
    assert (again.deleted_retired, again.new_files) == (28, 0)
    assert read_manifest(lake).retired == [] and not any(
        (lake / f["path"]).exists() for f in before.files)
    assert {at: events_at(lake, at) for at in points} == want


def test_the_sink_keeps_retired_files_and_writes_on_after_compaction(tmp_path):
    lake = tmp_path / "lake"
    tss = build_lake(lake)
    compact(lake, grace_s=60, clock=lambda: 1000.0)
    sink = ParquetLake(lake, flush_rows=1, clock=lambda: 0.0)
    assert sink.reset().commit_ts == tss[-1]
    assert sink.status()["removed_files"] == 0  # retired files are not leftovers
    sink.apply([(tss[-1] + 5, Changes(rows=((U, "insert", None, {"id": 99}),)), 2)])
    sink.close()
    m = read_manifest(lake)
    assert len(m.retired) == 28 and m.files[-1]["max_commit_ts"] == tss[-1] + 5


def test_plan_runs_keeps_large_files_and_splits_at_the_target():
    f = [{"database": "d", "table": "t", "date": "x", "schema_version": 1, "bytes": b}
         for b in (10, 10, 100, 10, 10, 10, 10)]
    assert plan_runs(f, target_bytes=30) == [[0, 1], [3, 4, 5]]  # 100: large; 6 alone
    assert plan_runs(f, target_bytes=5) == []


def test_a_running_sink_holds_the_lake_and_compaction_refuses(tmp_path):
    lake = tmp_path / "lake"
    build_lake(lake)
    # the sink's lock from another process (a POSIX lock is per process)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from tidb_binlog.drainer.sinks.parquet.compact import LakeLock\n"
         f"LakeLock({str(lake)!r}, \"a drainer's Parquet sink\").acquire()\n"
         "print('held', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StorageError, match="in use by a drainer's Parquet sink"):
            compact(lake)
        assert cli_main(["parquet-compact", "--dir", str(lake)]) == 1
        with pytest.raises(StorageError, match="in use by"):  # nor a second sink
            ParquetLake(lake).reset()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert cli_main(["parquet-compact", "--dir", str(lake), "--grace-s", "0"]) == 0
    assert len(read_manifest(lake).files) == 5


def test_cli_refuses_a_directory_without_a_manifest_and_keeps_defaults_in_step(tmp_path,
                                                                               capsys):
    assert cli_main(["parquet-compact", "--dir", str(tmp_path)]) == 1
    assert "no _manifest.json" in capsys.readouterr().err
    assert parquet_compact.TARGET_BYTES == compact_mod.TARGET_BYTES
    assert parquet_compact.GRACE_S == compact_mod.GRACE_S
