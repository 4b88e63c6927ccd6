"""A large served Commit as a layout over the value log, read in ranges.

A Commit binlog is served filled with its Prewrite's fields (``reader.py``); for a large
transaction that payload is hundreds of MB. Served by reference
(:class:`~tidb_binlog.binlog_ref.BinlogRef`), the pump must neither build it for the
pull nor for the reads of its ranges. :func:`served_layout` describes the payload as
pieces, each either bytes held here (the Commit's own fields, tags and lengths: tens of
bytes) or a range of the Prewrite's record in the value log (its key, value and DDL
query), exactly as :func:`~tidb_binlog.pump.storage.reader.spliced_commit` would join
them; it reads only the Prewrite's field headers (one ``pread`` of its first 4 KiB, one
more past each large field), never the value. :func:`read_range` then fills
``[offset, offset+n)`` of the payload with ``preadv`` straight into one ``bytearray``.

Checks: the Prewrite record's magic and length when its layout is read; its CRC once,
at the pull that makes the reference (:meth:`ValueLog.verify_record
<tidb_binlog.pump.storage.vlog.ValueLog.verify_record>`, 4 MiB at a time), so damage
stops the pull as for a payload served whole. Range reads do not check the CRC again
(that would mean reading the whole record for every range); the drainer's reader
checks the binlog's structure as it walks it.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

from tidb_binlog import binlog as bl
from tidb_binlog.pump.storage.protowire import BINLOG_WIRE_TYPES, read_varint, varint
from tidb_binlog.pump.storage.vlog_record import HEADER_SIZE, ValuePointer

__all__ = ["ServedLayout", "served_layout", "read_range", "LAYOUT_READ_BYTES",
           "MMAP_RANGE_BYTES"]

_U64 = (1 << 64) - 1
LAYOUT_READ_BYTES = 4096  # one pread of a record's first bytes (its small fields)
_MAX_HEADER_BYTES = 20    # a tag and a length varint: at most 10 bytes each
MMAP_RANGE_BYTES = 1 << 20  # a range read this large goes into its own mmap (read_range)


@dataclass(frozen=True, slots=True)
class ServedLayout:
    """The served payload of one Commit: ``pieces`` in order, each ``bytes`` or
    ``(offset, length)`` of file ``fid`` of the value log; ``size`` bytes in all."""

    fid: int
    pieces: tuple
    size: int


def _walk(first: bytes, length: int, read_at) -> dict[int, object] | None:
    """The Prewrite payload's top-level fields, ``number -> value or (start, end)``
    (payload offsets; the last occurrence wins, as protobuf's parse), reading only
    through ``read_at(pos, n)`` beyond ``first``: a length-delimited field is skipped
    over, not read. None when the payload is not laid out as a binlog (the caller
    serves it the ordinary way, which reports damage)."""
    buf, bstart, pos = first, 0, 0
    out: dict[int, object] = {}
    while pos < length:
        rel = pos - bstart
        if rel < 0 or (rel + _MAX_HEADER_BYTES > len(buf) and bstart + len(buf) < length):
            buf, bstart, rel = read_at(pos, min(LAYOUT_READ_BYTES, length - pos)), pos, 0
        tag, rel = read_varint(buf, rel)
        if tag < 0:
            return None
        number, wire = tag >> 3, tag & 7
        if BINLOG_WIRE_TYPES.get(number, wire) != wire:
            return None
        if wire == 0:
            value, rel = read_varint(buf, rel)
            if value < 0:
                return None
            out[number] = value
            pos = bstart + rel
        elif wire == 2:
            n, rel = read_varint(buf, rel)
            start = bstart + rel
            if n < 0 or start + n > length:
                return None
            out[number] = (start, start + n)
            pos = start + n
        else:
            return None
    return out


def served_layout(vlog, c: bl.Binlog, pptr: ValuePointer, first: bytes, length: int
                  ) -> ServedLayout | None:
    """The layout of Commit ``c`` filled from the Prewrite record at ``pptr`` (payload
    of ``length`` bytes, ``first`` its first bytes as read), piece for piece what
    :func:`~tidb_binlog.pump.storage.reader.spliced_commit` joins; None when that
    record is not a Prewrite of ``c`` laid out as expected."""
    base = pptr.offset + HEADER_SIZE

    def read_at(pos: int, n: int) -> bytes:
        buf = bytearray(n)
        vlog.read_into(pptr.fid, base + pos, memoryview(buf))
        return bytes(buf)

    p = _walk(first, length, read_at)
    if p is None or p.get(1, 0) != bl.BinlogType.PREWRITE \
            or p.get(2, 0) & _U64 != c.start_ts & _U64:
        return None
    parts: list = []

    def raw_field(tag: bytes, span) -> None:
        parts.append(tag + varint(span[1] - span[0]))
        if span[1] > span[0]:
            parts.append((base + span[0], span[1] - span[0]))

    for number, name in ((1, "tp"), (2, "start_ts"), (3, "commit_ts")):
        if c.HasField(name):
            parts.append(bytes((number << 3,)) + varint(getattr(c, name)))
    if isinstance(p.get(4), tuple):
        raw_field(b"\x22", p[4])
    elif c.HasField("prewrite_key"):
        parts.append(b"\x22" + varint(len(c.prewrite_key)) + c.prewrite_key)
    if isinstance(p.get(5), tuple):
        raw_field(b"\x2a", p[5])
    else:
        parts.append(b"\x2a\x00")
    if isinstance(p.get(6), tuple):
        raw_field(b"\x32", p[6])
    elif c.HasField("ddl_query"):
        parts.append(b"\x32" + varint(len(c.ddl_query)) + c.ddl_query)
    for number in (7, 8):
        value = p.get(number, 0)
        if isinstance(value, tuple):
            return None
        parts.append(bytes((number << 3,)) + varint(value))
    pieces: list = []
    for part in parts:  # neighbouring bytes joined: fewer pieces to walk per range
        if type(part) is bytes and pieces and type(pieces[-1]) is bytes:
            pieces[-1] += part
        else:
            pieces.append(part)
    size = sum(len(x) if type(x) is bytes else x[1] for x in pieces)
    return ServedLayout(pptr.fid, tuple(pieces), size)


def read_range(vlog, layout: ServedLayout, offset: int, n: int) -> bytearray | mmap.mmap:
    """Bytes ``[offset, offset+n)`` of the payload (the caller checks the bounds): one
    writable buffer of ``n`` bytes, the value-log pieces ``preadv``'d into it.

    From :data:`MMAP_RANGE_BYTES` on the buffer is an anonymous ``mmap``, unmapped when
    the last reference goes: a reader walks a transaction in ranges of several MiB, on
    whichever of the actor's threads runs the call, and glibc kept such ``bytearray``
    buffers in its per-thread arenas (its mmap threshold grows to the largest block
    freed): the pump actor held 145 MiB after serving 200 MiB in 8 MiB ranges, 0 with
    ``mmap``."""
    out = mmap.mmap(-1, n) if n >= MMAP_RANGE_BYTES else bytearray(n)
    view = memoryview(out)
    at = 0  # payload offset where the current piece starts
    end = offset + n
    for piece in layout.pieces:
        plen = len(piece) if type(piece) is bytes else piece[1]
        lo, hi = max(offset, at), min(end, at + plen)
        if lo < hi:
            dst = view[lo - offset:hi - offset]
            if type(piece) is bytes:
                dst[:] = piece[lo - at:hi - at]
            else:
                vlog.read_into(layout.fid, piece[0] + lo - at, dst)
        at += plen
        if at >= end:
            break
    return out
