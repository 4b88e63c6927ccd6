"""TiDB's model enums and MySQL type codes, with TiDB's numbers.

The numbers are persisted (in DDL job JSON and in binlogs) and read by TiDB's own
tools, so they are TiDB's exactly (``parser/model/ddl.go``, ``model.go``,
``parser/mysql/type.go``). See reference/tidb-codec.md §5.2.
"""

from __future__ import annotations

__all__ = [
    "ActionType",
    "JobState",
    "SchemaState",
    "PartitionType",
    "IndexType",
    "TypeCode",
    "Flag",
    "EXTRA_HANDLE_ID",
    "EXTRA_HANDLE_NAME",
    "MAX_GLOBAL_ID",
    "INTEGER_TYPES",
    "STRING_TYPES",
    "TIME_TYPES",
]


class ActionType:
    """``model.ActionType`` (a byte in the job JSON's ``type``)."""

    CREATE_SCHEMA = 1
    DROP_SCHEMA = 2
    CREATE_TABLE = 3
    DROP_TABLE = 4
    ADD_COLUMN = 5
    DROP_COLUMN = 6
    ADD_INDEX = 7
    DROP_INDEX = 8
    ADD_FOREIGN_KEY = 9
    DROP_FOREIGN_KEY = 10
    TRUNCATE_TABLE = 11
    MODIFY_COLUMN = 12
    REBASE_AUTO_ID = 13
    RENAME_TABLE = 14
    SET_DEFAULT_VALUE = 15
    SHARD_ROW_ID = 16
    MODIFY_TABLE_COMMENT = 17
    RENAME_INDEX = 18
    ADD_TABLE_PARTITION = 19
    DROP_TABLE_PARTITION = 20
    CREATE_VIEW = 21
    MODIFY_TABLE_CHARSET_AND_COLLATE = 22
    TRUNCATE_TABLE_PARTITION = 23
    DROP_VIEW = 24
    RECOVER_TABLE = 25
    MODIFY_SCHEMA_CHARSET_AND_COLLATE = 26
    LOCK_TABLE = 27
    UNLOCK_TABLE = 28
    REPAIR_TABLE = 29
    SET_TIFLASH_REPLICA = 30
    UPDATE_TIFLASH_REPLICA_STATUS = 31
    ADD_PRIMARY_KEY = 32
    DROP_PRIMARY_KEY = 33
    CREATE_SEQUENCE = 34
    ALTER_SEQUENCE = 35
    DROP_SEQUENCE = 36
    ADD_COLUMNS = 37
    DROP_COLUMNS = 38
    MODIFY_TABLE_AUTO_ID_CACHE = 39
    REBASE_AUTO_RANDOM_BASE = 40
    ALTER_INDEX_VISIBILITY = 41
    EXCHANGE_TABLE_PARTITION = 42
    CREATE_TABLES = 60
    MULTI_SCHEMA_CHANGE = 61


class JobState:
    """``model.JobState``. The drainer keeps only DONE and SYNCED jobs."""

    NONE = 0
    RUNNING = 1
    ROLLINGBACK = 2
    ROLLBACK_DONE = 3
    DONE = 4
    CANCELLED = 5
    SYNCED = 6
    CANCELLING = 7
    QUEUEING = 8


class SchemaState:
    """``model.SchemaState`` of a schema object during online DDL."""

    NONE = 0
    DELETE_ONLY = 1
    WRITE_ONLY = 2
    WRITE_REORGANIZATION = 3
    DELETE_REORGANIZATION = 4
    PUBLIC = 5
    REPLICA_ONLY = 6
    GLOBAL_TXN_ONLY = 7


class PartitionType:
    RANGE = 1
    HASH = 2
    LIST = 3
    KEY = 4
    SYSTEM_TIME = 5


class IndexType:
    INVALID = 0
    BTREE = 1
    HASH = 2
    RTREE = 3


class TypeCode:
    """MySQL column type bytes (``FieldType.Tp``)."""

    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    DURATION = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    JSON = 0xF5
    NEWDECIMAL = 0xF6
    ENUM = 0xF7
    SET = 0xF8
    TINY_BLOB = 0xF9
    MEDIUM_BLOB = 0xFA
    LONG_BLOB = 0xFB
    BLOB = 0xFC
    VAR_STRING = 0xFD
    STRING = 0xFE
    GEOMETRY = 0xFF


class Flag:
    """MySQL column flags (``FieldType.Flag`` bits)."""

    NOT_NULL = 1
    PRI_KEY = 2
    UNIQUE_KEY = 4
    MULTIPLE_KEY = 8
    BLOB = 16
    UNSIGNED = 32
    ZEROFILL = 64
    BINARY = 128
    ENUM = 256
    AUTO_INCREMENT = 512
    TIMESTAMP = 1024
    SET = 2048
    NO_DEFAULT_VALUE = 4096
    ON_UPDATE_NOW = 8192
    PART_KEY = 16384
    NUM = 32768


# Column id of TiDB's hidden row id (``model.ExtraHandleID``); it appears in
# update/delete rows of tables whose handle is neither the int PK nor the
# clustered PK.
EXTRA_HANDLE_ID = -1
EXTRA_HANDLE_NAME = "_tidb_rowid"

# ``ddl.MaxGlobalID``: jobs on tables above this id are DDL system tables.
MAX_GLOBAL_ID = 0xFFFFFFFFFFFF - 1000

INTEGER_TYPES = frozenset({TypeCode.TINY, TypeCode.SHORT, TypeCode.INT24, TypeCode.LONG,
                           TypeCode.LONGLONG})
STRING_TYPES = frozenset({TypeCode.VARCHAR, TypeCode.VAR_STRING, TypeCode.STRING,
                          TypeCode.TINY_BLOB, TypeCode.MEDIUM_BLOB, TypeCode.LONG_BLOB,
                          TypeCode.BLOB})
TIME_TYPES = frozenset({TypeCode.DATE, TypeCode.DATETIME, TypeCode.TIMESTAMP})
