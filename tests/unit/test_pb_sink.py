"""FileSink: records in commit order, savepoint cadence (after sync), the crash window
closed on reset, replays skipped, retention GC."""

from __future__ import annotations

import os

import pytest

from tidb_binlog.binlogfile import Binlogger, binlog_names, encode_record, walk
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import FileCheckpointStore
from tidb_binlog.drainer.sinks.file import sink as sink_module
from tidb_binlog.drainer.sinks.file.sink import FileSink
from tidb_binlog.drainer.translate.pb import ddl_record, record_commit_ts
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


@pytest.fixture(params=["whole", "in place"])
def trim_mode(request, monkeypatch):
    """The trim on a reset reads records whole, or (as records of 8 MiB or more) only
    their top level in place."""
    if request.param == "in place":
        monkeypatch.setattr(sink_module, "_TRIM_INLINE_MAX", 0)
    return request.param


def test_crash_window_records_are_written_once(env, trim_mode):
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


def test_crash_window_across_rotations_and_a_torn_tail(env, trim_mode):
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


def test_foreign_records_are_refused(env, trim_mode):
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


# -- the pipeline's file sink and pb keeper (the actors' bodies) -----------------------------
def test_file_sink_refuses_batches_out_of_sequence(tmp_path):
    from tidb_binlog.drainer.pipeline.gate import PipelineReset
    from tidb_binlog.drainer.sinks.file.sink import BinlogFileSink

    actor = BinlogFileSink(FileSink(tmp_path, FileCheckpointStore(tmp_path)))
    with pytest.raises(PipelineReset, match="before a reset"):
        actor.apply(0, items(1))
    assert actor.reset() == Checkpoint(0)
    assert actor.apply(0, items(1, 2)) == 2
    with pytest.raises(PipelineReset, match="expected batch 1, got 3"):
        actor.apply(3, items(3))
    st = actor.status().as_dict()
    assert st["commit_ts"] == 2 and st["applied_rows"] == 2 and st["outstanding"] == 0
    assert actor.close() == Checkpoint(2, consistent=True, schema_version=1)
    assert written(tmp_path) == [1, 2]


def test_pb_keeper_translates_and_skips_ignored_commit_ts():
    from tidb_binlog import binlog as bl
    from tidb_binlog.drainer.pipeline.gate import PipelineReset
    from tidb_binlog.drainer.pipeline.settings import TaskSettings
    from tidb_binlog.drainer.translate.keeper import PbKeeper
    from tidb_binlog.model import ActionType, CIStr, DBInfo, HistoryInfo, Job, JobState, SchemaState

    db = DBInfo(id=2, db_name=CIStr("shop"))
    create = Job(id=1, type=ActionType.CREATE_SCHEMA, schema_id=2, state=JobState.SYNCED,
                 schema_state=SchemaState.PUBLIC, query="CREATE DATABASE shop",
                 binlog=HistoryInfo(schema_version=1, db_info=db))

    class Meta:
        def history_jobs(self, up_to_schema_version=None):
            return [create]

        def job(self, job_id):
            return create if job_id == 1 else None

    keeper = PbKeeper(TaskSettings(cluster_id=1, ignore_txn_commit_ts=(30,)), Meta())
    ddl = bl.commit(9, 10, ddl_query=b"CREATE DATABASE shop", ddl_job_id=1)
    with pytest.raises(PipelineReset):
        keeper.translate([(10, bl.encode(ddl))])
    keeper.reset(0)
    out = keeper.translate([(10, bl.encode(ddl)), (20, bl.encode(bl.fake(20))),
                            (30, b"never decoded")])
    assert out == [(10, ddl_record(10, "shop", "CREATE DATABASE shop"), 1), (20, None, 1),
                   (30, None, 0)]


def test_file_sink_close_before_reset_reports_the_saved_checkpoint(tmp_path):
    from tidb_binlog.drainer.sinks.file.sink import BinlogFileSink

    FileCheckpointStore(tmp_path).save(Checkpoint(77, schema_version=3))
    actor = BinlogFileSink(FileSink(tmp_path, FileCheckpointStore(tmp_path)))
    assert actor.close() == Checkpoint(77, schema_version=3)
