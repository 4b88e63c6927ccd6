"""The pump serving a large Commit by reference (BinlogRef) and reading it back in
ranges from the value log (storage/payload_ref.py), on a real storage: the ranges
joined are byte for byte the payload a pull serves whole, before and after a restart."""

from __future__ import annotations

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef
from tidb_binlog.errors import DamagedBinlog, ProtocolError, StorageError
from tidb_binlog.pump.node import PumpNode, PumpNodeOptions
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.vlog import HEADER_SIZE

FAST = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                      resolve_interval_s=3600)
REF_ABOVE = 1024

# (start_ts, commit_ts, prewrite, commit): small ones, one whose prewrite a pull reads
# whole in its pass (3 KiB), bigger ones (through protobuf's fill and the splice), a
# DDL whose query is the large field, a commit carrying its own key
TXNS = [
    (10, 11, bl.prewrite(10, b"a" * 100, prewrite_key=b"k10"), bl.commit(10, 11)),
    (12, 13, bl.prewrite(12, b"b" * 3000, prewrite_key=b"k12"), bl.commit(12, 13)),
    (14, 15, bl.prewrite(14, bytes(range(256)) * 80, prewrite_key=b"k" * 300),
     bl.commit(14, 15)),
    (16, 17, bl.prewrite(16, b"", ddl_query=b"create table t (" + b"c int," * 400 + b"d int)",
                         ddl_job_id=7, ddl_schema_state=5), bl.commit(16, 17, ddl_job_id=7)),
    (18, 19, bl.prewrite(18, b"c" * 500), bl.commit(18, 19)),
    (20, 2**40, bl.prewrite(20, bytes(range(251)) * 9000, prewrite_key=b"pk"),  # 2.2 MB
     bl.commit(20, 2**40)),
    (2**40 + 1, 2**40 + 2, bl.prewrite(2**40 + 1, b"d" * 1100),
     bl.Binlog(tp=bl.BinlogType.COMMIT, start_ts=2**40 + 1, commit_ts=2**40 + 2,
               prewrite_key=b"own key")),
]


def _open(path):
    return Storage(path, FAST, metrics=StorageMetrics())


def _filled(s):
    for _, _, p, c in TXNS:
        s.write_binlog(p)
        s.write_binlog(c)
    s.write_binlog(bl.fake(2**41))
    assert s.flush()


def _pull_all(s, **kw):
    """Every item from 0 on, pull after pull; and how many items each batch had."""
    items, sizes, since = [], [], 0
    while True:
        batch, position = s.pull_commits(since, 1 << 30, 1 << 30, **kw)
        if not batch:
            return items, sizes
        items += batch
        sizes.append(len(batch))
        since = position


def _joined(s, ref, step):
    return b"".join(bytes(s.read_payload(ref.commit_ts, off, min(step, ref.size - off)))
                    for off in range(0, ref.size, step))


def _check_reads(s, refs, whole):
    for ref in refs:
        want = whole[ref.commit_ts]
        assert ref.size == len(want)
        for step in (7, 1000, 1 << 20, ref.size):
            if ref.size // step < 2000:
                assert _joined(s, ref, step) == want, (ref, step)
        for at in range(0, 48):  # 1-byte and short reads across the Commit's own fields,
            assert bytes(s.read_payload(ref.commit_ts, at, 1)) == want[at:at + 1]
            assert bytes(s.read_payload(ref.commit_ts, at, 13)) == want[at:at + 13]
        tail = ref.size - 40  # ... and across the end of the value and the fields after it
        assert bytes(s.read_payload(ref.commit_ts, tail, 40)) == want[tail:]
        assert bytes(s.read_payload(ref.commit_ts, ref.size, 0)) == b""


def test_large_commits_come_as_refs_read_back_in_ranges_also_after_a_restart(tmp_path):
    s = _open(tmp_path)
    _filled(s)
    whole_items, _ = _pull_all(s)
    whole = dict(whole_items)
    items, sizes = _pull_all(s, ref_above=REF_ABOVE, node_id="pump-1")
    assert [ts for ts, _ in items] == [ts for ts, _ in whole_items]  # same binlogs, same order
    refs = [p for _, p in items if isinstance(p, BinlogRef)]
    assert {r.commit_ts for r in refs} == {ts for ts, p in whole_items if len(p) >= REF_ABOVE}
    assert len(refs) == 5 and all(r.node_id == "pump-1" for r in refs)
    assert {r.commit_ts: r.start_ts for r in refs} == {c: st for st, c, _, _ in TXNS
                                                      if c in {r.commit_ts for r in refs}}
    for ts, p in items:  # small ones and the fake binlog unchanged
        if not isinstance(p, BinlogRef):
            assert p == whole[ts] and len(p) < REF_ABOVE
    # a reference ends its batch: each batch holds at most one, as its last item
    at = 0
    for n in sizes:
        batch = items[at:at + n]
        at += n
        assert all(not isinstance(p, BinlogRef) for _, p in batch[:-1])
    _check_reads(s, refs, whole)
    s.close()

    s = _open(tmp_path)  # a restarted pump: looked up again by commit_ts
    try:
        assert _pull_all(s, ref_above=REF_ABOVE, node_id="pump-1")[0] == items
        _check_reads(s, list(reversed(refs)), whole)
    finally:
        s.close()


def test_ref_above_zero_is_todays_pull_and_a_ref_counts_small_against_max_bytes(tmp_path):
    with _open(tmp_path) as s:
        _filled(s)
        assert s.pull_commits(0, 1 << 30, 1 << 30, ref_above=0) == s.pull_commits(0, 1 << 30,
                                                                                   1 << 30)
        # max_bytes of 200: the 100-byte commit is served, then the 3 KiB one as a
        # reference (it counts ~64 bytes), which ends the batch
        batch, position = s.pull_commits(0, 200, 1 << 30, ref_above=REF_ABOVE)
        assert [ts for ts, _ in batch] == [11, 13] and isinstance(batch[1][1], BinlogRef)
        assert position == 13


def test_a_bad_read_gets_a_clear_error_naming_the_pump(tmp_path):
    with _open(tmp_path) as s:
        _filled(s)
        node = PumpNode(PumpNodeOptions(data_dir=str(tmp_path), node_id="pump-x"), s,
                        tso=lambda: 1)
        size = len(dict(s.pull_commits(0, 1 << 30, 1 << 30)[0])[15])
        assert bytes(node.read_payload(15, 0, size)) == dict(s.pull_commits(14, 1 << 30,
                                                                             1)[0])[15]
        with pytest.raises(StorageError, match=r"pump pump-x: .*commit_ts 999: no binlog is "
                                               r"served at commit_ts 999.*pull again"):
            node.read_payload(999, 0, 10)
        with pytest.raises(StorageError, match="names a Prewrite"):
            node.read_payload(14, 0, 10)  # a start_ts: not served
        with pytest.raises(ProtocolError, match=rf"pump pump-x: .*past the end of the binlog "
                                                rf"at commit_ts 15 \({size} bytes\)"):
            node.read_payload(15, size - 10, 11)
        with pytest.raises(ProtocolError, match="must be >= 0"):
            node.read_payload(15, -1, 5)


def test_a_damaged_large_prewrite_stops_the_pull_that_would_make_its_ref(tmp_path):
    with _open(tmp_path) as s:
        _filled(s)
        ptr = s.index.lookup(20)  # the 2.2 MB prewrite: flip a byte deep in its value
        path = tmp_path / "value" / f"{ptr.fid:06d}.vlog"
        with open(path, "r+b") as f:
            f.seek(ptr.offset + HEADER_SIZE + 1_000_000)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(DamagedBinlog, match=f"ts {2**40}.*prewrite"):
            s.pull_commits(19, 1 << 30, 1 << 30, ref_above=REF_ABOVE)
