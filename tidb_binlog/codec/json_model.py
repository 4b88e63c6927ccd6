"""The Python model of TiDB's JSON values, shared by the binary and the text forms.

A JSON value is ``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` (or
``tuple``) and ``dict`` with ``str`` keys, plus the types TiDB has and Python's
JSON has not: :class:`JSONUInt` (a uint64 that stays one), :class:`JSONOpaque`,
:class:`JSONTime` and :class:`JSONDuration`. The ``TYPE_*`` constants are TiDB's
binary JSON type codes (``json_binary``); ``MAX_DEPTH`` is TiDB's nesting limit.

Bad model values raise :class:`~tidb_binlog.errors.CodecError` with
``flag=0x0a``.
"""

from __future__ import annotations

from dataclasses import dataclass

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

_TIME_TYPES = (TYPE_DATE, TYPE_DATETIME, TYPE_TIMESTAMP)
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1


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


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise _err(f"string {text!r} is not encodable as UTF-8: {exc.reason}", None) from exc
