"""Storage under damage: a cut tail, flipped bytes in a sealed file, orphan commits.

Each test damages the files of a closed storage the way an operator (or a disk) would,
reopens it and checks what a reader gets: never a binlog served twice or under another
ts, never a silent gap behind a damaged acknowledged binlog, never a log line per pull.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import DamagedBinlog
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.vlog_record import (
    FILE_END_MAGIC,
    HEADER_SIZE,
    ScanResult,
    scan_segment,
)

FAST = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                      resolve_interval_s=3600)


def _open(path, options=FAST, metrics=None):
    return Storage(path, options, metrics=metrics or StorageMetrics())


def _pair(s, start_ts, commit_ts):
    s.write_binlog(bl.prewrite(start_ts, b"v%d" % start_ts, prewrite_key=b"k%d" % start_ts))
    s.write_binlog(bl.commit(start_ts, commit_ts))


def _served(s, since=0):
    return [(ts, bl.decode(p)) for ts, p in s.pull_commit_binlogs(since, 1 << 30, 1 << 30)]


def _records(path) -> list[tuple[int, int, bl.Binlog]]:
    raw = path.read_bytes()
    end = len(raw) - (12 if int.from_bytes(raw[-4:], "little") == FILE_END_MAGIC else 0)
    return [(off, size, bl.decode(p)) for off, size, p in scan_segment(raw, 0, end, ScanResult())]


def _flip(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_cut_tail_marks_stale_index_entries_lost_so_new_commits_are_served_once(tmp_path,
                                                                               caplog):
    """The issue's case: the last file's tail is cut while the pump is stopped. Before
    the fix the index still named the cut records' offsets, new writes landed there,
    and a pull served a new commit twice (first under a stale ts). Now those entries are
    marked lost: a pull stops there with DamagedBinlog (the cut binlogs were
    acknowledged), and once the operator gives them up every new commit is served once,
    under its own ts."""
    s = _open(tmp_path)
    for i in range(10):
        _pair(s, 100 + 10 * i, 105 + 10 * i)
    s.close()  # indexed; the active file is < 50 KiB, so it stays unsealed
    last = tmp_path / "value" / "000001.vlog"
    off, size, victim = _records(last)[-3]  # C185; P190 and C195 follow it
    assert (victim.start_ts, victim.commit_ts) == (180, 185)
    with open(last, "r+b") as f:
        f.truncate(off + HEADER_SIZE + (size - HEADER_SIZE) // 2)
    metrics = StorageMetrics()
    with caplog.at_level(logging.ERROR, logger="tidb_binlog.pump.storage"):
        s = _open(tmp_path, metrics=metrics)
    assert (f"storage {tmp_path}: 3 index entries pointed at value-log bytes that were cut on "
            "recovery (ts 185, 190, 195); marked lost: a pull stops there with DamagedBinlog "
            "(a lost Commit whose Prewrite survived is written again through the resolver)"
            ) in caplog.messages
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "cut_on_recovery"}) == 3
    for i in range(3):
        _pair(s, 1000 + 10 * i, 1005 + 10 * i)
    assert s.flush()
    assert [ts for ts, _ in _served(s)] == [105 + 10 * i for i in range(8)]
    with pytest.raises(DamagedBinlog) as ei:
        _served(s, 175)
    assert (str(ei.value), ei.value.ts, ei.value.offset) == (
        "pump storage cannot serve the binlog at ts 185 (its record was cut from the value log "
        "when the pump recovered from a damaged tail); pulls stop before it so no reader skips "
        "an acknowledged binlog: restore this pump's data dir from a copy, or let the drainers "
        "skip it with [storage] skip-damaged-ts = [185] in pump.toml (its transaction is then "
        "missing downstream)", 185, None)
    assert s.get_binlog(190) is None
    s.close()
    s = _open(tmp_path, replace(FAST, skip_damaged_ts=frozenset({185, 190, 195})))
    got = _served(s)
    assert [ts for ts, _ in got] == [105 + 10 * i for i in range(8)] + [1005, 1015, 1025]
    assert all(b.commit_ts == ts and b.prewrite_value == b"v%d" % b.start_ts for ts, b in got)
    s.close()
    # reopened with no new cut: the markers stay, nothing is counted again
    metrics = StorageMetrics()
    s = _open(tmp_path, metrics=metrics)
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "cut_on_recovery"}) == 0
    with pytest.raises(DamagedBinlog):
        _served(s, 175)
    s.close()


def test_lost_commit_is_written_again_by_the_resolver(tmp_path):
    """A cut tail that took a Commit but not its Prewrite: the Prewrite waits again, the
    resolver writes the Commit, and its new record replaces the lost marker."""
    from tidb_binlog.node import TxnStatus

    class Committed:
        def txn_status(self, start_ts, key):
            return TxnStatus(TxnStatus.COMMITTED, start_ts + 5)

    s = _open(tmp_path)
    for i in range(3):
        _pair(s, 100 + 10 * i, 105 + 10 * i)
    assert s.flush()
    s.index.write([], {b"!binlog!handlePointer": s.index.lookup(120).encode()})  # P120 re-fed
    s.close(drain_index=False)
    last = tmp_path / "value" / "000001.vlog"
    off, size, victim = _records(last)[-1]
    assert victim.commit_ts == 125
    with open(last, "r+b") as f:
        f.truncate(off + size - 1)
    s = Storage(tmp_path, replace(FAST, max_txn_timeout_s=0), metrics=StorageMetrics(),
                resolver=Committed())
    assert s.resolve_pending() == 1 and s.flush()
    assert [ts for ts, _ in _served(s)] == [105, 115, 125]
    s.close()


def test_stale_index_entry_is_an_error_not_another_binlog(tmp_path):
    """The reader's own check: a record that is not the binlog its index key names
    (here: key 185 pointing at C195's record) stops the pull with DamagedBinlog."""
    s = _open(tmp_path)
    for i in range(10):
        _pair(s, 100 + 10 * i, 105 + 10 * i)
    assert s.flush()
    s.index.write([(b"ts:" + (185).to_bytes(8, "big"), s.index.lookup(195).encode())], {})
    assert [ts for ts, _ in _served(s)] == [105, 115, 125, 135, 145, 155, 165, 175]
    with pytest.raises(DamagedBinlog) as ei:
        _served(s, 175)
    assert ei.value.ts == 185
    assert str(ei.value).startswith(
        "pump storage cannot serve the binlog at ts 185 (the record there is a binlog of type 1 "
        "with start_ts 190, commit_ts 195, not the one the index names); pulls stop before it")
    s.close()


def _reader_errors(caplog) -> list[str]:
    """What the reader logged at ERROR (the storage's own INFO lines, e.g. a rotation, are
    captured too when an earlier test in this process left the root logger at INFO)."""
    return [r.getMessage() for r in caplog.records
            if r.name == "tidb_binlog.pump.storage.reader" and r.levelno >= logging.ERROR]


@pytest.mark.parametrize("victim_tp", ["commit", "prewrite"])
def test_flipped_byte_in_sealed_file_stops_the_pull_with_an_error(tmp_path, caplog, victim_tp):
    """The issue's case: a byte flipped in an older, sealed file. Before the fix the
    transaction was silently left out of the stream. Now everything before it is
    served, then the pull raises DamagedBinlog naming the ts, and never passes it."""
    opts = replace(FAST, value_log_file_size_bytes=200)  # a few records per file
    s = _open(tmp_path, opts)
    for i in range(10):
        _pair(s, 100 + 10 * i, 105 + 10 * i)
    s.write_binlog(bl.fake(300))
    s.close()
    first = tmp_path / "value" / "000002.vlog"  # an older file: records before it too
    assert int.from_bytes(first.read_bytes()[-4:], "little") == FILE_END_MAGIC  # sealed
    recs = _records(first)
    off, size, victim = next(r for r in recs if (r[2].tp == bl.BinlogType.COMMIT)
                             == (victim_tp == "commit"))
    _flip(first, off + size - 1)
    key = victim.commit_ts if victim_tp == "commit" else victim.start_ts
    metrics = StorageMetrics()
    s = _open(tmp_path, opts, metrics=metrics)
    before = [ts for ts, _ in _served(s)]
    commits = [105 + 10 * i for i in range(10)]
    assert before and before == [c for c in commits if c < key]
    with caplog.at_level(logging.ERROR, logger="tidb_binlog.pump.storage.reader"), \
            pytest.raises(DamagedBinlog) as ei:
        s.pull_commit_binlogs(before[-1])
    msg = (f"pump storage cannot serve the binlog at ts {key} (value log {first}: checksum "
           f"mismatch at offset {off}); pulls stop before it so no reader skips an "
           "acknowledged binlog: restore this pump's data dir from a copy, or let the drainers "
           f"skip it with [storage] skip-damaged-ts = [{key}] in pump.toml (its transaction is "
           "then missing downstream)")
    assert (str(ei.value), ei.value.ts, ei.value.path, ei.value.offset) == (
        msg, key, str(first), off)
    with caplog.at_level(logging.ERROR, logger="tidb_binlog.pump.storage.reader"), \
            pytest.raises(DamagedBinlog):  # again: the gap is never passed (logged once)
        s.pull_commit_binlogs(before[-1])
    assert _reader_errors(caplog) == [msg]
    assert metrics.value("binlog_pump_storage_error_count_total", {"type": "read_value"}) == 2
    s.close()

    # the operator gives that one transaction up: everything else is served
    s = _open(tmp_path, replace(opts, skip_damaged_ts=frozenset({key})))
    assert [ts for ts, _ in _served(s)] == [c for c in commits if c != victim.start_ts + 5] + [300]
    s.close()


def test_orphan_commit_logged_once_and_pulls_move_past_it(tmp_path, caplog):
    """The issue's case: a Commit whose Prewrite is not on this pump. Before the fix
    every pull logged it again and a reader re-read it in a tight loop; now it is
    logged once and the pull's position moves past it."""
    metrics = StorageMetrics()
    s = _open(tmp_path, metrics=metrics)
    _pair(s, 10, 11)
    s.write_binlog(bl.commit(5, 20))   # orphan
    assert s.flush() and s.max_commit_ts == 20
    with caplog.at_level(logging.ERROR, logger="tidb_binlog.pump.storage.reader"):
        for _ in range(50):
            assert s.pull_commits(11) == ([], 20)
        assert [ts for ts, _ in s.pull_commits(0)[0]] == [11]
    assert _reader_errors(caplog) == [
        "commit binlog at commit_ts 20: its prewrite (start_ts 5) is not on this pump (never "
        "written here, or purged by GC); skipped"]
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "feed_pre_write_value"}) == 1
    s.close()


def test_ordinary_torn_tail_is_cut_without_marking_anything(tmp_path, caplog):
    """A crash mid-write leaves a torn, never-indexed tail: it is truncated as before,
    nothing is marked lost (and the index is not scanned for it)."""
    s = _open(tmp_path)
    for i in range(5):
        _pair(s, 100 + 10 * i, 105 + 10 * i)
    s.close()
    last = tmp_path / "value" / "000001.vlog"
    with open(last, "ab") as f:
        f.write(bytes.fromhex("e8563a82") + b"\x40" + b"\x00" * 20)  # a header, no payload
    metrics = StorageMetrics()
    with caplog.at_level(logging.WARNING):
        s = _open(tmp_path, metrics=metrics)
    assert any("truncating torn tail" in m for m in caplog.messages)
    assert not any("marked lost" in m for m in caplog.messages)
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "cut_on_recovery"}) == 0
    assert [ts for ts, _ in _served(s)] == [105, 115, 125, 135, 145]
    s.close()
