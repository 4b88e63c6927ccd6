"""Typed decoding: raw row datums + column types -> typed datums -> SQL arguments.

``unflatten(datum, ft, tz)`` is TiDB's ``tablecodec.Unflatten`` and is idempotent
(an already typed datum comes back unchanged):

======================  ====================================================
column type             raw datum -> typed datum
======================  ====================================================
TINY..BIGINT, YEAR      unchanged; an INT64 in an UNSIGNED column (the insert
                        handle, always written signed) becomes its uint64
FLOAT                   FLOAT32 (rounded to float32); DOUBLE unchanged
DECIMAL, JSON           unchanged
DATE/DATETIME/TIMESTAMP UINT64 packed -> TIME; TIMESTAMP non-zero: UTC -> ``tz``
TIME                    INT64 nanoseconds -> DURATION
ENUM                    UINT64 -> ENUM; an index 0 or past the members -> 0
SET                     UINT64 -> SET; bits past the members -> CodecError
BIT                     UINT64 -> BIT, truncated to ``(flen + 7) // 8`` bytes
CHAR/VARCHAR/TEXT/BLOB  BYTES -> STRING
======================  ====================================================

``format_sql_arg(datum, ft, tz)`` is the drainer's ``formatData`` (what a MySQL
sink binds): NULL -> None; ints -> int; FLOAT/DOUBLE -> float; DECIMAL -> str
with exactly the datum's frac digits; DATE/DATETIME/TIMESTAMP -> ``Time.String()``
with fsp = ``ft.decimal`` (truncated); TIME -> ``Duration.String()``; ENUM /
SET / BIT -> int; JSON -> ``json_to_string``; strings -> ``bytes`` for the
binary charset, else ``str`` when the bytes are utf-8 (else the raw ``bytes``,
which is what TiDB would send).

``datum_for_column(value, ft, tz)`` is the inverse the upstream emulator needs:
a value as pymysql returns it -> the datum TiDB writes for that column.
TIMESTAMPs are taken to be in ``tz`` (aware datetimes in their own zone) and
packed in UTC; ENUM names -> index; SET names -> bitmask; BIT bytes -> int.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable

from tidb_binlog.codec import mysql as m
from tidb_binlog.codec.datum import UINT64_MAX, Datum, Kind
from tidb_binlog.codec.datum_codec import json_module
from tidb_binlog.codec.mydecimal import format_decimal
from tidb_binlog.codec.mytime import (
    format_duration,
    format_time,
    from_utc,
    pack_time,
    parse_duration_text,
    parse_time_text,
    to_utc,
    unpack_time,
)
from tidb_binlog.errors import CodecError

__all__ = ["unflatten", "format_sql_arg", "sql_arg_formatter", "datum_for_column", "UTC"]

UTC = datetime.UTC
_new = tuple.__new__
_U64 = (1 << 64) - 1


def _same(d: Datum, ft: m.FieldType, tz) -> Datum:
    return d


def _int(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.INT64 and ft.flag & m.UNSIGNED_FLAG:
        return _new(Datum, (Kind.UINT64, d[1] & _U64, 0, 0))
    return d


def _float(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.FLOAT64:
        return Datum.float32(d[1])
    return d


def _expect(d: Datum, kind: Kind, ft: m.FieldType) -> None:
    if d[0] is not kind:
        raise CodecError(
            f"column type {ft.tp} expects a {kind.name} datum in the row, got {d!r}; "
            f"the row does not match the table schema"
        )


def _time(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.TIME:
        return d
    _expect(d, Kind.UINT64, ft)
    packed = d[1]
    unpack_time(packed)
    if ft.tp == m.TYPE_TIMESTAMP and packed and tz is not UTC:
        packed = from_utc(packed, tz)
    return _new(Datum, (Kind.TIME, packed, 0, 0))


def _duration(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.DURATION:
        return d
    _expect(d, Kind.INT64, ft)
    return _new(Datum, (Kind.DURATION, d[1], 0, 0))


def _enum(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.ENUM:
        return d
    _expect(d, Kind.UINT64, ft)
    v = d[1]
    return _new(Datum, (Kind.ENUM, v if 1 <= v <= len(ft.elems) else 0, 0, 0))


def _set(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.SET:
        return d
    _expect(d, Kind.UINT64, ft)
    v = d[1]
    if v >> len(ft.elems):
        raise CodecError(f"invalid number {v} for Set {list(ft.elems)}: bits past the members")
    return _new(Datum, (Kind.SET, v, 0, 0))


def _bit_bytes(ft: m.FieldType) -> int:
    n = (ft.flen + 7) >> 3
    return n if 1 <= n <= 8 else 8


def _bit(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.BIT:
        return d
    _expect(d, Kind.UINT64, ft)
    return _new(Datum, (Kind.BIT, d[1] & ((1 << (8 * _bit_bytes(ft))) - 1), 0, 0))


def _string(d: Datum, ft: m.FieldType, tz) -> Datum:
    if d[0] is Kind.BYTES:
        return _new(Datum, (Kind.STRING, d[1], 0, 0))
    return d


_UNFLATTEN: dict[int, Callable] = {tp: _int for tp in m.INTEGER_TYPES}
_UNFLATTEN.update({tp: _time for tp in m.TIME_TYPES})
_UNFLATTEN.update({tp: _string for tp in m.STRING_TYPES})
_UNFLATTEN.update(
    {
        m.TYPE_FLOAT: _float,
        m.TYPE_DURATION: _duration,
        m.TYPE_ENUM: _enum,
        m.TYPE_SET: _set,
        m.TYPE_BIT: _bit,
    }
)


def unflatten(datum: Datum, ft: m.FieldType, tz: datetime.tzinfo = UTC) -> Datum:
    """``tablecodec.Unflatten``: the typed datum for column type ``ft`` (idempotent)."""
    if datum[0] is Kind.NULL:
        return datum
    return _UNFLATTEN.get(ft.tp, _same)(datum, ft, tz)


def _text(b: bytes, ft: m.FieldType) -> str | bytes:
    if ft.charset == m.BINARY_CHARSET:
        return b
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b  # not utf-8: bind the raw bytes, as TiDB's Go string would


def format_sql_arg(datum: Datum, ft: m.FieldType, tz: datetime.tzinfo = UTC):
    """The drainer's ``formatData``: the SQL argument a MySQL sink binds for this value."""
    d = unflatten(datum, ft, tz)
    kind, v = d[0], d[1]
    if kind is Kind.NULL:
        return None
    if kind is Kind.STRING or kind is Kind.BYTES:
        return _text(v, ft)
    if kind is Kind.DECIMAL:
        frac = d[3] if d[2] else max(0, -v.as_tuple().exponent)
        return format_decimal(v, frac)
    if kind is Kind.TIME:
        return format_time(v, ft.tp, ft.fsp)
    if kind is Kind.DURATION:
        return format_duration(v, ft.fsp)
    if kind is Kind.JSON:
        return json_module().json_to_string(v)
    if kind in (Kind.MIN_NOT_NULL, Kind.MAX_VALUE):
        raise CodecError(f"{d!r} is a key bound, not a column value")
    return v


def sql_arg_formatter(ft: m.FieldType, tz: datetime.tzinfo = UTC) -> Callable[[Datum], object]:
    """``format_sql_arg`` bound to one column type: the same result for every datum,
    without the per-value type dispatch for the common cases (integers in their own
    signedness, text and binary strings); anything else goes to ``format_sql_arg``.

    The translator builds one per column and table version, so the decode hot path
    pays the dispatch once per column, not once per value.
    """
    tp = ft.tp
    if tp in m.INTEGER_TYPES:
        same_kind = Kind.UINT64 if ft.flag & m.UNSIGNED_FLAG else Kind.INT64

        def fmt_int(d: Datum):
            if d[0] is same_kind:  # _int leaves it as it is; format_sql_arg returns d[1]
                return d[1]
            return format_sql_arg(d, ft, tz)

        return fmt_int
    if tp in m.STRING_TYPES:
        binary = ft.charset == m.BINARY_CHARSET
        string, raw = Kind.STRING, Kind.BYTES

        def fmt_text(d: Datum):
            kind = d[0]
            if kind is string or kind is raw:  # _string, then _text
                if binary:
                    return d[1]
                try:
                    return d[1].decode("utf-8")
                except UnicodeDecodeError:
                    return d[1]
            return format_sql_arg(d, ft, tz)

        return fmt_text

    def fmt_any(d: Datum):
        return format_sql_arg(d, ft, tz)

    return fmt_any


# ---- python value -> datum --------------------------------------------------


def _bad(value, ft: m.FieldType, why: str) -> CodecError:
    return CodecError(
        f"cannot store {type(value).__name__} {value!r} in a column of type {ft.tp}: {why}"
    )


def _to_int(value, ft: m.FieldType) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, decimal.Decimal | float) and value == int(value):
        return int(value)
    if isinstance(value, str | bytes):
        try:
            return int(value)
        except ValueError as err:
            raise _bad(value, ft, "not an integer") from err
    raise _bad(value, ft, "not an integer")


def _packed_for(value, ft: m.FieldType, tz: datetime.tzinfo) -> int:
    if isinstance(value, datetime.datetime):
        if ft.tp == m.TYPE_TIMESTAMP and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
            tz = UTC
        t = value.timetuple()
        packed = pack_time(
            t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, value.microsecond
        )
    elif isinstance(value, datetime.date):
        packed = pack_time(value.year, value.month, value.day)
    elif isinstance(value, str | bytes):
        packed = parse_time_text(value.decode() if isinstance(value, bytes) else value)
    else:
        raise _bad(value, ft, "expected datetime.date/datetime or text")
    if ft.tp in (m.TYPE_DATE, m.TYPE_NEWDATE):
        packed &= ~((1 << 41) - 1)  # keep year/month/day only
    if ft.tp == m.TYPE_TIMESTAMP and packed:
        packed = to_utc(packed, tz)
    return packed


def _member_index(name: str, ft: m.FieldType) -> int:
    if name == "":
        return 0
    try:
        return ft.elems.index(name) + 1
    except ValueError:
        lowered = [e.lower() for e in ft.elems]
        if name.lower() in lowered:
            return lowered.index(name.lower()) + 1
        raise CodecError(f"{name!r} is not a member of {list(ft.elems)}") from None


def _set_mask(value, ft: m.FieldType) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        names = ()
        mask = value
    else:
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        names = [n for n in value.split(",") if n] if isinstance(value, str) else list(value)
        mask = 0
    for name in names:
        mask |= 1 << (_member_index(name, ft) - 1)
    if mask >> len(ft.elems):
        raise _bad(value, ft, f"bits past the SET members {list(ft.elems)}")
    return mask


def datum_for_column(value, ft: m.FieldType, tz: datetime.tzinfo = UTC) -> Datum:
    """The datum TiDB writes for ``value`` (as pymysql returns it) in a column of type ``ft``."""
    if value is None:
        return Datum.null()
    tp = ft.tp
    if tp in m.INTEGER_TYPES:
        v = _to_int(value, ft)
        if ft.flag & m.UNSIGNED_FLAG:
            return Datum.uint64(v)
        return Datum.int64(v)
    if tp == m.TYPE_YEAR:
        return Datum.int64(_to_int(value, ft))
    if tp in (m.TYPE_FLOAT, m.TYPE_DOUBLE):
        try:
            f = float(value)
        except (TypeError, ValueError) as err:
            raise _bad(value, ft, "not a number") from err
        return Datum.float32(f) if tp == m.TYPE_FLOAT else Datum.float64(f)
    if tp == m.TYPE_NEWDECIMAL:
        try:
            dec = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
        except decimal.InvalidOperation as err:
            raise _bad(value, ft, "not a decimal") from err
        if ft.flen <= 0:
            return Datum.decimal(dec)
        frac = max(ft.decimal, 0)
        ctx = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)
        dec = dec.quantize(decimal.Decimal(1).scaleb(-frac), context=ctx)
        return Datum.decimal(dec, ft.flen, frac)
    if tp in m.TIME_TYPES:
        return Datum.time(_packed_for(value, ft, tz))
    if tp == m.TYPE_DURATION:
        if isinstance(value, datetime.timedelta):
            ns = (value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1000
        elif isinstance(value, str | bytes):
            ns = parse_duration_text(value.decode() if isinstance(value, bytes) else value)
        else:
            raise _bad(value, ft, "expected datetime.timedelta or text")
        return Datum.duration(ns)
    if tp == m.TYPE_ENUM:
        if isinstance(value, int) and not isinstance(value, bool):
            return Datum.enum(value)
        name = value.decode("utf-8") if isinstance(value, bytes) else value
        if not isinstance(name, str):
            raise _bad(value, ft, "expected an ENUM member name")
        return Datum.enum(_member_index(name, ft))
    if tp == m.TYPE_SET:
        return Datum.set(_set_mask(value, ft))
    if tp == m.TYPE_BIT:
        if isinstance(value, bytes | bytearray):
            v = int.from_bytes(value, "big")
        else:
            v = _to_int(value, ft)
        if not 0 <= v <= UINT64_MAX:
            raise _bad(value, ft, "BIT values have at most 64 bits")
        return Datum.bit(v)
    if tp == m.TYPE_JSON:
        if isinstance(value, bytes | bytearray):
            value = bytes(value).decode("utf-8")
        if isinstance(value, str):
            return Datum.json(json_module().parse_json_text(value))
        return Datum.json(value)
    if tp in m.STRING_TYPES:
        if ft.charset == m.BINARY_CHARSET:
            return Datum.bytes(value.encode("utf-8") if isinstance(value, str) else value)
        return Datum.string(value)
    raise _bad(value, ft, "unsupported column type")
