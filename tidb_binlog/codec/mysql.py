"""MySQL column types and flags as TiDB writes them, and :class:`FieldType`.

The type bytes are ``parser/mysql/type.go``'s; the flags are ``parser/mysql``'s
column flags. A :class:`FieldType` carries what decoding needs from a
``ColumnInfo.type`` object of TiDB's model JSON (``Tp``, ``Flag``, ``Flen``,
``Decimal``, ``Charset``, ``Collate``, ``Elems``):

- integers: ``UNSIGNED_FLAG`` decides int64 vs uint64;
- DECIMAL: ``flen`` is the precision, ``decimal`` the scale;
- DATETIME / TIMESTAMP / TIME: ``decimal`` is the fsp (0-6; -1 = unspecified = 0);
- BIT: ``flen`` is the width in bits;
- ENUM / SET: ``elems`` are the member names, in definition order;
- text vs blob, char vs binary: ``charset == "binary"`` means bytes.

``UNSPECIFIED_LENGTH`` (-1) is TiDB's marker for "no length given".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidb_binlog.errors import SchemaError

__all__ = [
    "TYPE_UNSPECIFIED",
    "TYPE_TINY",
    "TYPE_SHORT",
    "TYPE_LONG",
    "TYPE_FLOAT",
    "TYPE_DOUBLE",
    "TYPE_NULL",
    "TYPE_TIMESTAMP",
    "TYPE_LONGLONG",
    "TYPE_INT24",
    "TYPE_DATE",
    "TYPE_DURATION",
    "TYPE_DATETIME",
    "TYPE_YEAR",
    "TYPE_NEWDATE",
    "TYPE_VARCHAR",
    "TYPE_BIT",
    "TYPE_JSON",
    "TYPE_NEWDECIMAL",
    "TYPE_ENUM",
    "TYPE_SET",
    "TYPE_TINY_BLOB",
    "TYPE_MEDIUM_BLOB",
    "TYPE_LONG_BLOB",
    "TYPE_BLOB",
    "TYPE_VAR_STRING",
    "TYPE_STRING",
    "TYPE_GEOMETRY",
    "INTEGER_TYPES",
    "STRING_TYPES",
    "TIME_TYPES",
    "NOT_NULL_FLAG",
    "PRI_KEY_FLAG",
    "UNIQUE_KEY_FLAG",
    "MULTIPLE_KEY_FLAG",
    "BLOB_FLAG",
    "UNSIGNED_FLAG",
    "ZEROFILL_FLAG",
    "BINARY_FLAG",
    "ENUM_FLAG",
    "AUTO_INCREMENT_FLAG",
    "TIMESTAMP_FLAG",
    "SET_FLAG",
    "NO_DEFAULT_VALUE_FLAG",
    "ON_UPDATE_NOW_FLAG",
    "PART_KEY_FLAG",
    "NUM_FLAG",
    "UNSPECIFIED_LENGTH",
    "EXTRA_HANDLE_ID",
    "EXTRA_PID_ID",
    "EXTRA_TID_ID",
    "BINARY_CHARSET",
    "FieldType",
]

# Type bytes (parser/mysql/type.go).
TYPE_UNSPECIFIED = 0
TYPE_TINY = 1
TYPE_SHORT = 2
TYPE_LONG = 3
TYPE_FLOAT = 4
TYPE_DOUBLE = 5
TYPE_NULL = 6
TYPE_TIMESTAMP = 7
TYPE_LONGLONG = 8
TYPE_INT24 = 9
TYPE_DATE = 10
TYPE_DURATION = 11  # TIME
TYPE_DATETIME = 12
TYPE_YEAR = 13
TYPE_NEWDATE = 14
TYPE_VARCHAR = 15
TYPE_BIT = 16
TYPE_JSON = 0xF5
TYPE_NEWDECIMAL = 0xF6
TYPE_ENUM = 0xF7
TYPE_SET = 0xF8
TYPE_TINY_BLOB = 0xF9
TYPE_MEDIUM_BLOB = 0xFA
TYPE_LONG_BLOB = 0xFB
TYPE_BLOB = 0xFC
TYPE_VAR_STRING = 0xFD
TYPE_STRING = 0xFE  # CHAR / BINARY
TYPE_GEOMETRY = 0xFF

INTEGER_TYPES = frozenset({TYPE_TINY, TYPE_SHORT, TYPE_INT24, TYPE_LONG, TYPE_LONGLONG})
STRING_TYPES = frozenset(
    {
        TYPE_VARCHAR,
        TYPE_VAR_STRING,
        TYPE_STRING,
        TYPE_TINY_BLOB,
        TYPE_MEDIUM_BLOB,
        TYPE_LONG_BLOB,
        TYPE_BLOB,
        TYPE_GEOMETRY,
    }
)
TIME_TYPES = frozenset({TYPE_DATE, TYPE_DATETIME, TYPE_TIMESTAMP, TYPE_NEWDATE})

# Column flags (parser/mysql/type.go).
NOT_NULL_FLAG = 1
PRI_KEY_FLAG = 2
UNIQUE_KEY_FLAG = 4
MULTIPLE_KEY_FLAG = 8
BLOB_FLAG = 16
UNSIGNED_FLAG = 32
ZEROFILL_FLAG = 64
BINARY_FLAG = 128
ENUM_FLAG = 256
AUTO_INCREMENT_FLAG = 512
TIMESTAMP_FLAG = 1024
SET_FLAG = 2048
NO_DEFAULT_VALUE_FLAG = 4096
ON_UPDATE_NOW_FLAG = 8192
PART_KEY_FLAG = 16384
NUM_FLAG = 32768

UNSPECIFIED_LENGTH = -1

# Column ids TiDB gives to hidden handle columns.
EXTRA_HANDLE_ID = -1  # _tidb_rowid
EXTRA_PID_ID = -2  # _tidb_pid
EXTRA_TID_ID = -3  # _tidb_tid

BINARY_CHARSET = "binary"


@dataclass(frozen=True, slots=True)
class FieldType:
    """A column's type as TiDB's model JSON states it (``ColumnInfo.type``)."""

    tp: int
    flag: int = 0
    flen: int = UNSPECIFIED_LENGTH
    decimal: int = UNSPECIFIED_LENGTH
    charset: str = ""
    collate: str = ""
    elems: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.elems, tuple):
            object.__setattr__(self, "elems", tuple(self.elems or ()))

    @property
    def unsigned(self) -> bool:
        return bool(self.flag & UNSIGNED_FLAG)

    @property
    def not_null(self) -> bool:
        return bool(self.flag & NOT_NULL_FLAG)

    @property
    def is_binary_string(self) -> bool:
        """True for BINARY/VARBINARY/BLOB: values are bytes, not text."""
        return self.charset == BINARY_CHARSET

    @property
    def fsp(self) -> int:
        """Fractional-second precision of DATETIME/TIMESTAMP/TIME (0 when unspecified)."""
        return self.decimal if self.decimal > 0 else 0

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> FieldType:
        """Build from the ``type`` object of a ColumnInfo in TiDB's model JSON."""
        try:
            return cls(
                tp=int(obj["Tp"]),
                flag=int(obj.get("Flag", 0)),
                flen=int(obj.get("Flen", UNSPECIFIED_LENGTH)),
                decimal=int(obj.get("Decimal", UNSPECIFIED_LENGTH)),
                charset=obj.get("Charset") or "",
                collate=obj.get("Collate") or "",
                elems=tuple(obj.get("Elems") or ()),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise SchemaError(
                f"not a TiDB FieldType JSON object ({err!r}): {obj!r}; "
                'expected keys "Tp", "Flag", "Flen", "Decimal", "Charset", "Collate", "Elems"'
            ) from err

    def to_json(self) -> dict[str, Any]:
        """The ``type`` object as TiDB's model JSON writes it."""
        return {
            "Tp": self.tp,
            "Flag": self.flag,
            "Flen": self.flen,
            "Decimal": self.decimal,
            "Charset": self.charset,
            "Collate": self.collate,
            "Elems": list(self.elems) if self.elems else None,
            "ElemsIsBinaryLit": None,
            "Array": False,
        }
