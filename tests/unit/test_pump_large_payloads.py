"""The pump's large-payload path as pure pieces: reading a binlog's header without its
value, parsing a WriteBinlog request into a view, appending header + payload with writev,
and a Prewrite sent again while the first is still being written (one record)."""

from __future__ import annotations

import asyncio

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import ProtocolError
from tidb_binlog.proto import pump_pb2
from tidb_binlog.pump.storage import Storage, StorageOptions
from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.vlog import HEADER_SIZE
from tidb_binlog.pump.wire import LARGE_PAYLOAD_BYTES, binlog_header, parse_write_request

FAST = StorageOptions(sync_log=False, stop_write_at_available_space_bytes=0,
                      resolve_interval_s=3600)


@pytest.mark.parametrize("binlog", [
    bl.prewrite(5, b"v" * 300, prewrite_key=b"k"),
    bl.prewrite(2**62, b"", ddl_query=b"create table t (a int)", ddl_job_id=9,
                ddl_schema_state=5),
    bl.commit(5, 7),
    bl.rollback(11),
    bl.fake(12),
    bl.Binlog(tp=bl.BinlogType.COMMIT, start_ts=-3, commit_ts=-1),
])
def test_the_header_is_what_protobuf_decodes(binlog):
    payload = bl.encode(binlog)
    got = binlog_header(memoryview(payload))
    want = bl.decode(payload)
    assert (got.tp, got.start_ts, got.commit_ts) == (want.tp, want.start_ts, want.commit_ts)
    assert not got.prewrite_value  # not copied


def test_a_malformed_or_unusual_payload_goes_to_protobuf():
    with pytest.raises(ProtocolError, match="malformed binlog payload"):
        binlog_header(bl.encode(bl.prewrite(5, b"x" * 100))[:-3])
    with pytest.raises(ProtocolError, match="field tp missing"):
        binlog_header(b"\x10\x05")
    unknown = bl.encode(bl.prewrite(5, b"x")) + b"\x48\x01"  # field 9: protobuf keeps it
    assert binlog_header(unknown).start_ts == 5


def test_a_large_request_is_parsed_into_a_view_and_a_small_one_by_protobuf():
    payload = bl.encode(bl.prewrite(5, b"x" * LARGE_PAYLOAD_BYTES))
    data = pump_pb2.WriteBinlogReq(clusterID=2**63 + 5, payload=payload).SerializeToString()
    req = parse_write_request(data)
    assert isinstance(req.payload, memoryview) and req.payload.obj is data
    assert req.clusterID == 2**63 + 5 and bytes(req.payload) == payload
    small = pump_pb2.WriteBinlogReq(clusterID=3, payload=b"abc").SerializeToString()
    assert isinstance(parse_write_request(small), pump_pb2.WriteBinlogReq)
    odd = data + b"\x18\x01"  # an unknown field: protobuf's parse, same content
    assert parse_write_request(odd).payload == payload


def test_a_large_payload_is_appended_uncopied_and_reads_back(tmp_path):
    value = bytes(range(256)) * (LARGE_PAYLOAD_BYTES // 256 + 7)
    payload = bl.encode(bl.prewrite(50, value))
    with Storage(tmp_path, FAST, metrics=StorageMetrics()) as s:
        s.write_binlog(binlog_header(payload), memoryview(payload))
        s.write_binlog(bl.commit(50, 51))
        s.wait_for_commit(50, 10.0)
        (ts, served), = s.pull_commit_binlogs(0, max_bytes=64 << 20)
        assert ts == 51 and bl.decode(served).prewrite_value == value
    with Storage(tmp_path, FAST, metrics=StorageMetrics()) as s:  # recovery scans it too
        assert bl.decode(s.pull_commit_binlogs(0, max_bytes=64 << 20)[0][1]).prewrite_value \
            == value


def test_a_prewrite_sent_again_while_in_flight_waits_for_the_first(tmp_path):
    """Both calls in one loop turn: the second finds the first queued (or already
    written) and waits for its group; one record is written."""
    payload = bl.encode(bl.prewrite(60, b"p" * 2000))
    metrics = StorageMetrics()
    with Storage(tmp_path, FAST, metrics=metrics) as s:
        async def twice():
            first = s.write_binlog_async(bl.decode(payload), payload)
            second = s.write_binlog_async(bl.decode(payload), payload)
            await asyncio.gather(first, second)

        asyncio.run(twice())
        assert s.stats()["vlog_bytes"] == HEADER_SIZE + len(payload)  # one record
        assert metrics.value("binlog_pump_storage_duplicate_prewrite_count_total") == 1


def _protobuf_filled(c: bl.Binlog, p: bl.Binlog) -> bytes:
    """CommitReader.filled's protobuf way."""
    out = bl.Binlog()
    out.CopyFrom(c)
    if p.HasField("prewrite_key"):
        out.prewrite_key = p.prewrite_key
    out.prewrite_value = p.prewrite_value
    if p.HasField("ddl_query"):
        out.ddl_query = p.ddl_query
    out.ddl_job_id = p.ddl_job_id
    out.ddl_schema_state = p.ddl_schema_state
    return out.SerializeToString()


@pytest.mark.parametrize("c,p", [
    (bl.commit(5, 9), bl.prewrite(5, b"v" * LARGE_PAYLOAD_BYTES, prewrite_key=b"pk")),
    (bl.Binlog(tp=bl.BinlogType.COMMIT, start_ts=5, commit_ts=9, prewrite_key=b"own",
               ddl_query=b"q"), bl.prewrite(5, b"w" * 1000)),
    (bl.commit(5, 9, ddl_job_id=3), bl.prewrite(5, b"", ddl_query=b"alter table t add c int",
                                                ddl_job_id=3, ddl_schema_state=-1)),
])
def test_a_spliced_commit_is_what_protobuf_fills(c, p):
    from tidb_binlog.pump.storage.reader import spliced_commit

    raw = bl.encode(p)
    assert spliced_commit(c, raw) == _protobuf_filled(c, p)


def test_a_prewrite_that_is_not_laid_out_as_expected_is_left_to_protobuf():
    from tidb_binlog.pump.storage.reader import spliced_commit

    c = bl.commit(5, 9)
    assert spliced_commit(c, bl.encode(bl.prewrite(6, b"x"))) is None  # another start_ts
    assert spliced_commit(c, bl.encode(bl.prewrite(5, b"x" * 100))[:-20]) is None  # cut
    assert spliced_commit(c, b"\x08\x00\x10\x05\x2a\x05") is None  # value field truncated


class _Context:
    """What WriteBinlog asks of a grpc.aio context: the time left."""

    def __init__(self, remaining_s):
        self.remaining_s = remaining_s

    def time_remaining(self):
        return self.remaining_s


def test_a_write_whose_deadline_passed_before_it_is_handled_is_not_stored(tmp_path):
    from tidb_binlog.pump.grpc_server import PumpServicer
    from tidb_binlog.pump.node import PumpNode, PumpNodeOptions

    storage = Storage(tmp_path / "s", FAST, metrics=StorageMetrics())
    node = PumpNode(PumpNodeOptions(data_dir=str(tmp_path), cluster_id=7), storage)
    node.start(background=False)
    servicer = PumpServicer(node)
    payload = bl.encode(bl.prewrite(70, b"p" * 5000))
    request = pump_pb2.WriteBinlogReq(clusterID=7, payload=payload)
    try:
        late = asyncio.run(servicer.WriteBinlog(request, _Context(0.0)))
        assert b"deadline exceeded before the write" in late
        assert storage.stats()["vlog_bytes"] == 0
        assert asyncio.run(servicer.WriteBinlog(request, _Context(5.0))) == b""
        assert asyncio.run(servicer.WriteBinlog(request, _Context(None))) == b""  # no deadline
        assert storage.stats()["vlog_bytes"] == HEADER_SIZE + len(payload)  # once: dedupe
    finally:
        servicer.close()
        node.stop()


# -- the streaming write (WriteBinlogChunks): pure pieces ----------------------------


def test_chunk_messages_are_what_protobuf_parses_and_parse_chunk_reads_them():
    import google_crc32c

    from tidb_binlog.proto import pump_stream_pb2
    from tidb_binlog.pump.stream_write import parse_chunk
    from tidb_binlog.pump_client.transport import chunk_messages

    payload = bytes(range(256)) * 40  # 10240 bytes in chunks of 4096: 3 messages
    crc = google_crc32c.value(payload)
    messages = list(chunk_messages(2**63 + 1, memoryview(payload), crc, chunk_bytes=4096))
    assert len(messages) == 3
    parsed = [pump_stream_pb2.BinlogChunk.FromString(m) for m in messages]
    assert (parsed[0].clusterID, parsed[0].total_size, parsed[0].crc32c) == (2**63 + 1, 10240, crc)
    assert all(p.clusterID == 0 and p.total_size == 0 for p in parsed[1:])
    assert b"".join(p.data for p in parsed) == payload
    ours = [parse_chunk(m) for m in messages]
    assert (ours[0].cluster_id, ours[0].total_size, ours[0].crc32c) == (2**63 + 1, 10240, crc)
    assert b"".join(bytes(c.data) for c in ours) == payload
    odd = parse_chunk(messages[1] + b"\x28\x01")  # an unknown field: protobuf's parse
    assert bytes(odd.data) == payload[4096:8192]


def test_a_spill_file_checks_size_and_checksum_and_leaves_no_name(tmp_path):
    import google_crc32c

    from tidb_binlog.pump.stream_write import SpillFile, clear_spill_dir

    spill = SpillFile(tmp_path / "spill")
    spill.write(b"abc")
    spill.write(memoryview(b"defg"))
    assert list((tmp_path / "spill").iterdir()) == []  # unnamed while in use
    spill.check(7, google_crc32c.value(b"abcdefg"))
    with pytest.raises(ProtocolError, match="is 7 bytes, the stream announced 8"):
        spill.check(8, google_crc32c.value(b"abcdefg"))
    with pytest.raises(ProtocolError, match="corrupted in transit"):
        spill.check(7, 1234)
    assert spill.read_head(2) == b"ab" and spill.read_all() == b"abcdefg"
    (tmp_path / "spill" / "left-by-a-crash.spill").write_bytes(b"x")
    assert clear_spill_dir(tmp_path / "spill") == 1
    assert list((tmp_path / "spill").iterdir()) == []


def test_a_payload_in_a_file_is_appended_from_it_and_reads_back(tmp_path):
    """Storage.write_binlog_file_async: the record copied from the spill file equals a
    record written from memory (same bytes in the value log), and dedupe applies."""
    from tidb_binlog.pump.storage.vlog import payload_crc
    from tidb_binlog.pump.stream_write import SpillFile

    payload = bl.encode(bl.prewrite(80, bytes(range(256)) * 9000))
    metrics = StorageMetrics()
    with Storage(tmp_path / "a", FAST, metrics=metrics) as s:
        spill = SpillFile(tmp_path / "spill")
        for off in range(0, len(payload), 100_000):
            spill.write(payload[off:off + 100_000])

        async def write_twice():
            await s.write_binlog_file_async(binlog_header(payload), spill.source(), spill.crc)
            await s.write_binlog_file_async(binlog_header(payload), spill.source(), spill.crc)

        assert spill.crc == payload_crc(payload)
        asyncio.run(write_twice())
        spill.discard()
        assert metrics.duplicate_prewrite_count._value.get() == 1
        s.write_binlog(bl.commit(80, 81))
        s.wait_for_commit(80, 10.0)
        assert bl.decode(s.pull_commit_binlogs(0, max_bytes=64 << 20)[0][1]).prewrite_value \
            == bl.decode(payload).prewrite_value
    with Storage(tmp_path / "b", FAST, metrics=StorageMetrics()) as s:
        s.write_binlog(binlog_header(payload), payload)
    assert (tmp_path / "a" / "value" / "000001.vlog").read_bytes()[:HEADER_SIZE + len(payload)] \
        == (tmp_path / "b" / "value" / "000001.vlog").read_bytes()[:HEADER_SIZE + len(payload)]


def test_a_file_range_is_copied_in_pieces_where_copy_file_range_is_refused(tmp_path,
                                                                           monkeypatch):
    import errno
    import os

    from tidb_binlog.pump.storage.vlog import FileRange, ValueLog, encode_record

    def refused(*args):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refused, raising=False)
    payload = bytes(range(256)) * 9000  # > one 1 MiB piece
    src = tmp_path / "src"
    src.write_bytes(b"xx" + payload)
    record = encode_record(payload)
    with open(src, "rb") as f:
        log = ValueLog(tmp_path / "value", file_size_bytes=1 << 30, sync=False,
                       ts_of=lambda p: 1)
        try:
            log.append([record[:HEADER_SIZE], FileRange(f, 2, len(payload))], 1)
        finally:
            log.close()
    assert (tmp_path / "value" / "000001.vlog").read_bytes()[:len(record)] == record
