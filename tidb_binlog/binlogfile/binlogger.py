"""The writer of a binlog directory: :class:`Binlogger` (TiDB Binlog's ``OpenBinlogger``).

**Open.** ``Binlogger(directory, max_file_size_bytes)`` creates the directory,
takes an exclusive ``flock`` on ``<directory>/.lock`` and holds it until
:meth:`close` (a second writer gets a :class:`~tidb_binlog.errors.StorageError`
after :data:`LOCK_WAIT_S`, the time a reader's probe may hold it), checks that the segments
are contiguous, and appends to the newest one (``binlog-0000000000000000-<now>``
in an empty directory). The newest segment is scanned first: a *torn tail*
(damage running to its end: a record cut short by a crash, or garbage after
the last valid record) is truncated away and logged with the file and offset.
Damage followed by valid records is left alone: readers skip it and count it.

**Write.** :meth:`write_tail` appends one framed payload and returns the
:class:`Pos` just after it; :meth:`write_many` does the same for a list with
one ``write`` per segment touched; :meth:`write_streamed` appends one record whose
payload is read from a file in blocks (a large transaction's record, never held
whole). Once a segment reaches ``max_file_size_bytes``
the next record goes to a new segment (suffix + 1; the full one is fdatasync'ed
before it is left). An empty payload writes nothing (TiDB's behaviour) and
returns the current position. Writes are not synced: :meth:`sync` fdatasyncs
the open segment (and the directory when a segment was created since the last
sync). Whoever records a position durably elsewhere (a checkpoint) calls
``sync()`` first: a checkpoint may only point at bytes that survive a crash.

**Reposition.** :meth:`truncate_to` cuts everything after a position: the
segment is truncated there and later segments are removed (the file sink drops
what it wrote after its last durable checkpoint, then writes it again).

**Read and GC.** :meth:`walk` is :func:`tidb_binlog.binlogfile.reader.walk` on
this directory. :meth:`gc_by_time` removes segments whose mtime is older than
the retention; :meth:`gc_by_pos` those with a suffix below a position's; both
always keep the newest segment. :meth:`close` syncs and releases the lock.

**Is a writer at it?** :func:`writer_holds_lock` tells a reader whether a
Binlogger (in any process) has the directory open: a record cut short at the end
of the newest segment is then a write in progress, else a crash or lost bytes
(reparo's torn-tail check). It probes with a non-blocking *shared* ``flock`` on
``.lock``, released at once; a writer opening in that instant waits for it
(:data:`LOCK_WAIT_S`) rather than failing.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path
from typing import BinaryIO

from tidb_binlog.binlogfile.files import Pos, binlog_name, binlog_names, is_contiguous
from tidb_binlog.binlogfile.framing import (
    Damage,
    crc_extend,
    encode_record,
    record_header,
    record_trailer,
    scan,
)
from tidb_binlog.binlogfile.reader import WalkStats, segments, walk
from tidb_binlog.errors import InvalidArgument, StorageError

__all__ = ["Binlogger", "SEGMENT_SIZE_BYTES", "LOCK_FILE", "LOCK_WAIT_S", "writer_holds_lock"]

log = logging.getLogger(__name__)

SEGMENT_SIZE_BYTES = 512 << 20
"""TiDB's default segment size (``binlogfile.SegmentSizeBytes``)."""

LOCK_FILE = ".lock"
"""Held with an exclusive flock by the one writer of the directory while it is open."""

LOCK_WAIT_S = 1.0
"""How long an opening writer retries a held lock before it reports the directory in use
(a reader's :func:`writer_holds_lock` holds a shared lock for microseconds)."""


def writer_holds_lock(directory: str | os.PathLike) -> bool:
    """True while a :class:`Binlogger` has ``directory`` open (it holds ``.lock``): the
    newest segment is being appended to. Never blocks and leaves no lock behind (module
    doc); a directory without ``.lock`` never had a writer here (a copy) and has none."""
    path = Path(directory) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageError(f"cannot open the writer's lock file {path} to see whether a "
                           f"drainer is writing there: {exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError as exc:
            raise StorageError(f"cannot test the writer's lock {path} (flock: {exc}); the "
                               "file system may not support locks") from exc
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class Binlogger:
    """Appends framed records to a binlog directory; see the module docstring."""

    def __init__(self, directory: str | os.PathLike,
                 max_file_size_bytes: int = SEGMENT_SIZE_BYTES):
        if max_file_size_bytes <= 0:
            raise InvalidArgument(f"max_file_size_bytes must be > 0, got {max_file_size_bytes}")
        self.dir = Path(directory)
        self.max_file_size_bytes = max_file_size_bytes
        self.truncated_bytes = 0  # torn tail dropped at open
        self._fd = -1
        self._lock_fd = -1
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the binlog directory {self.dir}: {exc}") from exc
        self._lock_fd = self._lock()
        try:
            names = binlog_names(self.dir)
            if not is_contiguous(names):
                raise StorageError(f"binlog files in {self.dir} are not contiguous: {names}; "
                                   "a file is missing (move the directory aside or restore it)")
            if names:
                suffix = segments(self.dir)[-1][0]
                self._open_segment(suffix, self.dir / names[-1], create=False)
                self._repair_tail()
            else:
                self._open_segment(0, self.dir / binlog_name(0), create=True)
        except BaseException:
            self.close()
            raise

    # -- open -------------------------------------------------------------------------
    def _lock(self) -> int:
        path = self.dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open the lock file {path}: {exc}") from exc
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError as exc:  # another writer, or a reader's probe for an instant
                if time.monotonic() < deadline:
                    time.sleep(0.01)
                    continue
                os.close(fd)
                raise StorageError(f"binlog directory {self.dir} is in use by another writer "
                                   f"(the lock {path} is held); stop it or choose another "
                                   "dir") from exc
            except OSError as exc:
                os.close(fd)
                raise StorageError(f"cannot lock {path}: {exc}") from exc

    def _open_segment(self, suffix: int, path: Path, *, create: bool) -> None:
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open the binlog file {path}: {exc}") from exc
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        self.suffix = suffix
        self.path = path
        self.offset = os.fstat(fd).st_size
        self._dir_dirty = create

    def _repair_tail(self) -> None:
        last = None
        with open(self.path, "rb") as f:
            for item in scan(f, 0, self.offset, inline_max=0):  # keeps no payload
                last = item
        if isinstance(last, Damage) and last.torn:
            dropped = self.offset - last.offset
            log.warning("binlog file %s: dropping a torn tail of %d bytes at offset %d (%s); "
                        "a write was cut short by a crash", self.path, dropped, last.offset,
                        last.reason)
            self._truncate_file(last.offset)
            self.truncated_bytes += dropped

    def _truncate_file(self, offset: int) -> None:
        try:
            os.ftruncate(self._fd, offset)
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageError(f"cannot truncate {self.path} at {offset}: {exc}") from exc
        self.offset = offset

    # -- write ------------------------------------------------------------------------
    @property
    def position(self) -> Pos:
        """Where the next record will start (the end of what was written)."""
        return Pos(self.suffix, self.offset)

    def write_tail(self, payload: bytes) -> Pos:
        """Append one record; the position just after it."""
        return self.write_many([payload])[-1]

    def write_many(self, payloads: list[bytes]) -> list[Pos]:
        """Append records in order; the position after each."""
        self._check_open()
        out: list[Pos] = []
        chunk: list[bytes] = []
        offset = self.offset
        for payload in payloads:
            if not payload:
                out.append(Pos(self.suffix, offset))
                continue
            frame = encode_record(payload)
            chunk.append(frame)
            offset += len(frame)
            out.append(Pos(self.suffix, offset))
            if offset >= self.max_file_size_bytes:
                self._append(chunk, offset)
                chunk = []
                self._rotate()
                offset = 0
        if chunk:
            self._append(chunk, offset)
        return out

    def write_streamed(self, head: bytes, body: BinaryIO, body_size: int,
                       block_bytes: int = 1 << 20) -> Pos:
        """Append one record whose payload is ``head`` then ``body_size`` bytes read from
        ``body`` (from its position), ``block_bytes`` at a time: the header (with the
        size) first, the CRC as the blocks go by, the trailer last, so the payload is
        never in memory whole. A crash in between leaves a record running past the end
        of the file, a torn tail the next open truncates (as for :meth:`write_many`).
        Rotation as for :meth:`write_many`: the record stays in one segment."""
        self._check_open()
        size = len(head) + body_size
        crc = crc_extend(0, head)
        end = self.offset + size + 16
        self._append([record_header(size), head], self.offset + 12 + len(head))
        left = body_size
        while left:
            data = body.read(min(block_bytes, left))
            if not data:
                raise StorageError(f"the record's body ended {left} bytes short of "
                                   f"{body_size} while appending it to {self.path}")
            crc = crc_extend(crc, data)
            self._append([data], self.offset + len(data))
            left -= len(data)
        self._append([record_trailer(crc)], end)
        pos = Pos(self.suffix, end)
        if end >= self.max_file_size_bytes:
            self._rotate()
        return pos

    def _append(self, frames: list[bytes], end: int) -> None:
        data = b"".join(frames)
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as exc:
            raise StorageError(f"cannot append to the binlog file {self.path} at offset "
                               f"{self.offset}: {exc}; check the disk's space") from exc
        self.offset = end

    def _rotate(self) -> None:
        self._sync_fd()
        nxt = self.suffix + 1
        self._open_segment(nxt, self.dir / binlog_name(nxt), create=True)
        log.info("binlog file %s created", self.path)

    def sync(self) -> None:
        """Make everything written so far durable (fdatasync; the directory too when a
        segment was created since the last sync)."""
        self._check_open()
        self._sync_fd()
        if self._dir_dirty:
            dir_fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._dir_dirty = False

    def _sync_fd(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise StorageError(f"cannot sync the binlog file {self.path}: {exc}") from exc

    def truncate_to(self, pos: Pos) -> int:
        """Drop everything after ``pos`` (later segments removed); bytes dropped."""
        self._check_open()
        segs = segments(self.dir)
        paths = dict(segs)
        if pos.suffix not in paths:
            raise StorageError(f"cannot truncate {self.dir} to {pos}: no such binlog file")
        dropped = 0
        for suffix, path in reversed(segs):
            if suffix <= pos.suffix:
                break
            dropped += path.stat().st_size
            path.unlink()
            log.warning("binlog file %s removed (after %s)", path, pos)
        self._open_segment(pos.suffix, paths[pos.suffix], create=False)
        if pos.offset > self.offset:
            raise StorageError(f"cannot truncate {self.path} to offset {pos.offset}: the file "
                               f"has {self.offset} bytes")
        dropped += self.offset - pos.offset
        self._truncate_file(pos.offset)
        self._dir_dirty = True
        return dropped

    # -- read and GC --------------------------------------------------------------------
    def walk(self, from_pos: Pos | None = None, *, stats: WalkStats | None = None,
             strict: bool = False, inline_max: int | None = None):
        """:func:`~tidb_binlog.binlogfile.reader.walk` on this directory."""
        return walk(self.dir, from_pos, stats=stats, strict=strict, inline_max=inline_max)

    def gc_by_time(self, retention_s: float, now_s: float | None = None) -> list[str]:
        """Remove segments (not the newest) not modified for ``retention_s``; their names."""
        now_s = time.time() if now_s is None else now_s
        return self._gc(lambda suffix, st: now_s - st.st_mtime > retention_s)

    def gc_by_pos(self, pos: Pos) -> list[str]:
        """Remove segments (not the newest) with a suffix below ``pos.suffix``."""
        return self._gc(lambda suffix, st: suffix < pos.suffix)

    def _gc(self, doomed) -> list[str]:
        removed = []
        for suffix, path in segments(self.dir)[:-1]:
            if suffix == self.suffix:
                break
            try:
                if doomed(suffix, path.stat()):
                    path.unlink()
                    removed.append(path.name)
                    log.info("GC binlog file %s", path)
            except OSError as exc:  # one file failing must not stop the others
                log.error("cannot GC binlog file %s: %s", path, exc)
        return removed

    # -- close ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._fd < 0:
            raise StorageError(f"the binlogger of {self.dir} is closed")

    def close(self) -> None:
        """Sync, close the segment and release the directory lock. Idempotent."""
        try:
            if self._fd >= 0:
                self._sync_fd()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1

    def __enter__(self) -> Binlogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
