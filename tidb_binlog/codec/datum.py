"""``Datum``: one typed value, as TiDB's ``types.Datum`` carries it.

A Datum is an immutable, hashable 4-tuple ``(kind, value, precision, frac)``;
``precision`` and ``frac`` are only meaningful for decimals (TiDB's datum
``Length`` / ``Frac``) and are 0 otherwise. It is a tuple subclass rather than a
dataclass because the row decoders build hundreds of thousands per second.

Kinds and their Python values (``Kind`` numbers are TiDB's ``types.Kind*``):

=============  =============================================================
NULL           ``None``
INT64          ``int`` in [-2**63, 2**63)
UINT64         ``int`` in [0, 2**64)
FLOAT32        ``float`` already rounded to float32
FLOAT64        ``float``
STRING         ``bytes`` (TiDB strings are byte strings; text is utf-8)
BYTES          ``bytes``
DECIMAL        ``decimal.Decimal``; precision/frac = column (or inferred) p, s
DURATION       ``int`` nanoseconds (TIME), signed int64
ENUM           ``int`` 1-based member index (0 = the empty/invalid member)
SET            ``int`` member bitmask
BIT            ``int`` (the big-endian bit string as an unsigned int)
TIME           ``int`` packed DATE/DATETIME/TIMESTAMP (see ``mytime``);
               TIMESTAMPs are packed in UTC
JSON           the JSON Python model of ``json_binary``
MIN_NOT_NULL   ``None`` (keys only: sorts after NULL, before everything)
MAX_VALUE      ``None`` (keys only: sorts after everything)
=============  =============================================================

Constructors validate ranges and raise :class:`~tidb_binlog.errors.CodecError`
(with ``offset`` and ``flag`` unset) naming the kind, the value and the range.
Two JSON datums are equal when their binary encodings are equal.
"""

from __future__ import annotations

import decimal
import enum
import struct
from operator import itemgetter

from tidb_binlog.codec.json_binary import encode_json
from tidb_binlog.codec.mydecimal import (
    MAX_DECIMAL_PRECISION,
    MAX_DECIMAL_SCALE,
    check_decimal_fits,
)
from tidb_binlog.codec.mytime import check_packed
from tidb_binlog.errors import CodecError

__all__ = ["Kind", "Datum", "INT64_MIN", "INT64_MAX", "UINT64_MAX"]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

_F32 = struct.Struct("<f")


class Kind(enum.IntEnum):
    """TiDB's datum kinds (``types.Kind*`` numbers)."""

    NULL = 0
    INT64 = 1
    UINT64 = 2
    FLOAT32 = 3
    FLOAT64 = 4
    STRING = 5
    BYTES = 6
    BINARY_LITERAL = 7
    DECIMAL = 8
    DURATION = 9
    ENUM = 10
    BIT = 11
    SET = 12
    TIME = 13
    MIN_NOT_NULL = 15
    MAX_VALUE = 16
    JSON = 18


_new = tuple.__new__


def _check_int(kind: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise CodecError(f"Datum.{kind} needs an int, got {type(v).__name__} {v!r}")
    if not lo <= v <= hi:
        raise CodecError(f"Datum.{kind}({v}) is out of range [{lo}, {hi}]")
    return v


def _json_bytes(obj: object) -> bytes:
    return encode_json(obj)


class Datum(tuple):
    """An immutable typed value: ``(kind, value, precision, frac)``."""

    __slots__ = ()

    kind = property(itemgetter(0), doc="the :class:`Kind`")
    value = property(itemgetter(1), doc="the Python value (see the module table)")
    precision = property(itemgetter(2), doc="decimal precision (0 = infer)")
    frac = property(itemgetter(3), doc="decimal scale")

    def __new__(cls, kind: Kind, value: object = None, precision: int = 0, frac: int = 0):
        return _new(cls, (Kind(kind), value, precision, frac))

    def __getnewargs__(self):
        return tuple(self)

    def __repr__(self) -> str:
        kind = self[0]
        if kind in (Kind.NULL, Kind.MIN_NOT_NULL, Kind.MAX_VALUE):
            return f"Datum.{kind.name.lower()}()"
        if kind is Kind.DECIMAL:
            return f"Datum.decimal({self[1]!r}, {self[2]}, {self[3]})"
        return f"Datum.{kind.name.lower()}({self[1]!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Datum):
            return NotImplemented
        if self[0] is Kind.JSON and other[0] is Kind.JSON:
            return _json_bytes(self[1]) == _json_bytes(other[1])
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        if self[0] is Kind.JSON:
            return hash((Kind.JSON, _json_bytes(self[1])))
        return tuple.__hash__(self)

    @property
    def is_null(self) -> bool:
        return self[0] is Kind.NULL

    # ---- constructors -------------------------------------------------------

    @classmethod
    def null(cls) -> Datum:
        return _NULL

    @classmethod
    def min_not_null(cls) -> Datum:
        return _MIN_NOT_NULL

    @classmethod
    def max_value(cls) -> Datum:
        return _MAX_VALUE

    @classmethod
    def int64(cls, v: int) -> Datum:
        return _new(cls, (Kind.INT64, _check_int("int64", v, INT64_MIN, INT64_MAX), 0, 0))

    @classmethod
    def uint64(cls, v: int) -> Datum:
        return _new(cls, (Kind.UINT64, _check_int("uint64", v, 0, UINT64_MAX), 0, 0))

    @classmethod
    def float64(cls, v: float) -> Datum:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CodecError(f"Datum.float64 needs a float, got {type(v).__name__} {v!r}")
        try:
            return _new(cls, (Kind.FLOAT64, float(v), 0, 0))
        except OverflowError as err:
            raise CodecError(f"Datum.float64({v!r}) is out of float64 range") from err

    @classmethod
    def float32(cls, v: float) -> Datum:
        """A FLOAT value; ``v`` is rounded to the nearest float32 as TiDB stores it."""
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CodecError(f"Datum.float32 needs a float, got {type(v).__name__} {v!r}")
        try:
            f = _F32.unpack(_F32.pack(v))[0]
        except OverflowError as err:
            raise CodecError(f"Datum.float32({v!r}) is out of float32 range") from err
        return _new(cls, (Kind.FLOAT32, f, 0, 0))

    @classmethod
    def bytes(cls, b: bytes | bytearray | memoryview) -> Datum:
        if not isinstance(b, bytes | bytearray | memoryview):
            raise CodecError(f"Datum.bytes needs bytes, got {type(b).__name__} {b!r}")
        return _new(cls, (Kind.BYTES, bytes(b), 0, 0))

    @classmethod
    def string(cls, s: str | bytes) -> Datum:
        """A string value; ``str`` is stored as its utf-8 bytes."""
        if isinstance(s, str):
            return _new(cls, (Kind.STRING, s.encode("utf-8"), 0, 0))
        if isinstance(s, bytes | bytearray | memoryview):
            return _new(cls, (Kind.STRING, bytes(s), 0, 0))
        raise CodecError(f"Datum.string needs str or bytes, got {type(s).__name__} {s!r}")

    @classmethod
    def decimal(cls, v: decimal.Decimal, precision: int = 0, frac: int = 0) -> Datum:
        """A DECIMAL(precision, frac) value; precision 0 means "infer from the value".

        The value must fit: at most ``precision - frac`` integer digits and at most
        ``frac`` fractional digits (TiDB rounds to the column scale before storing;
        do the same with ``quantize`` first).
        """
        if isinstance(v, int) and not isinstance(v, bool):
            v = decimal.Decimal(v)
        if not isinstance(v, decimal.Decimal) or not v.is_finite():
            raise CodecError(f"Datum.decimal needs a finite decimal.Decimal, got {v!r}")
        if not (0 <= precision <= MAX_DECIMAL_PRECISION and 0 <= frac <= MAX_DECIMAL_SCALE):
            raise CodecError(
                f"Datum.decimal precision {precision} / frac {frac} out of range "
                f"(precision 0..{MAX_DECIMAL_PRECISION}, frac 0..{MAX_DECIMAL_SCALE})"
            )
        if precision:
            if frac > precision:
                raise CodecError(f"Datum.decimal frac {frac} exceeds precision {precision}")
            check_decimal_fits(v, precision, frac)
        elif frac:
            raise CodecError("Datum.decimal with precision 0 (infer) must have frac 0")
        return _new(cls, (Kind.DECIMAL, v, precision, frac))

    @classmethod
    def time(cls, packed: int) -> Datum:
        """A DATE/DATETIME/TIMESTAMP as its packed uint64 (``mytime.pack_time``)."""
        return _new(cls, (Kind.TIME, check_packed(packed), 0, 0))

    @classmethod
    def duration(cls, nanoseconds: int) -> Datum:
        """A TIME value as signed nanoseconds."""
        return _new(
            cls, (Kind.DURATION, _check_int("duration", nanoseconds, INT64_MIN, INT64_MAX), 0, 0)
        )

    @classmethod
    def json(cls, obj: object) -> Datum:
        return _new(cls, (Kind.JSON, obj, 0, 0))

    @classmethod
    def enum(cls, n: int) -> Datum:
        return _new(cls, (Kind.ENUM, _check_int("enum", n, 0, UINT64_MAX), 0, 0))

    @classmethod
    def set(cls, n: int) -> Datum:
        return _new(cls, (Kind.SET, _check_int("set", n, 0, UINT64_MAX), 0, 0))

    @classmethod
    def bit(cls, n: int) -> Datum:
        return _new(cls, (Kind.BIT, _check_int("bit", n, 0, UINT64_MAX), 0, 0))


_NULL = _new(Datum, (Kind.NULL, None, 0, 0))
_MIN_NOT_NULL = _new(Datum, (Kind.MIN_NOT_NULL, None, 0, 0))
_MAX_VALUE = _new(Datum, (Kind.MAX_VALUE, None, 0, 0))
