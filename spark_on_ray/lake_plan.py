"""The pure half of the change-log jobs (``snapshot-at``, ``stats``): row changes → events.

Two inputs give the same row changes: the Parquet sink's lake (:func:`lake_files` picks
the manifest's committed files, :func:`change_txns` turns their rows into transactions,
values rendered as the file sink's by :func:`text_value`, images in the table's columns
as of the job's ts by :func:`lake_layout`) and, as the fallback, a file sink's pb
binlogs (decoded by ``tidb_binlog.reparo.decode``).

No Ray, Spark or driver here (``spark_on_ray.lake`` runs it). A decoded file-sink
transaction (:class:`~tidb_binlog.drainer.apply.dml.Txn`) becomes **events**, one dict per
effect on one row of one table, ready to be written as Parquet and reduced by Spark:

- ``_key``: the row's identity, the ``repr`` of its key values (the table's primary key,
  or first unique key; the whole image for a table without one), so it is the same text
  in every process;
- ``_seq``: a number increasing in commit order (then in order inside a transaction);
- ``_op``: ``"put"`` (the row now has this image) or ``"del"`` (the row is gone);
- ``_type`` / ``_ts`` / ``_minute``: the change kind (``insert``, ``update``,
  ``delete``), its commit_ts and that time in whole minutes (:func:`minute_of`);
  ``_count``: 1 on exactly one event per row change (statistics count changes, not
  events); then the image's columns (None for a ``del``).

An INSERT is a put of the new image; a DELETE a del of its key; an UPDATE a put of the
new image, preceded by a del of the old key when the key changed. So the table's image
as of any commit_ts is, per ``_key``, the last event at or below it when that event is
a put (``snapshot-at``). For a table without a key, identical rows share a ``_key``:
those events carry ``_delta`` (+1 / -1) and the image is each distinct row repeated
``SUM(_delta)`` times.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

from spark_on_ray.errors import SparkJobError
from tidb_binlog.drainer.apply.dml import DML, DMLType, Txn
from tidb_binlog.drainer.sinks.parquet.manifest import Manifest, column_default
from tidb_binlog.tso import extract_physical

__all__ = ["META", "row_events", "minute_of", "events_table", "EventTypeError", "lake_files",
           "text_value", "change_txns", "Layout", "lake_layout"]

META = ("_key", "_seq", "_op", "_delta", "_type", "_ts", "_minute", "_count")
"""The event columns that are not the row's own."""

_TYPE = {DMLType.INSERT: "insert", DMLType.UPDATE: "update", DMLType.DELETE: "delete"}


def _key(image: Mapping[str, Any], key: Sequence[str]) -> str:
    if key:
        return repr(tuple(image.get(c) for c in key))
    return repr(tuple(sorted(image.items())))


def row_events(txns: Iterable[Txn], keys: Mapping[tuple[str, str], Sequence[str]],
               start_seq: int = 0) -> dict[tuple[str, str], list[dict]]:
    """Events per ``(database, table)`` for the tables in ``keys`` (their key columns,
    ``()`` for a keyless table); rows of other tables and DDLs are skipped."""
    out: dict[tuple[str, str], list[dict]] = {}
    seq = start_seq
    for txn in txns:
        for dml in txn.dmls:
            name = (dml.database, dml.table)
            key = keys.get(name)
            if key is None:
                continue
            events = out.setdefault(name, [])
            base = {"_type": _TYPE[dml.tp], "_ts": txn.commit_ts,
                    "_minute": minute_of(txn.commit_ts)}
            new_key = _key(dml.values, key)
            if dml.tp is DMLType.UPDATE:
                old_key = _key(dml.old_values, key)
                if old_key != new_key or not key:
                    seq += 1
                    events.append({**base, "_key": old_key, "_seq": seq, "_op": "del",
                                   "_delta": -1, "_count": 0})
            if dml.tp is DMLType.DELETE:
                seq += 1
                events.append({**base, "_key": new_key, "_seq": seq, "_op": "del",
                               "_delta": -1, "_count": 1})
            else:
                seq += 1
                events.append({**dml.values, **base, "_key": new_key, "_seq": seq,
                               "_op": "put", "_delta": 1, "_count": 1})
    return out


def minute_of(commit_ts: int) -> int:
    """The commit_ts's physical time in whole minutes since the epoch (UTC)."""
    return extract_physical(commit_ts) // 60_000


class EventTypeError(SparkJobError):
    """A column's values have no one Arrow type (``column`` names it)."""

    _fields = ("where", "column")


def events_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Events → an Arrow table for the Parquet hand-off, one column per name in first-seen
    order. Integers beyond int64 (BIGINT UNSIGNED) become ``decimal(20, 0)``, exact; a
    column with only NULLs becomes a string column (Spark reads no NULL type); values of
    mixed kinds (text and numbers) raise :class:`EventTypeError`."""
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    arrays, fields = [], []
    for name in names:
        values = [r.get(name) for r in rows]
        try:
            arr = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            if not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                       for v in values):
                raise EventTypeError(f"column {name!r}: values of mixed kinds ({exc})",
                                     column=name) from exc
            arr = pa.array([None if v is None else Decimal(v) for v in values],
                           pa.decimal128(20, 0))
        if pa.types.is_null(arr.type):
            arr = arr.cast(pa.string())
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


# ------------------------------------------------------------------ the Parquet sink's lake

_OPS = {"insert": DMLType.INSERT, "update": DMLType.UPDATE, "delete": DMLType.DELETE}


def lake_files(files: Sequence[Mapping[str, Any]], tables: Iterable[tuple[str, str]],
               start: int, stop: int) -> list[Mapping[str, Any]]:
    """The manifest's ``files`` entries of ``tables`` that may hold a change with
    ``start <= commit_ts <= stop`` (``stop`` 0: no end), in the manifest's (commit) order."""
    wanted = set(tables)
    return [f for f in files if (f["database"], f["table"]) in wanted
            and int(f["max_commit_ts"]) >= start
            and (not stop or int(f["min_commit_ts"]) <= stop)]


def text_value(v: Any) -> Any:
    """A Parquet change value for the events: DECIMAL, DATE, DATETIME / TIMESTAMP and
    TIME as their MySQL text (as the file sink stores them), the rest as it is. Text keeps
    the image's column types what they were with the pb input, and Spark reads no Arrow
    type it lacks (TIME is a duration in the lake)."""
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        us = v // datetime.timedelta(microseconds=1)
        sign, us = ("-" if us < 0 else ""), abs(us)
        secs, frac = divmod(us, 1_000_000)
        text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
        return text + (f".{frac:06d}" if frac else "")
    return v


Layout = tuple[tuple[str, ...], dict[str, Any]]
"""A table's columns in order, and the value (:func:`text_value`) each holds in a row
image that lacks it (:func:`lake_layout`)."""


def lake_layout(manifest: Manifest, database: str, table: str, ts: int) -> Layout | None:
    """The columns of ``database.table`` as of commit_ts ``ts`` (the manifest's entry
    that applies there: :meth:`~tidb_binlog.drainer.sinks.parquet.manifest.Manifest.schema_at`)
    with each column's ``default`` (the value a row written before the column was added
    holds). None when no entry applies, or it was written by an older sink (no
    ``nullable``/``default``): the images are then read as the files carry them."""
    entry = manifest.schema_at(database, table, ts)
    if entry is None or not all("nullable" in c for c in entry["columns"]):
        return None
    return (tuple(c["name"] for c in entry["columns"]),
            {c["name"]: text_value(column_default(c)) for c in entry["columns"]})


def _image(struct: Mapping[str, Any] | None, layout: Layout | None) -> dict[str, Any]:
    struct = struct or {}
    if layout is None:
        return {k: text_value(v) for k, v in struct.items()}
    names, fills = layout  # an added column holds its default; a dropped one is left out
    return {k: text_value(struct[k]) if k in struct else fills[k] for k in names}


def change_txns(rows: Iterable[Mapping[str, Any]], database: str, table: str, start: int,
                stop: int, layout: Layout | None = None) -> Iterable[Txn]:
    """Rows of one Parquet change file (``commit_ts``, ``op``, ``before``, ``after``, in
    the file's order) → one :class:`Txn` per row change in ``[start, stop]`` (``stop``
    0: no end), for :func:`row_events`; with ``layout`` (:func:`lake_layout`) each image
    has exactly its columns."""
    for r in rows:
        ts = int(r["commit_ts"])
        if ts < start or (stop and ts > stop):
            continue
        tp = _OPS[r["op"]]
        if tp is DMLType.INSERT:
            dml = DML(database, table, tp, _image(r["after"], layout))
        elif tp is DMLType.UPDATE:
            dml = DML(database, table, tp, _image(r["after"], layout),
                      _image(r["before"], layout))
        else:
            dml = DML(database, table, tp, _image(r["before"], layout))
        yield Txn(ts, (dml,))
