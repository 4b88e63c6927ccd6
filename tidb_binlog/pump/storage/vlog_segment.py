"""One segment file of the value log: its handle (fd, size, max ts, sealed), opening it
(reading its footer), recovering an unsealed one (the scan for its max ts, cutting a
torn tail), sealing it, and the writes that append to the active one (``writev`` of
buffers, ``copy_file_range`` of a :class:`FileRange`).

The format is :mod:`.vlog_record`'s; which segments exist, which one is active and
when to rotate is :class:`~tidb_binlog.pump.storage.vlog.ValueLog`'s.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

from tidb_binlog.pump.storage.vlog_record import (
    FILE_END_MAGIC,
    FOOTER_SIZE,
    FOOTER_STRUCT,
    ScanResult,
    scan_segment,
)

__all__ = ["Segment", "FileRange", "fsync_dir", "open_segment", "recover_max_ts",
           "truncate_tail", "seal", "write_buffers"]

_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16
_COPY_PIECE_BYTES = 1 << 20  # the read/write fallback of a FileRange copy
_COPY_FALLBACK_ERRNOS = (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF)


class Segment:
    __slots__ = ("fid", "path", "size", "max_ts", "sealed", "fd")

    def __init__(self, fid: int, path: Path, size: int, max_ts: int, sealed: bool, fd: int):
        self.fid, self.path, self.size, self.max_ts, self.sealed, self.fd = (
            fid, path, size, max_ts, sealed, fd)

    @property
    def data_end(self) -> int:
        return self.size - FOOTER_SIZE if self.sealed else self.size


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- open / recovery -----------------------------------------------------------------

def open_segment(fid: int, path: Path) -> Segment:
    """Open ``path`` for reading; sealed (with its footer's max ts) if it has a footer."""
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    seg = Segment(fid, path, size, 0, False, fd)
    if size >= FOOTER_SIZE:
        max_ts, magic = FOOTER_STRUCT.unpack(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE))
        if magic == FILE_END_MAGIC:
            seg.max_ts, seg.sealed = max_ts, True
    return seg


def recover_max_ts(seg: Segment, ts_of, res: ScanResult) -> None:
    """Scan the unsealed ``seg`` whole: its max ts is the largest ``ts_of(payload)`` of
    its valid records; ``res`` tells what was skipped and where valid data ends."""
    with open(seg.path, "rb") as f, (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                                     if seg.size else _Empty()) as mm:
        for _off, _size, payload in scan_segment(mm, 0, seg.size, res):
            seg.max_ts = max(seg.max_ts, ts_of(payload))


def truncate_tail(seg: Segment, at: int) -> None:
    """Cut ``seg`` at ``at`` (a torn tail), fsynced."""
    with open(seg.path, "r+b") as f:
        f.truncate(at)
        os.fsync(f.fileno())
    seg.size = at


def seal(seg: Segment) -> None:
    """Write the footer (its max ts) after the records; fsynced."""
    fd = os.open(seg.path, os.O_WRONLY)
    try:
        os.pwrite(fd, FOOTER_STRUCT.pack(seg.max_ts, FILE_END_MAGIC), seg.size)
        os.fsync(fd)
    finally:
        os.close(fd)
    seg.size += FOOTER_SIZE
    seg.sealed = True


class _Empty:
    """Stands in for an mmap of an empty file (mmap refuses length 0)."""

    def __enter__(self):
        return b""

    def __exit__(self, *exc):
        return False


# -- appending to the active segment ---------------------------------------------------

class FileRange:
    """``length`` bytes of an open file from ``offset``: a payload
    :meth:`~tidb_binlog.pump.storage.vlog.ValueLog.append` copies into the log from that
    file (``copy_file_range``, in the kernel) instead of
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


def write_buffers(wfd: int, bufs: list) -> int:
    """Write ``bufs`` back to back at ``wfd`` (runs of buffers with ``writev``, a
    :class:`FileRange` with :func:`_copy_range`); the bytes written."""
    total, run = 0, []
    for b in bufs:
        if isinstance(b, FileRange):
            if run:
                total += _writev_buffers(wfd, run)
                run = []
            _copy_range(wfd, b)
            total += b.length
        else:
            run.append(b)
    if run:
        total += _writev_buffers(wfd, run)
    return total


def _copy_range(wfd: int, src: FileRange) -> None:
    """Append ``src`` from its file: ``copy_file_range`` (no user-space copy), or
    1 MiB ``pread``/``write`` pieces where the kernel or file systems refuse it."""
    fd = src.owner.fileno()
    off, left = src.offset, src.length
    fast = hasattr(os, "copy_file_range")
    while left > 0:
        n = -1
        if fast:
            try:
                n = os.copy_file_range(fd, wfd, min(left, 1 << 30), off)
            except OSError as exc:
                if exc.errno not in _COPY_FALLBACK_ERRNOS:
                    raise
                fast = False
        if n < 0:
            piece = os.pread(fd, min(left, _COPY_PIECE_BYTES), off)
            n = len(piece)
            view, written = memoryview(piece), 0
            while written < n:
                written += os.write(wfd, view[written:])
        if n == 0:
            raise OSError(errno.EIO, f"source file ended {left} bytes before the end of "
                                     f"the record being appended from it")
        off += n
        left -= n


def _writev_buffers(wfd: int, bufs: list) -> int:
    """Write ``bufs`` back to back (partial writes resumed); the bytes written."""
    views = [memoryview(b).cast("B") for b in bufs]
    total = sum(v.nbytes for v in views)
    i = 0
    while i < len(views):
        n = os.writev(wfd, views[i:i + _IOV_MAX])
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
