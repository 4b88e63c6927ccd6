"""The Parquet change-log sink (``db-type = "parquet"``): a date-partitioned lake per table.

:class:`ParquetLake` keeps the files and the manifest; :class:`ParquetSink` is the
pipeline's :class:`~tidb_binlog.drainer.pipeline.sink.Sink` around it (sequence gate,
:class:`~tidb_binlog.drainer.pipeline.sink.SinkStatus`).

**Layout** (``[syncer.to] dir``, default ``data-dir``)::

    <dir>/_manifest.json                                  the checkpoint and the file list
    <dir>/<database>/<table>/date=YYYY-MM-DD/part-<min_ts>-<max_ts>-v<schema_version>-<n>.parquet

The date is the UTC date of the transaction's commit_ts (TSO physical time). Columns
and types: :mod:`.arrow`; the manifest: :mod:`.manifest`.

**Flush policy.** Row changes are buffered per (table, table version, date). The
buffer is written out when it holds ``flush_rows`` rows (default 100 000) or about
``flush_bytes`` (64 MiB, estimated), when ``flush_interval_s`` (3 s, the checkpoint
cadence of the other sinks) passed since the last flush and something is pending
(also a checkpoint moved only by fake binlogs), before a DDL, and on close. A flush
writes each group to ``.<name>.tmp``, fsyncs and renames it, then replaces the
manifest (new files, ``commit_ts`` = the last transaction handed in): **the checkpoint
is the manifest's commit_ts**, and a file is visible to readers only from that moment.

**Reset** (start, restart of any pipeline actor): drop the buffer, read the manifest
(none: write one at ``initial_commit_ts``), delete every file it does not list (a
flush that crashed between rename and manifest), resume after its commit_ts. So after
a ``kill -9`` every change is in the listed files exactly once, in commit order.

**Large transactions.** The keeper hands a transaction of more than ``txn-chunk-rows``
row changes in chunks (``Changes.more`` on every chunk but the last; see
:mod:`.keeper`). Its first chunk flushes everything before it (so the buffer then holds
this transaction alone); while it is open, a buffer over ``flush_rows`` /
``flush_bytes`` is *spilled*: appended to one open temp file per group
(``.spill-*.parquet.tmp``, a row group per spill) and dropped from memory, without a
manifest change; the time-based flush waits. Only after its last chunk may a flush
close, fsync and rename those files and list them: the checkpoint never passes a
transaction that is not wholly in listed files. A crash (or a reset) before that leaves
only temp files, deleted at the next reset, and the replay writes the transaction again,
once. ``close()`` with a transaction open commits what came before it and discards it.

**DDL.** Buffers are flushed first, then the manifest records the DDL (``ddls``) with
its commit_ts and the new schema version; the next row of a changed table starts a
new ``schemas`` entry (its ``min_commit_ts`` that row's), and files of the new version.
An entry describes the table as :func:`~.arrow.schema_fields` does (columns with types,
nullability and defaults; keys; handle): a change of any of those starts a new entry.
An entry of an older sink (no ``nullable``/``default``, no keys) at the very schema
version being written is completed in place (the same TableInfo), not repeated.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.pipeline.gated import GatedSink
from tidb_binlog.drainer.pipeline.sink import SinkStatus
from tidb_binlog.drainer.sinks.parquet.arrow import BatchBuilder, TableSpec, schema_fields
from tidb_binlog.drainer.sinks.parquet.compact import LakeLock
from tidb_binlog.drainer.sinks.parquet.manifest import (
    Manifest,
    fsync_dir,
    read_manifest,
    remove_unlisted,
    write_manifest,
)
from tidb_binlog.errors import StorageError

__all__ = ["ParquetLake", "ParquetSink", "FLUSH_ROWS", "FLUSH_BYTES", "FLUSH_INTERVAL_S",
           "commit_date"]

log = logging.getLogger(__name__)

FLUSH_ROWS = 100_000
FLUSH_BYTES = 64 << 20
FLUSH_INTERVAL_S = 3.0
COMPRESSION = "zstd"


_DAY_MS = 86_400_000
_dates: dict[int, str] = {}


def commit_date(commit_ts: int) -> str:
    """The UTC date of a TSO (its physical part is milliseconds since the epoch)."""
    day = (commit_ts >> 18) // _DAY_MS
    date = _dates.get(day)
    if date is None:
        date = (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat()
        _dates[day] = date
    return date


@dataclass
class _Spill:
    """A group's open temp file while a large transaction is written (module doc)."""

    file: object
    writer: pq.ParquetWriter
    tmp: Path
    rows: int = 0
    last_ts: int = 0


_spill_ids = itertools.count()


class ParquetLake:
    """The files and the manifest; see the module docstring."""

    def __init__(self, directory, *, flush_rows: int = FLUSH_ROWS,
                 flush_bytes: int = FLUSH_BYTES, flush_interval_s: float = FLUSH_INTERVAL_S,
                 initial_commit_ts: int = 0, compression: str = COMPRESSION,
                 clock: Callable[[], float] = time.monotonic):
        self.directory = Path(directory)
        self.flush_rows = flush_rows
        self.flush_bytes = flush_bytes
        self.flush_interval_s = flush_interval_s
        self.initial_commit_ts = initial_commit_ts
        self.compression = compression
        self.clock = clock
        self.manifest: Manifest | None = None
        # the lake's lock from reset to close: no compaction while this sink writes
        self._lock = LakeLock(self.directory, "a drainer's Parquet sink")
        self.applied_ts = 0
        self.schema_version = 0
        self._groups: dict[tuple[TableSpec, str], BatchBuilder] = {}
        self._group_first: dict[tuple[TableSpec, str], int] = {}
        self._pending_rows = 0
        self._pending_bytes = 0
        self._spills: dict[tuple[TableSpec, str], _Spill] = {}
        self._fields: dict[TableSpec, dict] = {}  # schema_fields per spec (a cache)
        self._open_txn = 0        # commit_ts of a large transaction whose chunks came in
        self._last_flush_s = 0.0
        self.spilled_rows = 0     # rows appended to temp files (large transactions)
        self.rows = 0             # rows committed since the sink was created
        self.files = 0
        self.ddls = 0
        self.flushes = 0
        self.skipped = 0          # items at or below what was applied (replays)
        self.removed_files = 0    # unlisted files deleted at resets
        self.zero_dates = 0

    # -- protocol -----------------------------------------------------------------------
    def reset(self) -> Checkpoint:
        """Forget the buffer, load the manifest, delete unlisted files (module doc)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        manifest = read_manifest(self.directory)
        if manifest is None:
            manifest = Manifest(commit_ts=self.initial_commit_ts)
            write_manifest(self.directory, manifest)
        removed = remove_unlisted(self.directory, manifest)
        if removed:
            self.removed_files += len(removed)
            fsync_dir(self.directory)
            log.warning("parquet sink: removed %d file(s) not in the manifest (a flush cut "
                        "short): %s; their changes are written again from the replay",
                        len(removed), ", ".join(removed[:5]))
        self.manifest = manifest
        self.applied_ts = manifest.commit_ts
        self.schema_version = manifest.schema_version
        self._abort_txn()
        self._last_flush_s = self.clock()
        return Checkpoint(manifest.commit_ts, schema_version=manifest.schema_version)

    def apply(self, items) -> int:
        """Buffer ``(commit_ts, Changes | None, schema_version)`` items; flush when due."""
        self._open()
        last_spec = last_date = last_builder = None
        for commit_ts, changes, version in items:
            if commit_ts <= self.applied_ts:
                self.skipped += 1
                continue
            if changes is not None and changes.ddl is not None:
                self.flush()
                self._commit_ddl(commit_ts, changes.ddl, version)
                last_spec = last_date = last_builder = None
                continue
            more = changes is not None and changes.more
            if commit_ts != self._open_txn and (more or self._open_txn):
                if self._open_txn:
                    raise StorageError(
                        f"parquet sink: the transaction at commit_ts {commit_ts} came while "
                        f"the chunks of {self._open_txn} were still coming; this is a bug, "
                        "report it (a restart replays both from the manifest)")
                self.flush()  # the buffer holds the large transaction alone from here
                self._open_txn = commit_ts
                last_spec = last_date = last_builder = None
            if changes is not None:
                date = commit_date(commit_ts)
                for spec, op, before, after in changes.rows:
                    if spec is last_spec and date is last_date:  # no deep hash of the spec
                        builder = last_builder
                    else:
                        key = (spec, date)
                        builder = self._groups.get(key)
                        if builder is None:
                            builder = self._groups[key] = BatchBuilder(spec)
                            self._group_first[key] = commit_ts
                        last_spec, last_date, last_builder = spec, date, builder
                    size = builder.approx_bytes
                    builder.add(commit_ts, op, before, after)
                    self._pending_bytes += builder.approx_bytes - size
                    self._pending_rows += 1
            if not more:  # a whole transaction, or a large one's last chunk
                self._open_txn = 0
                self.applied_ts = commit_ts
                self.schema_version = max(self.schema_version, version)
            if self._pending_rows >= self.flush_rows or self._pending_bytes >= self.flush_bytes:
                if self._open_txn:
                    self._spill()  # no manifest change before the transaction's end
                else:
                    self.flush()
                last_spec = last_date = last_builder = None
        self._maybe_flush_by_time()
        return self.applied_ts

    def idle(self) -> int:
        self._open()
        self._maybe_flush_by_time()
        return self.applied_ts

    def close(self) -> Checkpoint:
        self._open()
        if self._open_txn:  # its last chunk never came: the restart replays it
            self._abort_txn()
        self.flush()
        cp = Checkpoint(self.manifest.commit_ts, consistent=True,
                        schema_version=self.manifest.schema_version)
        self.manifest = None
        self._lock.release()
        return cp

    @property
    def committed_ts(self) -> int:
        return self.manifest.commit_ts if self.manifest is not None else 0

    # -- what the pipeline's gate asks (tidb_binlog.drainer.pipeline.gated.SinkWriter) ----
    @property
    def is_open(self) -> bool:
        return self.manifest is not None

    def saved_checkpoint(self) -> Checkpoint:
        """The manifest's checkpoint as it is on disk (``initial_commit_ts`` without one)."""
        manifest = read_manifest(self.directory)
        ts = manifest.commit_ts if manifest is not None else self.initial_commit_ts
        return Checkpoint(ts, schema_version=manifest.schema_version if manifest else 0)

    def sink_status(self, last_apply_s: float) -> SinkStatus:
        st = self.status()
        return SinkStatus(commit_ts=st["commit_ts"], saved_commit_ts=st["saved_commit_ts"],
                          schema_version=st["schema_version"], pending=st["pending_rows"],
                          applied_rows=st["rows"], flushes=st["flushes"],
                          last_apply_s=last_apply_s, ddl_jobs=st["ddl_records"],
                          savepoints=st["flushes"],
                          extra={k: v for k, v in st.items()
                                 if k not in ("commit_ts", "saved_commit_ts", "schema_version",
                                              "rows", "flushes", "ddl_records",
                                              "pending_rows")})

    def status(self) -> dict:
        return {"commit_ts": self.applied_ts, "saved_commit_ts": self.committed_ts,
                "schema_version": self.schema_version, "rows": self.rows,
                "files": self.files, "ddl_records": self.ddls, "flushes": self.flushes,
                "pending_rows": self._pending_rows, "skipped": self.skipped,
                "removed_files": self.removed_files, "zero_dates": self.zero_dates,
                "spilled_rows": self.spilled_rows, "open_txn": self._open_txn}

    # -- flushing -------------------------------------------------------------------------
    def flush(self) -> None:
        """Write every buffered group, then commit the manifest at ``applied_ts``."""
        manifest = self._open()
        if self._open_txn:
            raise StorageError(f"parquet sink: flush while the transaction at commit_ts "
                               f"{self._open_txn} is open; this is a bug, report it")
        if not self._groups and manifest.commit_ts == self.applied_ts:
            return
        new_files, new_schemas = [], []
        seq = len(manifest.files)
        for (spec, date), builder in self._groups.items():
            first = self._group_first[(spec, date)]
            version = self._schema_entry(manifest, spec, new_schemas, first)
            spill = self._spills.pop((spec, date), None)
            last = builder.commit_ts[-1] if len(builder) else spill.last_ts
            rows = len(builder) + (spill.rows if spill is not None else 0)
            rel = (f"{spec.database}/{spec.table}/date={date}/"
                   f"part-{first}-{last}-v{version}-{seq}.parquet")
            seq += 1
            size = self._write_file(rel, builder, spill)
            self.zero_dates += builder.zero_dates
            new_files.append({"path": rel, "database": spec.database, "table": spec.table,
                              "date": date, "schema_version": version,
                              "min_commit_ts": first, "max_commit_ts": last,
                              "rows": rows, "bytes": size})
        manifest.files.extend(new_files)
        manifest.schemas.extend(new_schemas)
        manifest.commit_ts = self.applied_ts
        manifest.schema_version = max(manifest.schema_version, self.schema_version)
        write_manifest(self.directory, manifest)
        self.rows += sum(f["rows"] for f in new_files)
        self.files += len(new_files)
        self.flushes += 1
        self._drop_buffer()
        self._last_flush_s = self.clock()

    def _write_file(self, rel: str, builder: BatchBuilder, spill: _Spill | None = None) -> int:
        """Write the group's file (the rest of a spilled one), fsync, rename into place."""
        path = self.directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if spill is not None:
            if len(builder):
                spill.writer.write_batch(builder.build())
            spill.writer.close()
            f, tmp = spill.file, spill.tmp
            try:
                f.flush()
                os.fsync(f.fileno())
            finally:
                f.close()
        else:
            tmp = path.with_name(f".{path.name}.tmp")
            batch = builder.build()
            with open(tmp, "wb") as f:
                with pq.ParquetWriter(f, batch.schema, compression=self.compression) as writer:
                    writer.write_table(pa.Table.from_batches([batch]))
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
        return path.stat().st_size

    def _spill(self) -> None:
        """Append every buffered group to its open temp file and empty the buffer, with
        no manifest change (a large transaction is open: module doc)."""
        for key, builder in list(self._groups.items()):
            if not len(builder):
                continue
            spec, date = key
            batch = builder.build()
            spill = self._spills.get(key)
            if spill is None:
                part = self.directory / spec.database / spec.table / f"date={date}"
                part.mkdir(parents=True, exist_ok=True)
                tmp = part / (f".spill-{self._group_first[key]}-{os.getpid()}-"
                              f"{next(_spill_ids)}.parquet.tmp")
                f = open(tmp, "wb")  # noqa: SIM115 (open until the transaction's last chunk)
                try:
                    writer = pq.ParquetWriter(f, batch.schema, compression=self.compression)
                except BaseException:
                    f.close()
                    raise
                spill = self._spills[key] = _Spill(f, writer, tmp)
            spill.writer.write_batch(batch)
            spill.rows += len(builder)
            spill.last_ts = builder.commit_ts[-1]
            self.zero_dates += builder.zero_dates
            self.spilled_rows += len(builder)
            self._groups[key] = BatchBuilder(spec)
        self._pending_rows = 0
        self._pending_bytes = 0

    def _abort_txn(self) -> None:
        """Drop the buffer and a large transaction's temp files (reset, or close with it
        open): nothing of it was listed, the replay brings it again."""
        for spill in self._spills.values():
            try:
                spill.writer.close()
            except Exception as exc:  # a half-written temp file: it is deleted below
                log.warning("parquet sink: closing %s: %s", spill.tmp, exc)
            spill.file.close()
            spill.tmp.unlink(missing_ok=True)
        self._spills.clear()
        self._open_txn = 0
        self._drop_buffer()

    def _schema_entry(self, manifest: Manifest, spec: TableSpec, new: list[dict],
                      first: int) -> int:
        """The schema version a file of ``spec`` (its first row at commit_ts ``first``) is
        listed under: the table's latest entry when it describes ``spec``, else a new one
        (module doc)."""
        fields = self._fields.get(spec)
        if fields is None:
            if len(self._fields) > 4096:
                self._fields.clear()
            fields = self._fields[spec] = schema_fields(spec)
        for entry in reversed(new):
            if (entry["database"], entry["table"]) == (spec.database, spec.table):
                if _describes(entry, fields):
                    entry["min_commit_ts"] = min(entry["min_commit_ts"], first)
                    return entry["schema_version"]
                break
        else:
            latest = manifest.latest_schema(spec.database, spec.table)
            if latest is not None:
                if _describes(latest, fields):
                    return latest["schema_version"]
                if (latest["schema_version"] == self.schema_version
                        and _completes(latest, fields)):
                    latest.update(fields)
                    latest.setdefault("min_commit_ts", manifest.entry_min_commit_ts(latest))
                    return latest["schema_version"]
        version = self.schema_version
        new.append({"database": spec.database, "table": spec.table, "schema_version": version,
                    "min_commit_ts": first, **fields})
        return version

    def _commit_ddl(self, commit_ts: int, ddl: tuple, version: int) -> None:
        manifest = self._open()
        database, table, query = ddl
        self.applied_ts = commit_ts
        self.schema_version = max(self.schema_version, version)
        manifest.ddls.append({"commit_ts": commit_ts, "schema_version": version,
                              "database": database, "table": table, "query": query})
        manifest.commit_ts = commit_ts
        manifest.schema_version = self.schema_version
        write_manifest(self.directory, manifest)
        self.ddls += 1
        self._last_flush_s = self.clock()

    def _maybe_flush_by_time(self) -> None:
        if (self.manifest is None or self.applied_ts == self.manifest.commit_ts
                or self._open_txn):
            return
        if self.clock() - self._last_flush_s >= self.flush_interval_s:
            self.flush()

    def _drop_buffer(self) -> None:
        self._groups.clear()
        self._group_first.clear()
        self._pending_rows = 0
        self._pending_bytes = 0

    def _open(self) -> Manifest:
        if self.manifest is None:
            raise StorageError("the parquet sink is not open: reset() it first")
        return self.manifest


def _describes(entry: dict, fields: dict) -> bool:
    """Whether a ``schemas`` entry says what ``fields`` (:func:`~.arrow.schema_fields`) says."""
    return all(entry.get(k) == v for k, v in fields.items())


def _layout(columns: list[dict]) -> list[tuple]:
    return [(c["name"], c["mysql_type"], c["arrow_type"]) for c in columns]


def _completes(entry: dict, fields: dict) -> bool:
    """Whether ``fields`` only adds to an older sink's entry what it did not record (the
    same columns and types; no nullability, defaults or keys in it)."""
    return ("unique_keys" not in entry and "handle" not in entry
            and all("nullable" not in c and "default" not in c for c in entry["columns"])
            and _layout(entry["columns"]) == _layout(fields["columns"]))


class ParquetSink(GatedSink):
    """The lake as the pipeline's :class:`~tidb_binlog.drainer.pipeline.sink.Sink`: a
    :class:`ParquetLake` behind the pipeline's gate
    (:class:`~tidb_binlog.drainer.pipeline.gated.GatedSink`)."""

    who = "parquet sink"

    @property
    def lake(self) -> ParquetLake:
        return self.writer
