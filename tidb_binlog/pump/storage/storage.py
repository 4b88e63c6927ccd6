"""The pump's durable, ordered binlog storage (TiDB Binlog's ``Append``).

:class:`Storage` implements :class:`~tidb_binlog.pump.storage.protocol.PumpStorage`,
what the pump process asks of a storage (the in-memory test storage implements it too).

Directory layout under ``data_dir``: ``value/NNNNNN.vlog`` (:mod:`.vlog`), ``kv/``
(LevelDB index, :mod:`.index`), ``.lock`` (``flock``: one process per data dir).

Write path, per binlog: encode + frame in the caller's thread → group commit
(:mod:`.group_commit`: one write + one fdatasync per group; the caller returns
once durable) → indexer (:mod:`.chaser`: one LevelDB batch per group with the
headPointer, slow-chaser fallback) → sorter (:mod:`.sorter`) → ``max_commit_ts``.

Write path for an event loop (the gRPC servicer): :meth:`Storage.write_binlog_async`
does the same checks and framing, and returns an ``asyncio.Future`` that the
group-commit writer settles after the group's fdatasync.

Read path (:mod:`.reader`): :meth:`Storage.pull_commit_binlogs` serves commits
(filled with their prewrite's fields) and fake binlogs in ``(since,
max_commit_ts]``; a start below ``gc_ts`` raises ``PurgedError``.

Recovery on open: the value log truncates a torn tail and skips corrupt
records; then every record from ``min(headPointer, handlePointer)`` is
re-indexed (idempotent) and those from ``handlePointer`` re-fed to the sorter,
which ignores commits at or below the persisted ``maxCommitTS``.

Missing commits (:mod:`.missing_commits`): a prewrite still unmatched
``max_txn_timeout_s`` after it was stored is looked up through the ``resolver``
(committed → the storage writes the Commit itself; rolled back → dropped).
GC and the disk-space guard: :mod:`.gc`.

Duplicate Prewrites: a pump client whose attempt hit its deadline while the pump was
still receiving or fsyncing a big Prewrite sends the same Prewrite again (to this pump
or the next). Each Prewrite is remembered as ``start_ts -> (size, crc32c, its group)``
until its Commit or Rollback arrives (at most ``_MAX_TRACKED_PREWRITES``, oldest
forgotten first). A Prewrite with the same start_ts, size and checksum as one that is
durable is acknowledged at once; as one still in flight, once that one's group is
durable; nothing is written twice (``binlog_pump_storage_duplicate_prewrite_count``).
A different payload under the same start_ts (never sent by TiDB) is stored as before,
the later one winning in the index; after a restart the memory is empty, so a retry
that arrives then is stored again (served once all the same: the index keeps one
pointer per start_ts). TiDB's pump stores every copy it receives.

Large payloads (at least ``LARGE_RECORD_BYTES``) are framed as ``(header, payload)``
and appended with ``writev`` from the caller's buffer (see :mod:`.group_commit`): no
framed copy of a 200 MB Prewrite. A payload held in a file (the streaming write's spill,
:meth:`Storage.write_binlog_file_async`) is framed as ``(header, FileRange)`` and the
value log copies it from that file (``copy_file_range``): never in memory.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import google_crc32c
from google.protobuf.message import DecodeError

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef
from tidb_binlog.errors import ProtocolError, PurgedError, StorageError
from tidb_binlog.pump.storage import index as ix
from tidb_binlog.pump.storage.chaser import Indexer
from tidb_binlog.pump.storage.gc import DiskGuard, GarbageCollector
from tidb_binlog.pump.storage.group_commit import GroupCommitter, record_size
from tidb_binlog.pump.storage.metrics import StorageMetrics, default_metrics
from tidb_binlog.pump.storage.missing_commits import MissingCommits
from tidb_binlog.pump.storage.reader import CommitReader
from tidb_binlog.pump.storage.sorter import Sorter
from tidb_binlog.pump.storage.vlog import ValueLog
from tidb_binlog.pump.storage.vlog_record import ValuePointer, payload_crc, record_header
from tidb_binlog.pump.storage.vlog_segment import FileRange
from tidb_binlog.tso import extract_physical

__all__ = ["StorageOptions", "Storage"]

log = logging.getLogger(__name__)

_PREWRITE, _COMMIT, _ROLLBACK = bl.BinlogType.PREWRITE, bl.BinlogType.COMMIT, bl.BinlogType.ROLLBACK
_SEAL_ON_CLOSE_BYTES = 50 * 1024
# A payload this large is appended from the caller's buffer with a separate header
# (writev) instead of being copied into a framed record.
LARGE_RECORD_BYTES = 1 << 20
_MAX_TRACKED_PREWRITES = 100_000  # start_ts remembered for duplicate detection
_CRC_CHUNK_BYTES = 1 << 20


def _checksum(payload) -> int:
    """crc32c of a payload; a memoryview is summed in 1 MiB pieces (the checksum
    library takes only ``bytes``), so a large one is never copied whole."""
    if isinstance(payload, bytes):
        return payload_crc(payload)
    crc = 0
    for off in range(0, len(payload), _CRC_CHUNK_BYTES):
        crc = google_crc32c.extend(crc, bytes(payload[off:off + _CRC_CHUNK_BYTES]))
    return crc


@dataclass(frozen=True)
class StorageOptions:
    sync_log: bool = True  # False for tests only: no fdatasync, a power loss may lose acked writes
    value_log_file_size_bytes: int = 500 * 2**20
    stop_write_at_available_space_bytes: int = 10 * 2**30
    max_txn_timeout_s: float = 600.0  # a prewrite unmatched this long is resolved
    kv_chan_cap: int = 1 << 20  # records in flight to the indexer, bounded as kv_chan_cap/1024 groups
    slow_write_threshold_s: float = 1.0
    gc_margin_s: float = 600.0
    kv_forward_timeout_s: float = 1.0  # queue full this long -> slow chaser on
    resolve_interval_s: float = 1.0  # how often unmatched prewrites are checked
    max_group_bytes: int = 1 << 20
    commit_delay_s: float = 0.001  # concurrent writers: wait for more per group (group_commit.py)
    # index keys (ts) of damaged binlogs an operator chose to give up: pulls skip them
    # (logged once) instead of stopping with DamagedBinlog; see the README
    skip_damaged_ts: frozenset[int] | tuple[int, ...] = frozenset()
    kv: ix.KVOptions = field(default_factory=ix.KVOptions)


def _item_of(payload: bytes) -> tuple[int, int, int, int]:
    """``(key_ts, start_ts, commit_ts, tp)`` of a stored payload.

    A payload that passed its CRC but is not a binlog (only possible if a caller
    passed a ``payload`` that does not match its ``binlog``) yields ``(0, 0, 0,
    ROLLBACK)``: never indexed, ignored by the sorter, logged.
    """
    b = bl.Binlog()
    try:
        b.ParseFromString(payload)
    except DecodeError:
        log.error("value log holds an undecodable payload of %d bytes; ignored", len(payload))
        return 0, 0, 0, _ROLLBACK
    key = b.start_ts if b.tp == _PREWRITE else b.commit_ts
    return key, b.start_ts, b.commit_ts, b.tp


def _ts_of(payload: bytes) -> int:
    _, s, c, _ = _item_of(payload)
    return max(s, c)


class Storage:
    """Durable binlog storage for one pump; see the module docstring. Thread-safe."""

    # write_binlog stores ``payload`` as given and reads only tp/start_ts/commit_ts of
    # ``binlog``: the node may pass a header-only Binlog for a large payload
    stores_payload = True

    def __init__(self, data_dir, options: StorageOptions = StorageOptions(), *, resolver=None,
                 current_ts=None, clock=time.monotonic, metrics: StorageMetrics | None = None):
        self.dir = Path(data_dir)
        self.options = options
        self._clock = clock
        self.metrics = m = metrics if metrics is not None else default_metrics()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._lock_dir()
        self._cond = threading.Condition()
        self._closed = False
        self.disk_guard = DiskGuard(self.dir, options.stop_write_at_available_space_bytes, m)
        vlog = index = None
        try:
            self.vlog = vlog = ValueLog(self.dir / "value",
                                        file_size_bytes=options.value_log_file_size_bytes,
                                        sync=options.sync_log, ts_of=_ts_of,
                                        on_skip=self._on_skip)
            self.index = index = ix.Index(str(self.dir / "kv"), options.kv)
            self._gc = GarbageCollector(self.index, self.vlog, m, gc_margin_s=options.gc_margin_s,
                                        gc_ts=self.index.get_int(ix.GC_TS_KEY))
            self._reader = CommitReader(self.index, self.vlog, m,
                                        skip_damaged_ts=options.skip_damaged_ts)
            head = self._recover()
        except BaseException:
            self._release(index, vlog)
            raise
        m.gc_ts.set(extract_physical(self._gc.gc_ts))
        m.max_commit_ts.set(extract_physical(self._max_commit_ts))
        self._to_disk_s = m.write_duration_s.labels("to_disk")
        self._fsync_s = m.write_duration_s.labels("fsync")
        # start_ts -> (record size, payload crc, group) of Prewrites not finished yet
        self._prewrites: OrderedDict[int, tuple[int, int, object]] = OrderedDict()
        self._dedupe_lock = threading.Lock()
        self._committer = GroupCommitter(self._append, self._forward, metrics=m,
                                         max_group_bytes=options.max_group_bytes,
                                         slow_write_threshold_s=options.slow_write_threshold_s,
                                         commit_delay_s=options.commit_delay_s)
        self._indexer = Indexer(self.vlog, self._apply, head=head, io_lock=self._committer.io_lock,
                                decode=_item_of, metrics=m,
                                queue_groups=max(1, options.kv_chan_cap // 1024),
                                forward_timeout_s=options.kv_forward_timeout_s,
                                on_idle=self._flush_meta)
        self._missing = MissingCommits(resolver, pending=self._pending, drop=self._drop,
                                       get_binlog=self.get_binlog, write_binlog=self.write_binlog,
                                       metrics=m, max_txn_timeout_s=options.max_txn_timeout_s,
                                       clock=clock, current_ts=current_ts)
        self._missing.start(options.resolve_interval_s)

    # -- open / close --------------------------------------------------------------------
    def _lock_dir(self) -> int:
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"data dir {self.dir} is in use by another pump (lock file "
                               f"{self.dir / '.lock'} is held); stop that process or choose "
                               "another data-dir") from exc
        return fd

    def _release(self, index: ix.Index | None, vlog: ValueLog | None) -> None:
        """Close what was opened (None: not opened yet) and release the data dir."""
        if index is not None:
            index.close()
        if vlog is not None:
            vlog.close(seal_min_bytes=1 << 62)  # a no-op after close() sealed it
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def _recover(self) -> ValuePointer:
        """Rebuild index and sorter from the log; return the new head pointer."""
        first = ValuePointer(self.vlog.segments()[0][0], 0)
        end = self.vlog.end()
        # A pointer past the end means the tail it covered was cut as torn or corrupt.
        stored_head = self.index.get_pointer(ix.HEAD_POINTER_KEY)
        # Every indexed record lies below the stored head pointer: only a cut below it (a
        # damaged acknowledged tail, not an ordinary torn, unindexed one) can leave entries
        # pointing at bytes that are gone.
        if stored_head is not None and (stored_head > end or any(
                stored_head > ValuePointer(fid, cut) for fid, cut in self.vlog.truncations)):
            self._mark_entries_past_cuts(end)
        head = min(stored_head or first, end)
        handle = min(self.index.get_pointer(ix.HANDLE_POINTER_KEY) or first, end)
        self._max_commit_ts = self.index.get_int(ix.MAX_COMMIT_TS_KEY)
        self._sorter = Sorter(self._max_commit_ts, handle)
        self._meta_version = self._meta_saved = 0  # bumped per advance / last persisted
        batch: list[tuple[bytes, bytes]] = []
        now = self._clock()
        for ptr, nxt, payload in self.vlog.scan(min(head, handle), end):
            key_ts, start_ts, commit_ts, tp = _item_of(payload)
            if ptr >= head and key_ts:
                batch.append((ix.ts_key(key_ts), ptr.encode()))
            if ptr >= handle:
                self._sorter.push(start_ts, commit_ts, tp, now, nxt)
            if len(batch) >= 4096:
                self.index.write(batch, {})
                batch = []
        self.index.write(batch, {ix.HEAD_POINTER_KEY: end.encode()})
        with self._cond:
            self._advance()
        self._flush_meta()
        if not self._sorter.all_matched():
            log.info("storage %s: %d prewrites wait for their commit after recovery", self.dir,
                     self._sorter.waiting_count())
        return end

    def _mark_entries_past_cuts(self, end: ValuePointer) -> None:
        """Mark lost the index entries that point into a cut tail or past the log's end.

        The indexer writes an entry only for a durable record, so such an entry names an
        acknowledged binlog whose bytes are gone (a damaged tail, a removed file). Left in
        place it would point at whatever is appended there next, and a pull would serve a
        new binlog under the old ts; dropped, the binlog would vanish from the stream
        unnoticed. Rewritten to :data:`~.index.LOST`, a pull stops there with
        DamagedBinlog (``reader.py``), and a lost Commit written again by the resolver
        (its Prewrite survived) replaces the marker. One pass over the index, only after
        a cut below the stored head pointer."""
        cuts = dict(self.vlog.truncations)
        lost = [ts for ts, ptr in self.index.iter_range(-1, (1 << 64) - 1)
                if ptr != ix.LOST and (ptr >= end or ptr.offset >= cuts.get(ptr.fid, 1 << 63))]
        if not lost:
            return
        self.index.write([(ix.ts_key(ts), ix.LOST.encode()) for ts in lost], {}, sync=True)
        self.metrics.error_count.labels("cut_on_recovery").inc(len(lost))
        shown = ", ".join(str(ts) for ts in lost[:10])
        log.error("storage %s: %d index entries pointed at value-log bytes that were cut on "
                  "recovery (ts %s%s); marked lost: a pull stops there with DamagedBinlog (a "
                  "lost Commit whose Prewrite survived is written again through the resolver)",
                  self.dir, len(lost), shown, ", ..." if len(lost) > 10 else "")

    def close(self, *, drain_index: bool = True) -> None:
        """Finish writes, index everything (unless ``drain_index=False``, a test knob
        that leaves the index behind as a crash would), seal the active file if it
        holds >= 50 KiB, close LevelDB and release the data dir."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._missing.stop()
        self._committer.close()
        self._indexer.stop(drain=drain_index)
        self._gc.close()
        if drain_index:
            self._flush_meta()
        self.vlog.close(seal_min_bytes=_SEAL_ON_CLOSE_BYTES if drain_index else 1 << 62)
        self._release(self.index, self.vlog)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- writing ---------------------------------------------------------------------------
    def write_binlog(self, binlog: bl.Binlog, payload: bytes | memoryview | None = None
                     ) -> None:
        """Store one binlog durably (see the module docstring). Thread-safe.

        ``payload`` (any bytes-like; a memoryview is not copied) is ``binlog``
        serialized, when the caller has it."""
        self._committer.wait(self._enqueue(*self._framed(binlog, payload)))

    def write_binlog_async(self, binlog: bl.Binlog, payload: bytes | memoryview | None = None):
        """:meth:`write_binlog` for an event loop: checks and frames the binlog now
        (raising the same errors), then returns an ``asyncio.Future`` of the running
        loop that completes once the record is durable. Call it on the loop's thread."""
        group = self._enqueue(*self._framed(binlog, payload))
        return self._committer.follow_async(group, asyncio.get_running_loop())

    def write_binlog_file_async(self, binlog: bl.Binlog, source: FileRange, crc: int):
        """:meth:`write_binlog_async` of a payload held in a file (the streaming write's
        spill): ``source`` is appended from that file by the value log (no copy in
        memory), ``crc`` is its crc32c, already checked by the caller. Same checks,
        duplicate-Prewrite dedupe, group commit and fdatasync before the future
        completes. The file must stay unchanged until then."""
        group = self._enqueue(*self._framed(binlog, source, crc=crc))
        return self._committer.follow_async(group, asyncio.get_running_loop())

    def _enqueue(self, item: tuple, ts: int, crc: int):
        """Queue a framed binlog, or find the same Prewrite already stored or in flight
        (see "Duplicate Prewrites" in the module docstring); the group to wait for."""
        size, start_ts, tp = record_size(item[0]), item[2], item[4]
        with self._dedupe_lock:
            if tp != _PREWRITE:
                self._prewrites.pop(start_ts, None)
                return self._committer.enqueue(item, ts)
            seen = self._prewrites.get(start_ts)
            if seen is not None and seen[0] == size and seen[1] == crc \
                    and seen[2].error is None:
                self.metrics.duplicate_prewrite_count.inc()
                log.info("prewrite start_ts=%d (%d bytes) is already %s: acknowledged without "
                         "writing it again (a client retried after its deadline)", start_ts,
                         size, "stored" if seen[2].done.is_set() else "being written")
                return seen[2]
            group = self._committer.enqueue(item, ts)
            self._prewrites[start_ts] = (size, crc, group)
            if len(self._prewrites) > _MAX_TRACKED_PREWRITES:
                self._prewrites.popitem(last=False)
            return group

    def _framed(self, binlog: bl.Binlog, payload, crc: int | None = None
                ) -> tuple[tuple, int, int]:
        """Validate ``binlog`` and frame it: ``(group-commit item, its max ts, payload
        crc)``; a large payload's record is ``(header, payload)``, not a copy (a
        :class:`FileRange` payload always, with its ``crc`` given)."""
        tp, start_ts, commit_ts = binlog.tp, binlog.start_ts, binlog.commit_ts
        if tp not in (_PREWRITE, _COMMIT, _ROLLBACK):
            raise ProtocolError(f"binlog type {tp} (start_ts {start_ts}) is not stored by a pump; "
                                "only Prewrite, Commit and Rollback are")
        if start_ts <= 0 or (tp == _COMMIT and commit_ts <= start_ts):
            # A zero start_ts (the pump client's probe) would wait in the sorter forever.
            raise ProtocolError(f"binlog type {tp} with start_ts {start_ts}, commit_ts {commit_ts} "
                                "is not storable: start_ts must be positive and a Commit's "
                                "commit_ts above it (drop probes before the storage)")
        if tp == _PREWRITE:
            # Only new transactions are refused: the small Commit / Rollback of a stored
            # Prewrite must get in, or that Prewrite would hold every later commit back
            # (an orphan stalling the sorter) even after space is freed.
            self.disk_guard.check()
        if payload is None:
            payload = binlog.SerializeToString()
        key_ts = start_ts if tp == _PREWRITE else commit_ts
        if crc is None:
            crc = _checksum(payload)
        if len(payload) >= LARGE_RECORD_BYTES or isinstance(payload, FileRange):
            record = (record_header(len(payload), crc), payload)
        else:
            record = record_header(len(payload), crc) + bytes(payload)
        return ((record, key_ts, start_ts, commit_ts, tp),
                commit_ts if commit_ts > start_ts else start_ts, crc)

    def _append(self, buf: bytes, max_ts: int) -> ValuePointer:
        fid = self.vlog.active_fid
        start = self.vlog.append(buf, max_ts)
        self._to_disk_s.observe(self.vlog.last_write_s)
        if self.options.sync_log:
            self._fsync_s.observe(self.vlog.last_sync_s)
        if start.fid != fid:
            log.info("value log rotated to file %06d.vlog", start.fid)
        return start

    def _forward(self, start: ValuePointer, items: list[tuple]) -> None:
        # the indexer needs each record's size, not its bytes: a written payload is not
        # kept alive while the group waits in the indexer's queue
        self._indexer.forward(start, [(record_size(it[0]), *it[1:]) for it in items])

    def _apply(self, entries: list[tuple], head: ValuePointer) -> None:
        """Indexer thread: one LevelDB batch, then feed the sorter."""
        meta = {ix.HEAD_POINTER_KEY: head.encode()}
        with self._cond:
            version = self._meta_version
            if version != self._meta_saved:
                meta.update(self._meta_values())
        kv = [(ix.ts_key(e[0]), e[4].encode()) for e in entries if e[0]]
        try:
            self.index.write(kv, meta)
        except StorageError:
            self.metrics.error_count.labels("batch_write_kv").inc()
            raise
        self._meta_saved = version  # only the indexer thread writes meta once running
        now = self._clock()
        with self._cond:
            push = self._sorter.push
            for e in entries:
                push(e[1], e[2], e[3], now, e[5])
            self._advance()

    def _advance(self) -> None:
        """Pop the sorter; publish a new max_commit_ts (caller holds _cond)."""
        new_max = self._sorter.pop_ready()
        if new_max is not None:
            self._max_commit_ts = new_max
            self._meta_version += 1
            self.metrics.max_commit_ts.set(extract_physical(new_max))
            self._cond.notify_all()

    def _meta_values(self) -> dict[bytes, bytes]:
        vals = {ix.MAX_COMMIT_TS_KEY: ix.Index.int_value(self._max_commit_ts)}
        if self._sorter.handle_pos is not None:
            vals[ix.HANDLE_POINTER_KEY] = self._sorter.handle_pos.encode()
        return vals

    def _flush_meta(self) -> None:
        with self._cond:
            version = self._meta_version
            if version == self._meta_saved:
                return
            meta = self._meta_values()
        self.index.write([], meta)
        self._meta_saved = version

    def _on_skip(self, path: str, offset: int, nbytes: int) -> None:
        self.metrics.corruption_skipped_bytes.inc(nbytes)

    # -- reading ---------------------------------------------------------------------------
    @property
    def max_commit_ts(self) -> int:
        return self._max_commit_ts

    @property
    def gc_ts(self) -> int:
        return self._gc.gc_ts

    def pull_commit_binlogs(self, since_commit_ts: int, max_bytes: int = 4 << 20,
                            max_count: int = 10_000) -> list[tuple[int, bytes]]:
        """``(commit_ts, payload)`` of commits and fake binlogs in ``(since, max_commit_ts]``."""
        return self.pull_commits(since_commit_ts, max_bytes, max_count)[0]

    def pull_commits(self, since_commit_ts: int, max_bytes: int = 4 << 20,
                     max_count: int = 10_000, *, ref_above: int = 0, node_id: str = ""
                     ) -> tuple[list[tuple[int, bytes | BinlogRef]], int]:
        """:meth:`pull_commit_binlogs` plus the position examined up to (every binlog
        served at or below it is in the batch or at or below ``since``): a caller pulls
        again from there, past keys that serve nothing (prewrites, orphan commits).
        Raises ``DamagedBinlog`` at a damaged acknowledged binlog (``reader.py``).
        With ``ref_above > 0`` a Commit of that many served bytes or more comes as a
        ``BinlogRef`` naming ``node_id`` (at most one per batch, last; read it with
        :meth:`read_payload`)."""
        gc_ts, upto = self._gc.gc_ts, self._max_commit_ts
        if self._closed:
            raise StorageError(f"storage {self.dir} is closed")
        if since_commit_ts < gc_ts:
            raise PurgedError(
                f"binlogs up to gc_ts {gc_ts} were purged by GC; cannot serve from commit_ts "
                f"{since_commit_ts}: restart the drainer from a checkpoint at or above {gc_ts}",
                requested_ts=since_commit_ts, gc_ts=gc_ts)
        return self._reader.pull(since_commit_ts, upto, max_bytes, max_count,
                                 ref_above=ref_above, node_id=node_id)

    def read_payload(self, commit_ts: int, offset: int, size: int) -> bytes | bytearray:
        """Bytes ``[offset, offset+size)`` of the payload a pull serves at ``commit_ts``
        (what a ``BinlogRef`` names), read in place from the value log
        (``reader.CommitReader.read_payload``). PurgedError at or below gc_ts."""
        if self._closed:
            raise StorageError(f"storage {self.dir} is closed")
        gc_ts = self._gc.gc_ts
        if commit_ts <= gc_ts:
            raise PurgedError(
                f"the binlog at commit_ts {commit_ts} was purged by GC (gc_ts {gc_ts}): "
                f"restart the drainer from a checkpoint at or above {gc_ts}",
                requested_ts=commit_ts, gc_ts=gc_ts)
        return self._reader.read_payload(commit_ts, offset, size)

    def wait_for_commit(self, above_ts: int, timeout_s: float) -> int:
        """Block until ``max_commit_ts > above_ts`` (or timeout / close); return it."""
        with self._cond:
            self._cond.wait_for(lambda: self._max_commit_ts > above_ts or self._closed,
                                timeout=timeout_s)
            return self._max_commit_ts

    def get_binlog(self, ts: int) -> bl.Binlog | None:
        """The stored binlog under index key ``ts`` (P by start_ts, C by commit_ts)."""
        return self._reader.get_binlog(ts)

    def all_matched(self) -> bool:
        with self._cond:
            return self._sorter.all_matched()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every durable record is indexed and fed to the sorter."""
        return self._indexer.wait_caught_up(timeout_s)

    def pause_indexing(self) -> None:
        """Test knob: stall the indexer (as a blocked LevelDB would)."""
        self._indexer.pause()

    def resume_indexing(self) -> None:
        self._indexer.resume()

    # -- missing commits (:mod:`.missing_commits`) -------------------------------------------
    def resolve_pending(self) -> int:
        """One round of missing-commit resolution (a background thread runs it every
        ``resolve_interval_s``); returns how many prewrites it settled."""
        return self._missing.resolve_pending()

    def _pending(self, now_s: float) -> list:
        with self._cond:
            return self._sorter.pending(now_s)

    def _drop(self, start_ts: int) -> None:
        with self._cond:
            self._sorter.resolve(start_ts, None)
            self._advance()

    # -- GC and disk -----------------------------------------------------------------------
    def gc(self, ts: int, *, wait: bool = False) -> None:
        """Persist gc_ts = ts, then delete (in the background unless ``wait``) sealed vlog
        files whose max ts <= ts - gc_margin and index keys at or below that
        (:mod:`.gc`)."""
        self._gc.request(ts, self._max_commit_ts, wait=wait)

    def available_space_bytes(self) -> int:
        """Free bytes of the data dir's file system (polled at most every 3 s)."""
        return self.disk_guard.available_bytes()

    def disk_guard_message(self) -> str:
        """The guard's refusal while Prewrites are refused for lack of space, else ""
        (for the pump's ``/status`` and its registry record)."""
        return self.disk_guard.refusal()

    def stats(self) -> dict:
        with self._cond:
            waiting = self._sorter.waiting_count()
        segs = self.vlog.segments()
        return {
            "max_commit_ts": self._max_commit_ts, "gc_ts": self._gc.gc_ts,
            "done_gc_ts": self._gc.done_gc_ts, "pending_prewrites": waiting,
            "vlog_files": len(segs), "vlog_bytes": sum(s[1] for s in segs),
            "head_pointer": tuple(self._indexer.head), "slow_chaser_on": self._indexer.chasing,
            "writes": self._committer.records_written, "groups": self._committer.groups_written,
            "fsyncs": self.vlog.sync_count, "available_bytes": self.available_space_bytes(),
            "capacity_bytes": self.disk_guard.capacity,
        }

