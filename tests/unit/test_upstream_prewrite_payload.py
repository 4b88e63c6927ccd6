"""The upstream's Prewrite payload built from row images is byte for byte protobuf's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.upstream.prewrite_payload import prewrite_payload


def _mut(table_id, inserted=(), updated=(), deleted=(), sequence=()):
    return SimpleNamespace(table_id=table_id, inserted=list(inserted), updated=list(updated),
                           deleted=list(deleted), sequence=list(sequence))


def _protobuf(start_ts, version, muts, key):
    pv = bl.new_prewrite_value(version, [
        bl.new_table_mutation(m.table_id, inserted_rows=m.inserted, updated_rows=m.updated,
                              deleted_rows=m.deleted, sequence=m.sequence) for m in muts])
    return bl.encode(bl.prewrite(start_ts, bl.encode(pv), prewrite_key=key))


CASES = [
    (5, 1, [_mut(45, inserted=[b"a" * 200, b"b" * 3], sequence=[0, 0])], b"\x74\x80k"),
    (2**62 + 3, 2**40, [_mut(45, inserted=[b"r" * 130], updated=[b"u" * 20000],
                              deleted=[b"", b"d"], sequence=[0, 1, 4, 4]),
                         _mut(-7, deleted=[b"x" * 127, b"y" * 128], sequence=[4, 4])], None),
    (9, 0, [_mut(2**63 - 1, inserted=[bytes(range(256)) * 700], sequence=[0])], b""),
    (9, -1, [], b"pk"),
]


@pytest.mark.parametrize("start_ts,version,muts,key", CASES)
def test_the_payload_is_what_protobuf_writes(start_ts, version, muts, key):
    payload = prewrite_payload(start_ts, version, muts, key)
    assert payload == _protobuf(start_ts, version, muts, key)
    b = bl.decode(payload)
    assert b.tp == bl.BinlogType.PREWRITE and b.start_ts == start_ts


@pytest.mark.parametrize("start_ts,version,muts,key", CASES)
def test_the_encoder_says_its_size_and_consumes_the_rows_it_wrote(start_ts, version, muts, key):
    import io

    from tidb_binlog.upstream.prewrite_payload import PrewriteEncoder

    want = _protobuf(start_ts, version, muts, key)
    enc = PrewriteEncoder(start_ts, version, muts, key)
    assert enc.size == len(want)
    out = io.BytesIO()
    enc.write_to(out, consume=True)
    assert out.getvalue() == want
    assert all(r is None for m in muts for r in (*m.inserted, *m.updated, *m.deleted))
