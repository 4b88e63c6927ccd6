"""The binlog file record (TiDB Binlog's ``pkg/binlogfile/encoder.go``, ``decoder.go``).

::

    record := magic u32 LE = 0x1C1B0504 (471532804)
            | size  u64 LE  (payload length)
            | payload
            | crc   u32 LE  (CRC-32C, Castagnoli, of the payload)

16 bytes of framing per record. (The pump's value log differs: its CRC sits in
the header.) A segment is records back to back, nothing else.

:func:`scan` reads the records of one segment and says what is wrong where
they are not valid:

- a valid record → :class:`Record` ``(offset, end, payload)``;
- a bad one (magic or CRC mismatch, a size running past the end, a header cut
  short) → :class:`Damage` ``(offset, end, reason, torn)``: the scan seeks the
  next magic after ``offset`` (TiDB's ``seekBinlog``) and goes on from there.
  ``torn`` is true when no magic follows, i.e. the damage runs to the end of the
  segment: a partial write at the tail (``reason == "partial"``) or garbage there.

Malformed bytes never raise here; the caller decides (the reader counts
corruption, the writer truncates a torn tail).

**Large records.** ``scan(..., inline_max=n)`` hands a record whose payload is larger
than ``n`` bytes out as a :class:`RecordSpan` ``(offset, end)`` instead: its CRC is
checked block by block (:data:`BLOCK` = 1 MiB reads, :func:`payload_crc`) and its payload
is not kept; the caller reads it in ranges (``payload_offset``, ``size``; the reader's
:class:`~tidb_binlog.binlogfile.reader.RecordSource`). ``inline_max=0`` gives every
record as a span (the writer's tail check keeps nothing). Without ``inline_max`` every
record comes whole, as before; its payload is read once (``read(size)``, then the 4-byte
CRC), never sliced out of a larger read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

import google_crc32c

__all__ = ["MAGIC", "HEADER_SIZE", "TRAILER_SIZE", "RECORD_OVERHEAD", "BLOCK", "Record",
           "RecordSpan", "Damage", "encode_record", "record_header", "record_trailer",
           "crc_extend", "payload_crc", "scan", "find_magic"]

MAGIC = 0x1C1B0504
_HEADER = struct.Struct("<IQ")
_TRAILER = struct.Struct("<I")
HEADER_SIZE = _HEADER.size    # 12
TRAILER_SIZE = _TRAILER.size  # 4
RECORD_OVERHEAD = HEADER_SIZE + TRAILER_SIZE
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_SEEK_CHUNK = 1 << 16
BLOCK = 1 << 20  # a large payload's CRC is checked in reads of this many bytes
_crc = google_crc32c.value
crc_extend = google_crc32c.extend  # crc_extend(crc, more_bytes): the CRC-32C of both


class Record(NamedTuple):
    """A valid record: its first byte, the byte after it, its payload."""

    offset: int
    end: int
    payload: bytes


class RecordSpan(NamedTuple):
    """A valid record whose payload was not kept (``scan``'s ``inline_max``): its first
    byte and the byte after it. The payload is ``size`` bytes at ``payload_offset``."""

    offset: int
    end: int

    @property
    def payload_offset(self) -> int:
        return self.offset + HEADER_SIZE

    @property
    def size(self) -> int:
        return self.end - self.offset - RECORD_OVERHEAD


class Damage(NamedTuple):
    """Bytes ``[offset, end)`` hold no valid record. ``reason``: ``magic`` | ``crc`` |
    ``partial``; ``torn``: the damage runs to the end of the segment."""

    offset: int
    end: int
    reason: str
    torn: bool


def encode_record(payload: bytes) -> bytes:
    """Frame one payload."""
    return b"".join((_HEADER.pack(MAGIC, len(payload)), payload,
                     _TRAILER.pack(_crc(payload))))


def record_header(size: int) -> bytes:
    """The 12 bytes before a payload of ``size`` bytes (a record written in pieces)."""
    return _HEADER.pack(MAGIC, size)


def record_trailer(crc: int) -> bytes:
    """The 4 bytes after a payload whose CRC-32C is ``crc``."""
    return _TRAILER.pack(crc)


def payload_crc(f: BinaryIO, offset: int, size: int, block: int = BLOCK) -> int | None:
    """The CRC-32C of ``f[offset:offset + size]`` read in blocks of at most ``block``
    bytes (never more in memory); None when the file ends before."""
    crc = 0
    f.seek(offset)
    left = size
    while left:
        got = f.read(min(block, left))
        if not got:
            return None
        crc = crc_extend(crc, got)
        left -= len(got)
    return crc


def _read_at(f: BinaryIO, off: int, end: int,
             inline_max: int | None = None) -> Record | RecordSpan | str:
    """The record at ``off``, or why there is none (``magic``/``crc``/``partial``); a
    payload over ``inline_max`` bytes is CRC-checked in blocks and not kept."""
    if end - off < HEADER_SIZE:
        f.seek(off)
        head = f.read(min(4, end - off))
        return "partial" if _MAGIC_BYTES.startswith(head) else "magic"
    f.seek(off)
    head = f.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return "partial"
    magic, size = _HEADER.unpack(head)
    if magic != MAGIC:
        return "magic"
    rec_end = off + RECORD_OVERHEAD + size
    if rec_end > end:
        return "partial"
    if inline_max is not None and size > inline_max:
        crc = payload_crc(f, off + HEADER_SIZE, size)
        trailer = f.read(TRAILER_SIZE) if crc is not None else b""
        if len(trailer) < TRAILER_SIZE:
            return "partial"
        return RecordSpan(off, rec_end) if crc == _TRAILER.unpack(trailer)[0] else "crc"
    payload = f.read(size)
    trailer = f.read(TRAILER_SIZE)
    if len(payload) < size or len(trailer) < TRAILER_SIZE:
        return "partial"
    if _crc(payload) != _TRAILER.unpack(trailer)[0]:
        return "crc"
    return Record(off, rec_end, payload)


def find_magic(f: BinaryIO, start: int, end: int) -> int | None:
    """The offset of the first magic at or after ``start`` (wholly before ``end``)."""
    pos = start
    while pos + 4 <= end:
        f.seek(pos)
        chunk = f.read(min(_SEEK_CHUNK, end - pos))
        if len(chunk) < 4:
            return None
        i = chunk.find(_MAGIC_BYTES)
        if i >= 0:
            return pos + i
        pos += len(chunk) - 3  # a magic may straddle two chunks
    return None


def scan(f: BinaryIO, start: int, end: int, *,
         inline_max: int | None = None) -> Iterator[Record | RecordSpan | Damage]:
    """Records and damage of ``f[start:end]`` in file order (see the module doc); a
    payload over ``inline_max`` bytes comes as a :class:`RecordSpan`."""
    off = start
    while off < end:
        got = _read_at(f, off, end, inline_max)
        if not isinstance(got, str):
            yield got
            off = got.end
            continue
        nxt = find_magic(f, off + 1, end)
        if nxt is None:
            yield Damage(off, end, got, True)
            return
        yield Damage(off, nxt, got, False)
        off = nxt
