"""Reading protobuf's wire format without parsing a message: a message's top-level
fields with the offsets of their bytes, so a large field (a Prewrite's value) can be
sliced out of a buffer instead of copied. Used by the storage's reader (splicing a
Commit with its large Prewrite) and the pump's request path (:mod:`tidb_binlog.pump.wire`).
"""

from __future__ import annotations

from tidb_binlog.errors import ProtocolError

__all__ = ["BINLOG_WIRE_TYPES", "fields", "read_varint", "varint"]

_U64 = (1 << 64) - 1
_ONE_BYTE = [bytes((i,)) for i in range(0x80)]

# binlog.Binlog's fields (binlog.proto): number -> wire type (0 varint, 2 bytes)
BINLOG_WIRE_TYPES = {1: 0, 2: 0, 3: 0, 4: 2, 5: 2, 6: 2, 7: 0, 8: 0}


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of an int64/uint64 (negative: 64-bit two's complement)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    value &= _U64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(buf, pos: int) -> tuple[int, int]:
    """``(value, index past it)`` of the varint at ``pos``; ``(-1, -1)`` when truncated or
    longer than 10 bytes."""
    value = shift = 0
    end = min(len(buf), pos + 10)
    while pos < end:
        b = buf[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return value & _U64, pos
        shift += 7
    return -1, -1


read_varint = _read_varint  # for walkers over a window of a larger buffer (payload_ref.py)


def fields(buf):
    """Yield ``(field number, wire type, value or (start, end))`` of a message's
    top-level fields (varint and length-delimited only); raise ProtocolError on anything
    else, a truncated field included."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _read_varint(buf, pos)
        if tag < 0:
            raise ProtocolError("truncated tag")
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            if value < 0:
                raise ProtocolError("truncated varint")
            yield number, wire, value
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if length < 0 or pos + length > end:
                raise ProtocolError("truncated bytes field")
            yield number, wire, (pos, pos + length)
            pos += length
        else:
            raise ProtocolError(f"wire type {wire}")
