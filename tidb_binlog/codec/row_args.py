"""Rows straight to SQL arguments: the drainer's decode hot path.

:func:`decode_row` followed by ``format_sql_arg`` per column builds a typed
:class:`~tidb_binlog.codec.datum.Datum` for every value and calls its formatter;
for the column types most rows are made of, the argument can be read from the
bytes directly. An :class:`ArgPlan` (built once per table version from the column
types, with their :func:`~tidb_binlog.codec.typed.sql_arg_formatter`) says, per
column id, how:

- text columns (CHAR/VARCHAR/TEXT..., non-binary charset) stored as compact
  bytes: ``str`` of the UTF-8 bytes, or the raw ``bytes`` when they are not UTF-8;
- binary-charset string columns stored as compact bytes: the ``bytes``;
- signed integer columns (TINYINT..BIGINT without UNSIGNED) stored as a varint:
  the ``int``;
- anything else (other types, other encodings, NULL): the datum is decoded,
  unflattened and formatted exactly as before.

So ``decode_row_args(buf, plan)[cid] == format_sql_arg(decode_row(buf, types)[cid])`` for
every column, with the same errors for malformed bytes (a ``CodecError`` naming the
offset, never an ``IndexError``). Row format v2 rows take the typed path.

- ``decode_row_args(buf, plan, tz, off=0)``: ``{cid: argument}`` of the plan's
  columns present in the row (``DecodeRowToDatumMap`` + format).
- ``decode_insert_args(buf, plan, pk_len, tz)``: the raw handle datums and the row.
- ``decode_old_and_new_args(buf, plan, tz)``: an update row ``old ‖ new``.

Old-format rows are decoded by the C extension ``tidb_binlog.codec._rowfast`` when it
is built (``COMPILED``): it reads the three fast cases above itself and calls back into
:func:`_old_args_loop` for one column at a time for everything else (other types or
encodings, NULLs, malformed bytes), so results and errors are those of the Python
reference :func:`_decode_old_args_py`. ``TIDB_BINLOG_PURE_PYTHON=1`` (any value but
empty or ``0``) selects the reference; so does a source tree whose extension was never
built. ``pip install -e .`` builds it next to the sources; after a change to
``_rowfast.c`` run it again, or ``python -c "from setuptools import setup; setup()"
build_ext --inplace`` from the repository root.
"""

from __future__ import annotations

import datetime
import os
import struct
from collections.abc import Callable, Collection, Mapping

from tidb_binlog.codec.datum import Datum, Kind
from tidb_binlog.codec.datum_codec import _cut_at, _decode_at, codec_error
from tidb_binlog.codec.mysql import (
    BINARY_CHARSET,
    INTEGER_TYPES,
    STRING_TYPES,
    UNSIGNED_FLAG,
    FieldType,
)
from tidb_binlog.codec.primitives import Malformed, read_varint
from tidb_binlog.codec.row import _EMPTY_ROW, CODEC_VER_V2, _col_id, _read_handles
from tidb_binlog.codec.rowv2 import decode_row_v2
from tidb_binlog.codec.typed import _UNFLATTEN, _same, sql_arg_formatter
from tidb_binlog.errors import CodecError

__all__ = ["ArgPlan", "decode_row_args", "decode_insert_args", "decode_int_handle_args",
           "decode_old_and_new_args"]

UTC = datetime.UTC
_OTHER, _TEXT, _BINARY, _SINT = 0, 1, 2, 3
_COMPACT_BYTES_FLAG = 0x02
_VARINT_FLAG = 0x08
_NULL = Kind.NULL


class ArgPlan:
    """Per column id: how to read its SQL argument (see the module docstring).

    ``field_types`` are the columns to decode (others are skipped, as
    ``decode_row`` skips ids it is not given); ``formatted`` the ids whose
    argument is wanted (default: all): the others are only decoded (their typed
    datum is returned), so a value nobody reads is never formatted.
    """

    __slots__ = ("columns", "field_types")

    def __init__(self, field_types: Mapping[int, FieldType], tz: datetime.tzinfo = UTC,
                 formatted: Collection[int] | None = None):
        self.field_types = dict(field_types)
        # cid -> (code, field type, unflatten function, formatter)
        self.columns: dict[int, tuple[int, FieldType, Callable, Callable]] = {}
        for cid, ft in self.field_types.items():
            tp = ft.tp
            unflatten_fn = _UNFLATTEN.get(tp, _same)
            if formatted is not None and cid not in formatted:
                self.columns[cid] = (_OTHER, ft, unflatten_fn, _datum)
                continue
            if tp in STRING_TYPES:
                code = _BINARY if ft.charset == BINARY_CHARSET else _TEXT
            elif tp in INTEGER_TYPES and not ft.flag & UNSIGNED_FLAG:
                code = _SINT
            else:
                code = _OTHER
            self.columns[cid] = (code, ft, unflatten_fn, sql_arg_formatter(ft, tz))


    def signed_int(self, cid: int) -> bool:
        """Whether column ``cid``'s argument is a varint read as a plain ``int``."""
        entry = self.columns.get(cid)
        return entry is not None and entry[0] == _SINT


def _datum(d: Datum) -> Datum:
    return d


def _old_args_loop(buf: bytes, off: int, plan: ArgPlan, tz, pairs: bool,
                   old: dict[int, object], new: dict[int, object], steps: int) -> int:
    """The columns from ``buf[off:]`` into ``old`` (and ``new`` in ``pairs`` mode) until
    the bytes end or ``steps`` columns are read (-1: no limit); the offset reached.

    The compiled loop calls it with ``steps=1`` for each column it leaves to Python."""
    n = len(buf)
    get = plan.columns.get
    start = off
    what = "column id"
    try:
        while off < n and steps:
            steps -= 1
            start, what = off, "column id"
            b = buf[off + 1]
            if buf[off] == 0x08 and b < 0x80:
                cid = (b >> 1) ^ -(b & 1)
                off += 2
            else:
                cid, off = _col_id(buf, off)
            start = off
            entry = get(cid)
            if entry is None:
                off = _cut_at(buf, off)
                continue
            what = f"value of column {cid}"
            if cid in old:
                if not pairs or cid in new:
                    raise Malformed(
                        f"column id {cid} appears {'three times' if pairs else 'twice'}")
                target = new
            else:
                target = old
            code = entry[0]
            flag = buf[off]
            if flag == _COMPACT_BYTES_FLAG and (code == _TEXT or code == _BINARY):
                b = buf[off + 1]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    p = off + 2
                elif buf[off + 2] < 0x80:  # 64..8191 bytes: a two-byte varint
                    ux = (b & 0x7F) | (buf[off + 2] << 7)
                    length = (ux >> 1) ^ -(ux & 1)
                    p = off + 3
                else:
                    length, p = read_varint(buf, off + 1)
                end = p + length
                if length < 0 or end > n:
                    raise Malformed(f"compact bytes of length {length}, {n - p} bytes remain")
                raw = buf[p:end]
                if code == _TEXT:
                    try:
                        target[cid] = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        target[cid] = raw
                else:
                    target[cid] = raw
                off = end
                continue
            if flag == _VARINT_FLAG and code == _SINT:
                b = buf[off + 1]
                if b < 0x80:
                    target[cid] = (b >> 1) ^ -(b & 1)
                    off += 2
                else:
                    target[cid], off = read_varint(buf, off + 1)
                continue
            d, off = _decode_at(buf, off)
            if d[0] is not _NULL:
                d = entry[2](d, entry[1], tz)
            target[cid] = entry[3](d)
    except (Malformed, IndexError, struct.error) as err:
        raise codec_error(buf, start, err, what) from err
    except CodecError as err:
        raise codec_error(buf, start, err, what) from err
    return off


def _decode_old_args_py(buf: bytes, off: int, plan: ArgPlan, tz, pairs: bool
                        ) -> tuple[dict[int, object], dict[int, object]]:
    """The reference decoder of old-format rows (``_rowfast.decode_old_args`` gives the
    same results and errors): ``(old, new)``, ``new`` filled only in ``pairs`` mode."""
    old: dict[int, object] = {}
    new: dict[int, object] = {}
    _old_args_loop(buf, off, plan, tz, pairs, old, new, -1)
    return old, new


def _pure_python_requested() -> bool:
    return os.environ.get("TIDB_BINLOG_PURE_PYTHON", "") not in ("", "0")


# The compiled decoder: absent from a source tree never built (then the reference
# decodes); one that is there but does not load raises.
if _pure_python_requested():
    _rowfast = None
else:
    try:
        import tidb_binlog.codec._rowfast as _rowfast
    except ModuleNotFoundError as exc:
        if exc.name != "tidb_binlog.codec._rowfast":
            raise
        _rowfast = None
if _rowfast is not None:
    _rowfast.set_callbacks(_old_args_loop, _decode_old_args_py)
#: whether the compiled ``_rowfast.decode_old_args`` decodes old-format rows
COMPILED = _rowfast is not None
_decode_old_args = _rowfast.decode_old_args if COMPILED else _decode_old_args_py


def _v2_args(buf: bytes, plan: ArgPlan, tz) -> dict[int, object]:
    columns = plan.columns
    return {cid: columns[cid][3](d)
            for cid, d in decode_row_v2(buf, plan.field_types, tz).items()}


def decode_row_args(buf: bytes, plan: ArgPlan, tz: datetime.tzinfo = UTC,
                    off: int = 0) -> dict[int, object]:
    """``{cid: SQL argument}`` of the plan's columns in the row at ``buf[off:]``."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    n = len(buf)
    if off >= n or (off + 1 == n and buf[off] == _EMPTY_ROW[0]):  # no copy of the tail
        return {}
    if buf[off] == CODEC_VER_V2:
        return _v2_args(buf[off:], plan, tz)
    return _decode_old_args(buf, off, plan, tz, False)[0]


def decode_insert_args(buf: bytes, plan: ArgPlan, pk_len: int = 1,
                       tz: datetime.tzinfo = UTC) -> tuple[list[Datum], dict[int, object]]:
    """An inserted row: its ``pk_len`` raw handle datums and ``{cid: SQL argument}``."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    handles, off = _read_handles(buf, pk_len)
    return handles, decode_row_args(buf, plan, tz, off)


def decode_int_handle_args(buf: bytes, plan: ArgPlan, tz: datetime.tzinfo = UTC
                           ) -> tuple[int | None, dict[int, object]]:
    """An inserted row whose handle is one integer datum stored as a varint (an int PK
    handle or ``_tidb_rowid``): ``(handle, {cid: SQL argument})``, the handle read
    straight from the bytes. ``(None, {})`` when the handle is encoded otherwise or
    malformed: then :func:`decode_insert_args` decides (and names any error)."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    if len(buf) < 2 or buf[0] != _VARINT_FLAG:
        return None, {}
    b = buf[1]
    if b < 0x80:
        handle, off = (b >> 1) ^ -(b & 1), 2
    else:
        try:
            handle, off = read_varint(buf, 1)
        except (Malformed, IndexError):
            return None, {}
    return handle, decode_row_args(buf, plan, tz, off)


def decode_old_and_new_args(buf: bytes, plan: ArgPlan, tz: datetime.tzinfo = UTC
                            ) -> tuple[dict[int, object], dict[int, object]]:
    """An update row ``old ‖ new`` as two ``{cid: SQL argument}`` (same column sets, or
    CodecError: TiDB's "row data is corrupted")."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    if not buf or buf[0] == 0x00:
        return {}, {}
    old, new = _decode_old_args(buf, 0, plan, tz, True)
    if old.keys() != new.keys():
        raise CodecError(
            f"row data is corrupted: old row has columns {sorted(old)}, new row {sorted(new)}",
            offset=0, flag=buf[0])
    return old, new
