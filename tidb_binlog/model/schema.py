"""TiDB's schema metadata: DBInfo, TableInfo, ColumnInfo, FieldType, IndexInfo, PartitionInfo.

These are TiDB's ``parser/model`` structs with their JSON names and order
(reference/tidb-codec.md §5.2), as stored in TiKV's meta keys and in DDL jobs'
``binlog`` field. ``to_json()`` writes what TiDB writes; ``from_json()`` accepts
what any TiDB version writes (unknown keys are kept, a bare string is accepted for
a ``CIStr``).

The helpers answer what the drainer and the upstream need to know about a table:

- *handle kind*: ``int`` (``pk_is_handle``: a single integer primary key is the
  row handle), ``common`` (``is_common_handle``: a clustered primary key of other
  types or several columns), or ``rowid`` (TiDB's hidden ``_tidb_rowid``);
- *writable columns* (public and not generated: what the drainer writes);
- *unique keys*, primary key first (what the drainer uses for WHERE and conflict
  detection);
- columns by id or (case-insensitive) name, and each column's field type.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tidb_binlog.codec import FieldType as CodecFieldType
from tidb_binlog.model._json import GoStruct
from tidb_binlog.model.consts import INTEGER_TYPES, Flag, IndexType, SchemaState

__all__ = [
    "CIStr",
    "FieldType",
    "ColumnInfo",
    "IndexColumn",
    "IndexInfo",
    "PartitionDefinition",
    "PartitionInfo",
    "TableInfo",
    "DBInfo",
    "UniqueKey",
    "HANDLE_INT",
    "HANDLE_COMMON",
    "HANDLE_ROWID",
    "TABLE_INFO_VERSION",
    "COLUMN_INFO_VERSION",
]

HANDLE_INT = "int"
HANDLE_COMMON = "common"
HANDLE_ROWID = "rowid"
TABLE_INFO_VERSION = 5  # model.TableInfoVersion5
COLUMN_INFO_VERSION = 2  # model.ColumnInfoVersion2


@dataclass(frozen=True)
class CIStr:
    """A case-insensitive name: ``{"O": original, "L": lower}``."""

    O: str  # noqa: E741 - TiDB's field name
    L: str = ""

    def __post_init__(self):
        if not self.L:
            object.__setattr__(self, "L", self.O.lower())

    def __str__(self) -> str:
        return self.O

    def to_obj(self) -> dict:
        return {"O": self.O, "L": self.L}

    @classmethod
    def from_obj(cls, obj) -> CIStr | None:
        if obj is None:
            return None
        if isinstance(obj, str):
            return cls(obj)
        return cls(obj.get("O", ""), obj.get("L", ""))


@dataclass
class FieldType(GoStruct):
    """A column's type. Attribute names match ``tidb_binlog.codec.FieldType`` so an
    instance can be passed wherever the codec expects one."""

    tp: int = 0
    flag: int = 0
    flen: int = -1
    decimal: int = -1
    charset: str = ""
    collate: str = ""
    elems: list[str] | None = None
    elems_is_binary_lit: list[bool] | None = None
    array: bool = False
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("Tp", "tp", None), ("Flag", "flag", None), ("Flen", "flen", None),
             ("Decimal", "decimal", None), ("Charset", "charset", None),
             ("Collate", "collate", None), ("Elems", "elems", None),
             ("ElemsIsBinaryLit", "elems_is_binary_lit", None), ("Array", "array", None))

    def has(self, flag: int) -> bool:
        return bool(self.flag & flag)

    @property
    def is_unsigned(self) -> bool:
        return self.has(Flag.UNSIGNED)

    @property
    def is_integer(self) -> bool:
        return self.tp in INTEGER_TYPES

    def to_codec(self):
        """The codec's own FieldType with the same values."""
        return CodecFieldType(self.tp, self.flag, self.flen, self.decimal, self.charset,
                              self.collate, tuple(self.elems) if self.elems else ())


@dataclass
class ColumnInfo(GoStruct):
    id: int
    name: CIStr
    offset: int = 0
    origin_default: Any = None
    origin_default_bit: str | None = None
    default: Any = None
    default_bit: str | None = None
    default_is_expr: bool = False
    generated_expr_string: str = ""
    generated_stored: bool = False
    dependences: dict | None = None
    type: FieldType = field(default_factory=FieldType)
    state: int = SchemaState.PUBLIC
    comment: str = ""
    hidden: bool = False
    change_state_info: dict | None = None
    version: int = COLUMN_INFO_VERSION
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("id", "id", None), ("name", "name", CIStr), ("offset", "offset", None),
             ("origin_default", "origin_default", None),
             ("origin_default_bit", "origin_default_bit", None), ("default", "default", None),
             ("default_bit", "default_bit", None), ("default_is_expr", "default_is_expr", None),
             ("generated_expr_string", "generated_expr_string", None),
             ("generated_stored", "generated_stored", None), ("dependences", "dependences", None),
             ("type", "type", FieldType), ("state", "state", None), ("comment", "comment", None),
             ("hidden", "hidden", None), ("change_state_info", "change_state_info", None),
             ("version", "version", None))

    @property
    def is_generated(self) -> bool:
        return self.generated_expr_string != ""

    @property
    def is_public(self) -> bool:
        return self.state == SchemaState.PUBLIC


@dataclass
class IndexColumn(GoStruct):
    name: CIStr
    offset: int = 0
    length: int = -1  # -1: the whole column (no prefix)
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("name", "name", CIStr), ("offset", "offset", None), ("length", "length", None))


@dataclass
class IndexInfo(GoStruct):
    id: int
    idx_name: CIStr
    tbl_name: CIStr
    idx_cols: list[IndexColumn] = field(default_factory=list)
    state: int = SchemaState.PUBLIC
    backfill_state: int = 0
    comment: str = ""
    index_type: int = IndexType.BTREE
    is_unique: bool = False
    is_primary: bool = False
    is_invisible: bool = False
    is_global: bool = False
    mv_index: bool = False
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("id", "id", None), ("idx_name", "idx_name", CIStr), ("tbl_name", "tbl_name", CIStr),
             ("idx_cols", "idx_cols", [IndexColumn]), ("state", "state", None),
             ("backfill_state", "backfill_state", None), ("comment", "comment", None),
             ("index_type", "index_type", None), ("is_unique", "is_unique", None),
             ("is_primary", "is_primary", None), ("is_invisible", "is_invisible", None),
             ("is_global", "is_global", None), ("mv_index", "mv_index", None))


@dataclass
class PartitionDefinition(GoStruct):
    id: int
    name: CIStr
    less_than: list[str] | None = None
    in_values: list[list[str]] | None = None
    policy_ref_info: dict | None = None
    comment: str = ""
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("id", "id", None), ("name", "name", CIStr), ("less_than", "less_than", None),
             ("in_values", "in_values", None), ("policy_ref_info", "policy_ref_info", None),
             ("comment", "comment", None))


@dataclass
class PartitionInfo(GoStruct):
    type: int
    expr: str = ""
    columns: list[CIStr] = field(default_factory=list)
    enable: bool = True
    definitions: list[PartitionDefinition] = field(default_factory=list)
    adding_definitions: list[PartitionDefinition] = field(default_factory=list)
    dropping_definitions: list[int] | None = None
    num: int = 0
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("type", "type", None), ("expr", "expr", None), ("columns", "columns", [CIStr]),
             ("enable", "enable", None), ("definitions", "definitions", [PartitionDefinition]),
             ("adding_definitions", "adding_definitions", [PartitionDefinition]),
             ("dropping_definitions", "dropping_definitions", None), ("num", "num", None))

    def ids(self) -> list[int]:
        return [d.id for d in self.definitions]


class UniqueKey(NamedTuple):
    """A unique key of a table: the PK (``primary``) or a unique index."""

    name: str
    columns: list[ColumnInfo]
    primary: bool


@dataclass
class TableInfo(GoStruct):
    id: int
    name: CIStr
    charset: str = "utf8mb4"
    collate: str = "utf8mb4_bin"
    cols: list[ColumnInfo] = field(default_factory=list)
    index_info: list[IndexInfo] = field(default_factory=list)
    constraint_info: list | None = None
    fk_info: list | None = None
    state: int = SchemaState.PUBLIC
    pk_is_handle: bool = False
    is_common_handle: bool = False
    common_handle_version: int = 0
    comment: str = ""
    auto_inc_id: int = 0
    auto_inc_id_extra: int = 0
    auto_id_cache: int = 0
    auto_rand_id: int = 0
    max_col_id: int = 0
    max_idx_id: int = 0
    max_fk_id: int = 0
    max_cst_id: int = 0
    update_timestamp: int = 0
    old_schema_id: int = 0
    shard_row_id_bits: int = 0
    max_shard_row_id_bits: int = 0
    auto_random_bits: int = 0
    auto_random_range_bits: int = 0
    pre_split_regions: int = 0
    partition: PartitionInfo | None = None
    compression: str = ""
    view: dict | None = None
    sequence: dict | None = None
    lock: dict | None = None
    version: int = TABLE_INFO_VERSION
    tiflash_replica: dict | None = None
    is_columnar: bool = False
    temp_table_type: int = 0
    cache_table_status: int = 0
    policy_ref_info: dict | None = None
    stats_options: dict | None = None
    exchange_partition_info: dict | None = None
    ttl_info: dict | None = None
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _OMITEMPTY = frozenset({"auto_inc_id_extra", "old_schema_id"})
    _JSON = tuple((k, a, kind) for k, a, kind in (
        ("id", "id", None), ("name", "name", CIStr), ("charset", "charset", None),
        ("collate", "collate", None), ("cols", "cols", [ColumnInfo]),
        ("index_info", "index_info", [IndexInfo]), ("constraint_info", "constraint_info", None),
        ("fk_info", "fk_info", None), ("state", "state", None),
        ("pk_is_handle", "pk_is_handle", None), ("is_common_handle", "is_common_handle", None),
        ("common_handle_version", "common_handle_version", None), ("comment", "comment", None),
        ("auto_inc_id", "auto_inc_id", None), ("auto_inc_id_extra", "auto_inc_id_extra", None),
        ("auto_id_cache", "auto_id_cache", None), ("auto_rand_id", "auto_rand_id", None),
        ("max_col_id", "max_col_id", None), ("max_idx_id", "max_idx_id", None),
        ("max_fk_id", "max_fk_id", None), ("max_cst_id", "max_cst_id", None),
        ("update_timestamp", "update_timestamp", None), ("old_schema_id", "old_schema_id", None),
        ("ShardRowIDBits", "shard_row_id_bits", None),
        ("max_shard_row_id_bits", "max_shard_row_id_bits", None),
        ("auto_random_bits", "auto_random_bits", None),
        ("auto_random_range_bits", "auto_random_range_bits", None),
        ("pre_split_regions", "pre_split_regions", None), ("partition", "partition", PartitionInfo),
        ("compression", "compression", None), ("view", "view", None),
        ("sequence", "sequence", None), ("Lock", "lock", None), ("version", "version", None),
        ("tiflash_replica", "tiflash_replica", None), ("is_columnar", "is_columnar", None),
        ("temp_table_type", "temp_table_type", None),
        ("cache_table_status", "cache_table_status", None),
        ("policy_ref_info", "policy_ref_info", None), ("stats_options", "stats_options", None),
        ("exchange_partition_info", "exchange_partition_info", None),
        ("ttl_info", "ttl_info", None)))

    # -- serialisation -------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(self.to_obj(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> TableInfo:
        return cls.from_obj(json.loads(text))

    def clone(self) -> TableInfo:
        return copy.deepcopy(self)

    # -- questions the drainer and the upstream ask --------------------------------
    @property
    def handle_kind(self) -> str:
        if self.pk_is_handle:
            return HANDLE_INT
        if self.is_common_handle:
            return HANDLE_COMMON
        return HANDLE_ROWID

    def column_by_id(self, col_id: int) -> ColumnInfo | None:
        for c in self.cols:
            if c.id == col_id:
                return c
        return None

    def column_by_name(self, name: str) -> ColumnInfo | None:
        low = name.lower()
        for c in self.cols:
            if c.name.L == low:
                return c
        return None

    def public_columns(self) -> list[ColumnInfo]:
        return [c for c in self.cols if c.is_public]

    def writable_columns(self) -> list[ColumnInfo]:
        """Public, non-generated columns: the ones the drainer writes downstream."""
        return [c for c in self.cols if c.is_public and not c.is_generated]

    def field_types(self) -> dict[int, FieldType]:
        """Column id → field type, for every column in any state (the drainer's type map)."""
        return {c.id: c.type for c in self.cols}

    def pk_handle_column(self) -> ColumnInfo | None:
        """The integer PK column that is the row handle (``pk_is_handle`` tables)."""
        if not self.pk_is_handle:
            return None
        for c in self.cols:
            if c.type.has(Flag.PRI_KEY):
                return c
        return None

    def primary_index(self) -> IndexInfo | None:
        for idx in self.index_info:
            if idx.is_primary:
                return idx
        return None

    def common_handle_columns(self) -> list[ColumnInfo]:
        """The clustered PK's columns in key order (``is_common_handle`` tables)."""
        idx = self.primary_index() if self.is_common_handle else None
        return [self.cols[ic.offset] for ic in idx.idx_cols] if idx else []

    def index_by_name(self, name: str) -> IndexInfo | None:
        low = name.lower()
        for idx in self.index_info:
            if idx.idx_name.L == low:
                return idx
        return None

    def unique_keys(self) -> list[UniqueKey]:
        """Public unique keys, the primary key first."""
        keys: list[UniqueKey] = []
        pk_col = self.pk_handle_column()
        if pk_col is not None:
            keys.append(UniqueKey("PRIMARY", [pk_col], True))
        for idx in sorted(self.index_info, key=lambda i: not i.is_primary):
            if (idx.is_unique or idx.is_primary) and idx.state == SchemaState.PUBLIC:
                keys.append(UniqueKey(idx.idx_name.O, [self.cols[ic.offset] for ic in idx.idx_cols],
                                      idx.is_primary))
        return keys

    def physical_ids(self) -> list[int]:
        """The table id, or the partition ids of a partitioned table."""
        return self.partition.ids() if self.partition else [self.id]


@dataclass
class DBInfo(GoStruct):
    id: int
    db_name: CIStr
    charset: str = "utf8mb4"
    collate: str = "utf8mb4_bin"
    state: int = SchemaState.PUBLIC
    policy_ref_info: dict | None = None
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("id", "id", None), ("db_name", "db_name", CIStr), ("charset", "charset", None),
             ("collate", "collate", None), ("state", "state", None),
             ("policy_ref_info", "policy_ref_info", None))

    def to_json(self) -> str:
        return json.dumps(self.to_obj(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> DBInfo:
        return cls.from_obj(json.loads(text))
