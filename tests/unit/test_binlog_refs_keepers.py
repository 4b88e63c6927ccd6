"""Large binlogs by reference beyond the row keeper's plain chunks: the file sink's pb
keeper, the Parquet keeper and loop control's verdict read a referenced binlog from a
:class:`~tidb_binlog.binlog_ref.ByteSource` through a window (down to 1 byte) and give
exactly what they give for the payload's bytes, which is what protobuf's decoding of the
whole payload gives; malformed payloads raise :class:`ProtocolError` through a source
too; and the merger's non-routed batches carry a large payload out of band."""

from __future__ import annotations

import pickle

import pytest
from test_drainer_binlog_refs import _Source
from test_drainer_chunks_unrouted import CHANNEL, _key, commit, mark_update, rows_of
from test_drainer_chunks_unrouted import _history as loop_history
from test_drainer_chunks_unrouted import keeper as loop_keeper
from test_drainer_txn_chunks import _Meta as LoopMeta
from test_drainer_txn_chunks import inserts
from test_drainer_wire_prewrite import MALFORMED
from test_parquet_large_txn import _inserts
from test_parquet_large_txn import _Meta as ParquetMeta
from test_pb_record_parts import _Meta as PbMeta
from test_pb_record_parts import big_commit
from test_pb_translate import pb_translator

import tidb_binlog.drainer.translate.payload_read as payload_read_module
from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef
from tidb_binlog.drainer.pipeline.merge_loop import OUT_OF_BAND_BYTES, MergeLoop
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.parquet.keeper import ParquetKeeper
from tidb_binlog.drainer.source.merge import Merger
from tidb_binlog.drainer.translate.keeper import PbKeeper, RowKeeper
from tidb_binlog.drainer.translate.pb import RecordPart, record_head
from tidb_binlog.errors import ProtocolError
from tidb_binlog.packed import pack

WINDOWS = [1, 7, 64, 1 << 20]


@pytest.fixture(params=WINDOWS)
def window(request, monkeypatch):
    """The keepers walk a referenced binlog through this window."""
    monkeypatch.setattr(payload_read_module, "REF_WINDOW_BYTES", request.param)
    return request.param


def _as_refs(items, payloads: dict, above: int):
    """``items`` with each payload of ``above`` bytes or more a reference (its bytes in
    ``payloads``, as the pump keeps them)."""
    out = []
    for ts, payload in items:
        if len(payload) >= above:
            payloads[ts] = payload
            out.append((ts, BinlogRef("pump-1", ts, ts - 1, len(payload))))
        else:
            out.append((ts, payload))
    return out


def _opener(payloads: dict, sources: list):
    def open_ref(ref):
        source = _Source(payloads[ref.commit_ts])
        sources.append(source)
        return source
    return open_ref


def _drain(k, items) -> list:
    """``translate_more`` until the keeper holds nothing: every item handed out."""
    out, more = k.translate_more(items)
    while more:
        got, more = k.translate_more(pack([]))
        out.extend(got)
    return out


def _checked_reads(sources, window: int, row_bytes: int) -> None:
    """Every source was read in pieces: a walk window, or a run of rows (a single larger
    row alone, rows asked one at a time in blocks of at most 1 MiB)."""
    assert sources
    bound = max(window, row_bytes)
    for source in sources:
        assert source.reads and all(n <= max(bound, 1 << 20) for _, n in source.reads)
        if window < source.size:
            assert max(n for _, n in source.reads) < source.size  # never read whole


# -- the file sink's pb keeper -------------------------------------------------------------

def _pb_keeper(chunk_rows: int, open_ref=None) -> PbKeeper:
    k = PbKeeper(TaskSettings(cluster_id=1, txn_chunk_rows=chunk_rows), PbMeta(),
                 open_ref=open_ref)
    k.reset(2)
    return k


def _pb_items():
    return [(50, bl.encode(big_commit(2, commit_ts=50))),
            (100, bl.encode(big_commit(30, commit_ts=100))),
            (150, bl.encode(big_commit(1, commit_ts=150)))]


def _record_of(out, ts: int) -> bytes:
    """The record of ``ts`` as the file sink writes it (its parts joined behind the head)."""
    recs = [rec for t, rec, _ in out if t == ts]
    if len(recs) == 1 and type(recs[0]) is not RecordPart:
        return recs[0]
    events = b"".join(p.events for p in recs)
    return record_head(ts, len(events)) + events


def test_pb_parts_from_a_source_are_protobufs_record_byte_for_byte(window):
    items = _pb_items()
    # protobuf's decoding of the whole payload, translated whole
    expected = {ts: pb_translator().translate(bl.decode(p)) for ts, p in items}
    payloads: dict = {}
    sources: list = []
    k = _pb_keeper(8, _opener(payloads, sources))
    out = _drain(k, _as_refs(items, payloads, 1000))
    assert list(payloads) == [100]  # the large one went by reference
    assert sum(type(rec) is RecordPart for _, rec, _ in out) > 2  # in parts
    assert {ts: _record_of(out, ts) for ts in (50, 100, 150)} == expected
    _checked_reads(sources, window, 200)
    assert k.ref_stats["refs"] == 1 and k.ref_stats["whole"] == 0
    assert k.ref_stats["bytes"] == sum(n for s in sources for _, n in s.reads)


def test_pb_parts_through_a_one_byte_window_match_the_bytes_path():
    binlog = big_commit(60)
    payload = bl.encode(binlog)
    source = _Source(payload)
    from_bytes = list(pb_translator().chunks(payload, 7))
    assert list(pb_translator().chunks(source, 7, window=1)) == from_bytes
    assert max(n for _, n in source.reads) < 200  # one row at most
    assert pb_translator().chunks(_Source(bl.encode(big_commit(3))), 1000) is None  # small


@pytest.mark.parametrize("bad", MALFORMED)
def test_pb_keeper_refuses_a_malformed_referenced_binlog(bad, window):
    b = bl.commit(99, 100)
    b.prewrite_value = bad + b"\x00" * 64  # large enough to be read in parts
    payloads = {100: bl.encode(b)}
    k = _pb_keeper(4, _opener(payloads, []))
    with pytest.raises(ProtocolError, match="malformed prewrite value"):
        _drain(k, [(100, BinlogRef("pump-1", 100, 99, len(payloads[100])))])


def test_pb_keeper_refuses_a_referenced_payload_that_is_no_binlog():
    payloads = {100: b"\xff" * 500}
    k = _pb_keeper(4, _opener(payloads, []))
    with pytest.raises(ProtocolError, match="malformed binlog payload"):
        _drain(k, [(100, BinlogRef("pump-1", 100, 99, 500))])


# -- the Parquet keeper --------------------------------------------------------------------

def _parquet_keeper(chunk_rows: int, open_ref=None) -> ParquetKeeper:
    k = ParquetKeeper(TaskSettings(cluster_id=1, txn_chunk_rows=chunk_rows), ParquetMeta(), 2,
                      open_ref=open_ref)
    k.reset(2)
    return k


def _changes(out) -> list:
    return [(ts, None if c is None else (c.more, [(r[1], r[2], r[3]) for r in c.rows]))
            for ts, c, _ in out]


def test_parquet_chunks_from_a_source_match_protobufs_whole_decoding(window):
    items = [_inserts(50, 100, 101), _inserts(60, 0, 23), _inserts(70, 200, 201)]
    whole = _parquet_keeper(0).translate(pack(items))  # protobuf's decoding, whole
    payloads: dict = {}
    sources: list = []
    k = _parquet_keeper(4, _opener(payloads, sources))
    out = _drain(k, _as_refs(items, payloads, 200))
    assert list(payloads) == [60]
    assert [c.more for ts, c, _ in out if ts == 60] == [True] * 5 + [False]
    rows = [(r[1], r[2], r[3]) for _, c, _ in out for r in c.rows]
    assert rows == [(r[1], r[2], r[3]) for _, c, _ in whole for r in c.rows]
    _checked_reads(sources, window, 40)
    assert k.ref_stats["refs"] == 1 and k.ref_stats["whole"] == 0


@pytest.mark.parametrize("bad", MALFORMED)
def test_parquet_keeper_refuses_a_malformed_referenced_binlog(bad, window):
    b = bl.commit(59, 60)
    b.prewrite_value = bad + b"\x00" * 64
    payloads = {60: bl.encode(b)}
    k = _parquet_keeper(4, _opener(payloads, []))
    with pytest.raises(ProtocolError, match="malformed prewrite value"):
        _drain(k, [(60, BinlogRef("pump-1", 60, 59, len(payloads[60])))])


def test_parquet_keeper_reads_the_out_of_band_form():
    big = _inserts(60, 0, 10)
    items = [(60, pickle.PickleBuffer(big[1]))]  # as Ray hands a routed_items list over
    assert _changes(_drain(_parquet_keeper(4), items)) == \
        _changes(_drain(_parquet_keeper(4), pack([big])))


# -- loop control's verdict ----------------------------------------------------------------

def _loop_items():
    return [
        (60, commit([inserts(0, 10), mark_update(CHANNEL)], 60)),       # ours: dropped
        (70, commit([inserts(20, 30), mark_update(CHANNEL + 1)], 70)),  # other: mark removed
        (80, commit([mark_update(CHANNEL + 1), inserts(40, 50)], 80)),
        (90, commit([inserts(60, 70)], 90)),                            # no mark
        (95, commit([inserts(90, 91), mark_update(CHANNEL)], 95)),      # small, ours
    ]


def _loop_keeper_with_refs(open_ref, *, exactly_once=False, loopback=True) -> RowKeeper:
    k = RowKeeper(TaskSettings(cluster_id=1, worker_count=3, txn_chunk_rows=4,
                               exactly_once=exactly_once, loopback_control=loopback,
                               channel_id=CHANNEL), LoopMeta(loop_history()), 4,
                  open_ref=open_ref)
    k.reset(4)
    return k


def _sorted_rows(rows: dict) -> dict:
    return {ts: sorted(map(_key, r)) for ts, r in rows.items() if r}


def test_loop_verdict_from_a_source_matches_the_whole_path(window):
    items = _loop_items()
    # the whole path: protobuf decodes every payload, the verdict on the whole Txn
    whole = rows_of([loop_keeper(0, loopback=True).translate(pack(items))])
    payloads: dict = {}
    sources: list = []
    k = _loop_keeper_with_refs(_opener(payloads, sources))
    refs = _as_refs(items, payloads, 100)
    assert sorted(payloads) == [60, 70, 80, 90]
    got = rows_of([_drain(k, pack(refs))])
    assert _sorted_rows(got) == _sorted_rows(whole)
    assert not got.get(60) and not got.get(95)
    assert k._loopback.dropped == 2 and k.ref_stats["whole"] == 0
    _checked_reads(sources, window, 60)


def test_loop_verdict_reuses_the_chunks_walk():
    """The verdict adds no second walk of a referenced binlog: the bytes read with loop
    control are those without it plus the mark rows (the dropped transaction reads its
    walk and its mark rows only)."""
    items = [(70, commit([inserts(20, 30), mark_update(CHANNEL + 1)], 70)),
             (60, commit([inserts(0, 10), mark_update(CHANNEL)], 60))]
    read = {}
    for loopback in (False, True):
        payloads: dict = {}
        sources: list = []
        k = _loop_keeper_with_refs(_opener(payloads, sources), loopback=loopback)
        _drain(k, pack(_as_refs(items, payloads, 100)))
        read[loopback] = [sum(n for _, n in s.reads) for s in sources]
    kept, dropped = read[True]
    assert kept - read[False][0] < 64  # the mark row, read again by range: tiny
    assert dropped < read[False][1] * 3 // 4  # its users rows were never read


@pytest.mark.parametrize("bad", MALFORMED)
def test_loop_verdict_refuses_a_malformed_referenced_binlog(bad):
    b = bl.commit(59, 60)
    b.prewrite_value = bad + b"\x00" * 64
    payloads = {60: bl.encode(b)}
    k = _loop_keeper_with_refs(_opener(payloads, []))
    with pytest.raises(ProtocolError, match="malformed prewrite value"):
        _drain(k, pack([(60, BinlogRef("pump-1", 60, 59, len(payloads[60])))]))


# -- the merger: out of band on the non-routed path ----------------------------------------

class _Calls:
    def __init__(self):
        self.sent = []

    def send(self, seq, items):
        self.sent.append(items)
        return seq

    def keeper_more(self):
        return False

    def done(self, handle):
        return True

    def result(self, handle):
        return None


class _Feed:
    def __init__(self, batches):
        self.batches = batches

    def poll(self):
        out, self.batches = self.batches, []
        return out

    def refs(self):
        return []


@pytest.mark.parametrize("sink", ["mysql", "file", "parquet"])
def test_non_routed_batches_carry_a_large_payload_out_of_band(sink):
    big = b"x" * OUT_OF_BAND_BYTES
    calls = _Calls()
    settings = TaskSettings(cluster_id=1, exactly_once=False, sink=sink)
    loop = MergeLoop(settings, calls, Merger(0))
    loop.merger.add_source("p")
    loop.step({"p": _Feed([([(10, b"small"), (20, big)], 20)])})
    loop.step({"p": _Feed([([(30, b"tiny")], 30)])})
    first, second = calls.sent
    assert type(first) is list and first[0] == (10, b"small")
    assert type(first[1][1]) is pickle.PickleBuffer and first[1][1].raw().obj is big
    assert type(second) is bytes  # a batch of small payloads stays packed
