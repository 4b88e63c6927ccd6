"""Datum encoding as TiDB's ``util/codec`` ``EncodeKey`` / ``EncodeValue`` / ``DecodeOne``.

Every encoded datum starts with a flag byte:

====  ==============  =====================================================
flag  name            payload
====  ==============  =====================================================
0x00  nil             none
0x01  bytes           memcomparable groups (key form); alone = MinNotNull
0x02  compactBytes    zigzag varint length + bytes (value form)
0x03  int             8 bytes, sign-flipped big-endian (key form)
0x04  uint            8 bytes big-endian
0x05  float           8 bytes order-preserving big-endian
0x06  decimal         precision, frac, MyDecimal binary
0x07  duration        8 bytes like int (nanoseconds)
0x08  varint          zigzag LEB128 (value form)
0x09  uvarint         LEB128 (value form)
0x0a  json            JSON type code + value (``json_binary``)
0xfa  max             none (MaxValue; keys only)
====  ==============  =====================================================

Per kind, key form / value form: NULL ``00``/``00``; INT64 ``03``/``08``;
UINT64, ENUM, SET, BIT ``04``/``09``; FLOAT32/64 ``05`` both; STRING, BYTES
``01``/``02``; TIME ``04`` + 8 bytes in **both** forms; DURATION ``07`` both;
DECIMAL ``06`` both (precision 0 = infer with ``precision_and_frac``, frac
clamped to 30); JSON ``0a`` both; MIN_NOT_NULL ``01``; MAX_VALUE ``fa``.
Key-form strings are the raw bytes (collation sort keys are the caller's).

``decode_one`` is TiDB's ``DecodeOne``: 0x03/0x08 -> INT64, 0x04/0x09 -> UINT64,
0x05 -> FLOAT64, 0x01/0x02 -> BYTES, 0x06 -> DECIMAL (with precision/frac),
0x07 -> DURATION, 0x0a -> JSON, 0x00 -> NULL; it also accepts 0xfa -> MAX_VALUE
(TiDB's ``DecodeRange`` does). ``cut_one`` is ``CutOne``/``peek``: the offset
after the datum, with the payload's length validated but not its content.
Truncated or malformed input raises :class:`~tidb_binlog.errors.CodecError` with
``offset`` = the datum's flag offset and ``flag`` = the flag byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from tidb_binlog.codec import json_binary
from tidb_binlog.codec.datum import Datum, Kind
from tidb_binlog.codec.mydecimal import (
    MAX_DECIMAL_PRECISION,
    MAX_DECIMAL_SCALE,
    decimal_bin_size,
    encode_decimal_bin,
    precision_and_frac,
    read_decimal_bin,
)
from tidb_binlog.codec.primitives import (
    Malformed,
    encode_bytes,
    encode_float,
    encode_int,
    encode_uint,
    encode_uvarint,
    encode_varint,
    peek_bytes,
    peek_uvarint,
    read_bytes,
    read_compact_bytes,
    read_float,
    read_int,
    read_uint,
    read_uvarint,
    read_varint,
)
from tidb_binlog.errors import CodecError

__all__ = [
    "NIL_FLAG",
    "BYTES_FLAG",
    "COMPACT_BYTES_FLAG",
    "INT_FLAG",
    "UINT_FLAG",
    "FLOAT_FLAG",
    "DECIMAL_FLAG",
    "DURATION_FLAG",
    "VARINT_FLAG",
    "UVARINT_FLAG",
    "JSON_FLAG",
    "MAX_FLAG",
    "FLAG_NAMES",
    "encode_datum",
    "encode_value",
    "encode_key",
    "decode_one",
    "decode_value",
    "decode_key",
    "cut_one",
    "codec_error",
    "json_module",
]

NIL_FLAG = 0x00
BYTES_FLAG = 0x01
COMPACT_BYTES_FLAG = 0x02
INT_FLAG = 0x03
UINT_FLAG = 0x04
FLOAT_FLAG = 0x05
DECIMAL_FLAG = 0x06
DURATION_FLAG = 0x07
VARINT_FLAG = 0x08
UVARINT_FLAG = 0x09
JSON_FLAG = 0x0A
MAX_FLAG = 0xFA

FLAG_NAMES = {
    NIL_FLAG: "nil",
    BYTES_FLAG: "bytes",
    COMPACT_BYTES_FLAG: "compactBytes",
    INT_FLAG: "int",
    UINT_FLAG: "uint",
    FLOAT_FLAG: "float",
    DECIMAL_FLAG: "decimal",
    DURATION_FLAG: "duration",
    VARINT_FLAG: "varint",
    UVARINT_FLAG: "uvarint",
    JSON_FLAG: "json",
    MAX_FLAG: "max",
}

_new = tuple.__new__
_NULL = Datum.null()
_MAX = Datum.max_value()
def json_module():
    """``tidb_binlog.codec.json_binary`` (the JSON datums' binary format)."""
    return json_binary


_FLAG_AT_START = object()


def codec_error(
    buf: bytes,
    start: int,
    err: BaseException | str,
    what: str = "datum",
    flag: object = _FLAG_AT_START,
) -> CodecError:
    """A CodecError for the datum starting at ``start`` (its flag named in the message).

    ``flag`` defaults to the byte at ``start``; row format v2 passes its codec version.
    """
    if flag is _FLAG_AT_START:
        flag = buf[start] if 0 <= start < len(buf) else None
    if flag is None:
        desc = "no bytes left"
    else:
        desc = f"flag 0x{flag:02x} ({FLAG_NAMES.get(flag, 'unknown')})"
    if isinstance(err, IndexError | struct.error):
        err = "bytes end in the middle of the value"
    return CodecError(
        f"cannot decode {what} at offset {start} of a {len(buf)}-byte buffer, {desc}: {err}; "
        f"the bytes are truncated or are not TiDB codec output",
        offset=start,
        flag=flag,
    )


# ---- encoding ---------------------------------------------------------------


def _encode_decimal(d: Datum) -> bytes:
    value, precision, frac = d[1], d[2], d[3]
    if precision == 0:
        precision, frac = precision_and_frac(value)
    if frac > MAX_DECIMAL_SCALE:
        frac = MAX_DECIMAL_SCALE
    return bytes((DECIMAL_FLAG, precision, frac)) + encode_decimal_bin(value, precision, frac)


def encode_datum(d: Datum, comparable: bool) -> bytes:
    """Encode one datum in the key form (``comparable``) or the value form."""
    kind = d[0]
    if kind is Kind.INT64:
        if comparable:
            return b"\x03" + encode_int(d[1])
        return b"\x08" + encode_varint(d[1])
    if kind in (Kind.UINT64, Kind.ENUM, Kind.SET, Kind.BIT):
        if comparable:
            return b"\x04" + encode_uint(d[1])
        return b"\x09" + encode_uvarint(d[1])
    if kind in (Kind.STRING, Kind.BYTES):
        if comparable:
            return b"\x01" + encode_bytes(d[1])
        return b"\x02" + encode_varint(len(d[1])) + d[1]
    if kind is Kind.NULL:
        return b"\x00"
    if kind in (Kind.FLOAT64, Kind.FLOAT32):
        return b"\x05" + encode_float(d[1])
    if kind is Kind.TIME:
        return b"\x04" + encode_uint(d[1])
    if kind is Kind.DURATION:
        return b"\x07" + encode_int(d[1])
    if kind is Kind.DECIMAL:
        return _encode_decimal(d)
    if kind is Kind.JSON:
        return b"\x0a" + json_module().encode_json(d[1])
    if kind is Kind.MIN_NOT_NULL:
        return b"\x01"
    if kind is Kind.MAX_VALUE:
        return b"\xfa"
    raise CodecError(f"cannot encode a datum of kind {kind!r}")


def _datums(datums: Iterable[Datum]) -> Iterable[Datum]:
    if isinstance(datums, Datum):
        raise CodecError("encode_value/encode_key take a list of datums, got a single Datum")
    return datums


def encode_value(datums: Iterable[Datum]) -> bytes:
    """``codec.EncodeValue``: the value form of every datum, concatenated."""
    return b"".join([encode_datum(d, False) for d in _datums(datums)])


def encode_key(datums: Iterable[Datum]) -> bytes:
    """``codec.EncodeKey``: the comparable (memcomparable) form, concatenated."""
    return b"".join([encode_datum(d, True) for d in _datums(datums)])


# ---- decoding ---------------------------------------------------------------


def _decode_at(buf: bytes, off: int) -> tuple[Datum, int]:
    """Decode the datum at ``off``; raises Malformed / IndexError / struct.error."""
    flag = buf[off]
    off += 1
    if flag == VARINT_FLAG:
        b = buf[off]
        if b < 0x80:
            return _new(Datum, (Kind.INT64, (b >> 1) ^ -(b & 1), 0, 0)), off + 1
        v, off = read_varint(buf, off)
        return _new(Datum, (Kind.INT64, v, 0, 0)), off
    if flag == COMPACT_BYTES_FLAG:
        v, off = read_compact_bytes(buf, off)
        return _new(Datum, (Kind.BYTES, v, 0, 0)), off
    if flag == UVARINT_FLAG:
        v, off = read_uvarint(buf, off)
        return _new(Datum, (Kind.UINT64, v, 0, 0)), off
    if flag == NIL_FLAG:
        return _NULL, off
    if flag == INT_FLAG:
        v, off = read_int(buf, off)
        return _new(Datum, (Kind.INT64, v, 0, 0)), off
    if flag == UINT_FLAG:
        v, off = read_uint(buf, off)
        return _new(Datum, (Kind.UINT64, v, 0, 0)), off
    if flag == FLOAT_FLAG:
        v, off = read_float(buf, off)
        return _new(Datum, (Kind.FLOAT64, v, 0, 0)), off
    if flag == DECIMAL_FLAG:
        if len(buf) - off < 3:
            raise Malformed("decimal needs precision, frac and at least one byte")
        precision, frac = buf[off], buf[off + 1]
        v, off = read_decimal_bin(buf, off + 2, precision, frac)
        return _new(Datum, (Kind.DECIMAL, v, precision, frac)), off
    if flag == DURATION_FLAG:
        v, off = read_int(buf, off)
        return _new(Datum, (Kind.DURATION, v, 0, 0)), off
    if flag == BYTES_FLAG:
        v, off = read_bytes(buf, off)
        return _new(Datum, (Kind.BYTES, v, 0, 0)), off
    if flag == JSON_FLAG:
        if off >= len(buf):
            raise Malformed("json datum has no type code")
        obj, end = json_module().decode_json(buf, off)
        return _new(Datum, (Kind.JSON, obj, 0, 0)), end
    if flag == MAX_FLAG:
        return _MAX, off
    raise Malformed(f"invalid encoded key flag {flag}")


def _as_bytes(buf) -> bytes:
    return buf if type(buf) is bytes else bytes(buf)


def decode_one(buf: bytes, offset: int = 0) -> tuple[Datum, int]:
    """Decode the datum at ``offset``: ``(datum, next_offset)``."""
    buf = _as_bytes(buf)
    try:
        return _decode_at(buf, offset)
    except (Malformed, IndexError, struct.error) as err:
        raise codec_error(buf, offset, err) from err
    except CodecError as err:  # from json_binary: keep its detail, name our datum
        raise codec_error(buf, offset, err) from err


def decode_value(buf: bytes) -> list[Datum]:
    """``codec.Decode``: every datum of the whole buffer (key or value form)."""
    buf = _as_bytes(buf)
    out = []
    off = 0
    n = len(buf)
    if n == 0:
        raise CodecError("cannot decode an empty buffer: expected at least one datum", offset=0)
    while off < n:
        d, off = decode_one(buf, off)
        out.append(d)
    return out


decode_key = decode_value


def _cut_at(buf: bytes, off: int) -> int:
    flag = buf[off]
    p = off + 1
    if flag == NIL_FLAG or flag == MAX_FLAG:
        end = p
    elif flag in (INT_FLAG, UINT_FLAG, FLOAT_FLAG, DURATION_FLAG):
        end = p + 8
    elif flag == VARINT_FLAG or flag == UVARINT_FLAG:
        end = peek_uvarint(buf, p)
    elif flag == COMPACT_BYTES_FLAG:
        length, p = read_varint(buf, p)
        if length < 0:
            raise Malformed(f"negative compact bytes length {length}")
        end = p + length
    elif flag == DECIMAL_FLAG:
        if len(buf) - p < 2:
            raise Malformed("decimal needs precision and frac bytes")
        precision, frac = buf[p], buf[p + 1]
        if not (
            1 <= precision <= MAX_DECIMAL_PRECISION and frac <= min(precision, MAX_DECIMAL_SCALE)
        ):
            raise Malformed(f"invalid DECIMAL({precision},{frac}) header")
        end = p + 2 + decimal_bin_size(precision, frac)
    elif flag == BYTES_FLAG:
        end = peek_bytes(buf, p)
    elif flag == JSON_FLAG:
        if p >= len(buf):
            raise Malformed("json datum has no type code")
        end = p + json_module().json_len(buf, p)
    else:
        raise Malformed(f"invalid encoded key flag {flag}")
    if end > len(buf):
        raise Malformed(
            f"invalid encoded key, expected length: {end - off}, actual length: {len(buf) - off}"
        )
    return end


def cut_one(buf: bytes, offset: int = 0) -> int:
    """``CutOne``/``peek``: the offset just after the datum at ``offset``."""
    buf = _as_bytes(buf)
    try:
        return _cut_at(buf, offset)
    except (Malformed, IndexError, struct.error) as err:
        raise codec_error(buf, offset, err) from err
    except CodecError as err:
        raise codec_error(buf, offset, err) from err
