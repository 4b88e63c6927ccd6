"""reparo at a record cut short at the end of the newest file (a torn tail), on real files:
an error naming the file, the offset and the last commit_ts restored unless a drainer is
writing the file (it holds the directory's lock) or allow-torn-tail accepts the cut;
everything before the cut is restored either way. The print runner and the CLI; the
MariaDB side is in tests/integration/test_reparo_mysql.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tidb_binlog.binlogfile import Binlogger, encode_record
from tidb_binlog.config.reparo import load_reparo_config
from tidb_binlog.errors import CorruptRecord, TornTail
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.runner import ReparoResult, run_reparo, summary_lines

ROW = "schema: shop; table: t; type: Insert"


def dml(ts: int) -> bytes:
    b = pb.Binlog(tp=pb.DML, commit_ts=ts)
    ev = b.dml_data.events.add(schema_name="shop", table_name="t", tp=pb.Insert)
    ev.row.append(pb.column(name="id", tp=b"\x03", mysql_type="int",
                            value=b"\x03" + ts.to_bytes(8, "big")).SerializeToString())
    return b.SerializeToString()


SIZE = len(encode_record(dml(10)))  # every record here has this size


def newest(d):
    return sorted(p for p in d.iterdir() if p.name.startswith("binlog-"))[-1]


def cut_files(tmp_path, n: int = 3, lose: int = 3):
    """Records 10, 11, ... (n of them) in one file whose last ``lose`` bytes are gone;
    the directory, the file and the offset where the cut record starts."""
    d = tmp_path / "files"
    with Binlogger(d) as b:
        b.write_many([dml(10 + i) for i in range(n)])
        b.sync()
    seg = newest(d)
    os.truncate(seg, seg.stat().st_size - lose)
    return d, seg, (n - 1) * SIZE


def test_a_cut_last_record_is_an_error_naming_file_offset_and_commit_ts(tmp_path):
    """The defect: the last 3 bytes gone, reparo printed the two records before it, its
    usual summary, and exited 0; the third transaction missing and nothing said so."""
    d, seg, offset = cut_files(tmp_path)
    lines: list[str] = []
    result = ReparoResult()
    with pytest.raises(TornTail) as info:
        run_reparo(load_reparo_config(None, {"data-dir": str(d)}), out=lines.append,
                   result=result)
    err = info.value
    assert (err.path, err.offset, err.commit_ts) == (str(seg), offset, 11)
    assert isinstance(err, CorruptRecord)
    msg = str(err)
    assert msg.startswith(f"{seg} ends in a record cut short at offset {offset} "
                          f"({SIZE - 3} bytes to the end of the file), after commit_ts 11 ")
    assert f"no drainer holds {d / '.lock'}, so it is no write in progress" in msg
    assert "everything up to commit_ts 11 (1970-01-01 00:00:00 UTC) is printed" in msg
    assert "pass --allow-torn-tail (reparo.toml allow-torn-tail = true)" in msg
    assert msg.endswith("otherwise restore the file from a copy and rerun with start-tso = 12")
    # everything before the cut was printed, and the counts are the caller's still
    assert lines.count(ROW) == 2
    assert (result.records, result.last_ts, result.torn_tail_state) == (2, 11, "error")
    assert summary_lines(result)[-1] == (
        f"reparo: torn tail: {seg} ends in a record cut short at offset {offset} "
        f"({SIZE - 3} bytes), after commit_ts 11 (1970-01-01 00:00:00 UTC); not restored "
        "(see the error)")


@pytest.mark.parametrize("lose", [1, SIZE - 12, SIZE - 1])  # in the CRC, the payload, the header
def test_any_cut_of_the_last_record_is_met(tmp_path, lose):
    d, seg, offset = cut_files(tmp_path, lose=lose)
    with pytest.raises(TornTail) as info:
        run_reparo(load_reparo_config(None, {"data-dir": str(d)}), out=lambda _: None)
    assert (info.value.path, info.value.offset, info.value.commit_ts) == (str(seg), offset, 11)


def test_allow_torn_tail_accepts_the_cut_and_reports_it(tmp_path):
    d, seg, offset = cut_files(tmp_path)
    lines: list[str] = []
    cfg = load_reparo_config(None, {"data-dir": str(d), "allow-torn-tail": True})
    result = run_reparo(cfg, out=lines.append)
    assert lines.count(ROW) == 2 and result.torn_tail == (str(seg), offset, SIZE - 3)
    assert result.torn_tail_state == "accepted"
    assert summary_lines(result)[-1] == (
        f"reparo: torn tail accepted (allow-torn-tail): {seg} ends in a record cut short at "
        f"offset {offset} ({SIZE - 3} bytes), after commit_ts 11 (1970-01-01 00:00:00 UTC); "
        "it is not restored")
    toml = tmp_path / "reparo.toml"  # the same from the file
    toml.write_text(f'data-dir = "{d}"\nallow-torn-tail = true\n')
    assert run_reparo(load_reparo_config(toml), out=lambda _: None).torn_tail_state == "accepted"


def test_a_record_being_written_by_a_live_writer_is_no_error(tmp_path):
    """The one legitimate cut: the writer (the file sink's Binlogger) holds the
    directory's lock while it appends. The same bytes once it is gone are an error."""
    d = tmp_path / "files"
    with Binlogger(d) as b:
        b.write_many([dml(10), dml(11)])
        b.sync()
        seg, offset = b.path, b.offset
        with open(seg, "ab") as f:  # a record half appended, as a reader sees it mid-write
            f.write(encode_record(dml(12))[:30])
        lines: list[str] = []
        result = run_reparo(load_reparo_config(None, {"data-dir": str(d)}), out=lines.append)
        assert lines.count(ROW) == 2 and result.torn_tail_state == "live"
        assert summary_lines(result)[-1] == (
            f"reparo: {seg} is being written by a live drainer (it holds the directory's "
            f".lock): read up to offset {offset}, after commit_ts 11 (1970-01-01 00:00:00 "
            "UTC); the record being written there is for a later run (start-tso = 12)")
        with open(b.path, "r+b") as f:  # the writer would have ended it; this test does
            f.truncate(offset)
    with open(seg, "ab") as f:  # the writer is gone (a crash mid-write): the same cut
        f.write(encode_record(dml(12))[:30])
    with pytest.raises(TornTail, match=f"cut short at offset {offset} "):
        run_reparo(load_reparo_config(None, {"data-dir": str(d)}), out=lambda _: None)


def test_a_newest_file_holding_only_a_cut_record_is_read(tmp_path):
    """After a rotation the newest file's first record is cut: it has no valid record,
    and with no other file holding one the restore used to read nothing and exit 0."""
    d = tmp_path / "files"
    d.mkdir()
    seg = d / "binlog-0000000000000000-20260101000000"
    seg.write_bytes(encode_record(dml(10))[:-3])
    with pytest.raises(TornTail) as info:
        run_reparo(load_reparo_config(None, {"data-dir": str(d)}), out=lambda _: None)
    assert (info.value.path, info.value.offset, info.value.commit_ts) == (str(seg), 0, 0)
    assert "before any record in range" in str(info.value)
    assert "nothing was restored" in str(info.value)
    # one full file before it: its records are restored, then the cut is met
    e = tmp_path / "rotated"
    with Binlogger(e, max_file_size_bytes=2 * SIZE) as b:
        b.write_many([dml(10), dml(11)])  # fills file 0; file 1 opened empty
        b.sync()
    with open(newest(e), "ab") as f:
        f.write(encode_record(dml(12))[:-3])
    lines: list[str] = []
    with pytest.raises(TornTail) as info:
        run_reparo(load_reparo_config(None, {"data-dir": str(e)}), out=lines.append)
    assert (info.value.path, info.value.offset, info.value.commit_ts) == (str(newest(e)), 0, 11)
    assert lines.count(ROW) == 2


def test_a_stop_before_the_cut_is_a_complete_restore(tmp_path):
    d, _, _ = cut_files(tmp_path)
    lines: list[str] = []
    result = run_reparo(load_reparo_config(None, {"data-dir": str(d), "stop-tso": 11}),
                        out=lines.append)
    assert lines.count(ROW) == 2 and result.torn_tail is None


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "reparo", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_exit_code_and_message(tmp_path):
    d, seg, offset = cut_files(tmp_path)
    proc = cli("--data-dir", str(d))
    assert proc.returncode == 1, proc
    assert proc.stdout.count(ROW) == 2
    err = proc.stderr
    assert (f"tidb-binlog reparo: TornTail: {seg} ends in a record cut short at offset "
            f"{offset} ") in err, err
    assert "after commit_ts 11 (1970-01-01 00:00:00 UTC)" in err
    assert "pass --allow-torn-tail" in err and "restore the file from a copy" in err
    # the summary still says what was restored before the error
    assert "reparo: 2 record(s) in range from 1 file(s); 2 transaction(s)" in err
    assert f"reparo: torn tail: {seg} ends in a record cut short at offset {offset}" in err
    proc = cli("--data-dir", str(d), "--allow-torn-tail")
    assert proc.returncode == 0, proc
    assert proc.stdout.count(ROW) == 2
    assert (f"reparo: torn tail accepted (allow-torn-tail): {seg} ends in a record cut short "
            f"at offset {offset}") in proc.stderr
    assert "TornTail" not in proc.stderr
