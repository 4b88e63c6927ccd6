"""The serialized Prewrite binlog of a transaction, built straight from its row images.

The protobuf way (``TableMutation`` messages, a ``PrewriteValue``, its bytes, a
``Binlog`` holding them, its bytes) copies the row data four times on its way to the
pump client; a million-row transaction held 6-7x its data at the peak. Here the row
images the capture collected (one ``bytes`` per row) are written once, in order, into
the stream the pump client builds its request in (:class:`PrewriteEncoder`), each row
image dropped from its list as soon as it is written (``consume``), so the rows and
their serialized copy are never both whole in memory. The bytes are what protobuf
writes: ``Binlog{tp, start_ts, commit_ts, prewrite_key, prewrite_value =
PrewriteValue{schema_version, mutations}, ddl_job_id, ddl_schema_state}``, fields in
number order, the proto2 scalars TiDB always writes included, ``TableMutation`` fields
in number order (``sequence`` unpacked, as proto2 writes it). A test checks them against
protobuf's for mixed transactions.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

__all__ = ["PrewriteEncoder", "prewrite_payload"]

_U64 = (1 << 64) - 1
_ONE_BYTE = [bytes((i,)) for i in range(0x80)]
_SEQ_BYTES = [b"\x38" + bytes((i,)) for i in range(0x80)]  # TableMutation.sequence items
_ROW_TAGS = (b"\x12", b"\x1a", b"\x32")  # inserted_rows, updated_rows, deleted_rows


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


class _Prefixes(dict):
    """``tag + varint(n)`` by ``(tag, n)``, made once per distinct row length."""

    def __missing__(self, key: tuple[bytes, int]) -> bytes:
        v = self[key] = key[0] + _varint(key[1])
        return v


class PrewriteEncoder:
    """The Prewrite binlog of ``mutations`` (the capture's per-table records:
    ``table_id``, ``inserted``/``updated``/``deleted`` row-image lists, ``sequence``;
    those with a sequence only): :attr:`size` in bytes, :meth:`write_to` a stream."""

    def __init__(self, start_ts: int, schema_version: int, mutations: Sequence,
                 prewrite_key: bytes | None):
        self.start_ts = start_ts
        self.schema_version = schema_version
        self.mutations = list(mutations)
        self.prewrite_key = prewrite_key
        self._prefixes = _Prefixes()
        self._sizes = [self._mutation_size(m) for m in self.mutations]
        self._pv_size = 1 + len(_varint(schema_version)) + sum(
            1 + len(_varint(s)) + s for s in self._sizes)
        self.size = len(self._head()) + self._pv_size + 4

    def _mutation_size(self, m) -> int:
        size = 1 + len(_varint(m.table_id)) + 2 * len(m.sequence)
        prefixes = self._prefixes
        for tag, rows in zip(_ROW_TAGS, (m.inserted, m.updated, m.deleted), strict=True):
            for row in rows:
                n = len(row)
                size += len(prefixes[tag, n]) + n
        return size

    def _head(self) -> bytes:
        head = [b"\x08\x00\x10", _varint(self.start_ts), b"\x18\x00"]
        if self.prewrite_key is not None:
            head += (b"\x22", _varint(len(self.prewrite_key)), self.prewrite_key)
        head += (b"\x2a", _varint(self._pv_size))
        return b"".join(head)

    def write_to(self, out, *, consume: bool = False) -> None:
        """Write the :attr:`size` bytes to binary stream ``out``; with ``consume`` each
        row image is removed from its list (set to None) once written, so the rows are
        freed as their serialized copy grows."""
        w = out.write
        prefixes = self._prefixes
        w(self._head())
        w(b"\x08")
        w(_varint(self.schema_version))
        for m, size in zip(self.mutations, self._sizes, strict=True):
            w(b"\x12")
            w(_varint(size))
            w(b"\x08")
            w(_varint(m.table_id))
            for tag, rows in zip(_ROW_TAGS, (m.inserted, m.updated, m.deleted), strict=True):
                for i, row in enumerate(rows):
                    w(prefixes[tag, len(row)])
                    w(row)
                    if consume:
                        rows[i] = None
            w(b"".join([_SEQ_BYTES[t] for t in m.sequence]))
        w(b"\x38\x00\x40\x00")


def prewrite_payload(start_ts: int, schema_version: int, mutations: Sequence,
                     prewrite_key: bytes | None) -> bytes:
    """The Prewrite binlog as bytes: ``bl.encode(bl.prewrite(start_ts,
    bl.encode(bl.new_prewrite_value(schema_version, [TableMutation of each m])),
    prewrite_key=prewrite_key))``, built with one copy of the rows."""
    out = io.BytesIO()
    PrewriteEncoder(start_ts, schema_version, mutations, prewrite_key).write_to(out)
    return out.getvalue()
