"""Batches packed for the hops between the pipeline's actors (tidb_binlog.packed)."""

from __future__ import annotations

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.packed import pack, unpack

SCHEMA = TableSchema.build("db", "t", ["id", "v"], ["id"])


def test_round_trip_keeps_items_and_models():
    items = [(5 << 18, b"\x08\x01payload"), (6 << 18, b"")]
    assert unpack(pack(items)) == items
    dml = DML("db", "t", DMLType.UPDATE, {"id": 1, "v": "new"}, {"id": 1, "v": "old"},
              schema=SCHEMA)
    parts = [(7 << 18, (dml,))]
    out = unpack(pack(parts))
    assert out == parts
    assert out[0][1][0].schema == SCHEMA


def test_pack_is_bytes_and_unpack_passes_anything_else_through():
    assert type(pack([])) is bytes
    batch = [(1, b"x")]
    assert unpack(batch) is batch
    assert unpack(None) is None
    assert unpack(42) == 42
