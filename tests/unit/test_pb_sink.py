"""FileSink: records in commit order, savepoint cadence (after sync), the crash window
closed on reset, replays skipped, retention GC."""

from __future__ import annotations

import os

import pytest

from tidb_binlog.binlogfile import Binlogger, binlog_names, encode_record, walk
from tidb_binlog.drainer.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint_store import FileCheckpointStore
from tidb_binlog.drainer.pb_sink import FileSink
from tidb_binlog.drainer.pb_translate import ddl_record, record_commit_ts
from tidb_binlog.errors import StorageError
from tidb_binlog.proto import pb_binlog_pb2 as pb


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def dml(ts: int) -> bytes:
    b = pb.Binlog(tp=pb.DML, commit_ts=ts)
    b.dml_data.events.add(schema_name="s", table_name="t", tp=pb.Insert, row=[b"x%d" % ts])
    return b.SerializeToString()


def items(*tss, fake=()):
    return [(ts, None if ts in fake else dml(ts), 1) for ts in tss]


def written(directory) -> list[int]:
    return [record_commit_ts(p) for _, p in walk(directory)]


@pytest.fixture
def env(tmp_path):
    clock = Clock()
    store = FileCheckpointStore(tmp_path / "data")

    def make(**kw):
        return FileSink(tmp_path / "files", store, clock=clock, **kw)

    return make, store, clock, tmp_path / "files"


def crash(sink: FileSink) -> None:
    """The process dies: the descriptors (and the lock) go, nothing else happens."""
    os.close(sink.binlogger._fd)
    os.close(sink.binlogger._lock_fd)
    sink.binlogger._fd = sink.binlogger._lock_fd = -1


def test_reset_apply_close(env):
    make, store, clock, files = env
    sink = make(initial_commit_ts=5)
    assert sink.reset() == Checkpoint(5)
    assert store.load() == Checkpoint(5)  # an initial savepoint at once
    assert sink.apply(items(10, 11, 12, fake={11})) == 12
    assert written(files) == [10, 12]
    assert store.load() == Checkpoint(5)  # not due yet
    final = sink.close()
    assert final == Checkpoint(12, consistent=True, schema_version=1)
    assert store.load() == final


def test_savepoint_every_interval_and_after_ddl(env):
    make, store, clock, files = env
    sink = make()
    sink.reset()
    sink.apply(items(10))
    clock.now += 2.9
    sink.idle()
    assert store.load().commit_ts == 0
    clock.now += 0.2
    assert sink.idle() == 10
    assert store.load().commit_ts == 10
    sink.apply([(20, ddl_record(20, "s", "create table t (a int)"), 2)])
    assert store.load() == Checkpoint(20, schema_version=2)  # at once after a DDL
    assert sink.status()["ddl_records"] == 1


def test_replayed_items_are_skipped(env):
    make, store, clock, files = env
    sink = make()
    sink.reset()
    sink.apply(items(10, 11))
    sink.apply(items(10, 11, 12))
    assert written(files) == [10, 11, 12]
    assert sink.status()["skipped"] == 2


def test_crash_window_records_are_written_once(env):
    make, store, clock, files = env
    sink = make()
    sink.reset()
    sink.apply(items(10, 11))
    clock.now += 5
    sink.apply(items(12))                 # saved at 12 (after a sync)
    assert store.load().commit_ts == 12
    sink.apply(items(13, 14))             # written, not in the savepoint
    crash(sink)
    again = make()
    assert again.reset().commit_ts == 12  # the replay starts after 12 ...
    assert written(files) == [10, 11, 12]  # ... and the files end there
    again.apply(items(13, 14, 15))
    assert written(files) == [10, 11, 12, 13, 14, 15]


def test_crash_window_across_rotations_and_a_torn_tail(env):
    make, store, clock, files = env
    sink = make(max_file_size_bytes=60)
    sink.reset()
    sink.apply(items(10))
    clock.now += 5
    sink.apply(items(11))
    assert store.load().commit_ts == 11
    sink.apply(items(*range(12, 20)))
    path = sink.binlogger.path
    crash(sink)
    with open(path, "ab") as f:
        f.write(encode_record(dml(20))[:9])  # torn
    assert len(binlog_names(files)) > 3
    again = make(max_file_size_bytes=60)
    again.reset()
    assert written(files) == [10, 11]
    again.apply(items(*range(12, 22)))
    assert written(files) == list(range(10, 22))


def test_first_run_crash_before_any_interval(env):
    make, store, clock, files = env
    sink = make(initial_commit_ts=5)
    sink.reset()
    sink.apply(items(6, 7))
    crash(sink)
    again = make(initial_commit_ts=5)
    assert again.reset().commit_ts == 5
    assert written(files) == []
    again.apply(items(6, 7))
    assert written(files) == [6, 7]


def test_no_checkpoint_with_existing_files_appends(env):
    make, store, clock, files = env
    with Binlogger(files) as b:
        b.write_tail(dml(100))
    sink = make(initial_commit_ts=200)
    assert sink.reset().commit_ts == 200
    sink.apply(items(201))
    assert written(files) == [100, 201]


def test_foreign_records_are_refused(env):
    make, store, clock, files = env
    store.save(Checkpoint(1))
    with Binlogger(files) as b:
        b.write_tail(b"\xff\xff not protobuf")
    with pytest.raises(StorageError, match="not a pb binlog"):
        make().reset()


def test_apply_before_reset_is_refused(env):
    make, *_ = env
    with pytest.raises(StorageError, match="reset"):
        make().apply(items(1))


def test_retention_gc(env):
    make, store, clock, files = env
    sink = make(max_file_size_bytes=20, retention_s=3600)
    sink.reset()
    sink.apply(items(1, 2, 3))
    names = binlog_names(files)
    for name in names[:2]:
        os.utime(files / name, (1.0, 1.0))
    sink.idle()
    assert binlog_names(files) == names  # hourly
    clock.now += 3601
    sink.idle()
    assert binlog_names(files) == names[2:]
    assert sink.status()["gc_files"] == 2
