"""The pump's value log: append-only segment files of framed binlog records.

The record format, the footer and the value pointer are :mod:`.vlog_record`'s (layout
byte-compatible with TiDB Binlog's ``pump/storage/log.go``); one segment file's I/O
(open, recover, seal, the appending writes) is :mod:`.vlog_segment`'s; the block-cached
reader of a pull is :mod:`.vlog_blocks`'s. This module owns :class:`ValueLog`: the
set of segments, the active one, rotation, appends, reads by pointer, scans and GC.
The names of those modules are importable from here as well.

Rules:

- Only the highest file id is *active* (appended to); every other file is
  *sealed* with a footer holding the largest ``max(start_ts, commit_ts)`` of its
  records, which is what GC compares against.
- :meth:`ValueLog.append` writes one pre-framed buffer (a whole group) with one
  ``write`` and, when ``sync`` is set, one ``os.fdatasync``. A group never spans
  two files: rotation happens before the group once the active file has reached
  ``file_size_bytes``.
- On open every unsealed file is validated record by record (magic, length,
  CRC). A bad record followed by a valid one is *skipped*: the scanner jumps to
  the next magic whose record checks out, and the skipped byte range is logged
  and counted (``binlog_pump_storage_corruption_skipped_bytes``). A bad region
  that reaches the end of the file is a torn tail: it is truncated (and
  fsynced). Skipped bytes are never served: reads re-check magic and CRC and
  raise :class:`~tidb_binlog.errors.CorruptRecord`.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import google_crc32c

from tidb_binlog.errors import CorruptRecord, StorageError
from tidb_binlog.pump.storage.vlog_blocks import BLOCK_READ_BYTES, BlockReader
from tidb_binlog.pump.storage.vlog_record import (
    FILE_END_MAGIC,
    FOOTER_SIZE,
    HEADER_SIZE,
    HEADER_STRUCT,
    POINTER_SIZE,
    RECORD_MAGIC,
    SEGMENT_NAME,
    ScanResult,
    ValuePointer,
    encode_record,
    payload_crc,
    record_header,
    scan_segment,
)
from tidb_binlog.pump.storage.vlog_segment import (
    FileRange,
    Segment,
    fsync_dir,
    open_segment,
    recover_max_ts,
    seal,
    truncate_tail,
    write_buffers,
)

__all__ = [
    "RECORD_MAGIC",
    "FILE_END_MAGIC",
    "HEADER_SIZE",
    "FOOTER_SIZE",
    "POINTER_SIZE",
    "READ_HINT_BYTES",
    "ValuePointer",
    "encode_record",
    "record_header",
    "payload_crc",
    "scan_segment",
    "ValueLog",
    "BlockReader",
    "BLOCK_READ_BYTES",
    "FileRange",
]

log = logging.getLogger(__name__)

READ_HINT_BYTES = 4096  # read() fetches header + this much in one pread
_crc = google_crc32c.value
_ScanResult = ScanResult  # its name before it moved to vlog_record


class ValueLog:
    """Segment files under ``dir_path``. One writer thread appends; readers use ``pread``.

    ``ts_of(payload) -> int`` gives a record's ``max(start_ts, commit_ts)``; it is
    used only when an unsealed file is scanned on open to recover its max ts.
    ``on_skip(path, offset, nbytes)`` is called once per corrupt region found.
    """

    def __init__(self, dir_path: str | os.PathLike, *, file_size_bytes: int, sync: bool,
                 ts_of, on_skip=None):
        self.dir = Path(dir_path)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file_size_bytes = file_size_bytes
        self.sync = sync
        self._ts_of = ts_of
        self._on_skip = on_skip or (lambda path, offset, nbytes: None)
        self._reported: set[tuple[int, int]] = set()
        self._lock = threading.Lock()  # guards _segments (GC vs readers vs rotation)
        self._segments: dict[int, Segment] = {}
        self._retired_fds: list[int] = []  # closed on close(): a reader may still hold one
        # (fid, new size) of every file whose torn tail was cut on open: index entries
        # pointing at or past the cut name records that are gone (the storage marks them lost)
        self.truncations: list[tuple[int, int]] = []
        self._wfd = -1
        self.sync_count = 0  # fdatasync calls made by append()
        self.last_write_s = self.last_sync_s = 0.0  # durations of the last append
        self._open_all()

    # -- open / recovery ---------------------------------------------------------
    def _open_all(self) -> None:
        fids = sorted(int(m.group(1)) for p in self.dir.iterdir()
                      if (m := SEGMENT_NAME.match(p.name)))
        for i, fid in enumerate(fids):
            self._open_segment(fid, last=(i == len(fids) - 1))
        if not fids or self._segments[fids[-1]].sealed:
            self._create(fids[-1] + 1 if fids else 1)
        else:
            active = self._segments[fids[-1]]
            self._active_fid = active.fid
            self._wfd = os.open(active.path, os.O_WRONLY)
            os.lseek(self._wfd, active.size, os.SEEK_SET)

    def _open_segment(self, fid: int, last: bool) -> None:
        path = self.dir / f"{fid:06d}.vlog"
        seg = open_segment(fid, path)
        self._segments[fid] = seg
        if seg.sealed:
            return
        size = seg.size
        res = ScanResult()
        recover_max_ts(seg, self._ts_of, res)
        self._report(seg, res)
        if res.valid_end < size:
            log.warning("value log %s: truncating torn tail at offset %d (%d bytes)",
                        path, res.valid_end, size - res.valid_end)
            truncate_tail(seg, res.valid_end)
            self.truncations.append((fid, res.valid_end))
        if not last:
            seal(seg)

    def _report(self, seg: Segment, res: ScanResult) -> None:
        for off, nbytes in res.skipped:
            if (seg.fid, off) not in self._reported:
                self._reported.add((seg.fid, off))
                log.error("value log %s: skipped %d corrupt bytes at offset %d", seg.path,
                          nbytes, off)
                self._on_skip(str(seg.path), off, nbytes)

    def _create(self, fid: int) -> None:
        path = self.dir / f"{fid:06d}.vlog"
        self._wfd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        rfd = os.open(path, os.O_RDONLY)
        fsync_dir(self.dir)
        with self._lock:
            self._segments[fid] = Segment(fid, path, 0, 0, False, rfd)
        self._active_fid = fid

    # -- writing (one writer thread) --------------------------------------------------
    @property
    def active_fid(self) -> int:
        return self._active_fid

    def end(self) -> ValuePointer:
        """The pointer just past the last durable record."""
        seg = self._segments[self.active_fid]
        return ValuePointer(seg.fid, seg.size)

    def rotate(self) -> None:
        """Seal the active file and start the next one."""
        seg = self._segments[self.active_fid]
        os.close(self._wfd)
        self._wfd = -1
        seal(seg)
        self._create(seg.fid + 1)

    def append(self, buf, max_ts: int) -> ValuePointer:
        """Append pre-framed records; return where they start. Durable on return if ``sync``.

        ``buf`` is one bytes-like, or a list of them written back to back with
        ``writev`` (a large payload is appended from the caller's buffer, uncopied);
        a :class:`FileRange` in the list is copied from its file."""
        seg = self._segments[self._active_fid]
        if seg.size >= self.file_size_bytes and seg.size > 0:
            self.rotate()
            seg = self._segments[self._active_fid]
        start = ValuePointer(seg.fid, seg.size)
        try:
            t0 = time.perf_counter()
            if isinstance(buf, list):
                nbytes = write_buffers(self._wfd, buf)
            else:
                nbytes = len(buf)
                view = memoryview(buf)
                written = 0
                while written < nbytes:
                    written += os.write(self._wfd, view[written:])
            t1 = time.perf_counter()
            if self.sync:
                os.fdatasync(self._wfd)
                self.sync_count += 1
            self.last_write_s, self.last_sync_s = t1 - t0, time.perf_counter() - t1
        except OSError as exc:
            # Leave no partial group behind: the caller fails the whole group.
            try:
                os.ftruncate(self._wfd, seg.size)
                os.lseek(self._wfd, seg.size, os.SEEK_SET)
            except OSError:
                log.exception("value log %s: cannot truncate a failed write", seg.path)
            size = len(buf) if not isinstance(buf, list) else sum(len(b) for b in buf)
            raise StorageError(f"value log {seg.path}: write of {size} bytes at offset "
                               f"{seg.size} failed: {exc}") from exc
        seg.size += nbytes
        if max_ts > seg.max_ts:
            seg.max_ts = max_ts
        return start

    # -- reading -------------------------------------------------------------------
    def _fd(self, fid: int) -> tuple[int, Segment]:
        with self._lock:
            seg = self._segments.get(fid)
        if seg is None:
            raise StorageError(f"value log file {fid:06d}.vlog does not exist (garbage collected?)")
        return seg.fd, seg

    def has_file(self, fid: int) -> bool:
        with self._lock:
            return fid in self._segments

    def _pread(self, fd: int, seg: Segment, nbytes: int, offset: int) -> bytes:
        try:
            return os.pread(fd, nbytes, offset)
        except OSError as exc:
            raise StorageError(f"value log {seg.path}: read of {nbytes} bytes at offset "
                               f"{offset} failed: {exc}") from exc

    def read(self, ptr: ValuePointer, *, size_hint_bytes: int = READ_HINT_BYTES,
             unless_prefix: bytes = b"") -> bytes | None:
        """The payload of the record at ``ptr``; raises CorruptRecord on a bad record.

        One ``pread`` of header + ``size_hint_bytes`` serves every record that fits
        (a second one fetches the rest of a bigger one). With ``unless_prefix``, a
        payload starting with it is not read further (nor CRC-checked): None.
        """
        raw, length, crc, fd, seg = self._first(ptr, size_hint_bytes)
        if unless_prefix and raw.startswith(unless_prefix, HEADER_SIZE):
            return None
        end = HEADER_SIZE + length
        if len(raw) >= end:
            payload = raw[HEADER_SIZE:end]
        else:  # read the payload whole again: one buffer, no joining copy of a big one
            del raw
            payload = self._pread(fd, seg, length, ptr.offset + HEADER_SIZE)
        return self._checked(payload, length, crc, seg, ptr)

    def read_first(self, ptr: ValuePointer, size_hint_bytes: int) -> tuple[bytes, bool]:
        """One ``pread`` of header + ``size_hint_bytes`` at ``ptr``: ``(payload, True)``
        when the whole record fits (CRC checked), else ``(its first bytes, False)``
        (magic and length checked, CRC not; :meth:`read` gets the whole)."""
        raw, length, crc, _, seg = self._first(ptr, size_hint_bytes)
        if len(raw) < HEADER_SIZE + length:
            return raw[HEADER_SIZE:], False
        return self._checked(raw[HEADER_SIZE:HEADER_SIZE + length], length, crc, seg, ptr), True

    def record_start(self, ptr: ValuePointer, nbytes: int) -> tuple[bytes, int, int]:
        """``(first bytes of the payload, payload length, crc)`` of the record at ``ptr``
        from one ``pread`` of header + ``nbytes`` (magic and length checked, CRC not):
        for reading a large record's layout without its body (``payload_ref.py``)."""
        raw, length, crc, _, _ = self._first(ptr, nbytes)
        return raw[HEADER_SIZE:HEADER_SIZE + length], length, crc

    def read_into(self, fid: int, offset: int, buf: memoryview) -> None:
        """Fill ``buf`` from file ``fid`` at ``offset`` with ``preadv`` (no intermediate
        ``bytes``); CorruptRecord if the file ends first."""
        fd, seg = self._fd(fid)
        done = 0
        while done < len(buf):
            try:
                n = os.preadv(fd, [buf[done:]], offset + done)
            except OSError as exc:
                raise StorageError(f"value log {seg.path}: read of {len(buf) - done} bytes "
                                   f"at offset {offset + done} failed: {exc}") from exc
            if n <= 0:
                raise CorruptRecord(f"value log {seg.path}: short read at offset "
                                    f"{offset + done} ({len(buf) - done} bytes missing)",
                                    path=str(seg.path), offset=offset)
            done += n

    def verify_record(self, ptr: ValuePointer, length: int, crc: int,
                      chunk_bytes: int = 4 << 20) -> None:
        """Check the CRC of the ``length``-byte payload at ``ptr`` reading it
        ``chunk_bytes`` at a time (a large record is never held whole); CorruptRecord
        on a mismatch."""
        fd, seg = self._fd(ptr.fid)
        start = ptr.offset + HEADER_SIZE
        got = 0
        for off in range(0, length, chunk_bytes):
            n = min(chunk_bytes, length - off)
            chunk = self._pread(fd, seg, n, start + off)
            if len(chunk) != n:
                got = -1
                break
            got = google_crc32c.extend(got, chunk)
            del chunk
        if got != crc:
            raise CorruptRecord(f"value log {seg.path}: checksum mismatch at offset {ptr.offset}",
                                path=str(seg.path), offset=ptr.offset)

    def _first(self, ptr: ValuePointer, size_hint_bytes: int):
        fd, seg = self._fd(ptr.fid)
        raw = self._pread(fd, seg, HEADER_SIZE + size_hint_bytes, ptr.offset)
        if len(raw) < HEADER_SIZE:
            raise CorruptRecord(f"value log {seg.path}: short header at offset {ptr.offset}",
                                path=str(seg.path), offset=ptr.offset)
        magic, length, crc = HEADER_STRUCT.unpack_from(raw)
        if magic != RECORD_MAGIC or length > seg.data_end - ptr.offset - HEADER_SIZE:
            raise CorruptRecord(f"value log {seg.path}: bad magic or length at offset {ptr.offset}",
                                path=str(seg.path), offset=ptr.offset)
        return raw, length, crc, fd, seg

    @staticmethod
    def _checked(payload: bytes, length: int, crc: int, seg: Segment, ptr: ValuePointer) -> bytes:
        if len(payload) != length or _crc(payload) != crc:
            raise CorruptRecord(f"value log {seg.path}: checksum mismatch at offset {ptr.offset}",
                                path=str(seg.path), offset=ptr.offset)
        return payload

    def block_reader(self, block_bytes: int = BLOCK_READ_BYTES) -> BlockReader:
        """A reader for one pass over records in (about) log order: see :class:`BlockReader`."""
        return BlockReader(self, block_bytes)

    def peek(self, ptr: ValuePointer, nbytes: int) -> bytes:
        """The first ``nbytes`` of the payload at ``ptr`` (magic checked, CRC not)."""
        fd, seg = self._fd(ptr.fid)
        raw = self._pread(fd, seg, HEADER_SIZE + nbytes, ptr.offset)
        if len(raw) < HEADER_SIZE or HEADER_STRUCT.unpack_from(raw)[0] != RECORD_MAGIC:
            raise CorruptRecord(f"value log {seg.path}: bad record at offset {ptr.offset}",
                                path=str(seg.path), offset=ptr.offset)
        return raw[HEADER_SIZE:]

    def scan(self, start: ValuePointer, until: ValuePointer | None = None
             ) -> Iterator[tuple[ValuePointer, ValuePointer, bytes]]:
        """Yield ``(pointer, next_pointer, payload)`` of valid records from ``start``
        up to ``until`` (default: the durable end when the scan reaches that file)."""
        with self._lock:
            fids = sorted(f for f in self._segments if f >= start.fid)
        for fid in fids:
            if until is not None and fid > until.fid:
                return
            with self._lock:
                seg = self._segments.get(fid)
            if seg is None:
                continue
            end = seg.data_end if until is None or fid < until.fid else min(until.offset,
                                                                             seg.data_end)
            off = start.offset if fid == start.fid else 0
            if end <= off:
                continue
            res = ScanResult()
            with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ) as mm:
                for roff, size, payload in scan_segment(mm, off, end, res):
                    yield ValuePointer(fid, roff), ValuePointer(fid, roff + size), payload
            if res.valid_end < end:
                res.skipped.append((res.valid_end, end - res.valid_end))
            self._report(seg, res)

    # -- maintenance ---------------------------------------------------------------
    def segments(self) -> list[tuple[int, int, bool, int]]:
        """``(fid, size_bytes, sealed, max_ts)`` of every file, ascending."""
        with self._lock:
            return [(s.fid, s.size, s.sealed, s.max_ts) for s in sorted(
                self._segments.values(), key=lambda s: s.fid)]

    def delete_sealed_upto(self, max_ts: int) -> list[int]:
        """Delete sealed files whose footer max ts <= ``max_ts``; never the active one."""
        deleted = []
        with self._lock:
            for fid in sorted(self._segments):
                seg = self._segments[fid]
                if fid == self._active_fid or not seg.sealed or seg.max_ts > max_ts:
                    continue
                del self._segments[fid]
                self._retired_fds.append(seg.fd)
                os.unlink(seg.path)
                deleted.append(fid)
        if deleted:
            fsync_dir(self.dir)
        return deleted

    def close(self, seal_min_bytes: int = 50 * 1024) -> None:
        """Close files; seal the active file if it holds at least ``seal_min_bytes``."""
        if self._wfd >= 0:
            os.close(self._wfd)
            self._wfd = -1
            seg = self._segments[self._active_fid]
            if seg.size >= seal_min_bytes:
                seal(seg)
        with self._lock:
            for seg in self._segments.values():
                os.close(seg.fd)
            self._segments.clear()
            for fd in self._retired_fds:
                os.close(fd)
            self._retired_fds.clear()
