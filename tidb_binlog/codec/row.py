"""TiDB's old row format (the one binlog uses) and the insert-row handle prefix.

``encode_old_row(col_ids, datums)`` is ``tablecodec.EncodeOldRow``: the value
form (``encode_value``) of ``[Int64(id0), flatten(d0), Int64(id1), flatten(d1), ...]``,
so each column is ``08 <zigzag varint id>`` followed by one value datum. Zero
columns encode as ``b"\\x00"``. ``flatten`` turns TIME into UINT64 (packed),
DURATION into INT64 (nanoseconds), and ENUM / SET / BIT into UINT64; everything
else is unchanged. Column order is the caller's; decoders never assume sorting.

Decoding:

- ``decode_old_row(buf)``: every column as the raw (flattened) datum, keyed by id.
  A column id seen twice is an error (an update row is ``old ‖ new``: use
  ``decode_old_and_new_row``).
- ``decode_row(buf, field_types, tz)``: ``DecodeRowToDatumMap``: empty or
  ``b"\\x00"`` -> ``{}``; first byte 0x80 -> row format v2; else the old format.
  Only the ids in ``field_types`` are returned, typed (``unflatten``); unknown ids
  (``_tidb_rowid`` = -1, dropped columns) are skipped.
- ``decode_old_and_new_row(buf, field_types, tz)``: ``DecodeOldAndNewRow``: the
  first occurrence of an id is the old value, the second the new one.
- ``split_insert_row(buf, pk_len)``: an inserted row is ``EncodeValue(handle
  datums) ‖ EncodeOldRow(row)``; returns the ``pk_len`` raw handle datums (1 for
  an int handle or ``_tidb_rowid``; one per PK column for a clustered common
  handle) and the row bytes.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Mapping, Sequence

from tidb_binlog.codec.datum import INT64_MAX, INT64_MIN, Datum, Kind
from tidb_binlog.codec.datum_codec import _cut_at, _decode_at, codec_error, encode_datum
from tidb_binlog.codec.mysql import (
    INTEGER_TYPES,
    STRING_TYPES,
    TYPE_YEAR,
    UNSIGNED_FLAG,
    FieldType,
)
from tidb_binlog.codec.primitives import Malformed, encode_varint, read_int, read_varint
from tidb_binlog.codec.rowv2 import decode_row_v2
from tidb_binlog.codec.typed import _UNFLATTEN, _same
from tidb_binlog.errors import CodecError

__all__ = [
    "flatten",
    "encode_old_row",
    "decode_old_row",
    "decode_row",
    "decode_old_and_new_row",
    "split_insert_row",
    "decode_insert_row",
]

UTC = datetime.UTC
CODEC_VER_V2 = 0x80
_EMPTY_ROW = b"\x00"
_new = tuple.__new__
_NULL_KIND = Kind.NULL
_STRING = Kind.STRING
_INT64 = Kind.INT64
_SIGNED_INT_TYPES = INTEGER_TYPES | {TYPE_YEAR}


def flatten(d: Datum) -> Datum:
    """``tablecodec.flatten``: the datum as stored in a row."""
    kind = d[0]
    if kind is Kind.TIME or kind is Kind.ENUM or kind is Kind.SET or kind is Kind.BIT:
        return _new(Datum, (Kind.UINT64, d[1], 0, 0))
    if kind is Kind.DURATION:
        return _new(Datum, (Kind.INT64, d[1], 0, 0))
    if kind is Kind.MIN_NOT_NULL or kind is Kind.MAX_VALUE:
        raise CodecError(f"{d!r} is a key bound and cannot be stored in a row")
    return d


def encode_old_row(col_ids: Sequence[int], datums: Sequence[Datum]) -> bytes:
    """``tablecodec.EncodeOldRow``: ``08 id value`` per column; no columns -> ``00``."""
    if len(col_ids) != len(datums):
        raise CodecError(
            f"EncodeRow error: data and columnID count not match {len(datums)} vs {len(col_ids)}"
        )
    if not col_ids:
        return _EMPTY_ROW
    parts = []
    for cid, d in zip(col_ids, datums, strict=True):
        if isinstance(cid, bool) or not isinstance(cid, int) or not INT64_MIN <= cid <= INT64_MAX:
            raise CodecError(f"column id {cid!r} is not an int64")
        if not isinstance(d, Datum):
            raise CodecError(f"column {cid}: expected a Datum, got {type(d).__name__} {d!r}")
        parts.append(b"\x08" + encode_varint(cid))
        parts.append(encode_datum(flatten(d), False))
    return b"".join(parts)


def _col_id(buf: bytes, off: int) -> tuple[int, int]:
    flag = buf[off]
    if flag == 0x08:
        b = buf[off + 1]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), off + 2
        return read_varint(buf, off + 1)
    if flag == 0x03:
        return read_int(buf, off + 1)
    raise Malformed(f"expected a column id (flag 0x08), found flag 0x{flag:02x}")


def _as_bytes(buf) -> bytes:
    return buf if type(buf) is bytes else bytes(buf)


def decode_old_row(buf: bytes) -> dict[int, Datum]:
    """Every column of an old-format row as its raw datum, keyed by column id."""
    buf = _as_bytes(buf)
    out: dict[int, Datum] = {}
    if not buf or buf == _EMPTY_ROW:
        return out
    n = len(buf)
    off = start = 0
    what = "column id"
    try:
        while off < n:
            start, what = off, "column id"
            cid, off = _col_id(buf, off)
            start, what = off, f"value of column {cid}"
            if cid in out:
                raise Malformed(
                    f"column id {cid} appears twice; an update row is old ‖ new, "
                    f"decode it with decode_old_and_new_row"
                )
            out[cid], off = _decode_at(buf, off)
    except (Malformed, IndexError, struct.error) as err:
        raise codec_error(buf, start, err, what) from err
    except CodecError as err:
        raise codec_error(buf, start, err, what) from err
    return out


def _decode_old_typed(
    buf: bytes, off: int, field_types: Mapping[int, FieldType], tz, pairs: bool
) -> tuple[dict[int, Datum], dict[int, Datum]]:
    """The old-format loop; with ``pairs`` the second occurrence of an id goes to ``new``."""
    old: dict[int, Datum] = {}
    new: dict[int, Datum] = {}
    n = len(buf)
    get = field_types.get
    unflatten_for = _UNFLATTEN.get
    string_types = STRING_TYPES
    signed_int_types = _SIGNED_INT_TYPES
    start = off
    what = "column id"
    try:
        while off < n:
            start, what = off, "column id"
            b = buf[off + 1]
            if buf[off] == 0x08 and b < 0x80:
                cid = (b >> 1) ^ -(b & 1)
                off += 2
            else:
                cid, off = _col_id(buf, off)
            start = off
            ft = get(cid)
            if ft is None:
                off = _cut_at(buf, off)
                continue
            what = f"value of column {cid}"
            if cid in old:
                if not pairs or cid in new:
                    raise Malformed(
                        f"column id {cid} appears {'three times' if pairs else 'twice'}"
                    )
                target = new
            else:
                target = old
            if buf[off] == 0x02 and ft.tp in string_types:
                b = buf[off + 1]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    p = off + 2
                else:
                    length, p = read_varint(buf, off + 1)
                end = p + length
                if length < 0 or end > n:
                    raise Malformed(f"compact bytes of length {length}, {n - p} bytes remain")
                target[cid] = _new(Datum, (_STRING, buf[p:end], 0, 0))
                off = end
                continue
            if buf[off] == 0x08 and ft.tp in signed_int_types and not ft.flag & UNSIGNED_FLAG:
                v, off = read_varint(buf, off + 1)
                target[cid] = _new(Datum, (_INT64, v, 0, 0))
                continue
            d, off = _decode_at(buf, off)
            target[cid] = d if d[0] is _NULL_KIND else unflatten_for(ft.tp, _same)(d, ft, tz)
    except (Malformed, IndexError, struct.error) as err:
        raise codec_error(buf, start, err, what) from err
    except CodecError as err:
        raise codec_error(buf, start, err, what) from err
    return old, new


def decode_row(
    buf: bytes, field_types: Mapping[int, FieldType], tz: datetime.tzinfo = UTC
) -> dict[int, Datum]:
    """``DecodeRowToDatumMap``: typed datums of the columns in ``field_types``."""
    buf = _as_bytes(buf)
    if not buf or buf == _EMPTY_ROW:
        return {}
    if buf[0] == CODEC_VER_V2:
        return decode_row_v2(buf, field_types, tz)
    return _decode_old_typed(buf, 0, field_types, tz, False)[0]


def decode_old_and_new_row(
    buf: bytes, field_types: Mapping[int, FieldType], tz: datetime.tzinfo = UTC
) -> tuple[dict[int, Datum], dict[int, Datum]]:
    """An update row ``old ‖ new``: (old, new) typed datums of the ids in ``field_types``.

    Raises CodecError when old and new have different column sets (TiDB's
    "row data is corrupted"). Columns missing from both are the caller's to fill.
    """
    buf = _as_bytes(buf)
    if not buf or buf[0] == 0x00:
        return {}, {}
    old, new = _decode_old_typed(buf, 0, field_types, tz, True)
    if old.keys() != new.keys():
        raise CodecError(
            f"row data is corrupted: old row has columns {sorted(old)}, new row {sorted(new)}",
            offset=0,
            flag=buf[0],
        )
    return old, new


def _read_handles(buf: bytes, pk_len: int) -> tuple[list[Datum], int]:
    if pk_len < 1:
        raise CodecError(f"pk_len must be >= 1, got {pk_len}")
    handles = []
    off = 0
    for i in range(pk_len):
        try:
            d, off = _decode_at(buf, off)
        except (Malformed, IndexError, struct.error, CodecError) as err:
            raise codec_error(buf, off, err, f"handle datum {i} of {pk_len}") from err
        handles.append(d)
    return handles, off


def split_insert_row(buf: bytes, pk_len: int = 1) -> tuple[list[Datum], bytes]:
    """Split an inserted row into its ``pk_len`` raw handle datums and the row bytes."""
    buf = _as_bytes(buf)
    handles, off = _read_handles(buf, pk_len)
    return handles, buf[off:]


def decode_insert_row(
    buf: bytes,
    field_types: Mapping[int, FieldType],
    pk_len: int = 1,
    tz: datetime.tzinfo = UTC,
) -> tuple[list[Datum], dict[int, Datum]]:
    """``split_insert_row`` + ``decode_row`` without copying the row bytes.

    Handle datums are raw; unflatten them with their PK columns' types (an int
    handle in an UNSIGNED column becomes its uint64 that way).
    """
    buf = _as_bytes(buf)
    handles, off = _read_handles(buf, pk_len)
    if off == len(buf) or buf[off:] == _EMPTY_ROW:
        return handles, {}
    if buf[off] == CODEC_VER_V2:
        return handles, decode_row_v2(buf[off:], field_types, tz)
    return handles, _decode_old_typed(buf, off, field_types, tz, False)[0]
