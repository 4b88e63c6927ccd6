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

:func:`json_to_string` is TiDB's ``BinaryJSON.String()``, the text a MySQL
sink receives: ``{"k": v, "k2": v2}``, ``[a, b]``, Go ``encoding/json``
string escaping without HTML escaping, plus ``\\b``/``\\f`` (current TiDB).
Doubles follow **current TiDB master**: exponent form when
``|f| < 1e-15 or |f| >= 1e15`` with no ``+`` in the exponent (``1e15``), and
integral doubles keep ``.0`` (``4.0``). Older TiDB (v4-v7 binlog era)
used Go's JSON cut-offs ``1e-6``/``1e21``, printed ``4`` and ``1e+21``:
pass ``legacy_floats=True`` for that form.

Malformed or truncated bytes raise :class:`~tidb_binlog.errors.CodecError`
with the absolute ``offset`` and ``flag=0x0a``; never an ``IndexError``.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from dataclasses import dataclass
from decimal import Decimal

from tidb_binlog.errors import CodecError

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

JSON_FLAG = 0x0A
TYPE_OBJECT = 0x01
TYPE_ARRAY = 0x03
TYPE_LITERAL = 0x04
TYPE_INT64 = 0x09
TYPE_UINT64 = 0x0A
TYPE_DOUBLE = 0x0B
TYPE_STRING = 0x0C
TYPE_OPAQUE = 0x0D
TYPE_DATE = 0x0E
TYPE_DATETIME = 0x0F
TYPE_TIMESTAMP = 0x10
TYPE_TIME = 0x11
MAX_DEPTH = 100  # TiDB's maxJSONDepth: nesting levels allowed below the root

_LIT_NULL, _LIT_TRUE, _LIT_FALSE = 0x00, 0x01, 0x02
_HEADER = 8  # count u32 + size u32
_KEY_ENTRY = 6
_VALUE_ENTRY = 5
_FIXED_LEN = {
    TYPE_LITERAL: 1, TYPE_INT64: 8, TYPE_UINT64: 8, TYPE_DOUBLE: 8,
    TYPE_DATE: 8, TYPE_DATETIME: 8, TYPE_TIMESTAMP: 8, TYPE_TIME: 12,
}  # fmt: skip
_TIME_TYPES = (TYPE_DATE, TYPE_DATETIME, TYPE_TIMESTAMP)
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")


def _err(message: str, offset: int | None) -> CodecError:
    where = f" at offset {offset}" if offset is not None else ""
    return CodecError(f"JSON (datum flag 0x0a){where}: {message}", offset=offset, flag=JSON_FLAG)


class JSONUInt(int):
    """A JSON uint64 (type 0x0a); equal to the plain ``int`` of the same value."""

    def __repr__(self) -> str:
        return f"JSONUInt({int(self)})"


@dataclass(frozen=True)
class JSONOpaque:
    """An opaque value: a MySQL column type byte and raw bytes (type 0x0d)."""

    mysql_type: int
    data: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.mysql_type <= 0xFF or not isinstance(self.data, bytes):
            raise _err(f"JSONOpaque needs a type byte 0..255 and bytes, got {self!r}", None)


@dataclass(frozen=True)
class JSONTime:
    """A date, datetime or timestamp (types 0x0e-0x10) as TiDB's raw ``CoreTime``.

    CoreTime bits: year 14 @50, month 4 @46, day 5 @41, hour 5 @36, minute 6
    @30, second 6 @24, microsecond 20 @4, fsp/type nibble 4 @0 (0 as TiDB writes).
    """

    type_code: int
    core_time: int

    def __post_init__(self) -> None:
        if self.type_code not in _TIME_TYPES or not 0 <= self.core_time <= _UINT64_MAX:
            raise _err(f"JSONTime needs type 0x0e/0x0f/0x10 and a uint64, got {self!r}", None)

    @classmethod
    def of(cls, type_code: int, year: int, month: int, day: int, hour: int = 0,
           minute: int = 0, second: int = 0, microsecond: int = 0) -> JSONTime:  # fmt: skip
        """Build from calendar fields (range-checked against the bit widths)."""
        parts = ((year, 14), (month, 4), (day, 5), (hour, 5), (minute, 6), (second, 6),
                 (microsecond, 20))  # fmt: skip
        core = 0
        for value, width in parts:
            if not 0 <= value < (1 << width):
                raise _err(f"time field {value} does not fit {width} bits", None)
            core = (core << width) | value
        return cls(type_code, core << 4)

    def _field(self, shift: int, width: int) -> int:
        return (self.core_time >> shift) & ((1 << width) - 1)

    year = property(lambda self: self._field(50, 14))
    month = property(lambda self: self._field(46, 4))
    day = property(lambda self: self._field(41, 5))
    hour = property(lambda self: self._field(36, 5))
    minute = property(lambda self: self._field(30, 6))
    second = property(lambda self: self._field(24, 6))
    microsecond = property(lambda self: self._field(4, 20))

    def __str__(self) -> str:
        """TiDB's Time.String() with fsp 6 (dates print without the clock)."""
        date = f"{self.year:04d}-{self.month:02d}-{self.day:02d}"
        if self.type_code == TYPE_DATE:
            return date
        clock = f"{self.hour:02d}:{self.minute:02d}:{self.second:02d}"
        return f"{date} {clock}.{self.microsecond:06d}"


@dataclass(frozen=True)
class JSONDuration:
    """A MySQL TIME (type 0x11): signed nanoseconds and the fsp it carried."""

    nanoseconds: int
    fsp: int

    def __post_init__(self) -> None:
        if not _INT64_MIN <= self.nanoseconds <= _INT64_MAX or not 0 <= self.fsp <= 0xFFFFFFFF:
            raise _err(f"JSONDuration needs int64 nanoseconds and a uint32 fsp: {self!r}", None)

    def __str__(self) -> str:
        """TiDB's Duration.String() with fsp 6: ``[-]HH:MM:SS.ffffff``."""
        sign = "-" if self.nanoseconds < 0 else ""
        rest_ns = abs(self.nanoseconds)
        hours, rest_ns = divmod(rest_ns, 3_600_000_000_000)
        minutes, rest_ns = divmod(rest_ns, 60_000_000_000)
        seconds, rest_ns = divmod(rest_ns, 1_000_000_000)
        return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{rest_ns // 1000:06d}"


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


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise _err(f"string {text!r} is not encodable as UTF-8: {exc.reason}", None) from exc


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


# ------------------------------------------------------------------------ text


def json_to_string(obj: object, *, legacy_floats: bool = False) -> str:
    """TiDB's ``BinaryJSON.String()`` of a Python JSON model value."""
    out: list[str] = []
    _to_text(obj, out, legacy_floats)
    return "".join(out)


def _to_text(obj: object, out: list[str], legacy: bool) -> None:
    if obj is None:
        out.append("null")
    elif obj is True or obj is False:
        out.append("true" if obj else "false")
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        out.append(_format_double(obj, legacy))
    elif isinstance(obj, str):
        out.append(_quote(obj))
    elif isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise _err(f"object key {key!r} is not a str", None)
        items = sorted(((_utf8(k), k, v) for k, v in obj.items()), key=lambda kv: kv[0])
        out.append("{")
        for i, (_, key, value) in enumerate(items):
            out.append(", " if i else "")
            out.append(_quote(key) + ": ")
            _to_text(value, out, legacy)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, value in enumerate(obj):
            out.append(", " if i else "")
            _to_text(value, out, legacy)
        out.append("]")
    elif isinstance(obj, JSONOpaque):
        out.append(f'"base64:type{obj.mysql_type}:{base64.b64encode(obj.data).decode()}"')
    elif isinstance(obj, (JSONTime, JSONDuration)):
        out.append(f'"{obj}"')
    else:
        raise _err(f"cannot render {type(obj).__name__} {obj!r}: not a TiDB JSON value", None)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
            "\f": "\\f", "\u2028": "\\u2028", "\u2029": "\\u2029"}  # fmt: skip
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\u2028\u2029\ud800-\udfff]')
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    ch = match.group()
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch < " ":
        return f"\\u00{ord(ch):02x}"
    return "\\ufffd"  # a surrogate: a byte that was not UTF-8 (surrogateescape)


def _quote(text: str) -> str:
    """Go encoding/json string quoting without HTML escaping (TiDB jsonMarshalStringTo)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _format_double(value: float, legacy: bool) -> str:
    """Go ``strconv.AppendFloat(f, 'f'|'e', -1, 64)`` with TiDB's cut-offs and clean-ups."""
    if not math.isfinite(value):
        raise _err(f"double {value} has no JSON text form", None)
    magnitude = abs(value)
    low, high = (1e-6, 1e21) if legacy else (1e-15, 1e15)
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # |value| = digits × 10**exponent
    if not digits:  # ±0.0
        digits, exponent = "0", 0
    prefix = "-" if sign else ""
    if magnitude != 0 and (magnitude < low or magnitude >= high):
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        power = exponent + len(digits) - 1
        if legacy:  # Go pads to two digits and keeps '+'; TiDB only strips "e-0"
            return f"{prefix}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}".replace(
                "e-0", "e-"
            )
        return f"{prefix}{mantissa}e{power}"
    if exponent >= 0:
        text = digits + "0" * exponent
    else:
        point = len(digits) + exponent
        text = "0." + "0" * -point + digits if point <= 0 else digits[:point] + "." + digits[point:]
    if not legacy and "." not in text:
        text += ".0"
    return prefix + text


def parse_json_text(text: str | bytes) -> object:
    """Parse JSON text (e.g. a MariaDB JSON column) into the model, by TiDB's rules.

    Integers that fit int64 become ``int``, else fitting uint64 ``JSONUInt``,
    else ``float``; numbers with ``.`` or an exponent are ``float``. Objects
    keep the last of duplicate keys and come back with keys in TiDB's byte-wise
    order. Invalid text raises CodecError with the character offset.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    try:
        parsed = json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                            parse_constant=_reject_constant)  # fmt: skip
    except json.JSONDecodeError as exc:
        raise CodecError(
            f"invalid JSON text at line {exc.lineno} column {exc.colno} (char {exc.pos}): "
            f"{exc.msg}; TiDB would reject this document too",
            offset=exc.pos, flag=JSON_FLAG,
        ) from exc  # fmt: skip
    except RecursionError as exc:
        raise _err(f"document nested deeper than TiDB's limit of {MAX_DEPTH}", None) from exc
    model, depth = _normalize(parsed)
    if depth - 1 > MAX_DEPTH:
        raise _err(f"document nested deeper than TiDB's limit of {MAX_DEPTH}", None)
    return model


def _parse_int(literal: str) -> object:
    if len(literal) <= 20:
        value = int(literal)
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
        if 0 <= value <= _UINT64_MAX:
            return JSONUInt(value)
    return _parse_float(literal)


def _parse_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise _err(f"number {literal[:40]} is out of the double range", None)
    return value


def _reject_constant(name: str) -> object:
    raise _err(f"{name} is not valid JSON", None)


def _normalize(obj: object) -> tuple[object, int]:
    """Sort object keys byte-wise, replace lone surrogates by U+FFFD (as Go
    does), and compute TiDB's element depth (scalar 1, container 1 + max)."""
    if isinstance(obj, str):
        return _scrub(obj), 1
    if isinstance(obj, list):
        pairs = [_normalize(v) for v in obj]
        return [v for v, _ in pairs], 1 + max((d for _, d in pairs), default=0)
    if isinstance(obj, dict):
        fields = sorted(((_scrub(k), _normalize(v)) for k, v in obj.items()),
                        key=lambda kv: kv[0].encode("utf-8"))  # fmt: skip
        for key, _ in fields:
            if len(key.encode("utf-8")) > 0xFFFF:
                raise _err("object key exceeds TiDB's 65535-byte limit", None)
        depth = 1 + max((d for _, (_, d) in fields), default=0)
        return {k: v for k, (v, _) in fields}, depth
    return obj, 1


def _scrub(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)
