"""Row keys and causality: which rows may run on different workers at the same time.

**Keys of a row** (:func:`row_keys`).  For each unique key of the table (the
primary key first) whose columns are all non-NULL in the new image, one key
string made of the table-qualified name, the key's column names and their values;
for an UPDATE the same again on the old image.  An image on which no unique key
qualifies (a table without keys, or keys holding NULLs) contributes one key
instead: the table-qualified name and the CRC32 of all its column values.  Keys
are deduplicated in order, so the first key is always the first non-NULL unique
key of the new image (or its all-columns hash): :func:`routing_key`.  Two rows
that touch the same row of the upstream share at least one key (equal unique key
values, or equal full images); CRC32 collisions only add needless conflicts.

Key strings depend only on names and ``repr`` of the values, never on Python's
per-process ``hash()`` salt, so every process computes the same strings, and
:func:`stable_hash` (CRC32 of the UTF-8 bytes) turns one into a worker number that
survives restarts.

**Causality** (:class:`Causality`, TiDB's ``causality.go``).  A kernel mapping each
key seen since the last flush to a *group* (the key that founded it):

- ``add(keys)``: if the keys already belong to two different groups, nothing is
  recorded and :data:`CONFLICT` is returned: the caller must let every worker
  finish what it has (flush), call :meth:`Causality.reset`, and add again.
  Otherwise the row joins the group one of its keys already belongs to (or founds
  a group named after its first key), every new key is recorded in that group,
  and the group is returned.
- ``worker_of(group) = stable_hash(group) % worker_count``; ``assign(keys)`` does
  both.

So rows sharing a key run on one worker, in dispatch order, and a row that would
tie two workers' rows together waits for both to drain.

**Transaction granularity** (:class:`TxnCausality`, ``[syncer] txn-atomic`` without
exactly-once).  The same idea with a whole transaction as the unit: the keys of all
its rows are looked up in a window mapping each key to the worker holding it since
the last flush.  Held by no worker: the txn goes to ``stable_hash(first key) %
worker_count``; held by exactly one worker: it goes to that worker (after the txns
it conflicts with, in order); held by several: :data:`CONFLICT` (flush every worker,
:meth:`TxnCausality.reset`, assign again).  So a transaction is never split, and
transactions sharing a key never run on two workers at once.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from tidb_binlog.drainer.apply.dml import DML, DMLType, TableSchema
from tidb_binlog.drainer.apply.sql import quote_table
from tidb_binlog.errors import InvalidArgument, SchemaError

__all__ = [
    "CONFLICT",
    "Conflict",
    "stable_hash",
    "image_keys",
    "row_keys",
    "routing_key",
    "Causality",
    "TxnCausality",
]


class Conflict:
    """Type of :data:`CONFLICT`: the row must wait for a flush of every worker."""

    _instance: Conflict | None = None

    def __new__(cls) -> Conflict:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "CONFLICT"

    def __reduce__(self):
        return (Conflict, ())


CONFLICT: Final = Conflict()


def stable_hash(key: str) -> int:
    """CRC32 of the key's UTF-8 bytes: the same in every process and every run."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass"))


_TAGS: dict[tuple[str, str], str] = {}
_TAGS_MAX = 65536


def _table_tag(database: str, table: str) -> str:
    """```db`.`t```: backquoted and escaped, so unambiguous; cached per table."""
    tag = _TAGS.get((database, table))
    if tag is None:
        if len(_TAGS) >= _TAGS_MAX:
            _TAGS.clear()
        tag = _TAGS[(database, table)] = quote_table(database, table)
    return tag


def image_keys(schema: TableSchema, database: str, table: str,
               image: Mapping[str, Any]) -> list[str]:
    """The keys of one row image (see the module docstring); never empty."""
    tag = _table_tag(database, table)
    keys = []
    get = image.get
    for key in schema.unique_keys:
        columns = key.columns
        if len(columns) == 1:
            value = get(columns[0])
            if value is not None:  # a missing column reads as None: not usable either
                keys.append(f"{tag}{key.key_tag}{(value,)!r}")
            continue
        values = tuple([get(c) for c in columns])
        if None not in values:
            keys.append(f"{tag}{key.key_tag}{values!r}")
    if not keys:
        values = tuple(image.get(c) for c in schema.columns if c in image)
        keys.append(f"{tag}*={zlib.crc32(repr(values).encode('utf-8', 'surrogatepass')):08x}")
    return keys


def row_keys(dml: DML) -> list[str]:
    """Keys of the new image, then (UPDATE) of the old image, deduplicated in order."""
    schema = dml.schema
    if schema is None:
        raise SchemaError(f"{dml.tp.name} on `{dml.database}`.`{dml.table}` carries no "
                          "TableSchema; keys need the table's unique keys")
    keys = image_keys(schema, dml.database, dml.table, dml.values)
    if dml.tp is DMLType.UPDATE:
        for key in image_keys(schema, dml.database, dml.table, dml.old_values):
            if key not in keys:
                keys.append(key)
    return keys


def routing_key(dml: DML) -> str:
    """The row's first key: first non-NULL unique key of the new image (or its hash)."""
    schema = dml.require_schema()
    return image_keys(schema, dml.database, dml.table, dml.values)[0]


class Causality:
    """Groups rows that share keys; see the module docstring."""

    def __init__(self, worker_count: int):
        if worker_count < 1:
            raise InvalidArgument(f"worker_count must be >= 1, got {worker_count}")
        self.worker_count = worker_count
        self._group_of: dict[str, str] = {}

    def add(self, keys: Sequence[str]) -> str | Conflict:
        """Record the row's keys and return its group, or CONFLICT (nothing recorded)."""
        if not keys:
            raise InvalidArgument("a row has at least one key (see row_keys)")
        group = None
        for key in keys:
            found = self._group_of.get(key)
            if found is not None:
                if group is not None and found != group:
                    return CONFLICT
                group = found
        if group is None:
            group = keys[0]
        for key in keys:
            self._group_of.setdefault(key, group)
        return group

    def worker_of(self, group: str) -> int:
        """The worker that runs a group: ``stable_hash(group) % worker_count``."""
        return stable_hash(group) % self.worker_count

    def assign(self, keys: Sequence[str]) -> int | Conflict:
        """``add`` then ``worker_of``: the row's worker, or CONFLICT."""
        group = self.add(keys)
        if group is CONFLICT:
            return CONFLICT
        return self.worker_of(group)

    def detect_conflict(self, keys: Iterable[str]) -> bool:
        """Whether ``add(keys)`` would return CONFLICT (records nothing)."""
        seen = {self._group_of[k] for k in keys if k in self._group_of}
        return len(seen) > 1

    def group_of(self, key: str) -> str | None:
        return self._group_of.get(key)

    def reset(self) -> None:
        """Forget every key: call after every worker has flushed."""
        self._group_of.clear()

    def __len__(self) -> int:
        return len(self._group_of)


class TxnCausality:
    """Conflict detection with whole transactions as the unit; see the module docstring.

    Unlike :class:`Causality` a transaction joins the *worker* that holds its keys (not
    a group), so two groups that happen to hash to one worker do not force a flush."""

    def __init__(self, worker_count: int):
        if worker_count < 1:
            raise InvalidArgument(f"worker_count must be >= 1, got {worker_count}")
        self.worker_count = worker_count
        self._worker_of: dict[str, int] = {}
        self.conflicts = 0

    def assign(self, keys: Sequence[str]) -> int | Conflict:
        """The worker of a transaction whose rows have ``keys`` (all rows' keys, first
        row's first), recorded until :meth:`reset`; or CONFLICT (nothing recorded)."""
        if not keys:
            raise InvalidArgument("a transaction has at least one key (see row_keys)")
        window = self._worker_of
        worker = None
        for key in keys:
            held = window.get(key)
            if held is not None and held != worker:
                if worker is not None:
                    self.conflicts += 1
                    return CONFLICT
                worker = held
        if worker is None:
            worker = stable_hash(keys[0]) % self.worker_count
        for key in keys:
            window[key] = worker
        return worker

    def reset(self) -> None:
        """Forget every key: call after every worker has flushed."""
        self._worker_of.clear()

    def __len__(self) -> int:
        return len(self._worker_of)
