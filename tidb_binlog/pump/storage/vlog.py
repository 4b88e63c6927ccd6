"""The pump's value log: append-only segment files of framed binlog records.

Layout: ``<dir>/NNNNNN.vlog`` (file id, six digits, starting at 1). All integers
little-endian, byte-compatible with TiDB Binlog's ``pump/storage/log.go``::

    file    := record* [footer]
    record  := magic u32 = 0x823a56e8 | length u64 | crc32c u32 (of payload) | payload
    footer  := max_ts i64 | file_end_magic u32 = 0x123ab922     (sealed files only)
    pointer := fid u32 | offset i64                              (12 bytes, ValuePointer)

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

import errno
import logging
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import google_crc32c

from tidb_binlog.errors import CorruptRecord, StorageError

__all__ = [
    "RECORD_MAGIC",
    "FILE_END_MAGIC",
    "HEADER_SIZE",
    "FOOTER_SIZE",
    "POINTER_SIZE",
    "READ_HINT_BYTES",
    "ValuePointer",
    "encode_record",
    "scan_segment",
    "ValueLog",
    "BlockReader",
    "BLOCK_READ_BYTES",
    "FileRange",
]

log = logging.getLogger(__name__)

RECORD_MAGIC = 0x823A56E8
FILE_END_MAGIC = 0x123AB922
_HEADER = struct.Struct("<IQI")
_FOOTER = struct.Struct("<qI")
_POINTER = struct.Struct("<Iq")
HEADER_SIZE = _HEADER.size  # 16
FOOTER_SIZE = _FOOTER.size  # 12
POINTER_SIZE = _POINTER.size  # 12
READ_HINT_BYTES = 4096  # read() fetches header + this much in one pread
BLOCK_READ_BYTES = 256 << 10  # a BlockReader's pread (a pull's records are near each other)
_MAGIC_BYTES = struct.pack("<I", RECORD_MAGIC)
_NAME = re.compile(r"^(\d{6,})\.vlog$")
_crc = google_crc32c.value
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


class ValuePointer(NamedTuple):
    """Where a record starts: file id and byte offset. Ordered like the log."""

    fid: int
    offset: int

    def encode(self) -> bytes:
        return _POINTER.pack(self.fid, self.offset)

    @classmethod
    def decode(cls, raw: bytes) -> ValuePointer:
        if len(raw) != POINTER_SIZE:
            raise StorageError(f"value pointer must be {POINTER_SIZE} bytes, got {len(raw)}: {raw!r}")
        return cls(*_POINTER.unpack(raw))


_COPY_PIECE_BYTES = 1 << 20  # the read/write fallback of a FileRange copy
_COPY_FALLBACK_ERRNOS = (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF)


class FileRange:
    """``length`` bytes of an open file from ``offset``: a payload :meth:`ValueLog.append`
    copies into the log from that file (``copy_file_range``, in the kernel) instead of
    from memory. A large binlog received by the streaming write is spilled to a file and
    appended this way, so the pump never holds it. ``owner`` is the object keeping the
    file descriptor open (``fileno()``); the range holds a reference to it, so the file
    stays open while the record waits in the group-commit queue even if the receiver
    already gave up on it."""

    __slots__ = ("owner", "offset", "length")

    def __init__(self, owner, offset: int, length: int):
        self.owner = owner
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length


def encode_record(payload: bytes) -> bytes:
    """Frame one payload (header + payload), ready to append."""
    return _HEADER.pack(RECORD_MAGIC, len(payload), _crc(payload)) + payload


def record_header(length: int, crc: int) -> bytes:
    """The header of a record whose payload is ``length`` bytes with checksum ``crc``
    (for appending header and payload as separate buffers, without copying the payload)."""
    return _HEADER.pack(RECORD_MAGIC, length, crc)


def payload_crc(payload) -> int:
    """The checksum a record header carries for ``payload`` (any bytes-like)."""
    return _crc(payload)


def _valid_at(buf, off: int, end: int) -> int:
    """Length of the valid record at ``off`` (header included), or -1."""
    if end - off < HEADER_SIZE:
        return -1
    magic, length, crc = _HEADER.unpack_from(buf, off)
    if magic != RECORD_MAGIC or length > end - off - HEADER_SIZE:
        return -1
    start = off + HEADER_SIZE
    if _crc(buf[start:start + length]) != crc:
        return -1
    return HEADER_SIZE + length


class _ScanResult:
    """Filled while :func:`scan_segment` runs: where valid data ends, what was skipped."""

    def __init__(self):
        self.valid_end = 0
        self.skipped: list[tuple[int, int]] = []  # (offset, nbytes)


def scan_segment(buf, start: int, end: int, result: _ScanResult | None = None
                 ) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(offset, record_size, payload)`` of each valid record in ``buf[start:end]``.

    A bad record is skipped up to the next magic that starts a valid record
    (``result.skipped``); a bad region with no valid record after it ends the
    scan, and ``result.valid_end`` is where it starts (the truncation point).
    """
    res = result if result is not None else _ScanResult()
    off = start
    while off < end:
        size = _valid_at(buf, off, end)
        if size < 0:
            nxt = buf.find(_MAGIC_BYTES, off + 1, end)
            while nxt >= 0 and _valid_at(buf, nxt, end) < 0:
                nxt = buf.find(_MAGIC_BYTES, nxt + 1, end)
            if nxt < 0:
                break
            res.skipped.append((off, nxt - off))
            off = nxt
            continue
        yield off, size, bytes(buf[off + HEADER_SIZE:off + size])
        off += size
    res.valid_end = off


class _Segment:
    __slots__ = ("fid", "path", "size", "max_ts", "sealed", "fd")

    def __init__(self, fid: int, path: Path, size: int, max_ts: int, sealed: bool, fd: int):
        self.fid, self.path, self.size, self.max_ts, self.sealed, self.fd = (
            fid, path, size, max_ts, sealed, fd)

    @property
    def data_end(self) -> int:
        return self.size - FOOTER_SIZE if self.sealed else self.size


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        self._segments: dict[int, _Segment] = {}
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
        fids = sorted(int(m.group(1)) for p in self.dir.iterdir() if (m := _NAME.match(p.name)))
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
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        seg = _Segment(fid, path, size, 0, False, fd)
        if size >= FOOTER_SIZE:
            max_ts, magic = _FOOTER.unpack(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE))
            if magic == FILE_END_MAGIC:
                seg.max_ts, seg.sealed = max_ts, True
        self._segments[fid] = seg
        if seg.sealed:
            return
        res = _ScanResult()
        with open(path, "rb") as f, (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                                     if size else _Empty()) as mm:
            for _off, _size, payload in scan_segment(mm, 0, size, res):
                seg.max_ts = max(seg.max_ts, self._ts_of(payload))
        self._report(seg, res)
        if res.valid_end < size:
            log.warning("value log %s: truncating torn tail at offset %d (%d bytes)",
                        path, res.valid_end, size - res.valid_end)
            with open(path, "r+b") as f:
                f.truncate(res.valid_end)
                os.fsync(f.fileno())
            seg.size = res.valid_end
            self.truncations.append((fid, res.valid_end))
        if not last:
            self._seal(seg)

    def _report(self, seg: _Segment, res: _ScanResult) -> None:
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
        _fsync_dir(self.dir)
        with self._lock:
            self._segments[fid] = _Segment(fid, path, 0, 0, False, rfd)
        self._active_fid = fid

    def _seal(self, seg: _Segment) -> None:
        fd = os.open(seg.path, os.O_WRONLY)
        try:
            os.pwrite(fd, _FOOTER.pack(seg.max_ts, FILE_END_MAGIC), seg.size)
            os.fsync(fd)
        finally:
            os.close(fd)
        seg.size += FOOTER_SIZE
        seg.sealed = True

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
        self._seal(seg)
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
                nbytes = self._writev(buf)
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

    def _writev(self, bufs: list) -> int:
        """Write ``bufs`` back to back (runs of buffers with ``writev``, a
        :class:`FileRange` with :meth:`_copy_range`); the bytes written."""
        total, run = 0, []
        for b in bufs:
            if isinstance(b, FileRange):
                if run:
                    total += self._writev_buffers(run)
                    run = []
                self._copy_range(b)
                total += b.length
            else:
                run.append(b)
        if run:
            total += self._writev_buffers(run)
        return total

    def _copy_range(self, src: FileRange) -> None:
        """Append ``src`` from its file: ``copy_file_range`` (no user-space copy), or
        1 MiB ``pread``/``write`` pieces where the kernel or file systems refuse it."""
        fd = src.owner.fileno()
        off, left = src.offset, src.length
        fast = hasattr(os, "copy_file_range")
        while left > 0:
            n = -1
            if fast:
                try:
                    n = os.copy_file_range(fd, self._wfd, min(left, 1 << 30), off)
                except OSError as exc:
                    if exc.errno not in _COPY_FALLBACK_ERRNOS:
                        raise
                    fast = False
            if n < 0:
                piece = os.pread(fd, min(left, _COPY_PIECE_BYTES), off)
                n = len(piece)
                view, written = memoryview(piece), 0
                while written < n:
                    written += os.write(self._wfd, view[written:])
            if n == 0:
                raise OSError(errno.EIO, f"source file ended {left} bytes before the end of "
                                         f"the record being appended from it")
            off += n
            left -= n

    def _writev_buffers(self, bufs: list) -> int:
        """Write ``bufs`` back to back (partial writes resumed); the bytes written."""
        views = [memoryview(b).cast("B") for b in bufs]
        total = sum(v.nbytes for v in views)
        i = 0
        while i < len(views):
            n = os.writev(self._wfd, views[i:i + _IOV_MAX])
            while n > 0 and i < len(views):
                if n >= views[i].nbytes:
                    n -= views[i].nbytes
                    i += 1
                else:
                    views[i] = views[i][n:]
                    n = 0
            while i < len(views) and views[i].nbytes == 0:
                i += 1
        return total

    # -- reading -------------------------------------------------------------------
    def _fd(self, fid: int) -> tuple[int, _Segment]:
        with self._lock:
            seg = self._segments.get(fid)
        if seg is None:
            raise StorageError(f"value log file {fid:06d}.vlog does not exist (garbage collected?)")
        return seg.fd, seg

    def has_file(self, fid: int) -> bool:
        with self._lock:
            return fid in self._segments

    def _pread(self, fd: int, seg: _Segment, nbytes: int, offset: int) -> bytes:
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
        magic, length, crc = _HEADER.unpack_from(raw)
        if magic != RECORD_MAGIC or length > seg.data_end - ptr.offset - HEADER_SIZE:
            raise CorruptRecord(f"value log {seg.path}: bad magic or length at offset {ptr.offset}",
                                path=str(seg.path), offset=ptr.offset)
        return raw, length, crc, fd, seg

    @staticmethod
    def _checked(payload: bytes, length: int, crc: int, seg: _Segment, ptr: ValuePointer) -> bytes:
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
        if len(raw) < HEADER_SIZE or _HEADER.unpack_from(raw)[0] != RECORD_MAGIC:
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
            res = _ScanResult()
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
            _fsync_dir(self.dir)
        return deleted

    def close(self, seal_min_bytes: int = 50 * 1024) -> None:
        """Close files; seal the active file if it holds at least ``seal_min_bytes``."""
        if self._wfd >= 0:
            os.close(self._wfd)
            self._wfd = -1
            seg = self._segments[self._active_fid]
            if seg.size >= seal_min_bytes:
                self._seal(seg)
        with self._lock:
            for seg in self._segments.values():
                os.close(seg.fd)
            self._segments.clear()
            for fd in self._retired_fds:
                os.close(fd)
            self._retired_fds.clear()


class _Empty:
    """Stands in for an mmap of an empty file (mmap refuses length 0)."""

    def __enter__(self):
        return b""

    def __exit__(self, *exc):
        return False


class BlockReader:
    """:meth:`ValueLog.read_first` through one cached block of a segment.

    A pull walks the index in ts order, and the records it reads lie close together in
    the log (written in about that order), so one ``pread`` of ``block_bytes`` serves
    hundreds of them instead of one ``pread`` each. The block starts a quarter block
    before the record that missed it (writers interleave, so the next record can lie a
    little behind) and never reaches past the segment's data end as read *before* the
    ``pread``: bytes appended later are never taken from a block read earlier. A record
    whose header or payload is not wholly inside the block, or whose magic does not
    match, or whose CRC does not, goes through :meth:`ValueLog.read_first` itself (same
    checks, same errors: :class:`~tidb_binlog.errors.CorruptRecord` naming the file).
    One reader per pass (not thread-safe); it holds one block.
    """

    __slots__ = ("_vlog", "_block_bytes", "_fid", "_start", "_end", "_data")

    def __init__(self, vlog: ValueLog, block_bytes: int = BLOCK_READ_BYTES):
        self._vlog = vlog
        self._block_bytes = block_bytes
        self._fid = -1
        self._start = self._end = 0
        self._data = b""

    def read_first(self, ptr: ValuePointer, size_hint_bytes: int) -> tuple[bytes, bool]:
        """``(payload, True)`` for a good record wholly inside the block (whatever its
        size), else what :meth:`ValueLog.read_first` returns for ``ptr``."""
        fid, offset = ptr
        if fid != self._fid or not self._start <= offset <= self._end - HEADER_SIZE:
            self._fill(ptr)
        if fid == self._fid and self._start <= offset <= self._end - HEADER_SIZE:
            at = offset - self._start
            magic, length, crc = _HEADER.unpack_from(self._data, at)
            end = at + HEADER_SIZE + length
            if magic == RECORD_MAGIC and offset + HEADER_SIZE + length <= self._end:
                payload = self._data[at + HEADER_SIZE:end]
                if _crc(payload) == crc:
                    return payload, True
        # not in the block, or not a good record there: the plain read decides (and
        # raises CorruptRecord naming the file)
        return self._vlog.read_first(ptr, size_hint_bytes)

    def _fill(self, ptr: ValuePointer) -> None:
        vlog = self._vlog
        fd, seg = vlog._fd(ptr.fid)
        data_end = seg.data_end  # before the pread: every byte below it is written
        start = max(0, ptr.offset - self._block_bytes // 4)
        nbytes = min(self._block_bytes, data_end - start)
        if nbytes <= HEADER_SIZE or ptr.offset >= data_end:
            self._fid = -1
            return
        self._data = vlog._pread(fd, seg, nbytes, start)
        self._fid, self._start, self._end = ptr.fid, start, start + len(self._data)
