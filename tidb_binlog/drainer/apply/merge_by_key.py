"""Merge-by-key bulk apply (TiDB's ``merge`` mode) for a batch of one table with a PK.

A batch of row changes to one table collapses into at most one change per
primary key, applied as one batched DELETE plus multi-row REPLACEs instead of one
statement per row.  The downstream ends in the same state as if every change had
been applied one by one, provided the batch is every change of that table in the
window, in commit order, and the table has a primary key.

**Step 1: PK changes.**  An UPDATE whose primary key values differ between old and
new image becomes ``DELETE(old image)`` followed by ``INSERT(new image)``.

**Step 2: collapse per key** (key = the PK values), in stream order.  ``earlier``
is what the batch holds for the key so far; the cell is what it holds after the
next change::

    earlier \\ next    INSERT n         UPDATE o->n          DELETE d
    (nothing)         INSERT n         UPDATE o->n          DELETE d
    INSERT a          INSERT n  (*)    INSERT n             DELETE d
    UPDATE o1->a      INSERT n  (*)    UPDATE o1->n         DELETE d
    DELETE d0         INSERT n         UPDATE o->n  (*)     DELETE d  (*)

The first UPDATE's old image is kept (update+update).  Cells marked (*) cannot
occur in a valid stream (a key inserted twice, or changed after its delete); as
TiDB does, the later change wins, and :attr:`MergedBatch.anomalies` counts them.
Key order is the order in which keys first appeared.

**Step 3: render** (:func:`render_merged`).  Every DELETE first, by primary key,
in chunks of ``batch_size`` keys: ``DELETE FROM t WHERE `id` IN (%s,%s)``, or for
a composite key ``WHERE (`a` = %s AND `b` = %s) OR (...)`` (plain OR of ANDs so
every MySQL flavour uses the PK range).  Then every INSERT and UPDATE as
``REPLACE INTO t (cols) VALUES (...),(...)`` in chunks of ``batch_size`` rows
(rows grouped by column list).

Why ``REPLACE`` and not ``INSERT ... ON DUPLICATE KEY UPDATE``: after collapsing,
each surviving row is the key's final image, and the set of final images is a
state the upstream held, so it satisfies every unique key.  But a final image may
still collide, on a *secondary* unique key, with another row's pre-batch image
(two rows swapping a unique value).  REPLACE deletes the colliding row, which the
batch itself rewrites or deletes, so the end state is exact.  ON DUPLICATE KEY
UPDATE would instead update the colliding row in place, keeping the wrong PK.
REPLACE also makes the apply idempotent, so it is safe for replay.  Deleting
first frees unique values the REPLACEs may need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import Any

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.apply.sql import Statement, image_columns, quote_name, quote_table
from tidb_binlog.errors import InvalidArgument, SchemaError

__all__ = ["MergedBatch", "split_key_changes", "merge_by_key", "render_merged",
           "merge_statements", "DEFAULT_BATCH_SIZE"]

DEFAULT_BATCH_SIZE = 1000
"""Rows per REPLACE / keys per DELETE; 1000-row statements are near the sweet spot."""


@dataclass
class MergedBatch:
    """One change per key: deletes (by PK) and upserts (final images), plus anomalies."""

    database: str
    table: str
    schema: TableSchema
    deletes: list[DML] = field(default_factory=list)
    upserts: list[DML] = field(default_factory=list)
    anomalies: int = 0


def _pk_error(schema: TableSchema, pk: tuple[str, ...], image: dict[str, Any],
              dml: DML) -> SchemaError:
    missing = [c for c in pk if c not in image]
    if missing:
        return SchemaError(f"{dml.tp.name} on {schema.qualified_name} lacks primary key "
                           f"column {missing[0]!r}; merge mode needs full rows")
    values = tuple(image[c] for c in pk)
    return SchemaError(f"{dml.tp.name} on {schema.qualified_name} has NULL in primary key "
                       f"{list(pk)}: {values!r}")


def _key_function(schema: TableSchema, pk: tuple[str, ...]):
    """``key(image, dml)``: the PK value (one column) or tuple of values, never NULL."""
    if len(pk) == 1:
        column = pk[0]

        def key(image: dict[str, Any], dml: DML):
            value = image.get(column)
            if value is None:
                raise _pk_error(schema, pk, image, dml)
            return value
    else:
        def key(image: dict[str, Any], dml: DML):
            try:
                values = tuple([image[c] for c in pk])
            except KeyError:
                raise _pk_error(schema, pk, image, dml) from None
            if None in values:
                raise _pk_error(schema, pk, image, dml)
            return values
    return key


def _check_batch(dmls: Sequence[DML]) -> tuple[TableSchema, tuple[str, ...]]:
    first = dmls[0]
    schema = first.require_schema()
    pk = schema.primary_key
    if pk is None:
        raise SchemaError(f"table {schema.qualified_name} has no primary key; merge mode "
                          "applies only to tables with one (use the causality path)")
    name = (first.database, first.table)
    for dml in dmls:
        if (dml.database, dml.table) != name:
            raise SchemaError(f"a merge batch holds one table: `{first.database}`."
                              f"`{first.table}` and `{dml.database}`.`{dml.table}` are mixed")
    return schema, pk.columns


def _split(dmls: Sequence[DML], key) -> list[tuple[Any, DML]]:
    """Step 1 on a checked batch: ``(key of the new image, change)`` pairs."""
    out: list[tuple[Any, DML]] = []
    for dml in dmls:
        new_key = key(dml.values, dml)
        if dml.tp is DMLType.UPDATE:
            old_key = key(dml.old_values, dml)
            if old_key != new_key:
                out.append((old_key, DML(dml.database, dml.table, DMLType.DELETE,
                                         dml.old_values, None, dml.schema)))
                out.append((new_key, DML(dml.database, dml.table, DMLType.INSERT,
                                         dml.values, None, dml.schema)))
                continue
        out.append((new_key, dml))
    return out


def split_key_changes(dmls: Sequence[DML]) -> list[DML]:
    """Step 1: every UPDATE that changes the PK becomes DELETE(old) + INSERT(new)."""
    if not dmls:
        return []
    schema, pk = _check_batch(dmls)
    return [dml for _, dml in _split(dmls, _key_function(schema, pk))]


def merge_by_key(dmls: Sequence[DML]) -> MergedBatch:
    """Steps 1 and 2: collapse a one-table batch to one change per primary key."""
    if not dmls:
        raise SchemaError("merge_by_key needs at least one DML")
    schema, pk = _check_batch(dmls)
    held: dict[Any, DML] = {}
    anomalies = 0
    INSERT, UPDATE, DELETE = DMLType.INSERT, DMLType.UPDATE, DMLType.DELETE
    for key, dml in _split(dmls, _key_function(schema, pk)):
        earlier = held.get(key)
        if earlier is None or dml.tp is DELETE:
            if earlier is not None and earlier.tp is DELETE:
                anomalies += 1  # delete + delete
            held[key] = dml
        elif dml.tp is INSERT:
            if earlier.tp is not DELETE:
                anomalies += 1  # insert + insert, update + insert
            held[key] = dml
        elif earlier.tp is INSERT:  # insert + update -> insert
            held[key] = DML(dml.database, dml.table, INSERT, dml.values, None, dml.schema)
        elif earlier.tp is UPDATE:  # update + update keeps the first old image
            held[key] = DML(dml.database, dml.table, UPDATE, dml.values, earlier.old_values,
                            dml.schema)
        else:  # delete + update
            anomalies += 1
            held[key] = dml
    batch = MergedBatch(dmls[0].database, dmls[0].table, schema, anomalies=anomalies)
    for dml in held.values():
        (batch.deletes if dml.tp is DELETE else batch.upserts).append(dml)
    return batch


def _chunks(seq: list, size: int):
    for i in range(0, len(seq), size):
        yield seq[i:i + size]


@lru_cache(maxsize=1024)
def _delete_sql(table: str, pk: tuple[str, ...], n: int) -> str:
    if len(pk) == 1:
        return f"DELETE FROM {table} WHERE {quote_name(pk[0])} IN ({','.join(['%s'] * n)})"
    one = "(" + " AND ".join(f"{quote_name(c)} = %s" for c in pk) + ")"
    return f"DELETE FROM {table} WHERE {' OR '.join([one] * n)}"


@lru_cache(maxsize=1024)
def _replace_sql(table: str, names: tuple[str, ...], n: int) -> str:
    cols = "(" + ",".join(quote_name(c) for c in names) + ")"
    row = "(" + ",".join(["%s"] * len(names)) + ")"
    return f"REPLACE INTO {table} {cols} VALUES {','.join([row] * n)}"


def _flat_args(images: list[dict[str, Any]], names: tuple[str, ...]) -> tuple:
    if len(names) == 1:
        name = names[0]
        return tuple([image[name] for image in images])
    get = itemgetter(*names)
    return tuple([v for image in images for v in get(image)])


def render_merged(batch: MergedBatch, *, batch_size: int = DEFAULT_BATCH_SIZE
                  ) -> list[Statement]:
    """Step 3: batched DELETEs by PK, then multi-row REPLACEs, ``batch_size`` per statement.

    The SQL text of each (table, columns, row count) is built once and cached.
    """
    if batch_size < 1:
        raise InvalidArgument(f"batch_size must be >= 1, got {batch_size}")
    schema = batch.schema
    pk = schema.primary_key.columns
    table = quote_table(batch.database, batch.table)
    out: list[Statement] = []
    for chunk in _chunks(batch.deletes, batch_size):
        out.append(Statement(_delete_sql(table, pk, len(chunk)),
                             _flat_args([dml.values for dml in chunk], pk)))
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    all_columns, column_set = schema.columns, schema.column_set
    for dml in batch.upserts:
        values = dml.values
        names = all_columns if values.keys() == column_set else tuple(
            image_columns(schema, values))
        by_columns.setdefault(names, []).append(values)
    for names, images in by_columns.items():
        for chunk in _chunks(images, batch_size):
            out.append(Statement(_replace_sql(table, names, len(chunk)),
                                 _flat_args(chunk, names)))
    return out


def merge_statements(dmls: Sequence[DML], *, batch_size: int = DEFAULT_BATCH_SIZE
                     ) -> list[Statement]:
    """``render_merged(merge_by_key(dmls))``: the whole bulk apply of one table's batch."""
    if not dmls:
        return []
    return render_merged(merge_by_key(dmls), batch_size=batch_size)
