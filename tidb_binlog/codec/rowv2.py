"""Row format v2 (TiDB's ``rowcodec``, "new row format", codec version 0x80).

Layout (all integers little-endian)::

    0x80 | flags u8 | not_null u16 | null u16 | col ids | offsets | data | [checksum]

- flags: bit0 = large (ids are u32 and offsets u32, else u8 and u16), bit1 =
  checksum present. ``large`` is set when an id exceeds 255 or the data
  exceeds 65535 bytes.
- col ids: the not-null ids ascending, then the null ids ascending. Columns not
  listed are absent (the reader fills defaults).
- offsets: the END offset in ``data`` of each not-null value.
- checksum: header byte (bits 0-2 version, bit 3 = extra checksum), u32 CRC32
  [+ u32 extra]. Tolerated: lengths are checked, the CRC is not verified.

Values: INT64/DURATION as the shortest of 1/2/4/8 bytes two's complement that
round-trips; UINT64 / TIME (packed, TIMESTAMP in UTC) / ENUM / SET / BIT as the
shortest 1/2/4/8-byte unsigned; STRING/BYTES raw; FLOAT32/64 as ``encode_float``
(8 bytes big-endian, order-preserving); DECIMAL as precision, frac, MyDecimal
binary; JSON as type code + value. The decoder reads values by column type
(``UNSIGNED_FLAG`` decides int vs uint) and returns typed datums like
``decode_row``. Trailing bytes after the data (and checksum) are an error.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Mapping, Sequence

from tidb_binlog.codec import mysql as m
from tidb_binlog.codec.datum import Datum, Kind
from tidb_binlog.codec.datum_codec import codec_error, json_module
from tidb_binlog.codec.mydecimal import (
    MAX_DECIMAL_SCALE,
    encode_decimal_bin,
    precision_and_frac,
    read_decimal_bin,
)
from tidb_binlog.codec.mysql import FieldType
from tidb_binlog.codec.primitives import Malformed, encode_float, read_float
from tidb_binlog.codec.typed import _UNFLATTEN, _same
from tidb_binlog.errors import CodecError

__all__ = ["encode_row_v2", "decode_row_v2", "CODEC_VER"]

CODEC_VER = 0x80
FLAG_LARGE = 0x01
FLAG_CHECKSUM = 0x02
CHECKSUM_EXTRA = 0x08
UTC = datetime.UTC
_HEADER = struct.Struct("<BBHH")
_new = tuple.__new__
_STRUCTS: dict[str, struct.Struct] = {}
_WIDTHS = (1, 2, 4, 8)


def _struct(fmt: str) -> struct.Struct:
    s = _STRUCTS.get(fmt)
    if s is None:
        s = _STRUCTS[fmt] = struct.Struct(fmt)
    return s


def _int_bytes(v: int) -> bytes:
    for w in _WIDTHS:
        if -(1 << (8 * w - 1)) <= v < (1 << (8 * w - 1)):
            return v.to_bytes(w, "little", signed=True)
    raise CodecError(f"int {v} does not fit 8 bytes")


def _uint_bytes(v: int) -> bytes:
    for w in _WIDTHS:
        if v < (1 << (8 * w)):
            return v.to_bytes(w, "little")
    raise CodecError(f"uint {v} does not fit 8 bytes")


def _value_bytes(d: Datum) -> bytes:
    kind = d[0]
    if kind is Kind.INT64 or kind is Kind.DURATION:
        return _int_bytes(d[1])
    if kind in (Kind.UINT64, Kind.TIME, Kind.ENUM, Kind.SET, Kind.BIT):
        return _uint_bytes(d[1])
    if kind is Kind.STRING or kind is Kind.BYTES:
        return d[1]
    if kind is Kind.FLOAT64 or kind is Kind.FLOAT32:
        return encode_float(d[1])
    if kind is Kind.DECIMAL:
        precision, frac = d[2], d[3]
        if precision == 0:
            precision, frac = precision_and_frac(d[1])
        frac = min(frac, MAX_DECIMAL_SCALE)
        return bytes((precision, frac)) + encode_decimal_bin(d[1], precision, frac)
    if kind is Kind.JSON:
        return json_module().encode_json(d[1])
    raise CodecError(f"row format v2 cannot store {d!r}")


def encode_row_v2(col_ids: Sequence[int], datums: Sequence[Datum]) -> bytes:
    """Encode a row in format v2 (ids sorted, NULLs listed after the not-null ids)."""
    if len(col_ids) != len(datums):
        raise CodecError(f"data and columnID count not match {len(datums)} vs {len(col_ids)}")
    if len(set(col_ids)) != len(col_ids):
        raise CodecError(f"duplicate column ids in {list(col_ids)}")
    not_null: list[tuple[int, bytes]] = []
    nulls: list[int] = []
    for cid, d in sorted(zip(col_ids, datums, strict=True), key=lambda p: p[0]):
        if isinstance(cid, bool) or not isinstance(cid, int) or not 0 <= cid < (1 << 32):
            raise CodecError(f"row format v2 column id {cid!r} must be in [0, 2**32)")
        if d[0] is Kind.NULL:
            nulls.append(cid)
        else:
            not_null.append((cid, _value_bytes(d)))
    data = b"".join(v for _, v in not_null)
    ids = [cid for cid, _ in not_null] + nulls
    if len(not_null) > 0xFFFF or len(nulls) > 0xFFFF:
        raise CodecError("row format v2 holds at most 65535 null and 65535 not-null columns")
    large = any(cid > 255 for cid in ids) or len(data) > 0xFFFF
    ends = []
    end = 0
    for _, v in not_null:
        end += len(v)
        ends.append(end)
    out = bytearray(_HEADER.pack(CODEC_VER, FLAG_LARGE if large else 0, len(not_null), len(nulls)))
    if large:
        out += _struct(f"<{len(ids)}I").pack(*ids)
        out += _struct(f"<{len(ends)}I").pack(*ends)
    else:
        out += bytes(ids)
        out += _struct(f"<{len(ends)}H").pack(*ends)
    out += data
    return bytes(out)


def _raw_datum(data: bytes, ft: m.FieldType) -> Datum:
    """The flattened datum a v2 value stands for, read by column type."""
    tp = ft.tp
    if tp in m.STRING_TYPES:
        return _new(Datum, (Kind.STRING, data, 0, 0))
    if tp in m.INTEGER_TYPES or tp == m.TYPE_YEAR or tp == m.TYPE_DURATION:
        if len(data) not in _WIDTHS:
            raise Malformed(f"integer value of {len(data)} bytes (expected 1, 2, 4 or 8)")
        if ft.flag & m.UNSIGNED_FLAG and tp != m.TYPE_DURATION:
            return _new(Datum, (Kind.UINT64, int.from_bytes(data, "little"), 0, 0))
        return _new(Datum, (Kind.INT64, int.from_bytes(data, "little", signed=True), 0, 0))
    if tp in m.TIME_TYPES or tp in (m.TYPE_ENUM, m.TYPE_SET, m.TYPE_BIT):
        if len(data) not in _WIDTHS:
            raise Malformed(f"unsigned value of {len(data)} bytes (expected 1, 2, 4 or 8)")
        return _new(Datum, (Kind.UINT64, int.from_bytes(data, "little"), 0, 0))
    if tp == m.TYPE_FLOAT or tp == m.TYPE_DOUBLE:
        if len(data) != 8:
            raise Malformed(f"float value of {len(data)} bytes (expected 8)")
        return _new(Datum, (Kind.FLOAT64, read_float(data, 0)[0], 0, 0))
    if tp == m.TYPE_NEWDECIMAL:
        if len(data) < 3:
            raise Malformed("decimal value needs precision, frac and digits")
        value, end = read_decimal_bin(data, 2, data[0], data[1])
        if end != len(data):
            raise Malformed(f"decimal value has {len(data) - end} trailing bytes")
        return _new(Datum, (Kind.DECIMAL, value, data[0], data[1]))
    if tp == m.TYPE_JSON:
        if not data:
            raise Malformed("empty JSON value")
        obj, end = json_module().decode_json(data, 0)
        if end != len(data):
            raise Malformed(f"JSON value has {len(data) - end} trailing bytes")
        return _new(Datum, (Kind.JSON, obj, 0, 0))
    raise Malformed(f"row format v2 cannot decode column type {tp}")


def _layout(buf: bytes) -> tuple[Sequence[int], Sequence[int], int, int]:
    """(col ids, end offsets, data start, number of not-null ids) of a v2 row."""
    if len(buf) < 6:
        raise Malformed(f"header needs 6 bytes, {len(buf)} given")
    ver, flags, n_not_null, n_null = _HEADER.unpack_from(buf, 0)
    if ver != CODEC_VER:
        raise Malformed(f"codec version 0x{ver:02x} is not 0x80")
    n_ids = n_not_null + n_null
    off = 6
    if flags & FLAG_LARGE:
        ids = _struct(f"<{n_ids}I").unpack_from(buf, off)
        off += 4 * n_ids
        ends = _struct(f"<{n_not_null}I").unpack_from(buf, off)
        off += 4 * n_not_null
    else:
        if off + n_ids > len(buf):
            raise Malformed(f"{n_ids} column ids do not fit the row")
        ids = buf[off : off + n_ids]
        off += n_ids
        ends = _struct(f"<{n_not_null}H").unpack_from(buf, off)
        off += 2 * n_not_null
    data_len = ends[-1] if ends else 0
    tail = len(buf) - off - data_len
    if flags & FLAG_CHECKSUM:
        if tail < 5:
            raise Malformed("checksum flag set but no checksum after the data")
        tail -= 9 if buf[off + data_len] & CHECKSUM_EXTRA else 5
    if tail != 0:
        raise Malformed(f"{abs(tail)} bytes {'missing from' if tail < 0 else 'after'} the row data")
    prev = 0
    for e in ends:
        if e < prev:
            raise Malformed(f"value offsets decrease ({prev} then {e})")
        prev = e
    return ids, ends, off, n_not_null


def decode_row_v2(
    buf: bytes, field_types: Mapping[int, FieldType], tz: datetime.tzinfo = UTC
) -> dict[int, Datum]:
    """Typed datums of the columns in ``field_types`` present in a v2 row (NULL included)."""
    buf = buf if type(buf) is bytes else bytes(buf)
    start = 0
    what = "row format v2 header"
    try:
        ids, ends, data_start, n_not_null = _layout(buf)
        out: dict[int, Datum] = {}
        get = field_types.get
        prev = 0
        for i, cid in enumerate(ids):
            ft = get(cid)
            if i < n_not_null:
                end = ends[i]
                if ft is not None:
                    start, what = data_start + prev, f"value of column {cid}"
                    d = _raw_datum(buf[data_start + prev : data_start + end], ft)
                    out[cid] = _UNFLATTEN.get(ft.tp, _same)(d, ft, tz)
                prev = end
            elif ft is not None:
                out[cid] = Datum.null()
        return out
    except (Malformed, IndexError, struct.error) as err:
        raise codec_error(buf, start, err, what, flag=CODEC_VER) from err
    except CodecError as err:
        raise codec_error(buf, start, err, what, flag=CODEC_VER) from err
