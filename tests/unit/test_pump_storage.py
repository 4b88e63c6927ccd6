"""Storage: pairing and serving, group commit, restart, slow chaser, resolver, GC, disk guard."""

from __future__ import annotations

import threading

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import DiskSpaceError, ProtocolError, PurgedError, StorageError
from tidb_binlog.node import TxnStatus
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.tso import compose

FAST = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                      resolve_interval_s=3600)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def metrics():
    return StorageMetrics()


def _open(path, options=FAST, **kw):
    kw.setdefault("metrics", StorageMetrics())
    return Storage(path, options, **kw)


def _pair(s, start_ts, commit_ts, value=None):
    s.write_binlog(bl.prewrite(start_ts, value or f"v{start_ts}".encode(),
                               prewrite_key=f"k{start_ts}".encode()))
    s.write_binlog(bl.commit(start_ts, commit_ts))


def _served(s, since=0):
    out = s.pull_commit_binlogs(since, max_bytes=1 << 30, max_count=1 << 30)
    return [(ts, bl.decode(p)) for ts, p in out]


def test_pairing_fills_prewrite_fields_and_serves_in_order(tmp_path, metrics):
    s = _open(tmp_path, metrics=metrics)
    s.write_binlog(bl.prewrite(10, b"pv10", prewrite_key=b"pk", ddl_query=b"create table t(a int)",
                               ddl_job_id=7, ddl_schema_state=5))
    s.write_binlog(bl.prewrite(12, b"pv12"))
    s.write_binlog(bl.commit(12, 13))
    s.write_binlog(bl.fake(14))
    assert s.flush() and s.max_commit_ts == 0  # P10 unmatched holds everything back
    assert _served(s) == [] and not s.all_matched()
    s.write_binlog(bl.commit(10, 15, ddl_job_id=7))
    s.write_binlog(bl.commit(9, 16))  # its prewrite was never written to this pump
    s.write_binlog(bl.rollback(17))
    assert s.flush() and s.max_commit_ts == 16 and s.all_matched()
    got = _served(s)
    assert [ts for ts, _ in got] == [13, 14, 15]
    c13, fake, c15 = (b for _, b in got)
    assert (c13.tp, c13.start_ts, c13.prewrite_value) == (bl.BinlogType.COMMIT, 12, b"pv12")
    assert fake == bl.fake(14)
    assert (c15.prewrite_key, c15.prewrite_value, c15.ddl_query, c15.ddl_job_id,
            c15.ddl_schema_state) == (b"pk", b"pv10", b"create table t(a int)", 7, 5)
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "feed_pre_write_value"}) == 1
    assert [ts for ts, _ in _served(s, since=13)] == [14, 15]
    assert len(s.pull_commit_binlogs(0, max_count=2)) == 2
    assert len(s.pull_commit_binlogs(0, max_bytes=1)) == 1  # at least one per call
    assert s.get_binlog(10).prewrite_value == b"pv10" and s.get_binlog(15).commit_ts == 15
    assert s.get_binlog(11) is None
    s.close()


@pytest.mark.parametrize("value_bytes", [10, 4000, 5000, 100_000])
def test_commit_filled_whether_its_prewrite_is_in_the_pass_or_not(tmp_path, value_bytes):
    """A Prewrite read whole in the same pass (small), one too big for the first read
    (looked up through the index), and one before ``since`` (not in the pass): every
    Commit gets its own prewrite value, however the batches are cut."""
    s = _open(tmp_path)
    values = {}
    for i in range(6):
        start_ts = 100 + 10 * i
        values[start_ts] = bytes([65 + i]) * (value_bytes + i)
        s.write_binlog(bl.prewrite(start_ts, values[start_ts], prewrite_key=b"k"))
    for i in range(6):                     # commits after every prewrite: 101, 111, ...
        s.write_binlog(bl.commit(100 + 10 * i, 1000 + 10 * i))
    assert s.flush()
    everything = [(ts, b.prewrite_value) for ts, b in _served(s)]
    assert everything == [(1000 + 10 * i, values[100 + 10 * i]) for i in range(6)]
    assert [(ts, bl.decode(p).prewrite_value) for ts, p in s.pull_commit_binlogs(
        125, max_bytes=1, max_count=2)] == [(1000, values[100])]        # cut by max_bytes
    assert [(ts, bl.decode(p).prewrite_value) for ts, p in s.pull_commit_binlogs(
        135, max_count=2)] == [(1000, values[100]), (1010, values[110])]  # prewrites < since
    s.close()


def test_wait_for_commit_wakes_on_new_commit(tmp_path):
    s = _open(tmp_path)
    assert s.wait_for_commit(0, 0.01) == 0
    t = threading.Timer(0.05, lambda: _pair(s, 5, 6))
    t.start()
    assert s.wait_for_commit(0, 30) == 6
    t.join()
    s.close()


def test_unsupported_type_and_closed_storage(tmp_path):
    s = _open(tmp_path)
    with pytest.raises(ProtocolError, match="binlog type 3"):
        s.write_binlog(bl.new_binlog(bl.BinlogType.PRE_DDL, 1))
    with pytest.raises(ProtocolError, match="start_ts must be positive"):
        s.write_binlog(bl.probe())
    with pytest.raises(ProtocolError, match="commit_ts above it"):
        s.write_binlog(bl.commit(5, 0))
    assert s.stats()["writes"] == 0
    s.close()
    with pytest.raises(StorageError, match="closed"):
        s.write_binlog(bl.fake(5))
    with pytest.raises(StorageError, match="closed"):
        s.pull_commit_binlogs(0)


def test_group_commit_concurrent_writers_durable_and_grouped(tmp_path):
    opts = StorageOptions(stop_write_at_available_space_bytes=0, resolve_interval_s=3600)
    s = _open(tmp_path, opts)
    n_threads, per_thread = 16, 40

    def writer(i):
        for j in range(per_thread):
            start = compose(1000 + j, i * 4)  # a TSO-like order across threads
            _pair(s, start, start + 1, value=bytes([i]) * 512)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = s.stats()
    writes = n_threads * per_thread * 2
    assert stats["writes"] == writes
    assert stats["fsyncs"] == stats["groups"] < writes  # one fdatasync per group
    s.close()
    s = _open(tmp_path, opts)
    got = _served(s)
    assert len(got) == n_threads * per_thread
    assert [ts for ts, _ in got] == sorted(ts for ts, _ in got)
    assert all(b.prewrite_value == bytes([(b.start_ts & 0x3FFFF) // 4]) * 512 for _, b in got)
    s.close()


def test_restart_during_indexing_lag_loses_and_duplicates_nothing(tmp_path):
    s = _open(tmp_path)
    for i in range(1, 21):
        _pair(s, 10 * i, 10 * i + 1)
    assert s.flush()
    s.pause_indexing()
    for i in range(21, 41):
        _pair(s, 10 * i, 10 * i + 1)
    assert s.stats()["head_pointer"] < tuple(s.vlog.end())
    s.close(drain_index=False)  # as if killed: the index is behind the log
    s = _open(tmp_path)
    got = [ts for ts, _ in _served(s)]
    assert got == [10 * i + 1 for i in range(1, 41)]
    s.close()
    s = _open(tmp_path)  # and again, after a clean close
    assert [ts for ts, _ in _served(s)] == got
    s.close()


def test_slow_chaser_takes_over_when_indexing_stalls(tmp_path, metrics):
    opts = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                          resolve_interval_s=3600, kv_chan_cap=1, kv_forward_timeout_s=0.02)
    s = _open(tmp_path, opts, metrics=metrics)
    s.pause_indexing()
    for i in range(1, 31):  # the queue holds one group: the writer switches to the chaser
        _pair(s, 10 * i, 10 * i + 1)
    assert s.stats()["slow_chaser_on"]
    assert metrics.value("binlog_pump_storage_slow_chaser_count_total",
                         {"type": "turned_on"}) == 1
    assert s.max_commit_ts < 301
    s.resume_indexing()
    assert s.flush()
    assert s.max_commit_ts == 301
    assert [ts for ts, _ in _served(s)] == [10 * i + 1 for i in range(1, 31)]
    assert metrics.value("binlog_pump_storage_slow_chaser_count_total",
                         {"type": "turned_off"}) >= 1
    assert not s.stats()["slow_chaser_on"]
    _pair(s, 1000, 1001)  # in-memory forwarding again
    assert s.flush() and s.max_commit_ts == 1001
    s.close()


class FakeResolver:
    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def txn_status(self, start_ts, prewrite_key):
        self.calls.append((start_ts, prewrite_key))
        return self.answers[start_ts]


def test_resolver_committed_rolled_back_unknown(tmp_path, metrics):
    clock = Clock()
    resolver = FakeResolver({10: TxnStatus(TxnStatus.COMMITTED, 25),
                             11: TxnStatus(TxnStatus.ROLLED_BACK),
                             12: TxnStatus(TxnStatus.UNKNOWN, detail="lock alive")})
    opts = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                          max_txn_timeout_s=5.0, resolve_interval_s=3600)
    s = _open(tmp_path, opts, resolver=resolver, clock=clock, metrics=metrics)
    for start in (10, 11, 12):
        s.write_binlog(bl.prewrite(start, b"v%d" % start, prewrite_key=b"k%d" % start))
    _pair(s, 20, 21)
    assert s.flush()
    clock.t += 4.9
    assert s.resolve_pending() == 0 and resolver.calls == []  # not old enough yet
    clock.t += 0.2
    assert s.resolve_pending() == 2
    assert resolver.calls == [(10, b"k10"), (11, b"k11"), (12, b"k12")]
    assert s.flush()
    assert s.max_commit_ts == 0  # 12 still unknown: waits
    assert metrics.value("binlog_pump_storage_query_tikv_count_total") == 3
    resolver.answers[12] = TxnStatus(TxnStatus.COMMITTED, 26)
    assert s.resolve_pending() == 1
    assert s.flush() and s.all_matched()
    got = _served(s)
    assert [(ts, b.start_ts, b.prewrite_value) for ts, b in got] == [
        (21, 20, b"v20"), (25, 10, b"v10"), (26, 12, b"v12")]
    s.close()


def test_without_resolver_prewrites_wait(tmp_path):
    clock = Clock()
    s = _open(tmp_path, StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                                       max_txn_timeout_s=1.0, resolve_interval_s=3600),
              clock=clock)
    s.write_binlog(bl.prewrite(10, b"v"))
    _pair(s, 11, 12)
    clock.t += 100
    assert s.resolve_pending() == 0
    assert s.flush() and s.max_commit_ts == 0
    s.close()


def _ts(physical_s: int) -> int:
    return compose(physical_s * 1000, 0)


def test_gc_respects_margin_and_never_deletes_active_file(tmp_path):
    opts = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                          resolve_interval_s=3600, value_log_file_size_bytes=1, gc_margin_s=600)
    s = _open(tmp_path, opts)
    for minute in range(10, 70, 10):  # one record per file (rotation before every group)
        _pair(s, _ts(minute * 60), _ts(minute * 60) + 1)
    assert s.flush()
    files_before = [f for f, *_ in s.vlog.segments()]
    assert len(files_before) == 12
    s.gc(_ts(50 * 60) + 5, wait=True)  # minus the 600 s margin: deletes what is <= 40 min
    assert s.gc_ts == _ts(50 * 60) + 5
    files_after = [f for f, *_ in s.vlog.segments()]
    assert files_after == files_before[8:]  # P and C of 10, 20, 30, 40 minutes are gone
    assert s.stats()["done_gc_ts"] == s.gc_ts
    with pytest.raises(PurgedError) as ei:
        s.pull_commit_binlogs(_ts(40 * 60))
    assert ei.value.gc_ts == s.gc_ts
    assert [ts for ts, _ in _served(s, s.gc_ts)] == [_ts(60 * 60) + 1]
    assert s.get_binlog(_ts(40 * 60) + 1) is None  # index keys below the margin are gone
    assert s.get_binlog(_ts(50 * 60) + 1) is not None  # inside the margin: kept
    s.gc(_ts(10 * 60))  # below the current gc_ts: ignored
    s.gc(s.max_commit_ts + 1, wait=True)  # not below max_commit_ts: ignored
    assert s.gc_ts == _ts(50 * 60) + 5
    active = s.vlog.active_fid
    s.close()
    s = _open(tmp_path, StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                                       resolve_interval_s=3600, gc_margin_s=0))
    assert s.gc_ts == _ts(50 * 60) + 5  # persisted
    s.gc(s.max_commit_ts - 1, wait=True)
    assert active in [f for f, *_ in s.vlog.segments()]
    s.close()


def test_disk_guard_refuses_prewrites_only(tmp_path, metrics):
    """A full disk refuses new transactions, but the Commit / Rollback of a stored
    Prewrite gets in: refused, that Prewrite would hold every later commit back."""
    s = _open(tmp_path, StorageOptions(sync_log=False, resolve_interval_s=3600,
                                       stop_write_at_available_space_bytes=0), metrics=metrics)
    s.write_binlog(bl.prewrite(10, b"v"))
    s.write_binlog(bl.prewrite(20, b"w"))
    assert s.disk_guard_message() == ""
    s.disk_guard.limit_bytes = 1 << 62  # the disk fills up
    with pytest.raises(DiskSpaceError, match="no available space: available") as ei:
        s.write_binlog(bl.prewrite(30, b"x"))
    assert ei.value.threshold_bytes == 1 << 62 and ei.value.available_bytes > 0
    assert str(ei.value) == s.disk_guard_message()
    assert str(ei.value).endswith("free space or lower the option (new transactions' Prewrites "
                                  "are refused; Commits and Rollbacks of stored ones are still "
                                  "accepted)")
    s.write_binlog(bl.commit(10, 11))
    s.write_binlog(bl.rollback(20))
    s.write_binlog(bl.fake(12))  # fake binlogs still pass
    assert s.flush() and s.stats()["writes"] == 5
    assert s.get_binlog(30) is None and s.max_commit_ts == 12 and s.all_matched()
    assert [ts for ts, _ in _served(s)] == [11, 12]
    assert metrics.value("binlog_pump_storage_storage_size_bytes", {"type": "available"}) > 0
    s.close()


def test_data_dir_is_exclusive(tmp_path):
    s = _open(tmp_path)
    with pytest.raises(StorageError, match="in use by another pump"):
        _open(tmp_path)
    s.close()
    _open(tmp_path).close()


def test_commit_whose_prewrite_file_was_collected_is_skipped(tmp_path, metrics):
    opts = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                          resolve_interval_s=3600, value_log_file_size_bytes=1, gc_margin_s=0)
    s = _open(tmp_path, opts, metrics=metrics)
    s.write_binlog(bl.prewrite(_ts(60), b"long txn"))  # its own file
    _pair(s, _ts(120), _ts(120) + 1)
    s.write_binlog(bl.commit(_ts(60), _ts(240)))  # a transaction that ran for 3 minutes
    s.write_binlog(bl.fake(_ts(300)))
    assert s.flush()
    s.vlog.delete_sealed_upto(_ts(60))  # as GC with no margin would
    got = _served(s, _ts(180))
    assert [ts for ts, _ in got] == [_ts(300)]
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "feed_pre_write_value"}) == 1
    s.close()


def test_undecodable_payload_is_ignored_on_recovery(tmp_path):
    s = _open(tmp_path)
    s.write_binlog(bl.fake(5), payload=b"\xff\xff not a binlog")  # caller bug: mismatched payload
    _pair(s, 6, 7)
    s.close(drain_index=False)
    s = _open(tmp_path)
    assert [ts for ts, _ in _served(s)] == [7]
    s.close()


def test_resolution_age_also_counts_tso_distance(tmp_path):
    clock = Clock()
    current = {"ts": _ts(1000)}
    resolver = FakeResolver({_ts(100): TxnStatus(TxnStatus.ROLLED_BACK)})
    s = _open(tmp_path, StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                                       max_txn_timeout_s=600, resolve_interval_s=3600),
              resolver=resolver, clock=clock, current_ts=lambda: current["ts"])
    s.write_binlog(bl.prewrite(_ts(100), b"v"))
    assert s.flush()
    current["ts"] = _ts(699)  # 599 s after start_ts and just stored: too young
    assert s.resolve_pending() == 0 and resolver.calls == []
    current["ts"] = _ts(700)  # 600 s by the TSO, though the clock age is still 0
    assert s.resolve_pending() == 1
    assert s.all_matched()
    s.close()


def test_failed_index_batches_are_retried_not_lost(tmp_path, metrics):
    s = _open(tmp_path, metrics=metrics)
    real_write, failures = s.index.write, []

    def flaky(entries, meta, sync=False):
        if len(failures) < 2:
            failures.append(1)
            raise StorageError("simulated: No space left on device")
        return real_write(entries, meta, sync)

    s.index.write = flaky
    _pair(s, 10, 11)
    assert s.flush() and s.max_commit_ts == 11
    assert len(failures) == 2
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "batch_write_kv"}) == 2
    assert [ts for ts, _ in _served(s)] == [11]
    s.close()


def test_io_failure_fails_the_group_and_leaves_nothing_behind(tmp_path, monkeypatch, metrics):
    from tidb_binlog.pump.storage import vlog as vlog_module

    opts = StorageOptions(stop_write_at_available_space_bytes=0, resolve_interval_s=3600)
    s = _open(tmp_path, opts, metrics=metrics)
    _pair(s, 10, 11)
    size_before = s.vlog.end().offset

    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(vlog_module.os, "fdatasync", broken)
    with pytest.raises(StorageError, match="Input/output error"):
        s.write_binlog(bl.prewrite(20, b"lost"))
    monkeypatch.undo()
    assert s.vlog.end().offset == size_before
    assert (tmp_path / "value" / "000001.vlog").stat().st_size == size_before  # cut back
    with pytest.raises(StorageError, match="refuses writes after an earlier I/O failure"):
        s.write_binlog(bl.fake(30))
    assert metrics.value("binlog_pump_storage_error_count_total",
                         {"type": "write_binlog_batch"}) == 1
    s.close()
    s = _open(tmp_path, opts)  # reopening clears the failure; the failed write is absent
    assert s.get_binlog(20) is None and [ts for ts, _ in _served(s)] == [11]
    s.write_binlog(bl.fake(30))
    assert s.flush() and s.max_commit_ts == 30
    s.close()
