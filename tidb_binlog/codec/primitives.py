"""The byte-level encoders of TiDB's ``util/codec``: numbers and byte strings.

All functions are byte-exact with TiDB (Go):

- ``encode_int`` / ``encode_uint``: 8 bytes big-endian; signed ints have the
  sign bit flipped (``uint64(v) ^ 1<<63``) so that the bytes sort like the values.
- ``encode_varint`` / ``encode_uvarint``: Go's ``binary.PutVarint`` (zigzag, then
  LEB128) and ``binary.PutUvarint`` (LEB128), at most 10 bytes.
- ``encode_float``: the IEEE bits, sign bit set for ``f >= 0`` and all bits
  inverted otherwise, 8 bytes big-endian (order-preserving; -0.0 encodes like
  0.0, as TiDB's binlog-era code tests ``f >= 0``).
- ``encode_bytes``: memcomparable groups of 8 bytes, each followed by a marker
  ``0xFF - pad``; a full group has marker 0xFF and is followed by another group.
- ``encode_compact_bytes``: zigzag varint length, then the bytes.

The ``read_*`` decoders take ``(buf, offset)`` and return ``(value, next_offset)``.
On malformed or truncated input they raise :class:`Malformed` (or ``IndexError``
/ ``struct.error`` from the hot paths); the public decoders in ``datum_codec``
translate all three into :class:`~tidb_binlog.errors.CodecError` naming the offset
and the flag, so callers never see them.
"""

from __future__ import annotations

import struct

__all__ = [
    "Malformed",
    "encode_int",
    "encode_uint",
    "encode_varint",
    "encode_uvarint",
    "encode_float",
    "encode_bytes",
    "encode_compact_bytes",
    "read_int",
    "read_uint",
    "read_varint",
    "read_uvarint",
    "read_float",
    "read_bytes",
    "read_compact_bytes",
    "peek_bytes",
    "peek_uvarint",
]

SIGN_MASK = 1 << 63
U64_MASK = (1 << 64) - 1
ENC_GROUP_SIZE = 8
ENC_MARKER = 0xFF
_PAD = b"\x00" * ENC_GROUP_SIZE

_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_pack_u64 = _U64.pack
_unpack_u64 = _U64.unpack_from


class Malformed(Exception):
    """Internal: the bytes at hand are not a valid encoding (message says why)."""


# ---- fixed-width ints -------------------------------------------------------


def encode_int(v: int) -> bytes:
    return _pack_u64((v & U64_MASK) ^ SIGN_MASK)


def encode_uint(v: int) -> bytes:
    return _pack_u64(v)


def read_int(buf: bytes, off: int) -> tuple[int, int]:
    if len(buf) - off < 8:
        raise Malformed(f"needs 8 bytes, {len(buf) - off} remain")
    u = _unpack_u64(buf, off)[0] ^ SIGN_MASK
    return (u - (1 << 64) if u & SIGN_MASK else u), off + 8


def read_uint(buf: bytes, off: int) -> tuple[int, int]:
    if len(buf) - off < 8:
        raise Malformed(f"needs 8 bytes, {len(buf) - off} remain")
    return _unpack_u64(buf, off)[0], off + 8


# ---- varints ----------------------------------------------------------------


def encode_uvarint(x: int) -> bytes:
    if x < 0x80:
        return bytes((x,))
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def encode_varint(v: int) -> bytes:
    return encode_uvarint(((v << 1) ^ (v >> 63)) & U64_MASK)


def read_uvarint(buf: bytes, off: int) -> tuple[int, int]:
    """Go's ``binary.Uvarint``: overflow past 10 bytes or a 10th byte > 1."""
    n = len(buf)
    if n - off >= 3:  # fast paths: 1-3 byte varints (column ids, lengths, small ints)
        b0 = buf[off]
        if b0 < 0x80:
            return b0, off + 1
        b1 = buf[off + 1]
        if b1 < 0x80:
            return (b0 & 0x7F) | (b1 << 7), off + 2
        b2 = buf[off + 2]
        if b2 < 0x80:
            return (b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14), off + 3
    x = 0
    shift = 0
    i = off
    end = off + 10
    while i < n:
        b = buf[i]
        i += 1
        if b < 0x80:
            if i == end and b > 1:
                raise Malformed("varint overflows 64 bits (10th byte > 1)")
            return x | (b << shift), i
        if i == end:
            if i < n:
                raise Malformed("varint overflows 64 bits (more than 10 bytes)")
            break
        x |= (b & 0x7F) << shift
        shift += 7
    raise Malformed(f"varint is truncated after {i - off} bytes")


def read_varint(buf: bytes, off: int) -> tuple[int, int]:
    ux, off = read_uvarint(buf, off)
    return (ux >> 1) ^ -(ux & 1), off


def peek_uvarint(buf: bytes, off: int) -> int:
    """Offset just past the (u)varint at ``off`` (validated like ``read_uvarint``)."""
    return read_uvarint(buf, off)[1]


# ---- floats -----------------------------------------------------------------


def encode_float(f: float) -> bytes:
    u = _U64.unpack(_F64.pack(f))[0]
    if f >= 0:
        u |= SIGN_MASK
    else:
        u ^= U64_MASK
    return _pack_u64(u)


def read_float(buf: bytes, off: int) -> tuple[float, int]:
    if len(buf) - off < 8:
        raise Malformed(f"needs 8 bytes, {len(buf) - off} remain")
    u = _unpack_u64(buf, off)[0]
    if u & SIGN_MASK:
        u &= ~SIGN_MASK
    else:
        u ^= U64_MASK
    return _F64.unpack(_pack_u64(u))[0], off + 8


# ---- byte strings -----------------------------------------------------------


def encode_bytes(data: bytes) -> bytes:
    out = bytearray()
    n = len(data)
    for i in range(0, n + 1, ENC_GROUP_SIZE):
        group = data[i : i + ENC_GROUP_SIZE]
        pad = ENC_GROUP_SIZE - len(group)
        out += group
        if pad:
            out += _PAD[:pad]
        out.append(ENC_MARKER - pad)
    return bytes(out)


def read_bytes(buf: bytes, off: int) -> tuple[bytes, int]:
    out = bytearray()
    n = len(buf)
    while True:
        if n - off < ENC_GROUP_SIZE + 1:
            raise Malformed(f"memcomparable group needs 9 bytes, {n - off} remain")
        marker = buf[off + ENC_GROUP_SIZE]
        pad = ENC_MARKER - marker
        if pad > ENC_GROUP_SIZE:
            raise Malformed(f"invalid group marker 0x{marker:02x} at offset {off + 8}")
        real = ENC_GROUP_SIZE - pad
        out += buf[off : off + real]
        if pad:
            if buf[off + real : off + ENC_GROUP_SIZE] != _PAD[:pad]:
                raise Malformed(f"group padding at offset {off + real} is not zero")
            return bytes(out), off + ENC_GROUP_SIZE + 1
        off += ENC_GROUP_SIZE + 1


def peek_bytes(buf: bytes, off: int) -> int:
    """Offset just past the memcomparable byte string at ``off`` (markers checked)."""
    n = len(buf)
    while True:
        if n - off < ENC_GROUP_SIZE + 1:
            raise Malformed(f"memcomparable group needs 9 bytes, {n - off} remain")
        marker = buf[off + ENC_GROUP_SIZE]
        off += ENC_GROUP_SIZE + 1
        if marker == ENC_MARKER:
            continue
        if ENC_MARKER - marker > ENC_GROUP_SIZE:
            raise Malformed(f"invalid group marker 0x{marker:02x} at offset {off - 1}")
        return off


def encode_compact_bytes(data: bytes) -> bytes:
    return encode_varint(len(data)) + data


def read_compact_bytes(buf: bytes, off: int) -> tuple[bytes, int]:
    length, off = read_varint(buf, off)
    end = off + length
    if length < 0 or end > len(buf):
        raise Malformed(f"compact bytes of length {length}, {len(buf) - off} bytes remain")
    return buf[off:end], end
