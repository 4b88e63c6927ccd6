"""The file sink (``db-type = "file"``, TiDB's ``drainer/sync/pb.go``): pb records in binlog files.

:class:`FileSink` writes each translated transaction (``pb_binlog.Binlog``
bytes from :mod:`tidb_binlog.drainer.translate.pb`) as one record of a
:class:`~tidb_binlog.binlogfile.Binlogger` in ``[syncer.to] dir`` (default
``data-dir``), and keeps the checkpoint (``<data-dir>/savepoint``, TOML, or any
store with ``load()``/``save(cp)``: ``FileCheckpointStore``).

**Protocol** (the one the merger drives, as for the MySQL coordinator):

- ``reset() -> Checkpoint``: (re)open the directory (the binlogger truncates a
  torn tail), load the checkpoint (missing: ``initial-commit-ts``), and make the
  files end exactly at it (below). Everything in flight is forgotten.
- ``apply(items) -> commit_ts``: ``items`` are ``(commit_ts, record | None,
  schema_version)`` in commit order; items at or below what was written are
  skipped (a replay after a reset); records are appended in one write; the
  return value is the highest commit_ts written (fake binlogs and skipped
  transactions, ``record = None``, move it too).
- ``idle() -> commit_ts``: save when due; GC when due.
- ``close() -> Checkpoint``: sync, save ``consistent = true``, close.

**Durability.** Records are appended without a sync (TiDB acks after the
append too). The checkpoint is saved every ``save_interval_s`` (3 s) and after a
batch holding a DDL, and *always after* :meth:`Binlogger.sync`: the savepoint
never points past what survives a machine crash.

**The crash window, closed.** Between a save and the crash, records above the
savepoint may sit in the files (written, maybe synced, maybe torn). TiDB's sink
appends the replay after them, so those transactions are in the files twice.
Ours makes the files end at the savepoint on :meth:`reset`: it walks the
segments from the newest backwards, finds the position just after the last
record with ``commit_ts <= savepoint`` and truncates there (later segments are
removed), then the replay writes the same records again: every transaction is
in the files exactly once, in commit order. The same holds when only the sink
restarts (Ray restarted the actor, or ``reset()`` after a pipeline error).
Consequences: a savepoint moved *back* by hand (``binlogctl generate_meta``)
also drops the newer records; with no savepoint at all (a new task on a
directory holding records) nothing is dropped and an initial savepoint is
written at once, so the window is bounded from the first record on.

**As the pipeline's sink**: :class:`BinlogFileSink` is the
:class:`~tidb_binlog.drainer.pipeline.sink.Sink` around a :class:`FileSink`, the
pipeline's :class:`~tidb_binlog.drainer.pipeline.gated.GatedSink`: batches through the
:class:`~tidb_binlog.drainer.pipeline.gate.SequenceGate` (refused before the first
reset, out of sequence, or after a failed one), a
:class:`~tidb_binlog.drainer.pipeline.sink.SinkStatus` with the sink's own keys
(``saved_commit_ts``, ``records``, ...) in ``extra``. It does not count replays
(``resets`` is left to the merger's count).

**Large transactions in parts.** A transaction of more than ``txn-chunk-rows`` row
changes arrives as :class:`~tidb_binlog.drainer.translate.pb.RecordPart` items (the pb
keeper's chunks), each ``(commit_ts, part, schema_version)``. The parts' bytes go to a
spill file (``<dir>/.record.spill``); at the last one the record is appended from it
(:meth:`Binlogger.write_streamed <tidb_binlog.binlogfile.Binlogger.write_streamed>`:
header with the total size, :func:`~tidb_binlog.drainer.translate.pb.record_head`, the
parts, CRC), the same bytes the whole path writes, in one segment. ``commit_ts`` moves
(and may be saved) only then; a crash before it loses only the spill (removed at reset,
rebuilt by the replay), a crash while the record is appended leaves a torn tail the
reset truncates: the transaction is in the files once, whole, or not at all.

**Retention.** With ``retention_s > 0`` segments not modified for that long are
removed at reset and then every ``gc_interval_s`` (1 h), the newest kept.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from tidb_binlog.binlog_ref import DEFAULT_REF_ABOVE_BYTES
from tidb_binlog.binlogfile import SEGMENT_SIZE_BYTES, Binlogger, Pos
from tidb_binlog.binlogfile.reader import segments, walk
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint, start_commit_ts
from tidb_binlog.drainer.pipeline.gated import GatedSink
from tidb_binlog.drainer.pipeline.sink import SinkStatus
from tidb_binlog.drainer.translate.pb import (
    RecordPart,
    is_ddl_record,
    record_commit_ts,
    record_head,
)
from tidb_binlog.errors import ProtocolError, StorageError

__all__ = ["FileSink", "BinlogFileSink", "SAVE_INTERVAL_S", "GC_INTERVAL_S"]

log = logging.getLogger(__name__)

SAVE_INTERVAL_S = 3.0
GC_INTERVAL_S = 3600.0
_TRIM_INLINE_MAX = DEFAULT_REF_ABOVE_BYTES - 1  # larger records are read in place on a reset
SPILL_FILE = ".record.spill"  # a large transaction's parts until its last one


class _Spill:
    """The parts of one large transaction's record so far, in a file."""

    def __init__(self, path, commit_ts: int):
        self.path = path
        self.commit_ts = commit_ts
        self.size = 0
        self.parts = 0
        try:
            self.file = open(path, "w+b")  # noqa: SIM115 (closed by discard())
        except OSError as exc:
            raise StorageError(f"cannot create the spill file {path} for the transaction at "
                               f"commit_ts {commit_ts}: {exc}") from exc

    def add(self, events: bytes) -> None:
        try:
            self.file.write(events)
        except OSError as exc:
            raise StorageError(f"cannot write to the spill file {self.path} (transaction at "
                               f"commit_ts {self.commit_ts}): {exc}; check the disk's "
                               "space") from exc
        self.size += len(events)
        self.parts += 1

    def discard(self) -> None:
        self.file.close()
        _remove_spill(self.path)


def _remove_spill(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot remove the spill file {path}: {exc}") from exc


class FileSink:
    """The pb file sink; see the module docstring."""

    def __init__(self, directory, store, *, max_file_size_bytes: int = SEGMENT_SIZE_BYTES,
                 retention_s: float = 0.0, save_interval_s: float = SAVE_INTERVAL_S,
                 gc_interval_s: float = GC_INTERVAL_S, initial_commit_ts: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        self.directory = directory
        self.store = store
        self.max_file_size_bytes = max_file_size_bytes
        self.retention_s = retention_s
        self.save_interval_s = save_interval_s
        self.gc_interval_s = gc_interval_s
        self.initial_commit_ts = initial_commit_ts
        self.clock = clock
        self.binlogger: Binlogger | None = None
        self.written_ts = 0
        self.schema_version = 0
        self.saved = Checkpoint(0)
        self.records = 0          # records written since the sink was created
        self.ddl_records = 0
        self.skipped = 0          # items at or below what was written (replays)
        self.trimmed_bytes = 0    # dropped above the savepoint at resets
        self.gc_files = 0
        self.parts = 0            # parts of large transactions received
        self._spill: _Spill | None = None
        self._ddl_unsaved = False
        self._last_save_s = 0.0
        self._last_gc_s = 0.0

    # -- protocol -----------------------------------------------------------------------
    def reset(self) -> Checkpoint:
        """Reopen the directory and make it end at the durable checkpoint."""
        if self.binlogger is not None:
            self.binlogger.close()
            self.binlogger = None
        self._drop_spill()
        binlogger = Binlogger(self.directory, self.max_file_size_bytes)
        try:
            loaded = self.store.load()
            cp = start_commit_ts(loaded, self.initial_commit_ts)
            if loaded is None:
                if binlogger.position != Pos(0, 0):
                    log.warning("file sink: no checkpoint, but %s already holds binlog files; "
                                "appending after them from commit_ts %d", self.directory,
                                cp.commit_ts)
                self.store.save(cp)  # bounds the crash window from the first record on
            else:
                self.trimmed_bytes += self._trim_above(binlogger, cp.commit_ts)
        except BaseException:
            binlogger.close()
            raise
        self.binlogger = binlogger
        self.written_ts = cp.commit_ts
        self.schema_version = cp.schema_version
        self.saved = cp
        self._ddl_unsaved = False
        now = self.clock()
        self._last_save_s = now
        self._gc(now, force=True)
        return cp

    def apply(self, items: list[tuple[int, bytes | RecordPart | None, int]]) -> int:
        """Append the records of ``items`` (commit order); save when due. A
        :class:`RecordPart` is spilled; its transaction's record is appended at its last
        part (module doc)."""
        binlogger = self._open()
        payloads = []
        last_ts, version, ddl = self.written_ts, self.schema_version, False
        for commit_ts, record, schema_version in items:
            if commit_ts <= last_ts:
                self.skipped += 1
                continue
            if type(record) is RecordPart:
                self._write(binlogger, payloads)  # the records before it first
                if not self._add_part(binlogger, commit_ts, record):
                    continue  # commit_ts moves at the last part only
                record = None  # appended
            last_ts = commit_ts
            version = max(version, schema_version)
            if record is not None:
                payloads.append(record)
                ddl = ddl or is_ddl_record(record)
        self._write(binlogger, payloads)
        self.written_ts, self.schema_version = last_ts, version
        self._ddl_unsaved = self._ddl_unsaved or ddl
        self._maybe_save(self.clock())
        return self.written_ts

    def idle(self) -> int:
        """Nothing new: save when due, GC when due."""
        self._open()
        now = self.clock()
        self._maybe_save(now)
        self._gc(now)
        return self.written_ts

    def close(self) -> Checkpoint:
        """Sync, save the final checkpoint (``consistent = true``), close the files. A
        large transaction still in parts is not in the checkpoint: dropped (replayed)."""
        binlogger = self._open()
        self._drop_spill()
        binlogger.sync()
        cp = Checkpoint(self.written_ts, consistent=True, schema_version=self.schema_version)
        self.store.save(cp)
        self.saved = cp
        binlogger.close()
        self.binlogger = None
        return cp

    def checkpoint(self) -> Checkpoint:
        """What would be saved now (``written_ts``; not necessarily durable yet)."""
        return Checkpoint(self.written_ts, schema_version=self.schema_version)

    # -- what the pipeline's gate asks (tidb_binlog.drainer.pipeline.gated.SinkWriter) ----
    @property
    def is_open(self) -> bool:
        return self.binlogger is not None

    @property
    def applied_ts(self) -> int:
        return self.written_ts

    def saved_checkpoint(self) -> Checkpoint:
        return start_commit_ts(self.store.load(), self.initial_commit_ts)

    def sink_status(self, last_apply_s: float) -> SinkStatus:
        st = self.status()
        return SinkStatus(commit_ts=st["commit_ts"], saved_commit_ts=st["saved_commit_ts"],
                          schema_version=st["schema_version"], applied_rows=st["records"],
                          last_apply_s=last_apply_s, ddl_jobs=st["ddl_records"],
                          savepoints=st["savepoints"],
                          extra={k: v for k, v in st.items()
                                 if k not in ("commit_ts", "saved_commit_ts", "schema_version",
                                              "savepoints")})

    def status(self) -> dict:
        b = self.binlogger
        return {"commit_ts": self.written_ts, "saved_commit_ts": self.saved.commit_ts,
                "schema_version": self.schema_version, "records": self.records,
                "ddl_records": self.ddl_records, "skipped": self.skipped,
                "trimmed_bytes": self.trimmed_bytes, "gc_files": self.gc_files,
                "parts": self.parts,
                "spilled_bytes": self._spill.size if self._spill is not None else 0,
                "position": tuple(b.position) if b is not None else None,
                "savepoints": getattr(self.store, "saves", 0)}

    # -- internals --------------------------------------------------------------------------
    def _open(self) -> Binlogger:
        if self.binlogger is None:
            raise StorageError("the file sink is not open: reset() it first")
        return self.binlogger

    def _write(self, binlogger: Binlogger, payloads: list[bytes]) -> None:
        """Append whole records (and empty ``payloads``)."""
        if not payloads:
            return
        binlogger.write_many(payloads)
        self.records += len(payloads)
        self.ddl_records += sum(map(is_ddl_record, payloads))
        payloads.clear()

    def _add_part(self, binlogger: Binlogger, commit_ts: int, part: RecordPart) -> bool:
        """Spill one part; at the last one append the record. Whether it was the last."""
        spill = self._spill
        if spill is not None and spill.commit_ts != commit_ts:
            raise ProtocolError(f"file sink: a part of the transaction at commit_ts {commit_ts} "
                                f"arrived while the one at {spill.commit_ts} had {spill.parts} "
                                "part(s) and no last one; the keeper's chunks are out of order")
        expected = spill.parts + 1 if spill is not None else 1
        if part.chunk != expected:
            raise ProtocolError(f"file sink: part {part.chunk} of the transaction at commit_ts "
                                f"{commit_ts} arrived, part {expected} was expected")
        if spill is None:
            spill = self._spill = _Spill(self.directory_path / SPILL_FILE, commit_ts)
        spill.add(part.events)
        self.parts += 1
        if not part.last:
            return False
        self._spill = None
        try:
            if spill.size:
                spill.file.seek(0)
                binlogger.write_streamed(record_head(commit_ts, spill.size), spill.file,
                                         spill.size)
                self.records += 1
        finally:
            spill.discard()
        return True

    def _drop_spill(self) -> None:
        """Forget a large transaction half received (a reset: the replay brings it again);
        a spill file left by a crash goes too."""
        if self._spill is not None:
            self._spill.discard()
            self._spill = None
        else:
            _remove_spill(self.directory_path / SPILL_FILE)

    @property
    def directory_path(self) -> Path:
        return Path(self.directory)

    def _maybe_save(self, now: float) -> None:
        if self.written_ts == self.saved.commit_ts and not self._ddl_unsaved:
            return
        if not self._ddl_unsaved and now - self._last_save_s < self.save_interval_s:
            return
        self.binlogger.sync()  # the savepoint may only point at durable records
        cp = self.checkpoint()
        self.store.save(cp)
        self.saved, self._last_save_s, self._ddl_unsaved = cp, now, False

    def _gc(self, now: float, force: bool = False) -> None:
        if self.retention_s <= 0 or (not force and now - self._last_gc_s < self.gc_interval_s):
            return
        self._last_gc_s = now
        removed = self.binlogger.gc_by_time(self.retention_s)
        self.gc_files += len(removed)

    def _trim_above(self, binlogger: Binlogger, commit_ts: int) -> int:
        """Make the files end just after the last record at or below ``commit_ts``."""
        above = 0
        cut = None
        for suffix, _ in reversed(segments(binlogger.dir)):
            last_le = None
            # a large record is CRC-checked in blocks and only its top level read
            for pos, payload in walk(binlogger.dir, Pos(suffix, 0), single_segment=True,
                                     inline_max=_TRIM_INLINE_MAX):
                try:
                    ts = record_commit_ts(payload)
                except ProtocolError as exc:
                    raise StorageError(f"the record ending at {pos} in {binlogger.dir} is not "
                                       f"a pb binlog ({exc.message}); the file sink's directory "
                                       "holds foreign files: move them away") from exc
                if ts <= commit_ts:
                    last_le = pos
                else:
                    above += 1
            cut = last_le if last_le is not None else Pos(suffix, 0)
            if last_le is not None:
                break
        if not above:
            return 0
        dropped = binlogger.truncate_to(cut)
        binlogger.sync()
        log.warning("file sink: dropped %d record(s) (%d bytes) written after the checkpoint "
                    "%d; they are written again from the replay", above, dropped, commit_ts)
        return dropped


class BinlogFileSink(GatedSink):
    """The file sink as the pipeline's :class:`~tidb_binlog.drainer.pipeline.sink.Sink`:
    a :class:`FileSink` behind the pipeline's gate
    (:class:`~tidb_binlog.drainer.pipeline.gated.GatedSink`)."""

    who = "file sink"

    @property
    def files(self) -> FileSink:
        return self.writer
