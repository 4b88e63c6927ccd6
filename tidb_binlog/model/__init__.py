"""TiDB's schema model: the metadata a binlog's rows are decoded with.

Dataclasses for TiDB's ``DBInfo``, ``TableInfo``, ``ColumnInfo`` (with its
``FieldType``), ``IndexInfo``/``IndexColumn``, ``PartitionInfo``/``PartitionDefinition``,
``Job`` and ``HistoryInfo``, with ``to_json()``/``from_json()`` using TiDB's field
names and order (reference/tidb-codec.md §5.2), plus the enums ``ActionType``,
``JobState``, ``SchemaState`` and MySQL ``TypeCode``/``Flag`` numbers.

Example::

    >>> from tidb_binlog.model import TableInfo
    >>> t = TableInfo.from_json('{"id": 100, "name": "t", "cols": [], "pk_is_handle": true}')
    >>> t.name.L, t.handle_kind
    ('t', 'int')
"""

from tidb_binlog.model.consts import (
    EXTRA_HANDLE_ID,
    EXTRA_HANDLE_NAME,
    INTEGER_TYPES,
    MAX_GLOBAL_ID,
    STRING_TYPES,
    TIME_TYPES,
    ActionType,
    Flag,
    IndexType,
    JobState,
    PartitionType,
    SchemaState,
    TypeCode,
)
from tidb_binlog.model.job import JOB_VERSION, HistoryInfo, Job
from tidb_binlog.model.schema import (
    COLUMN_INFO_VERSION,
    HANDLE_COMMON,
    HANDLE_INT,
    HANDLE_ROWID,
    TABLE_INFO_VERSION,
    CIStr,
    ColumnInfo,
    DBInfo,
    FieldType,
    IndexColumn,
    IndexInfo,
    PartitionDefinition,
    PartitionInfo,
    TableInfo,
    UniqueKey,
)

__all__ = [
    "ActionType", "JobState", "SchemaState", "PartitionType", "IndexType", "TypeCode", "Flag",
    "EXTRA_HANDLE_ID", "EXTRA_HANDLE_NAME", "MAX_GLOBAL_ID", "INTEGER_TYPES", "STRING_TYPES",
    "TIME_TYPES", "CIStr", "FieldType", "ColumnInfo", "IndexColumn", "IndexInfo",
    "PartitionDefinition", "PartitionInfo", "TableInfo", "DBInfo", "UniqueKey", "HistoryInfo",
    "Job", "HANDLE_INT", "HANDLE_COMMON", "HANDLE_ROWID", "TABLE_INFO_VERSION",
    "COLUMN_INFO_VERSION", "JOB_VERSION",
]
