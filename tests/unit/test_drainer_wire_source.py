"""translate/wire.py read from a ByteSource through a bounded window (a binlog served by
reference): the same reading as from bytes and as protobuf's, whatever the window, with
each read bounded (a window for the walk, a chunk's span for its rows) and the bytes
read in all about twice the prewrite value's."""

from __future__ import annotations

import random

import pytest
from test_drainer_txn_chunks import commit_with, inserts, mixed, translator
from test_drainer_wire_prewrite import MALFORMED

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BytesSource
from tidb_binlog.drainer.translate.wire import (
    SourceSlice,
    WirePrewrite,
    read_binlog,
    read_binlog_from,
)
from tidb_binlog.errors import ProtocolError, UnavailableError

WINDOWS = [1, 7, 64, 4096]


class Counting(BytesSource):
    """A BytesSource that notes every read ``(offset, n)``."""

    __slots__ = ("reads",)

    def __init__(self, buf: bytes):
        super().__init__(buf)
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, n: int):
        self.reads.append((offset, n))
        return super().read(offset, n)


# -- a protobuf encoder of our own, for the shapes Go's encoder never writes -------------
def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes_field(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _unknown(rng: random.Random) -> bytes:
    field = rng.choice([8, 9, 15, 100, 5000])  # not a TableMutation/PrewriteValue field
    wire = rng.choice([0, 1, 2, 5])
    value = {0: _varint(rng.randrange(1 << 64)), 1: rng.randbytes(8), 5: rng.randbytes(4),
             2: _varint(n := rng.randrange(40)) + rng.randbytes(n)}[wire]
    return _key(field, wire) + value


def _random_mutation(rng: random.Random) -> bytes:
    parts = [_key(1, 0) + _varint(rng.choice([0, 10, -3, 1 << 40, rng.randrange(1 << 63)]))]
    for field in (2, 3, 6):
        for _ in range(rng.choice([0, 1, 3, 20])):
            parts.append(_bytes_field(field, rng.randbytes(rng.choice([0, 1, 5, 70, 300]))))
    seq = [rng.choice([0, 1, 2, 3, 4, 9, 300]) for _ in range(rng.randrange(30))]
    while seq:  # packed or not, in pieces
        n = rng.randrange(1, len(seq) + 1)
        piece, seq = seq[:n], seq[n:]
        if rng.random() < 0.5:
            parts.append(_bytes_field(7, b"".join(_varint(v) for v in piece)))
        else:
            parts.extend(_key(7, 0) + _varint(v) for v in piece)
    parts.extend(_unknown(rng) for _ in range(rng.randrange(3)))
    rng.shuffle(parts)  # any field order (rows of one list keep their order)
    return b"".join(parts)


def _random_prewrite(rng: random.Random) -> bytes:
    parts = [_key(1, 0) + _varint(rng.randrange(-5, 1 << 40))
             for _ in range(rng.randrange(3))]  # the last one wins
    parts += [_bytes_field(2, _random_mutation(rng)) for _ in range(rng.randrange(4))]
    parts += [_unknown(rng) for _ in range(rng.randrange(3))]
    rng.shuffle(parts)
    return b"".join(parts)


def _listed(rows) -> list[bytes]:
    return [bytes(r) for r in rows]


def _same(pv: bytes, window: int) -> WirePrewrite:
    """WirePrewrite.from_source reads what protobuf does, every walk read at most
    ``window`` bytes and every row read within the span of the rows asked for."""
    pb = bl.decode_prewrite_value(pv)
    source = Counting(pv)
    wire = WirePrewrite.from_source(source, window=window)
    assert all(n <= window for _, n in source.reads)
    assert wire.schema_version == pb.schema_version
    assert len(wire.mutations) == len(pb.mutations)
    for w, p in zip(wire.mutations, pb.mutations, strict=True):
        assert w.table_id == p.table_id
        assert list(w.sequence) == list(p.sequence)
        for name in ("inserted_rows", "updated_rows", "deleted_rows"):
            rows, want = getattr(w, name), list(getattr(p, name))
            assert len(rows) == len(want)
            for lo, hi in ((0, len(rows)), (1, 3), (len(rows) // 2, len(rows))):
                source.reads.clear()
                assert rows[lo:hi] == want[lo:hi]
                if hi > lo and len(want[lo:hi]):
                    first, last = rows._starts[lo], rows._stops[min(hi, len(rows)) - 1]
                    assert all(first <= a and a + n <= last for a, n in source.reads)
            assert list(rows) == want
            assert [rows[i] for i in range(len(rows))] == want  # one at a time (read ahead)
            if want:
                assert rows[-1] == want[-1]
    return wire


@pytest.mark.parametrize("window", WINDOWS)
def test_reads_what_protobuf_reads_through_any_window(window):
    binlog = commit_with([inserts(0, 10), mixed(11), inserts(50, 54)])
    _same(binlog.prewrite_value, window)
    _same(bl.encode(bl.new_prewrite_value(-5, [bl.new_table_mutation(-3)])), window)
    _same(b"", window)
    # packed sequence with a value no MutationType names, unknown fields, the last
    # schema_version winning (as test_drainer_wire_prewrite)
    mut = (b"\x08\x0a" b"\x12\x02ab" b"\x48\x05" b"\x3a\x03\x00\x09\x04"
           b"\x7d\x01\x02\x03\x04" b"\x38\x01")
    pv = b"\x08\x03" + b"\x12" + bytes([len(mut)]) + mut + b"\x19" + bytes(8) + b"\x08\x07"
    assert list(_same(pv, window).mutations[0].sequence) == [0, 4, 1]


@pytest.mark.parametrize("seed", range(6))
def test_random_prewrite_values_and_their_truncations_against_protobuf(seed):
    rng = random.Random(seed)
    for _ in range(25):
        pv = _random_prewrite(rng)
        window = rng.choice(WINDOWS + [3, 19, 20, 21])
        _same(pv, window)
        # cut anywhere (a varint or a field's data across the end, or a clean cut):
        # refused exactly when protobuf refuses it
        cut = pv[:rng.randrange(len(pv) + 1)]
        try:
            bl.decode_prewrite_value(cut)
        except ProtocolError:
            with pytest.raises(ProtocolError, match="malformed prewrite value"):
                WirePrewrite.from_source(BytesSource(cut), window=window)
        else:
            _same(cut, window)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("bad", MALFORMED + [
    b"\x12\x03\x3a\x05\x00",  # a packed sequence longer than its mutation
    b"\x12\x02\x3a\x01",  # a packed sequence cut after its length
    b"\x12\x02\x38\x80",  # a sequence varint cut at the mutation's end
    b"\x00\x01",  # field number 0
])
def test_malformed_bytes_raise_before_any_row_through_any_window(bad, window):
    with pytest.raises(ProtocolError):
        bl.decode_prewrite_value(bad)
    with pytest.raises(ProtocolError, match=r"malformed prewrite value \(\d+ bytes at offset"):
        WirePrewrite.from_source(BytesSource(bad), window=window)
    # a straddle past a window boundary: the same fault deep inside a larger value
    good = bl.encode(bl.new_prewrite_value(3, [bl.new_table_mutation(
        10, inserted_rows=[bytes(30)] * 5, sequence=[0] * 5)]))
    with pytest.raises(ProtocolError):
        WirePrewrite.from_source(BytesSource(good + bad), window=window)


@pytest.mark.parametrize("window", [1, 7, 64])
def test_read_binlog_from_a_source(window):
    binlog = commit_with([inserts(0, 3)], commit_ts=100)
    binlog.ddl_job_id = 0
    binlog.ddl_query = b"q" * 100  # a bytes field after prewrite_value: skipped unread
    payload = bl.encode(binlog)
    source = Counting(payload)
    wire = read_binlog_from(source, window)
    assert all(n <= window for _, n in source.reads)
    assert (wire.tp, wire.start_ts, wire.commit_ts, wire.ddl_job_id) == (1, 99, 100, 0)
    pv = wire.prewrite_value
    assert isinstance(pv, SourceSlice) and len(pv) == len(binlog.prewrite_value)
    assert payload[pv.start:pv.stop] == binlog.prewrite_value
    assert sum(n for _, n in source.reads) < len(payload)  # the ddl_query was not read
    assert read_binlog_from(BytesSource(b""), window) is None
    assert read_binlog_from(BytesSource(payload[:-3]), window) is None  # truncated
    assert read_binlog_from(BytesSource(bl.encode(bl.commit(-2, 5))), window).start_ts == -2
    rng = random.Random(window)
    for _ in range(40):  # any cut: None exactly when read_binlog (from bytes) says None
        cut = payload[:rng.randrange(len(payload))]
        want = read_binlog(cut)
        got = read_binlog_from(BytesSource(cut), window)
        assert (got is None) == (want is None)
        if got is not None:
            assert (got.tp, got.commit_ts, len(got.prewrite_value)) == (
                want.tp, want.commit_ts, len(want.prewrite_value))


@pytest.mark.parametrize("window", [1, 7, 64])
@pytest.mark.parametrize("max_rows", [1, 4, 100])
def test_chunks_of_a_source_binlog_equal_the_whole_translation(window, max_rows):
    binlog = commit_with([inserts(0, 10), mixed(11), inserts(50, 54)])
    whole = translator().translate(binlog).dmls
    wire = read_binlog_from(BytesSource(bl.encode(binlog)), window)
    chunks = list(translator().translate_chunks(wire, max_rows))
    assert [d for dmls, _ in chunks for d in dmls] == list(whole)
    assert [last for _, last in chunks] == [False] * (len(chunks) - 1) + [True]


@pytest.mark.parametrize("window", [1024, 4096, 1 << 20])
def test_a_full_walk_and_all_rows_read_about_twice_the_payload(window):
    rows = [bytes([i % 251]) * (50 + i % 200) for i in range(3000)]
    pv = bl.encode(bl.new_prewrite_value(3, [
        bl.new_table_mutation(10, inserted_rows=rows[:2000], sequence=[0] * 2000),
        bl.new_table_mutation(20, inserted_rows=rows[2000:], sequence=[0] * 1000)]))
    source = Counting(pv)
    binlog_source = Counting(bl.encode(_with_value(pv)))
    for src, wire in ((source, WirePrewrite.from_source(source, window=window)),
                      (binlog_source, WirePrewrite(read_binlog_from(binlog_source, window)
                                                   .prewrite_value))):
        walked = sum(n for _, n in src.reads)
        assert max(n for _, n in src.reads) <= window
        for mut in wire.mutations:
            for lo in range(0, len(mut.inserted_rows), 500):  # chunks of 500 rows
                chunk = mut.inserted_rows[lo:lo + 500]
                assert len(chunk) == min(500, len(mut.inserted_rows) - lo)
        total = sum(n for _, n in src.reads)
        assert walked <= len(src._buf) + 64
        assert total <= 2 * len(src._buf) + 64, (walked, total, len(src._buf))


def _with_value(pv: bytes):
    b = bl.commit(99, 100)
    b.prewrite_value = pv
    return b


def test_rows_of_two_lists_interleaved_take_smaller_reads():
    # inserted and deleted rows alternate in the bytes, the deleted ones 100x larger:
    # reading the small inserted rows by span would read the large ones too
    small, large = b"i" * 10, b"d" * 1000
    mut = b"\x08\x0a" + b"".join(_bytes_field(2, small) + _bytes_field(6, large)
                                 for _ in range(50))
    pv = _bytes_field(2, mut)
    source = Counting(pv)
    wire = WirePrewrite.from_source(source, window=1 << 20)
    source.reads.clear()
    assert wire.mutations[0].inserted_rows[0:50] == [small] * 50
    assert sum(n for _, n in source.reads) <= 50 * (2 * len(small) + 16)
    source.reads.clear()
    assert wire.mutations[0].deleted_rows[0:50] == [large] * 50
    assert sum(n for _, n in source.reads) <= 2 * 50 * len(large)


def test_errors_of_the_source_pass_through_and_a_short_read_is_refused():
    pv = bl.encode(bl.new_prewrite_value(3, [bl.new_table_mutation(
        10, inserted_rows=[bytes(30)] * 5, sequence=[0] * 5)]))

    class Gone(BytesSource):
        def read(self, offset, n):
            raise UnavailableError("pump gone")

    class Short(BytesSource):
        def read(self, offset, n):
            return super().read(offset, n)[:-1]

    with pytest.raises(UnavailableError):
        WirePrewrite.from_source(Gone(pv))
    with pytest.raises(UnavailableError):
        read_binlog_from(Gone(bl.encode(_with_value(pv))))
    with pytest.raises(ProtocolError, match="returned 1 bytes at offset 0, asked for 2"):
        WirePrewrite.from_source(Short(pv), window=2)
    with pytest.raises(ValueError, match="window must be >= 1"):
        WirePrewrite.from_source(BytesSource(pv), window=0)


@pytest.mark.parametrize("window", [1, 2, 3, 5, 7, 11])
def test_a_packed_sequence_of_long_varints_across_windows(window):
    # values of 2 and 10 bytes (300 and -1 are no MutationType: dropped) between types
    values = [300, 1, (1 << 64) - 1, 2, 300, 3, 0] * 7
    mut = b"\x08\x0a" + _bytes_field(7, b"".join(_varint(v) for v in values))
    pv = _bytes_field(2, mut) + b"\x08\x05"
    wire = _same(pv, window)
    assert list(wire.mutations[0].sequence) == [1, 2, 3, 0] * 7
