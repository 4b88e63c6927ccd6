"""reparo's reading side: segments picked for a [start, stop] range (TiDB's filterFiles),
records in range, early stop, damage with file and offset, bad data-dirs; and the print
runner end to end on a written directory."""

from __future__ import annotations

import pytest

from tidb_binlog.binlogfile import Binlogger, WalkStats
from tidb_binlog.config.reparo import load_reparo_config
from tidb_binlog.drainer.translate.pb import ddl_record
from tidb_binlog.errors import CorruptRecord, StorageError
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.runner import run_reparo, summary_lines
from tidb_binlog.reparo.source import read_records, select_segments


def dml(ts: int, table: str = "t") -> bytes:
    b = pb.Binlog(tp=pb.DML, commit_ts=ts)
    ev = b.dml_data.events.add(schema_name="shop", table_name=table, tp=pb.Insert)
    ev.row.append(pb.column(name="id", tp=b"\x03", mysql_type="int",
                            value=b"\x03" + ts.to_bytes(8, "big")).SerializeToString())
    return b.SerializeToString()


def write_segments(d, groups: list[list[int]]) -> None:
    """One segment per group of two commit_ts (the size limit is two records)."""
    with Binlogger(d, max_file_size_bytes=2 * (16 + len(dml(10)))) as b:
        for group in groups:
            assert len(group) == 2 and all(10 <= ts < 64 for ts in group)  # same sizes
            b.write_many([dml(ts) for ts in group])
        b.sync()


@pytest.fixture
def four(tmp_path):
    d = tmp_path / "files"
    write_segments(d, [[10, 11], [20, 21], [30, 31], [40, 41]])
    return d


def suffixes(picked):
    return [s for s, _ in picked]


def test_select_segments_like_tidb(four):
    # the writer opened an empty segment 4 after the last rotation: never picked
    assert sorted(p.name for p in four.glob("binlog-*"))[4].startswith("binlog-0000000000000004-")
    assert suffixes(select_segments(four)) == [0, 1, 2, 3]
    assert suffixes(select_segments(four, 0, 0)) == [0, 1, 2, 3]
    # the last segment starting at or below start (it may hold start), then up to stop
    assert suffixes(select_segments(four, 21, 0)) == [1, 2, 3]
    assert suffixes(select_segments(four, 20, 30)) == [1, 2]
    assert suffixes(select_segments(four, 0, 25)) == [0, 1]
    assert suffixes(select_segments(four, 50, 0)) == [3]
    assert suffixes(select_segments(four, 0, 5)) == []


def test_read_records_range_inclusive(four):
    def tss(start, stop):
        return [b.commit_ts for _, b in read_records(four, start, stop)]

    assert tss(0, 0) == [10, 11, 20, 21, 30, 31, 40, 41]
    assert tss(11, 30) == [11, 20, 21, 30]
    assert tss(41, 0) == [41]
    assert tss(42, 0) == []


def test_read_stops_at_the_first_record_past_stop(four):
    stats = WalkStats()
    assert [b.commit_ts for _, b in read_records(four, 0, 20, stats=stats)] == [10, 11, 20]
    assert stats.records == 4  # 10, 11, 20 and 21, the first past stop; nothing later


def test_bad_data_dirs(tmp_path):
    with pytest.raises(StorageError, match=r"data-dir .*missing does not exist; point data-dir "
                                           r"at the directory the drainer's file sink writes"):
        select_segments(tmp_path / "missing")
    (tmp_path / "f").write_text("x")
    with pytest.raises(StorageError, match="is not a directory"):
        select_segments(tmp_path / "f")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StorageError, match=r"holds no binlog files \(binlog-<16 digits>-"):
        select_segments(tmp_path / "empty")


def damage(four) -> tuple[str, int]:
    """Flip a payload byte of the second record of segment 1; its (path, offset)."""
    path = sorted(p for p in four.iterdir() if p.name.startswith("binlog-"))[1]
    first = 16 + len(dml(20))  # magic u32 + size u64 + payload + crc u32
    data = bytearray(path.read_bytes())
    data[first + 12 + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    return str(path), first


def test_damaged_record_stops_with_file_and_offset(four):
    path, offset = damage(four)
    with pytest.raises(CorruptRecord, match=rf"{path} at offset {offset}: CRC mismatch"):
        list(read_records(four))


def test_skip_corrupt_reports_file_and_offset(four, tmp_path):
    path, offset = damage(four)
    cfg = load_reparo_config(None, {"data-dir": str(four), "skip-corrupt": True})
    lines: list[str] = []
    result = run_reparo(cfg, out=lines.append)
    assert result.records == 7 and result.corruptions == [(path, offset, "CRC mismatch")]
    assert f"reparo: skipped damaged bytes in {path} at offset {offset} (CRC mismatch)" in \
        summary_lines(result)
    assert lines.count("schema: shop; table: t; type: Insert") == 7


def test_print_runner_range_and_filter(tmp_path):
    d = tmp_path / "files"
    with Binlogger(d) as b:
        b.write_many([ddl_record(5, "shop", "CREATE TABLE t (id INT)"), dml(10), dml(11, "log"),
                      dml(12), dml(13)])
        b.sync()
    cfg = load_reparo_config(None, {"data-dir": str(d), "stop-tso": 12})
    lines: list[str] = []
    result = run_reparo(cfg, out=lines.append)
    assert lines[0] == "DDL query: use `shop`; CREATE TABLE t (id INT);"
    assert lines.count("schema: shop; table: t; type: Insert") == 2
    assert (result.records, result.applied_txns, result.ddls, result.last_ts) == (4, 4, 1, 12)
    toml = tmp_path / "reparo.toml"
    toml.write_text(f'data-dir = "{d}"\n[[replicate-ignore-table]]\ndb-name = "shop"\n'
                    'tbl-name = "log"\n')
    lines.clear()
    result = run_reparo(load_reparo_config(toml), out=lines.append)
    assert "schema: shop; table: log; type: Insert" not in lines
    assert (result.records, result.filtered, result.rows) == (5, 1, 3)


def test_a_file_with_damage_and_no_valid_record_is_not_taken_for_an_empty_one(tmp_path):
    """A segment whose only bytes are damaged used to be left out like the empty segment
    the sink opens after a rotation: the restore read 0 files and exited 0."""
    d = tmp_path / "dmg"
    d.mkdir()
    seg = d / "binlog-0000000000000000-20260101000000"
    seg.write_bytes(b"garbage that is no record")
    with pytest.raises(CorruptRecord) as info:
        select_segments(d)
    assert f"{seg} holds no valid binlog record: damage at offset 0" in str(info.value)
    assert "set skip-corrupt = true to leave it out" in str(info.value)
    assert select_segments(d, skip_corrupt=True) == []


def big(ts: int, rows: int) -> bytes:
    """A record of ``rows`` inserts over two tables (``t`` and ``log``)."""
    b = pb.Binlog(tp=pb.DML, commit_ts=ts)
    for i in range(rows):
        ev = b.dml_data.events.add(schema_name="shop", table_name=("t", "log")[i % 2],
                                   tp=pb.Insert)
        ev.row.append(pb.column(name="id", tp=b"\x03", mysql_type="int",
                                value=b"\x03" + i.to_bytes(8, "big")).SerializeToString())
    return b.SerializeToString()


def test_large_records_print_as_whole_ones(tmp_path):
    """Records of large-record-bytes or more are read in place (LargeRecord) and printed
    event by event: the same lines and counts as read whole, filters included; a
    malformed large record fails before any of its lines is printed."""
    d = tmp_path / "files"
    with Binlogger(d) as b:
        b.write_many([ddl_record(5, "shop", "CREATE TABLE t (id INT)"), big(10, 400), dml(11),
                      big(12, 2), big(13, 300), ddl_record(14, "shop", "DROP TABLE t")])
        b.sync()
    kinds = [type(r).__name__ for _, r in read_records(d, large_record_bytes=1000)]
    assert kinds == ["Binlog", "LargeRecord", "Binlog", "Binlog", "LargeRecord", "Binlog"]
    toml = tmp_path / "reparo.toml"
    toml.write_text(f'data-dir = "{d}"\nstart-tso = 10\n[[replicate-ignore-table]]\n'
                    'db-name = "shop"\ntbl-name = "log"\n')
    for over in ({}, {"stop-tso": 13}):
        runs = []
        for large in (0, 1000, 1):  # off, the big ones in place, every record in place
            lines: list[str] = []
            cfg = load_reparo_config(toml, {"large-record-bytes": large, **over})
            result = run_reparo(cfg, out=lines.append)
            runs.append((lines, result.records, result.applied_txns, result.rows,
                         result.filtered, result.ddls, result.last_ts))
        assert runs[0] == runs[1] == runs[2]
        assert runs[0][0].count("schema: shop; table: t; type: Insert") == 200 + 1 + 1 + 150
    # a large record whose 200th event is not an Event: nothing of it is printed
    bad = pb.Binlog.FromString(big(20, 400))
    bad.dml_data.events[200].row[0] = b"\xff"
    e = tmp_path / "bad"
    with Binlogger(e) as b:
        b.write_many([dml(19), bad.SerializeToString()])
        b.sync()
    errors = []
    for large in (0, 1000):
        lines = []
        with pytest.raises(Exception) as info:
            run_reparo(load_reparo_config(None, {"data-dir": str(e),
                                                 "large-record-bytes": large}),
                       out=lines.append)
        errors.append((type(info.value), str(info.value), len(lines)))
    assert errors[0] == errors[1] and errors[0][2] == 2  # only dml(19)'s lines
    assert "event 200 (`shop`.`t`) at commit_ts 20" in errors[0][1]
