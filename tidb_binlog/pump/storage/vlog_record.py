"""The value log's on-disk format: record framing, the sealed file's footer, the value
pointer, and the scan that finds the valid records in a segment's bytes.

Layout: ``<dir>/NNNNNN.vlog`` (file id, six digits, starting at 1). All integers
little-endian, byte-compatible with TiDB Binlog's ``pump/storage/log.go``::

    file    := record* [footer]
    record  := magic u32 = 0x823a56e8 | length u64 | crc32c u32 (of payload) | payload
    footer  := max_ts i64 | file_end_magic u32 = 0x123ab922     (sealed files only)
    pointer := fid u32 | offset i64                              (12 bytes, ValuePointer)

Pure: no file is opened here (:mod:`.vlog_segment` does the file I/O,
:mod:`.vlog` the log of segments).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from typing import NamedTuple

import google_crc32c

from tidb_binlog.errors import StorageError

__all__ = [
    "RECORD_MAGIC",
    "FILE_END_MAGIC",
    "HEADER_SIZE",
    "FOOTER_SIZE",
    "POINTER_SIZE",
    "HEADER_STRUCT",
    "FOOTER_STRUCT",
    "SEGMENT_NAME",
    "ValuePointer",
    "ScanResult",
    "encode_record",
    "record_header",
    "payload_crc",
    "scan_segment",
]

RECORD_MAGIC = 0x823A56E8
FILE_END_MAGIC = 0x123AB922
HEADER_STRUCT = struct.Struct("<IQI")
FOOTER_STRUCT = struct.Struct("<qI")
_POINTER = struct.Struct("<Iq")
HEADER_SIZE = HEADER_STRUCT.size  # 16
FOOTER_SIZE = FOOTER_STRUCT.size  # 12
POINTER_SIZE = _POINTER.size  # 12
_MAGIC_BYTES = struct.pack("<I", RECORD_MAGIC)
SEGMENT_NAME = re.compile(r"^(\d{6,})\.vlog$")
_crc = google_crc32c.value


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


def encode_record(payload: bytes) -> bytes:
    """Frame one payload (header + payload), ready to append."""
    return HEADER_STRUCT.pack(RECORD_MAGIC, len(payload), _crc(payload)) + payload


def record_header(length: int, crc: int) -> bytes:
    """The header of a record whose payload is ``length`` bytes with checksum ``crc``
    (for appending header and payload as separate buffers, without copying the payload)."""
    return HEADER_STRUCT.pack(RECORD_MAGIC, length, crc)


def payload_crc(payload) -> int:
    """The checksum a record header carries for ``payload`` (any bytes-like)."""
    return _crc(payload)


def _valid_at(buf, off: int, end: int) -> int:
    """Length of the valid record at ``off`` (header included), or -1."""
    if end - off < HEADER_SIZE:
        return -1
    magic, length, crc = HEADER_STRUCT.unpack_from(buf, off)
    if magic != RECORD_MAGIC or length > end - off - HEADER_SIZE:
        return -1
    start = off + HEADER_SIZE
    if _crc(buf[start:start + length]) != crc:
        return -1
    return HEADER_SIZE + length


class ScanResult:
    """Filled while :func:`scan_segment` runs: where valid data ends, what was skipped."""

    def __init__(self):
        self.valid_end = 0
        self.skipped: list[tuple[int, int]] = []  # (offset, nbytes)


def scan_segment(buf, start: int, end: int, result: ScanResult | None = None
                 ) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(offset, record_size, payload)`` of each valid record in ``buf[start:end]``.

    A bad record is skipped up to the next magic that starts a valid record
    (``result.skipped``); a bad region with no valid record after it ends the
    scan, and ``result.valid_end`` is where it starts (the truncation point).
    """
    res = result if result is not None else ScanResult()
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
