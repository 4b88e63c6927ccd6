"""Reading a value log in blocks: :class:`BlockReader` serves a pull's records (which lie
close together in the log) from one cached ``pread`` of a segment, falling back to
:meth:`~tidb_binlog.pump.storage.vlog.ValueLog.read_first` for anything it cannot
serve from its block."""

from __future__ import annotations

import google_crc32c

from tidb_binlog.pump.storage.vlog_record import (
    HEADER_SIZE,
    HEADER_STRUCT,
    RECORD_MAGIC,
    ValuePointer,
)

__all__ = ["BlockReader", "BLOCK_READ_BYTES"]

BLOCK_READ_BYTES = 256 << 10  # a BlockReader's pread (a pull's records are near each other)
_crc = google_crc32c.value


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

    def __init__(self, vlog, block_bytes: int = BLOCK_READ_BYTES):
        self._vlog = vlog  # the ValueLog (not imported: vlog.py imports this module)
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
            magic, length, crc = HEADER_STRUCT.unpack_from(self._data, at)
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
