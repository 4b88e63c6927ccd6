"""Row changes → Arrow record batches whose types keep every MySQL value exact.

The keeper hands the sink each row change as the MySQL sink's SQL arguments
(:func:`tidb_binlog.codec.typed.format_sql_arg`: decimals, times and JSON as text,
ENUM/SET/BIT as integers, strings as ``str`` or ``bytes``) together with the
table's column types (:class:`TableSpec`, from the TableInfo at that schema
version). Here each column gets the Arrow type that holds its values without loss,
and each SQL argument is turned into the Python value Arrow stores:

====================================  =================================  ======================
MySQL type                            Arrow type                          value
====================================  =================================  ======================
TINYINT/SMALLINT/MEDIUMINT/INT/BIGINT int8/16/32/32/64 (uint* unsigned)  int
FLOAT / DOUBLE                        float32 / float64                  float
DECIMAL(p, s)                         decimal128(p, s) (decimal256 p>38) ``Decimal(text)``
DATE                                  date32                             ``date``
DATETIME(fsp) / TIMESTAMP(fsp)        timestamp[us] (no zone)            ``datetime``
TIME(fsp)                             duration[us] (±838:59:59)          ``timedelta``
YEAR                                  int16                              int
CHAR/VARCHAR/TEXT (non-binary)        string                             str
BINARY/VARBINARY/BLOB, GEOMETRY       binary                             bytes
BIT(n)                                binary, ``ceil(n/8)`` big-endian   bytes
ENUM / SET                            string (member name / names ``,``) str
JSON                                  string (the JSON text)             str
====================================  =================================  ======================

TIMESTAMP values are wall-clock times in the task's ``[syncer.to.params] time_zone``
(default UTC), as the MySQL sink binds them. A zero or partial date
(``0000-00-00``, month or day 0: MySQL accepts them, no calendar holds them) is
stored as NULL and counted (:attr:`BatchBuilder.zero_dates`). Text that is not UTF-8
in a non-binary column is refused with an error naming the column (no value is
silently altered).

Every file of one table and schema version has the same Arrow schema
(:func:`change_schema`): ``commit_ts`` int64, ``op`` string (``insert``/``update``/
``delete``), ``before`` and ``after`` structs with one field per column (``before``
is NULL for an insert, ``after`` NULL for a delete).

**The manifest's description of a table** (:func:`schema_fields`, a ``schemas`` entry
of :mod:`.manifest`): per column its MySQL and Arrow types, ``nullable`` and
``default``; the table's ``primary_key``, ``unique_keys`` and ``handle``. ``default`` is
the value a row image lacking the column holds (a row written before the column was
added: :attr:`ColumnSpec.default`, the keeper's fill value), written as the lake stores
it in JSON (:func:`default_json`): integers and floats as numbers, DECIMAL, DATE,
DATETIME/TIMESTAMP as text Arrow casts from (``"1.50"``, ``"2024-02-29"``,
``"2024-02-29 23:59:59.500000"``), TIME as integer microseconds, binary columns (BINARY,
BLOB, BIT, GEOMETRY) as base64 text, text/ENUM/SET/JSON as the string, a zero date and
no default as null.
"""

from __future__ import annotations

import base64
import datetime
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from tidb_binlog.errors import DownstreamError, SchemaError
from tidb_binlog.model.consts import Flag, TypeCode

__all__ = ["ColumnSpec", "TableSpec", "arrow_type", "converter", "change_schema",
           "BatchBuilder", "OPS", "mysql_type_name", "DEFAULT_UNKNOWN", "default_json",
           "column_entry", "schema_fields"]

OPS = ("insert", "update", "delete")

_INT_BITS = {TypeCode.TINY: 8, TypeCode.SHORT: 16, TypeCode.INT24: 32, TypeCode.LONG: 32,
             TypeCode.LONGLONG: 64}
_TEXT_TYPES = {TypeCode.VARCHAR, TypeCode.VAR_STRING, TypeCode.STRING, TypeCode.TINY_BLOB,
               TypeCode.MEDIUM_BLOB, TypeCode.LONG_BLOB, TypeCode.BLOB}
_NAMES = {TypeCode.DECIMAL: "decimal", TypeCode.NEWDECIMAL: "decimal", TypeCode.TINY: "tinyint",
          TypeCode.SHORT: "smallint", TypeCode.INT24: "mediumint", TypeCode.LONG: "int",
          TypeCode.LONGLONG: "bigint", TypeCode.FLOAT: "float", TypeCode.DOUBLE: "double",
          TypeCode.NULL: "null", TypeCode.TIMESTAMP: "timestamp", TypeCode.DATE: "date",
          TypeCode.NEWDATE: "date", TypeCode.DURATION: "time", TypeCode.DATETIME: "datetime",
          TypeCode.YEAR: "year", TypeCode.VARCHAR: "varchar", TypeCode.VAR_STRING: "varchar",
          TypeCode.STRING: "char", TypeCode.BIT: "bit", TypeCode.JSON: "json",
          TypeCode.ENUM: "enum", TypeCode.SET: "set", TypeCode.TINY_BLOB: "tinyblob",
          TypeCode.MEDIUM_BLOB: "mediumblob", TypeCode.LONG_BLOB: "longblob",
          TypeCode.BLOB: "blob", TypeCode.GEOMETRY: "geometry"}
BINARY_CHARSET = "binary"


class _Unknown(enum.Enum):
    DEFAULT = "unknown"

    def __repr__(self) -> str:
        return "DEFAULT_UNKNOWN"


DEFAULT_UNKNOWN = _Unknown.DEFAULT
"""A :attr:`ColumnSpec.default` nobody told (a spec built by hand): the manifest then
omits the column's ``default``."""


@dataclass(frozen=True)
class ColumnSpec:
    """One column's name and MySQL type (the TableInfo's FieldType fields we need), and
    ``default``: the SQL argument a row lacking the column holds, as the translator
    fills it (the keeper's ``fill_default``), or :data:`DEFAULT_UNKNOWN`."""

    name: str
    tp: int
    flag: int = 0
    flen: int = -1
    decimal: int = -1
    charset: str = ""
    elems: tuple[str, ...] = ()
    default: Any = DEFAULT_UNKNOWN

    @classmethod
    def of(cls, name: str, ft, default: Any = DEFAULT_UNKNOWN) -> ColumnSpec:
        """From a model or codec FieldType."""
        return cls(name, ft.tp, ft.flag, ft.flen, ft.decimal, ft.charset or "",
                   tuple(ft.elems or ()), default)

    @property
    def unsigned(self) -> bool:
        return bool(self.flag & Flag.UNSIGNED)

    @property
    def nullable(self) -> bool:
        return not self.flag & Flag.NOT_NULL

    @property
    def binary(self) -> bool:
        return self.charset == BINARY_CHARSET


@dataclass(frozen=True)
class TableSpec:
    """A table's writable columns at one schema version, in table order; its unique keys
    as ``(name, columns, primary)``, the primary key first (the translator's, TiDB
    Binlog's order), and its row ``handle`` (``int``, ``common`` or ``rowid``: TiDB's
    handle kind). None: not told (a spec built by hand; the manifest omits them)."""

    database: str
    table: str
    columns: tuple[ColumnSpec, ...]
    unique_keys: tuple[tuple[str, tuple[str, ...], bool], ...] | None = None
    handle: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.table}"


def mysql_type_name(col: ColumnSpec) -> str:
    """A readable MySQL type for the manifest (``decimal(10,2)``, ``bigint unsigned``)."""
    name = _NAMES.get(col.tp, f"type{col.tp}")
    if col.tp in (TypeCode.DECIMAL, TypeCode.NEWDECIMAL):
        p, s = _decimal_precision(col)
        name = f"decimal({p},{s})"
    elif col.tp in (TypeCode.DATETIME, TypeCode.TIMESTAMP, TypeCode.DURATION) and col.decimal > 0:
        name = f"{name}({col.decimal})"
    elif col.tp == TypeCode.BIT:
        name = f"bit({col.flen})"
    elif col.tp in _TEXT_TYPES and col.binary:
        name = {"varchar": "varbinary", "char": "binary"}.get(name, name)
    if col.tp in _INT_BITS and col.unsigned:
        name += " unsigned"
    return name


def _text_number(col: ColumnSpec) -> Callable[[Any], Any] | None:
    """For a numeric column: text → the number (MySQL's defaults are text: a TableInfo's
    ``origin_default`` of an INT column is ``"33"``); None for other columns."""
    if col.tp in _INT_BITS or col.tp == TypeCode.YEAR:
        def integer(v):
            if not isinstance(v, str):
                return v
            try:
                d = Decimal(v.strip())
            except InvalidOperation:
                raise DownstreamError(f"{v!r} is not a number") from None
            if d != d.to_integral_value():
                raise DownstreamError(f"{v!r} is not an integer")
            return int(d)
        return integer
    if col.tp in (TypeCode.FLOAT, TypeCode.DOUBLE):
        return lambda v: float(v) if isinstance(v, str) else v
    return None


def default_json(col: ColumnSpec, arg: Any) -> Any:
    """A fill value (a SQL argument, as :attr:`ColumnSpec.default`) as the manifest holds
    it: the value the lake stores, in JSON (module doc). DownstreamError (or Arrow's
    ArrowInvalid, a ValueError) when it is not a value of the column's type."""
    if arg is None:
        return None
    number = _text_number(col)
    if number is not None:
        arg = number(arg)
    conv = converter(col)
    try:
        value = arg if conv is None else conv(arg)
    except _ZeroDate:
        return None
    except (TypeError, IndexError, OverflowError, ArithmeticError) as exc:
        raise DownstreamError(f"{arg!r} is not a value of {mysql_type_name(col)} "
                              f"({exc})") from None
    pa.array([value], arrow_type(col))  # it must fit the column's Arrow type
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(microseconds=1)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise DownstreamError(f"{arg!r} is not a value of {mysql_type_name(col)}")


def column_entry(col: ColumnSpec) -> dict:
    """A column of a manifest ``schemas`` entry (module doc); no ``default`` when it is
    unknown (or not a value of the column's type: it is then left out, never guessed)."""
    entry = {"name": col.name, "mysql_type": mysql_type_name(col),
             "arrow_type": str(arrow_type(col)), "nullable": col.nullable}
    if col.default is not DEFAULT_UNKNOWN:
        try:
            entry["default"] = default_json(col, col.default)
        except (DownstreamError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # unknown to readers, as in an entry of an older sink
    return entry


def schema_fields(spec: TableSpec) -> dict:
    """What a manifest ``schemas`` entry says of ``spec`` besides its database, table,
    schema version and ``min_commit_ts``: ``columns``, and when the spec knows them
    ``primary_key``, ``unique_keys`` and ``handle`` (module doc)."""
    fields: dict[str, Any] = {"columns": [column_entry(c) for c in spec.columns]}
    if spec.unique_keys is not None:
        keys = spec.unique_keys
        fields["primary_key"] = list(keys[0][1]) if keys and keys[0][2] else []
        fields["unique_keys"] = [{"name": name, "columns": list(cols), "primary": primary}
                                 for name, cols, primary in keys]
    if spec.handle is not None:
        fields["handle"] = spec.handle
    return fields


def _decimal_precision(col: ColumnSpec) -> tuple[int, int]:
    scale = col.decimal if col.decimal >= 0 else 0
    precision = col.flen if col.flen > 0 else 65
    return max(precision, scale, 1), scale


def arrow_type(col: ColumnSpec) -> pa.DataType:
    """The Arrow type that holds every value of ``col`` exactly (module table)."""
    tp = col.tp
    if tp in _INT_BITS:
        bits = _INT_BITS[tp]
        return getattr(pa, f"{'u' if col.unsigned else ''}int{bits}")()
    if tp == TypeCode.FLOAT:
        return pa.float32()
    if tp == TypeCode.DOUBLE:
        return pa.float64()
    if tp in (TypeCode.DECIMAL, TypeCode.NEWDECIMAL):
        p, s = _decimal_precision(col)
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    if tp in (TypeCode.DATE, TypeCode.NEWDATE):
        return pa.date32()
    if tp in (TypeCode.DATETIME, TypeCode.TIMESTAMP):
        return pa.timestamp("us")
    if tp == TypeCode.DURATION:
        return pa.duration("us")
    if tp == TypeCode.YEAR:
        return pa.int16()
    if tp in _TEXT_TYPES:
        return pa.binary() if col.binary else pa.string()
    if tp in (TypeCode.BIT, TypeCode.GEOMETRY):
        return pa.binary()
    if tp in (TypeCode.ENUM, TypeCode.SET, TypeCode.JSON):
        return pa.string()
    if tp == TypeCode.NULL:
        return pa.null()
    raise SchemaError(f"column {col.name!r} has MySQL type code {tp}, which the Parquet sink "
                      "does not know; report it with the table's CREATE TABLE")


class _ZeroDate(Exception):
    pass


def _parse_date(text: str) -> datetime.date:
    y, m, d = int(text[0:4]), int(text[5:7]), int(text[8:10])
    if not (y and m and d):
        raise _ZeroDate
    return datetime.date(y, m, d)


def _parse_datetime(text: str) -> datetime.datetime:
    date = _parse_date(text)
    hh, mm, ss = int(text[11:13]), int(text[14:16]), int(text[17:19])
    frac = text[20:26] if len(text) > 20 else ""
    us = int(frac.ljust(6, "0")) if frac else 0
    return datetime.datetime(date.year, date.month, date.day, hh, mm, ss, us)


def _parse_duration(text: str) -> datetime.timedelta:
    neg = text.startswith("-")
    body = text[1:] if neg else text
    hms, _, frac = body.partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    us = int(frac[:6].ljust(6, "0")) if frac else 0
    delta = datetime.timedelta(hours=h, minutes=m, seconds=s, microseconds=us)
    return -delta if neg else delta


def converter(col: ColumnSpec) -> Callable[[Any], Any] | None:
    """SQL argument → the value Arrow stores, or None when the argument is already it.

    The returned function gets non-NULL values only; it raises :class:`_ZeroDate`
    for a date no calendar holds (the builder stores NULL and counts it)."""
    tp = col.tp
    if tp in (TypeCode.DECIMAL, TypeCode.NEWDECIMAL):
        return lambda v: v if isinstance(v, Decimal) else Decimal(str(v))
    if tp in (TypeCode.DATE, TypeCode.NEWDATE):
        return lambda v: v if isinstance(v, datetime.date) else _parse_date(v)
    if tp in (TypeCode.DATETIME, TypeCode.TIMESTAMP):
        return lambda v: v if isinstance(v, datetime.datetime) else _parse_datetime(v)
    if tp == TypeCode.DURATION:
        return lambda v: v if isinstance(v, datetime.timedelta) else _parse_duration(v)
    if tp == TypeCode.BIT:
        width = (col.flen + 7) // 8 if col.flen > 0 else 8
        return lambda v: v if isinstance(v, bytes) else int(v).to_bytes(width, "big")
    if tp == TypeCode.ENUM:
        elems = col.elems

        def enum_name(v):
            if isinstance(v, str):
                return v
            return elems[v - 1] if 1 <= v <= len(elems) else ""
        return enum_name
    if tp == TypeCode.SET:
        elems = col.elems

        def set_names(v):
            if isinstance(v, str):
                return v
            return ",".join(e for i, e in enumerate(elems) if v >> i & 1)
        return set_names
    if tp == TypeCode.JSON:
        return lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v)
    if tp in _TEXT_TYPES and not col.binary:
        name = col.name

        def text(v):
            if isinstance(v, bytes):
                try:
                    return v.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DownstreamError(f"column {name!r} is a text column but holds bytes "
                                          f"that are not UTF-8 ({exc}); the Parquet sink stores "
                                          "text as UTF-8 strings; make the column binary or fix "
                                          "the value upstream") from None
            return v
        return text
    if tp in _TEXT_TYPES or tp == TypeCode.GEOMETRY:
        return lambda v: v.encode("utf-8") if isinstance(v, str) else v
    return None


def change_schema(spec: TableSpec) -> pa.Schema:
    """The Arrow schema of every change file of ``spec`` (module doc)."""
    image = pa.struct([pa.field(c.name, arrow_type(c)) for c in spec.columns])
    return pa.schema([pa.field("commit_ts", pa.int64(), nullable=False),
                      pa.field("op", pa.string(), nullable=False),
                      pa.field("before", image), pa.field("after", image)],
                     metadata={"tidb_binlog.table": spec.qualified_name})


class BatchBuilder:
    """Collects the row changes of one :class:`TableSpec` and builds the record batch.

    ``add(commit_ts, op, before, after)``: images are dicts keyed by column name
    (None for the missing image); a column missing from an image is NULL."""

    def __init__(self, spec: TableSpec):
        self.spec = spec
        self.schema = change_schema(spec)
        self._convert = [converter(c) for c in spec.columns]
        # Only text columns (str already, bytes rarely) and types Arrow takes as they are:
        # the whole image goes to Arrow in one call; a failure retries column by column,
        # which names the column.
        self._direct = all(conv is None or c.tp in _TEXT_TYPES or c.tp == TypeCode.GEOMETRY
                           for c, conv in zip(spec.columns, self._convert, strict=True))
        self._names = [c.name for c in spec.columns]
        self._row_bytes = 16 + 16 * len(self._names)
        self.commit_ts: list[int] = []
        self.ops: list[str] = []
        self.before: list[dict | None] = []
        self.after: list[dict | None] = []
        self.zero_dates = 0
        self.approx_bytes = 0

    def __len__(self) -> int:
        return len(self.commit_ts)

    def add(self, commit_ts: int, op: str, before: dict | None, after: dict | None) -> None:
        self.commit_ts.append(commit_ts)
        self.ops.append(op)
        self.before.append(before)
        self.after.append(after)
        self.approx_bytes += self._row_bytes * ((before is not None) + (after is not None))

    def build(self) -> pa.RecordBatch:
        """The batch of everything added (in the order added)."""
        struct_type = self.schema.field("before").type
        images = [self._image(self.before, struct_type), self._image(self.after, struct_type)]
        return pa.RecordBatch.from_arrays(
            [pa.array(self.commit_ts, pa.int64()), pa.array(self.ops, pa.string()), *images],
            schema=self.schema)

    def _image(self, rows: Sequence[dict | None], struct_type: pa.StructType) -> pa.Array:
        if self._direct and struct_type.num_fields:
            try:
                return pa.array(rows, struct_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                pass  # column by column below: the error names the column and the value
        mask = pa.array([r is None for r in rows], pa.bool_())
        children = []
        for i, name in enumerate(self._names):
            conv = self._convert[i]
            values = [None if r is None else r.get(name) for r in rows]
            if conv is not None:
                values = [self._convert_one(conv, v) for v in values]
            field = struct_type.field(i)
            try:
                children.append(pa.array(values, field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                children.append(self._numbers(i, values, field, exc))
        if not children:
            return pa.nulls(len(rows), struct_type)
        return pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask)

    def _numbers(self, i: int, values: list, field: pa.Field, exc: Exception) -> pa.Array:
        """A numeric column holding text too: a default the translator filled in for a
        row written before the column was added is the TableInfo's text (``"33"``)."""
        number = _text_number(self.spec.columns[i])
        if number is not None:
            try:
                return pa.array([number(v) for v in values], field.type)
            except (DownstreamError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError,
                    OverflowError):
                pass  # (float() of text that is no number raises ValueError)
        raise DownstreamError(f"column {field.name!r} of {self.spec.qualified_name} "
                              f"({field.type}): a value does not fit: {exc}") from exc

    def _convert_one(self, conv, v):
        if v is None:
            return None
        try:
            return conv(v)
        except _ZeroDate:
            self.zero_dates += 1
            return None
