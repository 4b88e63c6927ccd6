"""TiDB's datum codec, row formats and typed decoding, byte-exact with ``util/codec``.

Layers, bottom up (each module's docstring is its specification):

- ``primitives``: ints, varints, floats, memcomparable and compact bytes;
- ``mydecimal``: MyDecimal's binary form; ``mytime``: packed times, durations;
- ``datum``: the :class:`Datum` value type; ``datum_codec``: key and value forms;
- ``row``: the old row format binlog uses, insert handle prefixes;
  ``rowv2``: row format v2;
- ``mysql``: column types and flags, :class:`FieldType`; ``typed``: unflatten,
  SQL arguments, pymysql values -> datums;
- ``json_binary``: TiDB's binary JSON (flag 0x0a payloads).

Nothing here imports ray. Malformed bytes raise
:class:`tidb_binlog.errors.CodecError` with ``offset`` and ``flag``.
"""

from tidb_binlog.codec.datum import INT64_MAX, INT64_MIN, UINT64_MAX, Datum, Kind
from tidb_binlog.codec.datum_codec import (
    cut_one,
    decode_key,
    decode_one,
    decode_value,
    encode_key,
    encode_value,
)
from tidb_binlog.codec.mydecimal import (
    decimal_bin_size,
    decode_decimal_bin,
    encode_decimal_bin,
    format_decimal,
    precision_and_frac,
)
from tidb_binlog.codec.mysql import FieldType
from tidb_binlog.codec.mytime import (
    PackedTime,
    format_duration,
    format_time,
    pack_time,
    unpack_time,
)
from tidb_binlog.codec.row import (
    decode_insert_row,
    decode_old_and_new_row,
    decode_old_row,
    decode_row,
    encode_old_row,
    flatten,
    split_insert_row,
)
from tidb_binlog.codec.rowv2 import decode_row_v2, encode_row_v2
from tidb_binlog.codec.typed import (
    datum_for_column,
    format_sql_arg,
    sql_arg_formatter,
    unflatten,
)

__all__ = [
    "Datum",
    "Kind",
    "INT64_MIN",
    "INT64_MAX",
    "UINT64_MAX",
    "encode_value",
    "encode_key",
    "decode_value",
    "decode_key",
    "decode_one",
    "cut_one",
    "encode_old_row",
    "decode_old_row",
    "decode_row",
    "decode_old_and_new_row",
    "split_insert_row",
    "decode_insert_row",
    "flatten",
    "encode_row_v2",
    "decode_row_v2",
    "encode_decimal_bin",
    "decode_decimal_bin",
    "decimal_bin_size",
    "precision_and_frac",
    "format_decimal",
    "pack_time",
    "unpack_time",
    "PackedTime",
    "format_time",
    "format_duration",
    "FieldType",
    "unflatten",
    "format_sql_arg",
    "sql_arg_formatter",
    "datum_for_column",
]
