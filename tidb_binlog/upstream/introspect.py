"""Build a TiDB ``TableInfo`` from MariaDB's information_schema.

:func:`build_table_info` reads one table's columns, indexes and partitions and
turns them into the TableInfo TiDB would hold for the same CREATE TABLE, diffing
against the previous TableInfo so ids behave as in TiDB:

- a column keeps its id by (case-insensitive) name, or by its old name when the
  DDL renamed it (``renames``); a new column gets ``max_col_id + 1``; ids are never
  reused (``max_col_id`` only grows). Indexes likewise with ``max_idx_id``;
  partitions keep their physical id by name, new ones take a global id.
- type codes, ``flen``/``decimal``, charset/collation, ``elems`` and flags
  (NOT NULL, PRI KEY, UNIQUE KEY, MULTIPLE KEY, UNSIGNED, ZEROFILL, BINARY,
  AUTO_INCREMENT, ON UPDATE NOW, NO DEFAULT VALUE) follow TiDB's DDL;
- handle: a single integer primary key is the handle (``pk_is_handle``, not listed
  in ``index_info``); another primary key is clustered (``is_common_handle``) when
  ``clustered_index == "on"``; otherwise, or without a primary key, rows are keyed
  by TiDB's hidden ``_tidb_rowid``, kept upstream in an INVISIBLE auto-increment
  column of that name (hidden from the TableInfo, as in TiDB);
- JSON: MariaDB's JSON is LONGTEXT with a ``json_valid`` check; such columns are
  TiDB JSON columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tidb_binlog.errors import UpstreamSchemaError
from tidb_binlog.model import (
    EXTRA_HANDLE_NAME,
    INTEGER_TYPES,
    CIStr,
    ColumnInfo,
    FieldType,
    Flag,
    IndexColumn,
    IndexInfo,
    PartitionDefinition,
    PartitionInfo,
    PartitionType,
    TableInfo,
    TypeCode,
)

__all__ = ["build_table_info", "needs_hidden_rowid", "CLUSTERED_ON", "CLUSTERED_INT_ONLY"]

CLUSTERED_ON = "on"
CLUSTERED_INT_ONLY = "int_only"

_INT_TYPES = {"tinyint": (TypeCode.TINY, 4, 3), "smallint": (TypeCode.SHORT, 6, 5),
              "mediumint": (TypeCode.INT24, 9, 8), "int": (TypeCode.LONG, 11, 10),
              "bigint": (TypeCode.LONGLONG, 20, 20)}
_TEXT_TYPES = {"tinytext": (TypeCode.TINY_BLOB, 255), "text": (TypeCode.BLOB, 65535),
               "mediumtext": (TypeCode.MEDIUM_BLOB, 16777215),
               "longtext": (TypeCode.LONG_BLOB, 4294967295),
               "tinyblob": (TypeCode.TINY_BLOB, 255), "blob": (TypeCode.BLOB, 65535),
               "mediumblob": (TypeCode.MEDIUM_BLOB, 16777215),
               "longblob": (TypeCode.LONG_BLOB, 4294967295)}
_PARTITION_METHODS = {"RANGE": PartitionType.RANGE, "RANGE COLUMNS": PartitionType.RANGE,
                      "HASH": PartitionType.HASH, "LIST": PartitionType.LIST,
                      "LIST COLUMNS": PartitionType.LIST}


def _parens(column_type: str) -> list[str]:
    m = re.search(r"\((.*)\)", column_type)
    return [p.strip() for p in m.group(1).split(",")] if m else []


def _elems(column_type: str) -> list[str]:
    body = column_type[column_type.index("(") + 1:column_type.rindex(")")]
    return [m.group(1).replace("''", "'").replace("\\\\", "\\")
            for m in re.finditer(r"'((?:[^']|'')*)'", body)]


def _field_type(row: dict, is_json: bool) -> FieldType:
    dt = row["DATA_TYPE"].lower()
    ctype = row["COLUMN_TYPE"].lower()
    charset = row["CHARACTER_SET_NAME"] or "binary"
    collate = row["COLLATION_NAME"] or "binary"
    flag = 0
    if "unsigned" in ctype:
        flag |= Flag.UNSIGNED
    if "zerofill" in ctype:
        flag |= Flag.ZEROFILL
    ft = FieldType(charset="binary", collate="binary", flag=flag)
    args = _parens(ctype)
    fsp = int(row["DATETIME_PRECISION"] or 0)
    if dt in _INT_TYPES:
        ft.tp, signed_len, unsigned_len = _INT_TYPES[dt]
        ft.flen = int(args[0]) if args else (unsigned_len if flag & Flag.UNSIGNED else signed_len)
        ft.decimal = 0
    elif dt in ("float", "double"):
        ft.tp = TypeCode.FLOAT if dt == "float" else TypeCode.DOUBLE
        ft.flen, ft.decimal = (int(args[0]), int(args[1])) if len(args) == 2 else (
            12 if dt == "float" else 22, -1)
    elif dt == "decimal":
        ft.tp, ft.flen, ft.decimal = TypeCode.NEWDECIMAL, int(args[0]), int(args[1])
    elif dt == "bit":
        ft.tp, ft.flen, ft.decimal = TypeCode.BIT, int(args[0]), 0
        ft.flag |= Flag.UNSIGNED
    elif dt == "date":
        ft.tp, ft.flen, ft.decimal = TypeCode.DATE, 10, 0
    elif dt in ("datetime", "timestamp"):
        ft.tp = TypeCode.DATETIME if dt == "datetime" else TypeCode.TIMESTAMP
        ft.flen, ft.decimal = 19 + (fsp + 1 if fsp else 0), fsp
    elif dt == "time":
        ft.tp, ft.flen, ft.decimal = TypeCode.DURATION, 10 + (fsp + 1 if fsp else 0), fsp
    elif dt == "year":
        ft.tp, ft.flen, ft.decimal = TypeCode.YEAR, 4, 0
        ft.flag |= Flag.UNSIGNED | Flag.ZEROFILL
    elif is_json:
        ft.tp, ft.flen, ft.decimal = TypeCode.JSON, -1, 0
        ft.flag |= Flag.BINARY
    elif dt in ("char", "varchar", "binary", "varbinary"):
        ft.tp = TypeCode.STRING if dt in ("char", "binary") else TypeCode.VARCHAR
        ft.flen, ft.decimal = int(args[0]), 0
        ft.charset, ft.collate = charset, collate
    elif dt in _TEXT_TYPES:
        ft.tp, ft.flen = _TEXT_TYPES[dt]
        ft.decimal = 0
        ft.charset, ft.collate = charset, collate
    elif dt in ("enum", "set"):
        ft.tp = TypeCode.ENUM if dt == "enum" else TypeCode.SET
        ft.elems = _elems(row["COLUMN_TYPE"])
        ft.flen, ft.decimal = -1, 0
        ft.charset, ft.collate = charset, collate
    else:
        raise UpstreamSchemaError(
            f"column {row['COLUMN_NAME']!r} has type {row['COLUMN_TYPE']!r}, which the upstream "
            "emulator does not model; use a TiDB-supported type")
    if ft.charset == "binary" and ft.tp in (TypeCode.STRING, TypeCode.VARCHAR, TypeCode.TINY_BLOB,
                                            TypeCode.BLOB, TypeCode.MEDIUM_BLOB,
                                            TypeCode.LONG_BLOB):
        ft.flag |= Flag.BINARY
    return ft


def _default(raw: str | None) -> tuple[object, bool]:
    """MariaDB's COLUMN_DEFAULT text → (TiDB ``default`` value, is_expr)."""
    if raw is None or raw == "NULL":
        return None, False
    if raw.startswith("'") and raw.endswith("'"):
        return raw[1:-1].replace("''", "'"), False
    if raw.lower().startswith("current_timestamp"):
        return "CURRENT_TIMESTAMP", False
    if re.fullmatch(r"-?\d+(\.\d+)?(e[+-]?\d+)?", raw, re.I):
        return raw, False
    return raw, True


def needs_hidden_rowid(info: TableInfo) -> bool:
    return not info.pk_is_handle and not info.is_common_handle


def _query(cur, sql: str, args) -> list[dict]:
    cur.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def build_table_info(cur, db: str, table: str, table_id: int, *, alloc_id: Callable[[], int],
                     previous: TableInfo | None = None, renames: dict[str, str] | None = None,
                     clustered_index: str = CLUSTERED_ON) -> TableInfo:
    """The TableInfo of ``db.table`` as it is now in MariaDB (see the module docstring)."""
    col_rows = _query(cur, "SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                           "AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (db, table))
    if not col_rows:
        raise UpstreamSchemaError(f"table {db}.{table} does not exist upstream")
    checks = _query(cur, "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                         "WHERE CONSTRAINT_SCHEMA=%s AND TABLE_NAME=%s", (db, table))
    json_cols = {m.group(1).lower() for r in checks
                 if (m := re.fullmatch(r"json_valid\(`([^`]+)`\)", r["CHECK_CLAUSE"].strip()))}
    trow = _query(cur, "SELECT TABLE_COLLATION, TABLE_COMMENT FROM information_schema.TABLES "
                       "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table))[0]
    stats = _query(cur, "SELECT INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME, SUB_PART "
                        "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s AND "
                        "TABLE_NAME=%s ORDER BY INDEX_NAME='PRIMARY' DESC, INDEX_NAME, "
                        "SEQ_IN_INDEX", (db, table))
    renames = {k.lower(): v.lower() for k, v in (renames or {}).items()}  # new -> old
    prev_cols = {c.name.L: c for c in previous.cols} if previous else {}
    max_col_id = previous.max_col_id if previous else 0
    collate = trow["TABLE_COLLATION"] or "utf8mb4_bin"
    info = TableInfo(id=table_id, name=CIStr(table), charset=collate.split("_")[0],
                     collate=collate, comment=trow["TABLE_COMMENT"] or "")
    for row in col_rows:
        name = row["COLUMN_NAME"]
        if name == EXTRA_HANDLE_NAME:
            continue
        old = prev_cols.get(renames.get(name.lower(), name.lower()))
        if old is not None:
            cid = old.id
        else:
            max_col_id += 1
            cid = max_col_id
        ft = _field_type(row, name.lower() in json_cols)
        extra = (row["EXTRA"] or "").lower()
        if row["IS_NULLABLE"] == "NO":
            ft.flag |= Flag.NOT_NULL
        if "auto_increment" in extra:
            ft.flag |= Flag.AUTO_INCREMENT
        if "on update" in extra:
            ft.flag |= Flag.ON_UPDATE_NOW
        default, is_expr = _default(row["COLUMN_DEFAULT"])
        if (row["COLUMN_DEFAULT"] is None and ft.flag & Flag.NOT_NULL
                and not ft.flag & Flag.AUTO_INCREMENT):
            ft.flag |= Flag.NO_DEFAULT_VALUE
        gen = row.get("GENERATION_EXPRESSION") or ""
        col = ColumnInfo(id=cid, name=CIStr(name), offset=len(info.cols), type=ft,
                         default=None if gen else default, default_is_expr=is_expr,
                         generated_expr_string=gen, generated_stored="stored" in extra,
                         comment=row["COLUMN_COMMENT"] or "",
                         origin_default=old.origin_default if old else None)
        info.cols.append(col)
    info.max_col_id = max_col_id
    _add_indexes(info, stats, previous, clustered_index)
    info.partition = _partition(cur, db, table, alloc_id, previous)
    return info


def _add_indexes(info: TableInfo, stats: list[dict], previous: TableInfo | None,
                 clustered_index: str) -> None:
    by_name: dict[str, list[dict]] = {}
    for r in stats:
        by_name.setdefault(r["INDEX_NAME"], []).append(r)
    prev_idx = {i.idx_name.L: i for i in previous.index_info} if previous else {}
    max_idx_id = previous.max_idx_id if previous else 0
    for name, parts in by_name.items():
        col_names = [p["COLUMN_NAME"] for p in parts]
        if EXTRA_HANDLE_NAME in col_names:
            continue
        cols = [info.column_by_name(c) for c in col_names]
        primary, unique = name == "PRIMARY", not int(parts[0]["NON_UNIQUE"])
        for c in cols:
            if primary:
                c.type.flag |= Flag.PRI_KEY
        if unique and not primary and len(cols) == 1:
            cols[0].type.flag |= Flag.UNIQUE_KEY
        elif not unique:
            cols[0].type.flag |= Flag.MULTIPLE_KEY
        if primary and len(cols) == 1 and cols[0].type.tp in INTEGER_TYPES:
            info.pk_is_handle = True
            continue
        if primary and clustered_index == CLUSTERED_ON:
            info.is_common_handle, info.common_handle_version = True, 1
        old = prev_idx.get(name.lower())
        if old is not None:
            idx_id = old.id
        else:
            max_idx_id += 1
            idx_id = max_idx_id
        info.index_info.append(IndexInfo(
            id=idx_id, idx_name=CIStr(name), tbl_name=CIStr(info.name.O), is_unique=unique,
            is_primary=primary,
            idx_cols=[IndexColumn(CIStr(c.name.O), c.offset,
                                  int(p["SUB_PART"]) if p["SUB_PART"] is not None else -1)
                      for c, p in zip(cols, parts, strict=True)]))
    info.max_idx_id = max_idx_id


def _partition(cur, db: str, table: str, alloc_id: Callable[[], int],
               previous: TableInfo | None) -> PartitionInfo | None:
    rows = _query(cur, "SELECT PARTITION_NAME, PARTITION_METHOD, PARTITION_EXPRESSION, "
                       "PARTITION_DESCRIPTION, SUBPARTITION_NAME FROM information_schema.PARTITIONS "
                       "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY PARTITION_ORDINAL_POSITION",
                  (db, table))
    if not rows or rows[0]["PARTITION_NAME"] is None:
        return None
    method = rows[0]["PARTITION_METHOD"]
    if method not in _PARTITION_METHODS or rows[0]["SUBPARTITION_NAME"] is not None:
        raise UpstreamSchemaError(
            f"table {db}.{table}: partitioning {method!r} (or subpartitions) is not "
            "modelled; use RANGE, RANGE COLUMNS, HASH, LIST or LIST COLUMNS")
    ptype = _PARTITION_METHODS[method]
    expr = rows[0]["PARTITION_EXPRESSION"] or ""
    prev = {d.name.L: d.id for d in previous.partition.definitions} if (
        previous and previous.partition) else {}
    info = PartitionInfo(type=ptype, num=len(rows))
    if "COLUMNS" in method:
        info.columns = [CIStr(c.strip().strip("`")) for c in expr.split(",")]
    else:
        info.expr = expr
    for r in rows:
        name = r["PARTITION_NAME"]
        pid = prev.get(name.lower()) or alloc_id()
        d = PartitionDefinition(id=pid, name=CIStr(name))
        desc = r["PARTITION_DESCRIPTION"]
        if ptype == PartitionType.RANGE:
            d.less_than = [v.strip() for v in desc.split(",")]
        elif ptype == PartitionType.LIST:
            d.in_values = [[v.strip()] for v in desc.split(",")]
        info.definitions.append(d)
    return info
