"""The serialized Prewrite binlog of a transaction, built straight from its row images.

The protobuf way (``TableMutation`` messages, a ``PrewriteValue``, its bytes, a
``Binlog`` holding them, its bytes) copies the row data four times on its way to the
pump client; a million-row transaction held 7x its data at the peak. Here the row
images the capture collected (one ``bytes`` per row) are framed and joined ONCE into
the bytes protobuf would produce: ``Binlog{tp, start_ts, commit_ts, prewrite_key,
prewrite_value = PrewriteValue{schema_version, mutations}, ddl_job_id,
ddl_schema_state}``, fields in number order, proto2 scalars TiDB always writes included,
``TableMutation`` fields in number order (``sequence`` unpacked, as proto2 writes it).
A test checks the bytes against protobuf's for mixed transactions.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["prewrite_payload"]

_U64 = (1 << 64) - 1
_ONE_BYTE = [bytes((i,)) for i in range(0x80)]
_SEQ_BYTES = [b"\x38" + bytes((i,)) for i in range(0x80)]  # TableMutation.sequence items


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint (negative int64: 10-byte two's complement)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value &= _U64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Lengths(dict):
    """varint(n) by n, made once per distinct row length (rows of a table have few)."""

    def __missing__(self, n: int) -> bytes:
        v = self[n] = _varint(n)
        return v


def _mutation_parts(m, lengths: _Lengths) -> tuple[list, int]:
    """The framed body of one ``TableMutation`` as parts, and its size."""
    parts = [b"\x08", _varint(m.table_id)]
    size = 1 + len(parts[1])
    for tag, rows in ((b"\x12", m.inserted), (b"\x1a", m.updated), (b"\x32", m.deleted)):
        for row in rows:
            n = len(row)
            prefix = lengths[n]
            parts += (tag, prefix, row)
            size += 1 + len(prefix) + n
    seq = b"".join([_SEQ_BYTES[t] for t in m.sequence])
    parts.append(seq)
    return parts, size + len(seq)


def prewrite_payload(start_ts: int, schema_version: int, mutations: Sequence,
                     prewrite_key: bytes | None) -> bytes:
    """``bl.encode(bl.prewrite(start_ts, bl.encode(bl.new_prewrite_value(schema_version,
    [TableMutation of each m])), prewrite_key=prewrite_key))`` with one copy of the rows.

    ``mutations`` are the capture's per-table records (``table_id``, ``inserted``,
    ``updated``, ``deleted`` row-image lists, ``sequence``), those with a sequence only.
    """
    lengths = _Lengths()
    pv_parts = [b"\x08", _varint(schema_version)]
    pv_size = 1 + len(pv_parts[1])
    for m in mutations:
        body, size = _mutation_parts(m, lengths)
        prefix = _varint(size)
        pv_parts += (b"\x12", prefix)
        pv_parts += body
        pv_size += 1 + len(prefix) + size
    head = [b"\x08\x00\x10", _varint(start_ts), b"\x18\x00"]
    if prewrite_key is not None:
        head += (b"\x22", _varint(len(prewrite_key)), prewrite_key)
    head += (b"\x2a", _varint(pv_size))
    return b"".join([*head, *pv_parts, b"\x38\x00\x40\x00"])
