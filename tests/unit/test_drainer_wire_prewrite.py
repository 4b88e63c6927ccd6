"""translate/wire.py reads a Commit binlog from its bytes as protobuf parses it."""

from __future__ import annotations

import pickle

import pytest
from test_drainer_txn_chunks import _call, _keeper, commit_with, inserts, mixed, translator

from tidb_binlog import binlog as bl
from tidb_binlog.drainer.pipeline import merge_loop
from tidb_binlog.drainer.translate.wire import WirePrewrite, read_binlog
from tidb_binlog.errors import ProtocolError
from tidb_binlog.packed import unpack


def _same(pv_bytes: bytes) -> None:
    """WirePrewrite of the bytes reads what protobuf's PrewriteValue does."""
    pb = bl.decode_prewrite_value(pv_bytes)
    wire = WirePrewrite(pv_bytes)
    assert wire.schema_version == pb.schema_version
    assert len(wire.mutations) == len(pb.mutations)
    for w, p in zip(wire.mutations, pb.mutations, strict=True):
        assert w.table_id == p.table_id
        assert list(w.sequence) == list(p.sequence)
        for name in ("inserted_rows", "updated_rows", "deleted_rows"):
            rows = getattr(w, name)
            assert len(rows) == len(getattr(p, name))
            assert list(rows) == list(getattr(p, name))
            assert rows[1:3] == list(getattr(p, name))[1:3]
            if len(rows):
                assert rows[-1] == getattr(p, name)[-1]


def test_reads_mixed_mutations_as_protobuf_does():
    binlog = commit_with([inserts(0, 10), mixed(11), inserts(50, 54)])
    _same(binlog.prewrite_value)
    _same(bl.encode(bl.new_prewrite_value(-5, [bl.new_table_mutation(-3)])))  # negatives
    _same(b"")


def test_packed_sequence_unknown_fields_and_enum_values():
    # TableMutation{table_id 10, inserted_rows "ab", field 9 (unknown, varint),
    # sequence packed [0, 9 (not a MutationType: dropped), 4], field 15 fixed32, sequence 1
    # unpacked}; PrewriteValue{schema_version 7 (twice: the last wins), that mutation,
    # field 3 fixed64 (unknown)}
    mut = (b"\x08\x0a" b"\x12\x02ab" b"\x48\x05" b"\x3a\x03\x00\x09\x04"
           b"\x7d\x01\x02\x03\x04" b"\x38\x01")
    pv = b"\x08\x03" + b"\x12" + bytes([len(mut)]) + mut + b"\x19" + bytes(8) + b"\x08\x07"
    _same(pv)
    assert list(WirePrewrite(pv).mutations[0].sequence) == [0, 4, 1]
    assert WirePrewrite(pv).schema_version == 7


MALFORMED = [
    b"\x12\x05\x08",  # a mutation longer than the value
    b"\x08",  # a truncated varint
    b"\x08" + b"\xff" * 11,  # a varint of 11 bytes
    b"\x12\x02\x12\x05",  # a row longer than its mutation
    b"\x0b",  # wire type 3 (a group)
]


@pytest.mark.parametrize("bad", MALFORMED)
def test_malformed_bytes_raise_protocol_error_up_front(bad):
    with pytest.raises(ProtocolError):
        bl.decode_prewrite_value(bad)  # protobuf refuses them too
    with pytest.raises(ProtocolError, match=r"malformed prewrite value \(\d+ bytes\)"):
        WirePrewrite(bad)


def test_read_binlog_header_and_fallback():
    binlog = commit_with([inserts(0, 3)], commit_ts=100)
    binlog.ddl_job_id = 0
    payload = bl.encode(binlog)
    wire = read_binlog(payload)
    assert (wire.tp, wire.start_ts, wire.commit_ts, wire.ddl_job_id) == (1, 99, 100, 0)
    assert bytes(wire.prewrite_value) == binlog.prewrite_value
    assert read_binlog(b"") is None  # no tp: the caller's protobuf parse raises
    assert read_binlog(payload[:-3]) is None  # truncated
    assert read_binlog(bl.encode(bl.commit(-2, 5))).start_ts == -2


@pytest.mark.parametrize("max_rows", [1, 4, 7, 100])
def test_chunks_of_the_wire_binlog_equal_the_whole_translation(max_rows):
    binlog = commit_with([inserts(0, 10), mixed(11), inserts(50, 54)])
    whole = translator().translate(binlog).dmls
    wire = read_binlog(bl.encode(binlog))
    chunks = list(translator().translate_chunks(wire, max_rows))
    assert [d for dmls, _ in chunks for d in dmls] == list(whole)
    assert [last for _, last in chunks] == [False] * (len(chunks) - 1) + [True]


def test_a_large_payload_goes_to_the_routed_keeper_out_of_band():
    small = (50, bl.encode(commit_with([inserts(100, 101)], commit_ts=50)))
    big = (60, bl.encode(commit_with([inserts(0, 10)], commit_ts=60)))
    assert type(merge_loop.routed_items([small, big])) is bytes  # packed: nothing large
    limit, merge_loop.OUT_OF_BAND_BYTES = merge_loop.OUT_OF_BAND_BYTES, len(big[1])
    try:
        items = merge_loop.routed_items([small, big])
    finally:
        merge_loop.OUT_OF_BAND_BYTES = limit
    assert items[0] == small and isinstance(items[1][1], pickle.PickleBuffer)
    # as Ray carries it: the big payload out of band, handed over as a buffer, not bytes
    buffers: list = []
    carried = pickle.dumps(items, 5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and len(carried) < len(big[1])
    received = pickle.loads(carried, buffers=[b.raw() for b in buffers])
    got = merge_loop.keeper_items(received)
    assert got[0] == small and isinstance(got[1][1], memoryview)
    assert bytes(got[1][1]) == big[1]
    # the keeper's answers are those of the packed batch: same plans, same rows
    answers = []
    for batch in (received, merge_loop.pack([small, big])):
        keeper = _keeper(chunk_rows=4)
        out = keeper.translate_routed(batch, 3)  # not packed again: as Ray hands it over
        calls = [(unpack(out[0]), [unpack(p) for p in out[1:-1]], out[-1])]
        while calls[-1][2]:
            calls.append(_call(keeper, []))
        answers.append(calls)
    assert answers[0] == answers[1] and len(answers[0]) == 3


def test_the_keeper_never_parses_a_large_binlog_with_protobuf(monkeypatch):
    # what held the transaction two or three times over: a Binlog message, its
    # prewrite_value copy, a PrewriteValue message (the rows must come from the payload)
    big = commit_with([inserts(0, 10)], commit_ts=60)
    whole = translator().translate(big).dmls
    payload = bl.encode(big)

    def refuse(*_):
        raise AssertionError("protobuf parse of a large binlog")

    monkeypatch.setattr(bl, "decode_prewrite_value", refuse)
    monkeypatch.setattr(bl, "decode", refuse)
    keeper = _keeper(chunk_rows=4)
    calls = [_call(keeper, [(60, payload)])]
    while calls[-1][2]:
        calls.append(_call(keeper, []))
    rows = [d for _, payloads, _ in calls for w in payloads for part in w for d in part[1]]
    assert rows == list(whole)
