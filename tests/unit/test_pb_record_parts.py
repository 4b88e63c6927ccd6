"""A large transaction's pb record in parts: the keeper's parts reassembled are the whole
record byte for byte, and the file sink appends such a record from its spill file with
the crash semantics of a whole one (a crash between parts leaves no partial record)."""

from __future__ import annotations

import pytest
from test_pb_sink import crash, env, written  # noqa: F401 (env: a fixture)
from test_pb_translate import commit_with, history, pb_translator, row_of

from tidb_binlog import binlog as bl
from tidb_binlog.binlogfile import Binlogger, walk
from tidb_binlog.codec import Datum, encode_value
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.file.sink import SPILL_FILE
from tidb_binlog.drainer.translate.keeper import PbKeeper
from tidb_binlog.drainer.translate.pb import RecordPart, record_head
from tidb_binlog.errors import ProtocolError
from tidb_binlog.proto import pb_binlog_pb2 as pb


def big_commit(n: int, commit_ts: int = 100) -> bl.Binlog:
    """``n`` inserts, then ``n // 3`` updates and deletes in a second mutation (chunk
    boundaries fall inside and across mutations)."""
    inserts = [encode_value([Datum.int64(i)]) + row_of(f"u{i}", "1.50", 1 + i % 2)
               for i in range(n)]
    first = bl.new_table_mutation(10, inserted_rows=inserts,
                                  sequence=[bl.MutationType.INSERT] * n)
    k = n // 3
    old = [row_of(f"u{i}", "1.50", 1, with_id=i) for i in range(k)]
    new = [row_of(f"v{i}", "2.00", 2, with_id=i) for i in range(k)]
    seq = [bl.MutationType.UPDATE, bl.MutationType.DELETE_ROW] * k
    second = bl.new_table_mutation(10, updated_rows=[a + b for a, b in zip(old, new, strict=True)],
                                   deleted_rows=new, sequence=seq)
    return commit_with([first, second], commit_ts=commit_ts)


@pytest.mark.parametrize("max_rows", [1, 7, 50, 150])  # 150: one part, the last
def test_parts_reassembled_are_the_whole_record(max_rows):
    binlog = big_commit(60)
    whole = pb_translator().translate(binlog)
    parts = pb_translator().chunks(bl.encode(binlog), max_rows)
    assert parts is not None
    got = list(parts)
    assert [last for _, last in got] == [False] * (len(got) - 1) + [True]
    assert all(len(pb.DMLData.FromString(e).events) == max_rows for e, _ in got[:-1])
    events = b"".join(e for e, _ in got)
    assert record_head(100, len(events)) + events == whole  # byte-identical
    # and a reader sees the same transaction
    assert pb.Binlog.FromString(record_head(100, len(events)) + events) == \
        pb.Binlog.FromString(whole)


def test_small_or_ddl_binlogs_are_not_parted():
    tr = pb_translator()
    assert tr.chunks(bl.encode(big_commit(3)), 1000) is None  # too small to exceed
    ddl = bl.commit(9, 10, ddl_query=b"CREATE TABLE x (a int)", ddl_job_id=2)
    assert tr.chunks(bl.encode(ddl), 1) is None
    assert tr.chunks(b"\xff" * 100, 1) is None  # malformed: the whole path reports it


class _Meta:
    def history_jobs(self, up_to_schema_version=None):
        return history()

    def job(self, job_id):
        return {j.id: j for j in history()}.get(job_id)


def keeper(chunk_rows: int) -> PbKeeper:
    k = PbKeeper(TaskSettings(cluster_id=1, txn_chunk_rows=chunk_rows), _Meta())
    k.reset(2)
    return k


def test_keeper_hands_a_large_transaction_out_in_parts():
    small, large = big_commit(2, commit_ts=50), big_commit(30, commit_ts=100)
    after = big_commit(1, commit_ts=150)
    whole = keeper(0).translate([(50, bl.encode(small)), (100, bl.encode(large)),
                                 (150, bl.encode(after))])
    k = keeper(8)
    out, more = k.translate_more([(50, bl.encode(small)), (100, bl.encode(large)),
                                  (150, bl.encode(after))])
    calls = 1
    while more:
        got, more = k.translate_more([])
        out.extend(got)
        calls += 1
    assert calls > 3  # one part per call
    parts = [rec for ts, rec, _ in out if type(rec) is RecordPart]
    assert [p.chunk for p in parts] == list(range(1, len(parts) + 1))
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    events = b"".join(p.events for p in parts)
    plain = [(ts, rec, v) for ts, rec, v in out if type(rec) is not RecordPart]
    assert plain == [whole[0], whole[2]]
    assert record_head(100, len(events)) + events == whole[1][1]


def part_items(record_ts: int, n: int, max_rows: int):
    parts = list(pb_translator().chunks(bl.encode(big_commit(n, commit_ts=record_ts)),
                                        max_rows))
    return [(record_ts, RecordPart(e, i + 1, last), 2) for i, (e, last) in enumerate(parts)]


def test_sink_appends_a_parted_record_whole(env):  # noqa: F811
    make, store, clock, files = env
    sink = make(max_file_size_bytes=1)  # rotate after every record: never split
    sink.reset()
    whole = pb_translator().translate(big_commit(30, commit_ts=100))
    parts = part_items(100, 30, 8)
    small = pb_translator().translate(big_commit(2, commit_ts=50))
    assert sink.apply([(50, small, 2), *parts[:2]]) == 50  # not past 50 before the last
    assert sink.status()["spilled_bytes"] > 0 and (files / SPILL_FILE).exists()
    assert sink.apply(parts[2:] + [(150, None, 2)]) == 150
    assert not (files / SPILL_FILE).exists()
    assert [p for _, p in walk(files)] == [small, whole]
    assert sink.status()["records"] == 2
    sink.close()


def test_crash_between_parts_leaves_no_partial_record(env):  # noqa: F811
    make, store, clock, files = env
    sink = make()
    sink.reset()
    parts = part_items(100, 30, 8)
    sink.apply([(50, None, 2), *parts[:2]])
    crash(sink)
    again = make()
    assert again.reset().commit_ts == 0  # 50 was never saved
    assert not (files / SPILL_FILE).exists() and written(files) == []
    assert again.apply([(50, None, 2), *parts]) == 100  # the replay: once, whole
    assert written(files) == [100]
    again.close()


def test_crash_while_the_record_is_appended_is_a_torn_tail(env, monkeypatch):  # noqa: F811
    make, store, clock, files = env
    sink = make()
    sink.reset()
    sink.apply([(50, pb_translator().translate(big_commit(2, commit_ts=50)), 2)])
    sink.close()
    sink = make()
    sink.reset()
    real = Binlogger._append
    calls = []

    def dies_midway(self, frames, end):
        calls.append(end)
        if len(calls) == 2:  # the header went out, the body has not
            raise KeyboardInterrupt("killed")
        return real(self, frames, end)

    monkeypatch.setattr(Binlogger, "_append", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        sink.apply(part_items(100, 30, 8))
    monkeypatch.undo()
    crash(sink)
    again = make()
    again.reset()
    assert written(files) == [50]  # the torn record was truncated
    again.close()


def test_parts_out_of_order_are_refused(env):  # noqa: F811
    make, store, clock, files = env
    sink = make()
    sink.reset()
    parts = part_items(100, 30, 8)
    with pytest.raises(ProtocolError, match="part 2 .* part 1 was expected"):
        sink.apply([parts[1]])
    sink.reset()  # forgets the half-received one (nothing here)
    sink.apply([parts[0]])
    other = part_items(200, 30, 8)
    with pytest.raises(ProtocolError, match="while the one at 100"):
        sink.apply([other[0]])
    sink.reset()
    assert not (files / SPILL_FILE).exists()
    sink.close()

