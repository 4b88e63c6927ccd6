"""tidb_binlog.binlogfile: framing bytes, names, the writer (lock, torn tail, rotation,
sync, truncate, GC) and the reader (corruption skipped and counted)."""

from __future__ import annotations

import datetime
import fcntl
import os
import struct
import threading

import google_crc32c
import pytest

from tidb_binlog.binlogfile import (
    Binlogger,
    Pos,
    RecordSource,
    WalkStats,
    binlog_name,
    binlog_names,
    encode_record,
    framing,
    parse_binlog_name,
    walk,
    writer_holds_lock,
)
from tidb_binlog.binlogfile import binlogger as binlogger_module
from tidb_binlog.binlogfile.files import BadBinlogName, is_contiguous
from tidb_binlog.errors import CorruptRecord, StorageError


# -- framing -----------------------------------------------------------------------------
def test_record_bytes_are_tidbs():
    # magic 471532804 LE, size u64 LE, payload, crc32c (Castagnoli) u32 LE, trailing.
    rec = encode_record(b"abc")
    assert rec[:4] == bytes.fromhex("04051b1c")
    assert rec[4:12] == (3).to_bytes(8, "little")
    assert rec[12:15] == b"abc"
    # CRC-32C("abc") = 0x364b3fb7 (RFC 3720 test vectors' algorithm)
    assert rec[15:] == struct.pack("<I", 0x364B3FB7)
    assert google_crc32c.value(b"abc") == 0x364B3FB7
    assert len(encode_record(b"")) == 16


# -- names -------------------------------------------------------------------------------
def test_binlog_name_and_parse():
    when = datetime.datetime(2024, 1, 2, 3, 4, 5)
    name = binlog_name(7, when)
    assert name == "binlog-0000000000000007-20240102030405"
    assert parse_binlog_name(name) == (7, 0)
    assert parse_binlog_name("binlog-0000000000000007") == (7, 0)  # legacy, no date
    assert parse_binlog_name(
        "binlog-0000000000000007-20181010101010-407623959013752832.tar.gz") == (
        7, 407623959013752832)
    for bad in ("binlog", "binlog-", "binlog-x-1", "relay-0000000000000001", "binlog-1-2-x.tar.gz",
                "binlog-1-2-3-4"):
        with pytest.raises(BadBinlogName):
            parse_binlog_name(bad)


def test_binlog_names_order_and_filter(tmp_path):
    for name in ("binlog-0000000000000010-20240101000000", "binlog-0000000000000009",
                 ".lock", "savepoint", "savepoint.x.tmp", "notes.txt", "checkpoint"):
        (tmp_path / name).write_bytes(b"")
    assert binlog_names(tmp_path) == ["binlog-0000000000000009",
                                      "binlog-0000000000000010-20240101000000"]
    assert is_contiguous(binlog_names(tmp_path))
    assert not is_contiguous(["binlog-0000000000000001", "binlog-0000000000000003"])
    assert binlog_names(tmp_path / "missing") == []


# -- writer and reader -------------------------------------------------------------------
def _payloads(n, size=10):
    return [f"{i:0{size}d}".encode() for i in range(n)]


def test_write_then_walk_positions(tmp_path):
    with Binlogger(tmp_path) as b:
        positions = b.write_many(_payloads(3))
        assert positions == [Pos(0, 26), Pos(0, 52), Pos(0, 78)]
        assert b.write_tail(b"") == Pos(0, 78)  # nothing written
        got = list(b.walk())
    assert got == list(zip(positions, _payloads(3), strict=True))
    # resuming after a returned position continues with the next record
    assert [p for _, p in walk(tmp_path, Pos(0, 26))] == _payloads(3)[1:]
    assert list(walk(tmp_path, Pos(0, 78))) == []


def test_reopen_appends_to_newest(tmp_path):
    with Binlogger(tmp_path) as b:
        b.write_many(_payloads(2))
    with Binlogger(tmp_path) as b:
        assert b.position == Pos(0, 52)
        b.write_tail(b"x")
    assert [p for _, p in walk(tmp_path)] == [*_payloads(2), b"x"]


def test_directory_lock_refuses_second_writer(tmp_path):
    with Binlogger(tmp_path):
        with pytest.raises(StorageError, match="in use by another writer"):
            Binlogger(tmp_path)
    Binlogger(tmp_path).close()  # released on close


def test_writer_holds_lock_tells_a_live_writer(tmp_path):
    """What reparo asks before it calls a cut record at the end a write in progress:
    True exactly while a Binlogger has the directory open (its flock on .lock, another
    open file description here, as a drainer in another process)."""
    assert not writer_holds_lock(tmp_path)  # no .lock: never had a writer (a copy)
    with Binlogger(tmp_path):
        assert writer_holds_lock(tmp_path)
        assert writer_holds_lock(tmp_path)  # the probe left nothing behind
    assert (tmp_path / ".lock").exists() and not writer_holds_lock(tmp_path)
    Binlogger(tmp_path).close()  # nor does it keep a writer out


def test_a_probe_in_progress_does_not_make_a_writer_fail(tmp_path, monkeypatch):
    """The probe holds a shared flock for an instant; a writer opening then waits for it
    (LOCK_WAIT_S) instead of reporting the directory in use."""
    Binlogger(tmp_path).close()
    fd = os.open(tmp_path / ".lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a probe, caught in the middle
        monkeypatch.setattr(binlogger_module, "LOCK_WAIT_S", 0.0)
        with pytest.raises(StorageError, match="in use by another writer"):
            Binlogger(tmp_path)
        monkeypatch.setattr(binlogger_module, "LOCK_WAIT_S", 60.0)
        opened: list = []
        writer = threading.Thread(target=lambda: opened.append(Binlogger(tmp_path)))
        writer.start()
        fcntl.flock(fd, fcntl.LOCK_UN)  # the probe ends
        writer.join(60)
    finally:
        os.close(fd)
    assert len(opened) == 1 and writer_holds_lock(tmp_path)
    opened[0].close()


def test_rotation_and_walk_across_segments(tmp_path):
    with Binlogger(tmp_path, max_file_size_bytes=60) as b:
        positions = b.write_many(_payloads(7))
    # 26 bytes a record: a segment is full after the 3rd (78 >= 60)
    assert [p.suffix for p in positions] == [0, 0, 0, 1, 1, 1, 2]
    assert len(binlog_names(tmp_path)) == 3
    got = list(walk(tmp_path))
    assert [p for _, p in got] == _payloads(7)
    assert [pos for pos, _ in got] == positions
    assert [p for _, p in walk(tmp_path, Pos(1, 0))] == _payloads(7)[3:]
    with pytest.raises(StorageError, match="suffix 5 is not in"):
        list(walk(tmp_path, Pos(5, 0)))


def test_torn_tail_is_truncated_on_open_and_eof_for_readers(tmp_path):
    with Binlogger(tmp_path) as b:
        b.write_many(_payloads(2))
        path = b.path
    whole = encode_record(b"third record")
    with open(path, "ab") as f:
        f.write(whole[:20])  # crash mid-write
    stats = WalkStats()
    assert [p for _, p in walk(tmp_path, stats=stats)] == _payloads(2)
    assert stats.torn_tail and stats.corrupt == 0
    assert stats.torn_at == (str(path), 52, 20)  # where the cut record starts, its bytes
    with Binlogger(tmp_path) as b:
        assert b.truncated_bytes == 20
        assert b.position == Pos(0, 52)
        b.write_tail(b"after")
    assert [p for _, p in walk(tmp_path)] == [*_payloads(2), b"after"]


@pytest.mark.parametrize("cut", [1, 3, 11])
def test_torn_header_is_truncated(tmp_path, cut):
    with Binlogger(tmp_path) as b:
        b.write_many(_payloads(1))
        path = b.path
    with open(path, "ab") as f:
        f.write(encode_record(b"x")[:cut])
    with Binlogger(tmp_path) as b:
        assert b.position == Pos(0, 26)


def test_zero_filled_tail_is_truncated(tmp_path):
    with Binlogger(tmp_path) as b:
        b.write_many(_payloads(2))
        path = b.path
    with open(path, "ab") as f:
        f.write(b"\0" * 100)
    with Binlogger(tmp_path) as b:
        assert b.position == Pos(0, 52)


def test_corrupt_middle_record_is_skipped_and_counted(tmp_path):
    with Binlogger(tmp_path) as b:
        b.write_many(_payloads(3))
        path = b.path
    data = bytearray(path.read_bytes())
    data[26 + 12] ^= 0xFF  # a payload byte of the 2nd record: CRC mismatch
    path.write_bytes(bytes(data))
    stats = WalkStats()
    got = list(walk(tmp_path, stats=stats))
    assert [p for _, p in got] == [_payloads(3)[0], _payloads(3)[2]]
    assert stats.corrupt == 1 and stats.skipped_bytes == 26
    assert stats.corruptions == [(str(path), 26, "CRC mismatch")]
    with pytest.raises(CorruptRecord) as err:
        list(walk(tmp_path, strict=True))
    assert err.value.offset == 26 and err.value.path == str(path)
    # the writer leaves damage followed by valid records alone
    with Binlogger(tmp_path) as b:
        assert b.truncated_bytes == 0 and b.position == Pos(0, 78)


def test_bad_magic_and_garbage_between_records(tmp_path):
    good = [encode_record(p) for p in _payloads(2)]
    path = tmp_path / binlog_name(0)
    path.write_bytes(good[0] + b"garbage!" + good[1])
    stats = WalkStats()
    assert [p for _, p in walk(tmp_path, stats=stats)] == _payloads(2)
    assert stats.corrupt == 1 and stats.corruptions[0][2] == "magic mismatch"


def test_huge_size_field_never_allocates(tmp_path):
    path = tmp_path / binlog_name(0)
    path.write_bytes(struct.pack("<IQ", 0x1C1B0504, 1 << 62) + b"x" * 8
                     + encode_record(b"ok"))
    stats = WalkStats()
    assert [p for _, p in walk(tmp_path, stats=stats)] == [b"ok"]
    assert stats.corrupt == 1


def test_damage_at_end_of_earlier_segment_is_corruption(tmp_path):
    with Binlogger(tmp_path, max_file_size_bytes=50) as b:
        b.write_many(_payloads(3))  # segments 0 (2 records), 1 (1 record)
    first = tmp_path / binlog_names(tmp_path)[0]
    with open(first, "ab") as f:
        f.write(encode_record(b"x")[:10])
    stats = WalkStats()
    assert [p for _, p in walk(tmp_path, stats=stats)] == _payloads(3)
    assert stats.corrupt == 1 and not stats.torn_tail


def test_missing_segment_is_refused(tmp_path):
    with Binlogger(tmp_path, max_file_size_bytes=20) as b:
        b.write_many(_payloads(3))
    os.unlink(tmp_path / binlog_names(tmp_path)[1])
    with pytest.raises(StorageError, match="not contiguous"):
        Binlogger(tmp_path)
    with pytest.raises(StorageError, match="not contiguous"):
        list(walk(tmp_path))


def test_truncate_to_drops_later_records_and_segments(tmp_path):
    with Binlogger(tmp_path, max_file_size_bytes=60) as b:
        positions = b.write_many(_payloads(7))
        dropped = b.truncate_to(positions[3])  # keep 4 records
        assert dropped == 3 * 26
        assert b.position == positions[3]
        b.write_tail(b"new")
    assert [p for _, p in walk(tmp_path)] == [*_payloads(4), b"new"]
    assert len(binlog_names(tmp_path)) == 2


def test_sync_and_close_are_safe_to_repeat(tmp_path):
    b = Binlogger(tmp_path)
    b.write_tail(b"x")
    b.sync()
    b.sync()
    b.close()
    b.close()
    with pytest.raises(StorageError, match="closed"):
        b.write_tail(b"y")


def test_gc_keeps_newest_segment(tmp_path):
    with Binlogger(tmp_path, max_file_size_bytes=20) as b:
        b.write_many(_payloads(4))  # one record a segment, plus the empty newest
        names = binlog_names(tmp_path)
        assert len(names) == 5
        old = 1_000_000.0
        for name in names[:3]:
            os.utime(tmp_path / name, (old, old))
        assert b.gc_by_time(3600, now_s=old + 7200) == names[:3]
        assert binlog_names(tmp_path) == names[3:]
        assert b.gc_by_pos(Pos(99, 0)) == [names[3]]  # never the newest
        assert binlog_names(tmp_path) == names[4:]
        b.write_tail(b"still writable")
    assert [p for _, p in walk(tmp_path)] == [b"still writable"]


def test_readme_example_runs(tmp_path, capsys):
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "tidb_binlog" / "binlogfile" / "README.md"
    block = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.S)[0]
    exec(compile(block.replace("/tmp/bf-demo", str(tmp_path / "demo")), str(readme), "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out == ["Pos(suffix=0, offset=43) b'second'", "Pos(suffix=0, offset=64) b'third'",
                   "2 0"]


# -- large records: CRC in blocks, payload read in place ------------------------------
def _large_dir(tmp_path, sizes=(10, 5000, 20, 70000)):
    d = tmp_path / "large"
    payloads = [bytes((i * 7 + n) % 251 for n in range(size)) for i, size in enumerate(sizes)]
    with Binlogger(d) as b:
        positions = b.write_many(payloads)
        b.sync()
    return d, payloads, positions


def test_walk_hands_large_records_out_in_place(tmp_path):
    d, payloads, positions = _large_dir(tmp_path)
    stats = WalkStats()
    got = []
    for pos, item in walk(d, stats=stats, inline_max=4096):
        if isinstance(item, bytes):
            got.append((pos, "bytes", item))
            continue
        assert isinstance(item, RecordSource) and item.size == len(payloads[len(got)])
        # any range, as a ByteSource reads it
        assert item.read(0, 3) == payloads[len(got)][:3]
        assert item.read(item.size - 5, 100) == payloads[len(got)][-5:]
        body = b"".join(item.read(o, 999) for o in range(0, item.size, 999))
        got.append((pos, "source", body))
        source = item
    assert [(p, k) for p, k, _ in got] == list(zip(positions, ["bytes", "source", "bytes",
                                                              "source"], strict=True))
    assert [b for _, _, b in got] == payloads and stats.records == 4
    # a source is valid until the walk moves on
    with pytest.raises(StorageError, match="read after the walk moved on"):
        source.read(0, 1)
    # without inline_max every record comes whole, as before
    assert [p for _, p in walk(d)] == payloads


def test_large_record_crc_is_checked_in_blocks(tmp_path):
    d, payloads, _ = _large_dir(tmp_path, sizes=(3 << 20, 10))
    seg = sorted(d.glob("binlog-*"))[0]
    reads = []
    with open(seg, "rb") as f:
        orig_read = f.read

        class Spy:
            def __getattr__(self, name):
                return getattr(f, name)

            def read(self, n=-1):
                reads.append(n)
                return orig_read(n)

        items = list(framing.scan(Spy(), 0, os.path.getsize(seg), inline_max=1000))
    assert [type(i).__name__ for i in items] == ["RecordSpan", "Record"]
    assert items[0].size == 3 << 20 and max(reads) == framing.BLOCK  # never the payload whole
    # a flipped byte in the middle of a large payload: the same damage as a whole read
    data = bytearray(seg.read_bytes())
    data[framing.HEADER_SIZE + 150000] ^= 1
    seg.write_bytes(bytes(data))
    for inline in (None, 1000):
        stats = WalkStats()
        assert [len(p) if isinstance(p, bytes) else p.size
                for _, p in walk(d, stats=stats, inline_max=inline)] == [10]
        assert (stats.corrupt, stats.corruptions[0][1:]) == (1, (0, "CRC mismatch"))
        with pytest.raises(CorruptRecord, match=f"corrupt binlog record in {seg} at offset 0"):
            list(walk(d, strict=True, inline_max=inline))


def test_torn_large_record_at_the_tail(tmp_path):
    d, payloads, positions = _large_dir(tmp_path, sizes=(10, 70000))
    seg = sorted(d.glob("binlog-*"))[0]
    with open(seg, "r+b") as f:
        f.truncate(positions[1].offset - 5)
    for inline in (None, 0, 1000):
        stats = WalkStats()
        assert len(list(walk(d, stats=stats, inline_max=inline))) == 1
        assert stats.torn_tail and not stats.corrupt
    with Binlogger(d) as b:  # the writer truncates it (its check keeps no payload)
        assert b.position == positions[0] and b.truncated_bytes > 0
