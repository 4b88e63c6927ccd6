"""Row images → the bytes TiDB puts in a binlog (reference/tidb-codec.md §3.3).

A :class:`TableCodec` is built once per TableInfo. It names the columns to read
from MariaDB (``select_list``: every column of the TableInfo, plus the hidden
``_tidb_rowid`` for row-id tables) and turns one row tuple in that order into:

- ``insert_row``: ``EncodeValue(handle datums) ‖ EncodeOldRow(cols)`` where cols are
  the non-delete-only columns minus TiDB's ``CanSkip`` ones (the int PK handle; a
  clustered PK column without prefix; a NULL with neither default nor origin
  default; a virtual generated column). The handle is ``Int64(pk)`` (an unsigned PK
  is written as its two's-complement int64), ``Int64(_tidb_rowid)``, or for a
  clustered PK one datum per PK column as TiDB decodes it from the record key
  (TIME packed as uint64; strings as their raw bytes: we emulate TiDB with new
  collations disabled, so the key bytes are the value bytes);
- ``update_row``: ``EncodeOldRow(old) ‖ EncodeOldRow(new)`` over every column but
  delete-only and virtual generated ones, plus ``(-1, Int64(_tidb_rowid))`` for
  row-id tables;
- ``delete_row``: ``EncodeOldRow`` of every column (+ ``_tidb_rowid``).

It also gives the row's handle (to detect handle changes and build the TiKV
record key used as the transaction's ``prewrite_key``).
"""

from __future__ import annotations

import datetime
import struct

from tidb_binlog.codec import (
    Datum,
    Kind,
    datum_for_column,
    encode_key,
    encode_old_row,
    encode_value,
)
from tidb_binlog.model import (
    EXTRA_HANDLE_ID,
    EXTRA_HANDLE_NAME,
    HANDLE_COMMON,
    HANDLE_INT,
    HANDLE_ROWID,
    SchemaState,
    TableInfo,
)

__all__ = ["TableCodec", "quote_id", "record_key"]

_UTC = datetime.UTC
_DELETE_STATES = (SchemaState.DELETE_ONLY, SchemaState.DELETE_REORGANIZATION)


def quote_id(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def record_key(table_id: int, handle) -> bytes:
    """TiKV's record key ``t{table_id}_r{handle}`` (int handle or list of key datums)."""
    prefix = b"t" + struct.pack(">Q", (table_id & 0xFFFFFFFFFFFFFFFF) ^ (1 << 63)) + b"_r"
    if isinstance(handle, int):
        return prefix + struct.pack(">Q", (handle & 0xFFFFFFFFFFFFFFFF) ^ (1 << 63))
    return prefix + encode_key(handle)


def _as_int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


class TableCodec:
    """Encodes row tuples (in ``select_list`` order) as TiDB binlog rows."""

    def __init__(self, info: TableInfo, tz: datetime.tzinfo = _UTC):
        self.info = info
        self.tz = tz
        self.kind = info.handle_kind
        self.columns = list(info.cols)
        self.field_types = [c.type.to_codec() for c in self.columns]
        names = [quote_id(c.name.O) for c in self.columns]
        if self.kind == HANDLE_ROWID:
            names.append(quote_id(EXTRA_HANDLE_NAME))
        self.select_list = ", ".join(names)
        n = len(self.columns)
        self.rowid_index = n if self.kind == HANDLE_ROWID else None
        pk_offsets: list[int] = []
        if self.kind == HANDLE_INT:
            pk_offsets = [info.pk_handle_column().offset]
        elif self.kind == HANDLE_COMMON:
            pk_offsets = [ic.offset for ic in info.primary_index().idx_cols]
        self.pk_offsets = pk_offsets
        full_pk = set()
        if self.kind == HANDLE_COMMON:
            full_pk = {ic.offset for ic in info.primary_index().idx_cols if ic.length == -1}
        virtual = {c.offset for c in self.columns if c.is_generated and not c.generated_stored}
        live = [i for i, c in enumerate(self.columns) if c.state not in _DELETE_STATES]
        # insert: (index, col id, may skip when NULL)
        self._insert_cols = []
        for i in live:
            c = self.columns[i]
            if i in virtual or (self.kind == HANDLE_INT and i == pk_offsets[0]) or i in full_pk:
                continue
            skip_null = c.default is None and c.origin_default is None
            self._insert_cols.append((i, c.id, skip_null))
        self._update_idx = [i for i in live if i not in virtual]
        self._update_ids = [self.columns[i].id for i in self._update_idx]
        self._delete_ids = [c.id for c in self.columns]
        if self.kind == HANDLE_ROWID:
            self._update_ids.append(EXTRA_HANDLE_ID)
            self._delete_ids.append(EXTRA_HANDLE_ID)

    # -- values ----------------------------------------------------------------------
    def datums(self, row) -> list[Datum]:
        tz = self.tz
        return [datum_for_column(v, ft, tz) for v, ft in zip(row, self.field_types, strict=False)]

    def handle(self, row):
        """The row's handle: an int (int PK / row id) or a tuple of PK values."""
        if self.kind == HANDLE_ROWID:
            return row[self.rowid_index]
        if self.kind == HANDLE_INT:
            return row[self.pk_offsets[0]]
        return tuple(row[i] for i in self.pk_offsets)

    def handle_datums(self, row, datums: list[Datum] | None = None) -> list[Datum]:
        if self.kind != HANDLE_COMMON:
            return [Datum.int64(_as_int64(int(self.handle(row))))]
        datums = datums or self.datums(row)
        out = []
        for i in self.pk_offsets:
            d = datums[i]
            if d.kind is Kind.TIME or d.kind is Kind.ENUM or d.kind is Kind.SET or d.kind is Kind.BIT:
                d = Datum.uint64(d.value)
            elif d.kind is Kind.STRING:
                d = Datum.bytes(d.value)
            out.append(d)
        return out

    def key(self, row, table_id: int | None = None) -> bytes:
        h = self.handle_datums(row)
        handle = h[0].value if self.kind != HANDLE_COMMON else h
        return record_key(self.info.id if table_id is None else table_id, handle)

    # -- binlog rows -----------------------------------------------------------------
    def insert_row(self, row) -> bytes:
        datums = self.datums(row)
        ids, vals = [], []
        for i, cid, skip_null in self._insert_cols:
            d = datums[i]
            if skip_null and d.kind is Kind.NULL:
                continue
            ids.append(cid)
            vals.append(d)
        return encode_value(self.handle_datums(row, datums)) + encode_old_row(ids, vals)

    def _row_datums(self, row, idx: list[int]) -> list[Datum]:
        datums = self.datums(row)
        vals = [datums[i] for i in idx]
        if self.kind == HANDLE_ROWID:
            vals.append(Datum.int64(int(row[self.rowid_index])))
        return vals

    def update_row(self, old, new) -> bytes:
        return (encode_old_row(self._update_ids, self._row_datums(old, self._update_idx))
                + encode_old_row(self._update_ids, self._row_datums(new, self._update_idx)))

    def delete_row(self, old) -> bytes:
        return encode_old_row(self._delete_ids, self._row_datums(old, range(len(self.columns))))
