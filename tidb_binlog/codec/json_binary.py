"""TiDB's binary JSON: the payload of a datum with flag ``0x0a``.

A JSON value is ``type_code(1) ‖ value``. All integers are little-endian.
Offsets inside a container are relative to the first byte of the container's
value (the byte right after its type code).

=========  ==========  ======================================================
type code  Python      value bytes
=========  ==========  ======================================================
0x01       dict        ``count u32 | size u32 | count×keyEntry(6) |
                        count×valueEntry(5) | keys… | values…``
0x03       list        ``count u32 | size u32 | count×valueEntry(5) | values…``
0x04       None/bool   one byte: 0x00 null, 0x01 true, 0x02 false
0x09       int         int64
0x0a       JSONUInt    uint64 (an ``int`` subclass, so it re-encodes as 0x0a)
0x0b       float       IEEE-754 double
0x0c       str         ``uvarint(len) ‖ utf-8``
0x0d       JSONOpaque  ``mysql_type(1) ‖ uvarint(len) ‖ bytes``
0x0e-0x10  JSONTime    TiDB ``CoreTime`` uint64 (date, datetime, timestamp)
0x11       JSONDuration int64 nanoseconds ‖ uint32 fsp
=========  ==========  ======================================================

* ``keyEntry = keyOffset u32 | keyLen u16``; object keys are sorted byte-wise
  (UTF-8) and a key appears once (text parsing keeps the last duplicate).
* ``valueEntry = typeCode u8 | u32``: a literal is inlined in the first byte
  of the u32 (the other three are zero); any other type stores its offset.
* ``size`` is the container's whole value length, header included.
* TiDB never writes MySQL's small containers (0x00/0x02) or the 16/32-bit
  integers (0x05-0x08); we neither write nor accept them.
* Python ``int`` in int64 range encodes as 0x09, above it (up to 2**64-1) as
  0x0a. Strings are decoded with ``surrogateescape`` so that bytes that are
  not UTF-8 still round-trip byte-exactly.
* Nesting deeper than TiDB's limit (100 below the root) is rejected.

:func:`json_to_string` (TiDB's ``BinaryJSON.String()``) and
:func:`parse_json_text` live in ``json_text`` and the model types in
``json_model``; all are importable from here too.

Malformed or truncated bytes raise :class:`~tidb_binlog.errors.CodecError`
with the absolute ``offset`` and ``flag=0x0a``; never an ``IndexError``.
"""

from __future__ import annotations

import struct

from tidb_binlog.codec.json_model import (
    _INT64_MAX,
    _INT64_MIN,
    _TIME_TYPES,
    _UINT64_MAX,
    JSON_FLAG,
    MAX_DEPTH,
    TYPE_ARRAY,
    TYPE_DATE,
    TYPE_DATETIME,
    TYPE_DOUBLE,
    TYPE_INT64,
    TYPE_LITERAL,
    TYPE_OBJECT,
    TYPE_OPAQUE,
    TYPE_STRING,
    TYPE_TIME,
    TYPE_TIMESTAMP,
    TYPE_UINT64,
    JSONDuration,
    JSONOpaque,
    JSONTime,
    JSONUInt,
    _err,
    _utf8,
)
from tidb_binlog.codec.json_text import json_to_string, parse_json_text

__all__ = [
    "JSON_FLAG",
    "TYPE_OBJECT",
    "TYPE_ARRAY",
    "TYPE_LITERAL",
    "TYPE_INT64",
    "TYPE_UINT64",
    "TYPE_DOUBLE",
    "TYPE_STRING",
    "TYPE_OPAQUE",
    "TYPE_DATE",
    "TYPE_DATETIME",
    "TYPE_TIMESTAMP",
    "TYPE_TIME",
    "MAX_DEPTH",
    "JSONUInt",
    "JSONOpaque",
    "JSONTime",
    "JSONDuration",
    "encode_json",
    "decode_json",
    "json_len",
    "json_to_string",
    "parse_json_text",
]

_LIT_NULL, _LIT_TRUE, _LIT_FALSE = 0x00, 0x01, 0x02
_HEADER = 8  # count u32 + size u32
_KEY_ENTRY = 6
_VALUE_ENTRY = 5
_FIXED_LEN = {
    TYPE_LITERAL: 1, TYPE_INT64: 8, TYPE_UINT64: 8, TYPE_DOUBLE: 8,
    TYPE_DATE: 8, TYPE_DATETIME: 8, TYPE_TIMESTAMP: 8, TYPE_TIME: 12,
}  # fmt: skip
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")


# ---------------------------------------------------------------------- encode


def encode_json(obj: object) -> bytes:
    """Encode a Python JSON model value as ``type_code ‖ value`` (after flag 0x0a)."""
    type_code, value = _encode(obj, 0)
    return bytes((type_code,)) + value


def _encode(obj: object, depth: int) -> tuple[int, bytes]:
    if obj is None:
        return TYPE_LITERAL, b"\x00"
    if obj is True:
        return TYPE_LITERAL, b"\x01"
    if obj is False:
        return TYPE_LITERAL, b"\x02"
    if isinstance(obj, JSONUInt):
        if not 0 <= obj <= _UINT64_MAX:
            raise _err(f"JSONUInt {int(obj)} is outside uint64", None)
        return TYPE_UINT64, _U64.pack(obj)
    if isinstance(obj, int):
        if _INT64_MIN <= obj <= _INT64_MAX:
            return TYPE_INT64, _I64.pack(obj)
        if 0 <= obj <= _UINT64_MAX:
            return TYPE_UINT64, _U64.pack(obj)
        raise _err(f"integer {obj} fits neither int64 nor uint64; use a float", None)
    if isinstance(obj, float):
        return TYPE_DOUBLE, _F64.pack(obj)
    if isinstance(obj, str):
        data = _utf8(obj)
        return TYPE_STRING, _uvarint(len(data)) + data
    if isinstance(obj, (list, tuple, dict)):
        if depth >= MAX_DEPTH + 1:
            raise _err(f"document nested deeper than TiDB's limit of {MAX_DEPTH}", None)
        if isinstance(obj, dict):
            return TYPE_OBJECT, _encode_object(obj, depth + 1)
        return TYPE_ARRAY, _encode_container([], list(obj), depth + 1)
    if isinstance(obj, JSONOpaque):
        return TYPE_OPAQUE, bytes((obj.mysql_type,)) + _uvarint(len(obj.data)) + obj.data
    if isinstance(obj, JSONTime):
        return obj.type_code, _U64.pack(obj.core_time)
    if isinstance(obj, JSONDuration):
        return TYPE_TIME, _I64.pack(obj.nanoseconds) + _U32.pack(obj.fsp)
    raise _err(f"cannot encode {type(obj).__name__} {obj!r}: not a TiDB JSON value", None)


def _encode_object(obj: dict, depth: int) -> bytes:
    fields = []
    for key, value in obj.items():
        if not isinstance(key, str):
            raise _err(f"object key {key!r} is not a str", None)
        raw = _utf8(key)
        if len(raw) > 0xFFFF:
            raise _err(f"object key of {len(raw)} bytes exceeds TiDB's 65535-byte limit", None)
        fields.append((raw, value))
    fields.sort(key=lambda field: field[0])
    return _encode_container([raw for raw, _ in fields], [v for _, v in fields], depth)


def _encode_container(keys: list[bytes], values: list, depth: int) -> bytes:
    count = len(values)
    data_start = _HEADER + (_KEY_ENTRY if keys else 0) * count + _VALUE_ENTRY * count
    key_entries, value_entries, data = [], [], bytearray()
    for raw in keys:
        key_entries.append(_U32.pack(data_start + len(data)) + _U16.pack(len(raw)))
        data += raw
    for value in values:
        type_code, encoded = _encode(value, depth)
        if type_code == TYPE_LITERAL:
            value_entries.append(bytes((type_code,)) + encoded + b"\x00\x00\x00")
        else:
            value_entries.append(bytes((type_code,)) + _U32.pack(data_start + len(data)))
            data += encoded
    size = data_start + len(data)
    return b"".join((_U32.pack(count), _U32.pack(size), *key_entries, *value_entries, data))


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# ---------------------------------------------------------------------- decode


def json_len(buf: bytes, offset: int = 0) -> int:
    """Length of the JSON value at ``offset`` (type code + value), as PeekBytesAsJSON."""
    if offset >= len(buf):
        raise _err("no type code byte: the buffer ends here", offset)
    return 1 + _value_len(buf, buf[offset], offset + 1, len(buf))


def decode_json(buf: bytes, offset: int = 0) -> tuple[object, int]:
    """Decode the JSON value at ``offset``; return it and the offset right after it."""
    end = offset + json_len(buf, offset)
    return _decode(buf, buf[offset], offset + 1, end, 0), end


def _value_len(buf: bytes, type_code: int, pos: int, limit: int) -> int:
    """Byte length of the value of ``type_code`` at ``pos``; it must end by ``limit``."""
    fixed = _FIXED_LEN.get(type_code)
    if fixed is not None:
        length = fixed
    elif type_code == TYPE_STRING:
        n, width = _read_uvarint(buf, pos, limit)
        length = width + n
    elif type_code == TYPE_OPAQUE:
        _need(buf, pos, 1, limit, "opaque type byte")
        n, width = _read_uvarint(buf, pos + 1, limit)
        length = 1 + width + n
    elif type_code in (TYPE_OBJECT, TYPE_ARRAY):
        _need(buf, pos, _HEADER, limit, "container header")
        count = _U32.unpack_from(buf, pos)[0]
        length = _U32.unpack_from(buf, pos + 4)[0]
        entries = count * (_VALUE_ENTRY + (_KEY_ENTRY if type_code == TYPE_OBJECT else 0))
        if length < _HEADER + entries:
            raise _err(f"container size {length} is too small for {count} entries", pos + 4)
    else:
        raise _err(f"unknown or unsupported JSON type code 0x{type_code:02x}", pos - 1)
    _need(buf, pos, length, limit, f"value of type 0x{type_code:02x}")
    return length


def _need(buf: bytes, pos: int, n: int, limit: int, what: str) -> None:
    if pos + n > limit or pos + n > len(buf):
        have = max(0, min(limit, len(buf)) - pos)
        raise _err(f"truncated {what}: need {n} bytes, {have} available", pos)


def _read_uvarint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """Go's binary.Uvarint: value and width; errors on truncation and on overflow."""
    result = shift = 0
    for i in range(10):
        if pos + i >= limit or pos + i >= len(buf):
            raise _err("truncated length varint", pos)
        byte = buf[pos + i]
        if i == 9 and byte > 1:
            raise _err("length varint overflows 64 bits", pos)
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i + 1
        shift += 7
    raise _err("length varint overflows 64 bits", pos)


def _decode(buf: bytes, type_code: int, pos: int, end: int, depth: int) -> object:
    """Decode a value whose bytes are ``buf[pos:end]`` (lengths already checked)."""
    if type_code == TYPE_LITERAL:
        literal = buf[pos]
        if literal == _LIT_NULL:
            return None
        if literal in (_LIT_TRUE, _LIT_FALSE):
            return literal == _LIT_TRUE
        raise _err(f"unknown literal 0x{literal:02x} (want 0x00/0x01/0x02)", pos)
    if type_code == TYPE_INT64:
        return _I64.unpack_from(buf, pos)[0]
    if type_code == TYPE_UINT64:
        return JSONUInt(_U64.unpack_from(buf, pos)[0])
    if type_code == TYPE_DOUBLE:
        return _F64.unpack_from(buf, pos)[0]
    if type_code == TYPE_STRING:
        n, width = _read_uvarint(buf, pos, end)
        return bytes(buf[pos + width : pos + width + n]).decode("utf-8", "surrogateescape")
    if type_code == TYPE_OPAQUE:
        n, width = _read_uvarint(buf, pos + 1, end)
        return JSONOpaque(buf[pos], bytes(buf[pos + 1 + width : pos + 1 + width + n]))
    if type_code in _TIME_TYPES:
        return JSONTime(type_code, _U64.unpack_from(buf, pos)[0])
    if type_code == TYPE_TIME:
        return JSONDuration(_I64.unpack_from(buf, pos)[0], _U32.unpack_from(buf, pos + 8)[0])
    if depth >= MAX_DEPTH + 1:
        raise _err(f"document nested deeper than TiDB's limit of {MAX_DEPTH}", pos)
    return _decode_container(buf, type_code, pos, end, depth + 1)


def _decode_container(buf: bytes, type_code: int, pos: int, end: int, depth: int):
    count = _U32.unpack_from(buf, pos)[0]
    is_object = type_code == TYPE_OBJECT
    value_entries = pos + _HEADER + (_KEY_ENTRY * count if is_object else 0)
    data_start = value_entries + _VALUE_ENTRY * count
    values = []
    for i in range(count):
        entry = value_entries + i * _VALUE_ENTRY
        elem_type = buf[entry]
        if elem_type == TYPE_LITERAL:
            values.append(_decode(buf, TYPE_LITERAL, entry + 1, entry + 2, depth))
            continue
        elem_pos = pos + _U32.unpack_from(buf, entry + 1)[0]
        if not data_start <= elem_pos < end:
            raise _err(f"element {i} points outside its container (offset {elem_pos})", entry)
        elem_end = elem_pos + _value_len(buf, elem_type, elem_pos, end)
        values.append(_decode(buf, elem_type, elem_pos, elem_end, depth))
    if not is_object:
        return values
    result = {}
    for i in range(count):
        entry = pos + _HEADER + i * _KEY_ENTRY
        key_pos = pos + _U32.unpack_from(buf, entry)[0]
        key_len = _U16.unpack_from(buf, entry + 4)[0]
        if not data_start <= key_pos or key_pos + key_len > end:
            raise _err(f"key {i} points outside its object (offset {key_pos})", entry)
        key = bytes(buf[key_pos : key_pos + key_len]).decode("utf-8", "surrogateescape")
        result[key] = values[i]
    return result
