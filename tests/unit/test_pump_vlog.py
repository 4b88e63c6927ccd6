"""Value log: framing, rotation and footers, torn tails, corrupt records in the middle."""

from __future__ import annotations

import os
import struct

import google_crc32c
import pytest

from tidb_binlog.errors import CorruptRecord, StorageError
from tidb_binlog.pump.storage.vlog import (
    FILE_END_MAGIC,
    FOOTER_SIZE,
    HEADER_SIZE,
    RECORD_MAGIC,
    ValueLog,
    ValuePointer,
    encode_record,
    scan_segment,
)


def _ts_of(payload: bytes) -> int:
    return int(payload.split(b":")[0])


def _payload(ts: int, size: int = 40) -> bytes:
    head = f"{ts}:".encode()
    return head + bytes((ts + i) % 251 for i in range(size - len(head)))


class Skips:
    def __init__(self):
        self.calls = []

    def __call__(self, path, offset, nbytes):
        self.calls.append((os.path.basename(path), offset, nbytes))


def _open(d, size=1 << 20, skips=None):
    return ValueLog(d, file_size_bytes=size, sync=True, ts_of=_ts_of, on_skip=skips)


def _write(vl, tss, size=40):
    ptrs = []
    for ts in tss:
        ptrs.append(vl.append(encode_record(_payload(ts, size)), ts))
    return ptrs


def test_record_framing_is_tidbs_little_endian_layout():
    payload = b"\x08\x01\x10\x01"
    rec = encode_record(payload)
    magic, length, crc = struct.unpack("<IQI", rec[:16])
    assert (magic, length, crc) == (RECORD_MAGIC, 4, google_crc32c.value(payload))
    assert rec[:4] == bytes.fromhex("e8563a82") and rec[16:] == payload
    assert ValuePointer(3, 1 << 40).encode() == struct.pack("<Iq", 3, 1 << 40)
    assert ValuePointer.decode(ValuePointer(3, 17).encode()) == (3, 17)
    with pytest.raises(StorageError, match="12 bytes"):
        ValuePointer.decode(b"\x00" * 5)


def test_round_trip_and_reopen(tmp_path):
    vl = _open(tmp_path)
    ptrs = _write(vl, range(1, 21))
    assert [vl.read(p) for p in ptrs] == [_payload(t) for t in range(1, 21)]
    vl.close()
    vl = _open(tmp_path)
    assert [vl.read(p) for p in ptrs] == [_payload(t) for t in range(1, 21)]
    scanned = list(vl.scan(ValuePointer(1, 0)))
    assert [p for p, _, _ in scanned] == ptrs
    assert scanned[5][1] == ptrs[6]
    more = _write(vl, [99])
    assert more[0] == vl.segments()[-1][:1] + (ptrs[-1].offset + HEADER_SIZE + 40,)
    vl.close()


def test_rotation_seals_with_footer_holding_max_ts(tmp_path):
    vl = _open(tmp_path, size=150)  # 3 records of 56 bytes per file
    ptrs = _write(vl, [5, 9, 7, 8, 20, 11, 30])
    segs = vl.segments()
    assert [s[0] for s in segs] == [1, 2, 3]
    assert all(s[2] for s in segs[:-1]) and not segs[-1][2]
    raw = (tmp_path / "000001.vlog").read_bytes()
    assert struct.unpack("<qI", raw[-FOOTER_SIZE:]) == (9, FILE_END_MAGIC)
    assert segs[1][3] == 20
    vl.close()
    vl = _open(tmp_path, size=150)
    assert [vl.read(p) for p in ptrs] == [_payload(t) for t in [5, 9, 7, 8, 20, 11, 30]]
    assert vl.active_fid == 3  # the unsealed last file stays active
    vl.close()


def test_close_seals_only_big_files(tmp_path):
    vl = _open(tmp_path)
    _write(vl, [1, 2])
    vl.close(seal_min_bytes=10_000)
    assert not (tmp_path / "000001.vlog").read_bytes().endswith(struct.pack("<I", FILE_END_MAGIC))
    vl = _open(tmp_path)
    vl.close(seal_min_bytes=1)
    assert (tmp_path / "000001.vlog").read_bytes().endswith(struct.pack("<I", FILE_END_MAGIC))
    vl = _open(tmp_path)
    assert [s[0] for s in vl.segments()] == [1, 2]  # a sealed last file gets a successor
    vl.close()


def test_torn_tail_is_truncated_at_every_cut(tmp_path):
    base = tmp_path / "base"
    vl = _open(base)
    ptrs = _write(vl, [1, 2, 3])
    vl.close()
    full = (base / "000001.vlog").read_bytes()
    last = ptrs[-1].offset
    for cut in range(last + 1, len(full)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / "000001.vlog").write_bytes(full[:cut])
        skips = Skips()
        vl = _open(d, skips=skips)
        assert os.path.getsize(d / "000001.vlog") == last, cut
        assert [p for p, _, _ in vl.scan(ValuePointer(1, 0))] == ptrs[:2]
        assert skips.calls == []  # a torn tail is not corruption
        p = vl.append(encode_record(_payload(4)), 4)
        assert p == ValuePointer(1, last) and vl.read(p) == _payload(4)
        vl.close()
        vl = _open(d)
        assert [_ts_of(x) for _, _, x in vl.scan(ValuePointer(1, 0))] == [1, 2, 4]
        vl.close()


@pytest.mark.parametrize("where", ["magic", "length", "crc", "payload"])
def test_flipped_byte_mid_file_is_skipped_and_counted(tmp_path, where):
    vl = _open(tmp_path)
    ptrs = _write(vl, [1, 2, 3, 4])
    vl.close()
    bad = ptrs[1].offset + {"magic": 1, "length": 5, "crc": 13, "payload": 30}[where]
    path = tmp_path / "000001.vlog"
    raw = bytearray(path.read_bytes())
    raw[bad] ^= 0x40
    path.write_bytes(bytes(raw))
    skips = Skips()
    vl = _open(tmp_path, skips=skips)
    assert skips.calls == [("000001.vlog", ptrs[1].offset, ptrs[2].offset - ptrs[1].offset)]
    assert [_ts_of(x) for _, _, x in vl.scan(ValuePointer(1, 0))] == [1, 3, 4]
    with pytest.raises(CorruptRecord) as ei:
        vl.read(ptrs[1])
    assert ei.value.offset == ptrs[1].offset
    assert os.path.getsize(path) == len(raw)  # nothing truncated: valid data follows
    vl.close()
    skips = Skips()
    vl = _open(tmp_path, skips=skips)  # reopen: same result, still counted once per open
    assert len(skips.calls) == 1
    assert vl.read(ptrs[3]) == _payload(4)
    vl.close()


def test_corrupt_last_record_is_truncated(tmp_path):
    vl = _open(tmp_path)
    ptrs = _write(vl, [1, 2])
    vl.close()
    path = tmp_path / "000001.vlog"
    raw = bytearray(path.read_bytes())
    raw[ptrs[1].offset + 20] ^= 1
    path.write_bytes(bytes(raw))
    vl = _open(tmp_path)
    assert os.path.getsize(path) == ptrs[1].offset
    vl.close()


def test_scan_segment_finds_records_after_garbage():
    recs = [encode_record(_payload(t)) for t in (1, 2)]
    buf = b"\xe8\x56\x3a\x82garbage" + recs[0] + b"zz" + recs[1] + b"\xe8\x56"
    from tidb_binlog.pump.storage.vlog_record import ScanResult

    res = ScanResult()
    got = list(scan_segment(buf, 0, len(buf), res))
    assert [_ts_of(p) for _, _, p in got] == [1, 2]
    assert res.skipped == [(0, 11), (11 + len(recs[0]), 2)]
    assert res.valid_end == len(buf) - 2


def test_gc_deletes_sealed_files_only(tmp_path):
    vl = _open(tmp_path, size=100)
    _write(vl, [1, 2, 3, 4, 5, 6])  # two records per file
    assert [s[0] for s in vl.segments()] == [1, 2, 3]
    assert vl.delete_sealed_upto(4) == [1, 2]
    assert vl.delete_sealed_upto(1 << 60) == []  # file 3 is active
    assert [s[0] for s in vl.segments()] == [3]
    with pytest.raises(StorageError, match="does not exist"):
        vl.read(ValuePointer(1, 0))
    vl.close()


@pytest.mark.parametrize("hint", [0, 7, 40, 4096])
def test_read_is_exact_whatever_the_size_hint(tmp_path, hint):
    """One pread when the record fits the hint, a second for the rest otherwise; a
    sealed file's footer beyond the last record is never part of a payload."""
    vl = _open(tmp_path, size=100)
    ptrs = _write(vl, [1, 2, 3], size=60)  # 2 records per file: files 1 (sealed) and 2
    assert [p.fid for p in ptrs] == [1, 1, 2]
    assert [vl.read(p, size_hint_bytes=hint) for p in ptrs] == [_payload(t, 60) for t in (1, 2, 3)]
    vl.close()


@pytest.mark.parametrize("hint", [7, 4096])
def test_read_with_a_hint_still_checks_the_crc(tmp_path, hint):
    vl = _open(tmp_path)
    ptrs = _write(vl, [1, 2])
    vl.close()
    path = tmp_path / "000001.vlog"
    raw = bytearray(path.read_bytes())
    raw[ptrs[0].offset + HEADER_SIZE + 30] ^= 0x01
    path.write_bytes(bytes(raw))
    vl = _open(tmp_path)
    with pytest.raises(CorruptRecord, match="checksum"):
        vl.read(ptrs[0], size_hint_bytes=hint)
    assert vl.read(ptrs[1], size_hint_bytes=hint) == _payload(2)
    vl.close()


def test_read_unless_prefix_skips_matching_payloads_only(tmp_path):
    vl = _open(tmp_path)
    ptrs = _write(vl, [1, 22])
    assert vl.read(ptrs[0], unless_prefix=b"1:") is None
    assert vl.read(ptrs[1], unless_prefix=b"1:") == _payload(22)
    assert vl.read(ptrs[0], unless_prefix=b"1:x") == _payload(1)  # a partial match is read
    vl.close()


@pytest.mark.parametrize("block", [64, 200, 1 << 18])
def test_block_reader_reads_what_read_first_reads(tmp_path, block):
    """Every record (small, bigger than the block, across files), in log order, in
    reverse, and after records were appended behind a block read earlier."""
    vl = _open(tmp_path, size=2000)
    sizes = [40, 300, 40, 5000, 40, 41, 700, 40]
    ptrs = [vl.append(encode_record(_payload(ts, size)), ts)
            for ts, size in enumerate(sizes, start=1)]
    reader = vl.block_reader(block)
    for order in (ptrs, list(reversed(ptrs))):
        for p in order:
            payload, complete = reader.read_first(p, 4096)
            if complete:  # a record wholly inside the block comes whole, whatever its size
                assert payload == vl.read(p)
            else:
                assert (payload, complete) == vl.read_first(p, 4096)
    last = reader.read_first(ptrs[-1], 4096)  # the block now ends at the log's end
    assert last == (_payload(len(sizes), 40), True)
    more = _write(vl, [100, 101], size=50)  # appended after that block was read
    assert [reader.read_first(p, 4096) for p in more] == [(_payload(100, 50), True),
                                                          (_payload(101, 50), True)]
    vl.close()


def test_block_reader_raises_on_a_bad_crc_like_read_first(tmp_path):
    vl = _open(tmp_path)
    ptrs = _write(vl, [1, 2, 3])
    vl.close()
    path = tmp_path / "000001.vlog"
    raw = bytearray(path.read_bytes())
    raw[ptrs[1].offset + HEADER_SIZE + 30] ^= 0x01
    path.write_bytes(bytes(raw))
    vl = _open(tmp_path)
    reader = vl.block_reader()
    assert reader.read_first(ptrs[0], 4096) == (_payload(1), True)
    with pytest.raises(CorruptRecord, match="checksum"):
        reader.read_first(ptrs[1], 4096)
    assert reader.read_first(ptrs[2], 4096) == (_payload(3), True)
    vl.close()


def test_index_reads_pointers_in_the_value_logs_layout():
    """pump.index decodes pointers with its own Struct (no constructor call per key)."""
    from tidb_binlog.pump.storage.index import _POINTER_STRUCT

    ptr = ValuePointer(7, 1 << 40)
    assert _POINTER_STRUCT.unpack(ptr.encode()) == tuple(ptr)
