"""Packed DATE/DATETIME/TIMESTAMP values and TIME durations, as TiDB stores them.

Packed time (``Time.ToPackedUint``), 64 bits from the top::

    0 | 17 bits year*13+month | 5 day | 5 hour | 6 minute | 6 second | 24 microsecond

so ``packed = ((((year*13 + month) << 5 | day) << 17 | hour << 12 | minute << 6 |
second) << 24) | microsecond``. The zero time ``0000-00-00 00:00:00`` packs to 0
and zero-in-date values such as ``2020-00-00`` round-trip unchanged. TIMESTAMP
values are packed in UTC: :func:`to_utc` converts from the session zone before
packing, :func:`from_utc` converts back (never for the zero value).

``format_time`` is ``Time.String()``: ``YYYY-MM-DD`` for DATE, otherwise
``YYYY-MM-DD HH:MM:SS`` plus ``"." + "%06d" % microsecond`` truncated to fsp
digits. ``format_duration`` is ``Duration.String()``: ``[-]HH:MM:SS`` (hours may
exceed 24) plus the truncated fraction; sub-microsecond nanoseconds are dropped.
"""

from __future__ import annotations

import datetime
import re
from typing import NamedTuple

from tidb_binlog.errors import CodecError

__all__ = [
    "PackedTime",
    "pack_time",
    "unpack_time",
    "check_packed",
    "format_time",
    "format_duration",
    "to_utc",
    "from_utc",
    "parse_time_text",
    "parse_duration_text",
    "NANOS_PER_SECOND",
]

NANOS_PER_SECOND = 1_000_000_000
_UTC = datetime.UTC
_U64_MAX = (1 << 64) - 1
_TYPE_DATE = 10
_TYPE_NEWDATE = 14


class PackedTime(NamedTuple):
    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0


_LIMITS = (
    ("year", 9999),
    ("month", 12),
    ("day", 31),
    ("hour", 23),
    ("minute", 59),
    ("second", 59),
    ("microsecond", 999_999),
)


def _check_fields(fields: tuple[int, ...], what: str) -> None:
    for (name, hi), v in zip(_LIMITS, fields, strict=True):
        if not 0 <= v <= hi:
            raise CodecError(f"{what}: {name} {v} out of range [0, {hi}] in {fields}")


def pack_time(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    microsecond: int = 0,
) -> int:
    """Pack a time as ``Time.ToPackedUint`` does (all zero -> 0)."""
    fields = (year, month, day, hour, minute, second, microsecond)
    _check_fields(fields, "pack_time")
    ymd = ((year * 13 + month) << 5) | day
    hms = (hour << 12) | (minute << 6) | second
    return (((ymd << 17) | hms) << 24) | microsecond


def unpack_time(packed: int) -> PackedTime:
    """Inverse of :func:`pack_time`; raises CodecError if a field is out of range."""
    if not 0 <= packed <= _U64_MAX:
        raise CodecError(f"packed time {packed} is not a uint64")
    us = packed & 0xFFFFFF
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    hms = ymdhms & 0x1FFFF
    ym = ymd >> 5
    t = PackedTime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, us)
    _check_fields(t, f"packed time 0x{packed:016x}")
    return t


def check_packed(packed: int) -> int:
    """Validate a packed time and return it."""
    if isinstance(packed, bool) or not isinstance(packed, int):
        raise CodecError(f"Datum.time needs a packed int, got {type(packed).__name__} {packed!r}")
    unpack_time(packed)
    return packed


def _frac_text(microsecond: int, fsp: int) -> str:
    return "." + f"{microsecond:06d}"[:fsp] if fsp > 0 else ""


def format_time(packed: int, tp: int, fsp: int) -> str:
    """``Time.String()`` for a DATE (tp 10) or DATETIME/TIMESTAMP with ``fsp`` digits."""
    t = unpack_time(packed)
    date = f"{t.year:04d}-{t.month:02d}-{t.day:02d}"
    if tp in (_TYPE_DATE, _TYPE_NEWDATE):
        return date
    return f"{date} {t.hour:02d}:{t.minute:02d}:{t.second:02d}{_frac_text(t.microsecond, fsp)}"


def format_duration(nanoseconds: int, fsp: int) -> str:
    """``Duration.String()``: ``[-]HH:MM:SS[.fraction truncated to fsp]``."""
    sign = "-" if nanoseconds < 0 else ""
    n = -nanoseconds if nanoseconds < 0 else nanoseconds
    seconds, rem_ns = divmod(n, NANOS_PER_SECOND)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}{_frac_text(rem_ns // 1000, fsp)}"


def _convert(packed: int, src: datetime.tzinfo, dst: datetime.tzinfo) -> int:
    if packed == 0 or src is dst:
        return packed
    t = unpack_time(packed)
    try:
        dt = datetime.datetime(*t, tzinfo=src).astimezone(dst)
    except (ValueError, OverflowError) as err:
        raise CodecError(
            f"TIMESTAMP {t.year:04d}-{t.month:02d}-{t.day:02d} "
            f"{t.hour:02d}:{t.minute:02d}:{t.second:02d} cannot be converted "
            f"between time zones ({err}); a TIMESTAMP must be a real instant"
        ) from err
    return pack_time(dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.microsecond)


def to_utc(packed: int, tz: datetime.tzinfo) -> int:
    """A TIMESTAMP packed in zone ``tz`` -> packed in UTC (zero stays zero)."""
    return _convert(packed, tz, _UTC)


def from_utc(packed: int, tz: datetime.tzinfo) -> int:
    """A TIMESTAMP packed in UTC -> packed in zone ``tz`` (zero stays zero)."""
    return _convert(packed, _UTC, tz)


_TIME_RE = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?)?$"
)
_DURATION_RE = re.compile(r"^(-)?(\d{1,3}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?$")


def parse_time_text(text: str) -> int:
    """Pack ``YYYY-MM-DD[ HH:MM:SS[.ffffff]]`` (as MySQL prints it; zero dates allowed)."""
    m = _TIME_RE.match(text.strip())
    if not m:
        raise CodecError(
            f"cannot parse {text!r} as a date/time: expected YYYY-MM-DD[ HH:MM:SS[.ffffff]]"
        )
    y, mo, d, h, mi, s, frac = m.groups()
    us = int(frac.ljust(6, "0")) if frac else 0
    return pack_time(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), us)


def parse_duration_text(text: str) -> int:
    """Nanoseconds of ``[-]HHH:MM:SS[.ffffff]`` (as MySQL prints a TIME)."""
    m = _DURATION_RE.match(text.strip())
    if not m:
        raise CodecError(f"cannot parse {text!r} as a TIME: expected [-]HH:MM:SS[.ffffff]")
    neg, h, mi, s, frac = m.groups()
    us = int(frac.ljust(6, "0")) if frac else 0
    ns = ((int(h) * 60 + int(mi)) * 60 + int(s)) * NANOS_PER_SECOND + us * 1000
    return -ns if neg else ns
