"""The low-level protobuf wire reader under :mod:`.wire`: varints, field headers, the
fields of a message in bytes (:func:`fields_of`), and :class:`Cursor`, the forward walk
over a :class:`~tidb_binlog.binlog_ref.ByteSource` through one window (with the
``TableMutation`` loop, the hot path of a large transaction's walk, and packed
``sequence`` values). Wire-format errors are :class:`Malformed` at a byte offset; the
message readers of :mod:`.wire` (and :mod:`.pb_wire`, which walks the file sink's pb
records with the same cursor) turn them into :class:`~tidb_binlog.errors.ProtocolError`.
"""

from __future__ import annotations

from array import array

from tidb_binlog.errors import InvalidArgument, ProtocolError

__all__ = ["Malformed", "Cursor", "fields_of", "signed", "varint", "read_exact",
           "HEADER_BYTES"]

_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_MUTATION_TYPES = frozenset(range(5))  # binlog.MutationType: Insert .. DeleteRow

HEADER_BYTES = 20  # a field's key and its varint value or length: at most 10 + 10 bytes


class Malformed(Exception):
    """A wire-format error at a byte offset (turned into ProtocolError by the caller)."""


def varint(buf, pos: int, end: int, base: int = 0) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it (``base``: what to add to a
    position in ``buf`` to report the payload's offset in an error)."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    result = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _MASK, pos
        shift += 7
        if shift >= 70:
            raise Malformed(f"varint longer than 10 bytes at offset {base + pos}")
    raise Malformed(f"truncated varint at offset {base + pos}")


def signed(value: int) -> int:
    return value - (1 << 64) if value & _SIGN else value


def _skip(buf, pos: int, end: int, wire: int, field: int) -> int:
    """The position after an unknown field's value."""
    if wire == 0:
        return varint(buf, pos, end)[1]
    if wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    elif wire == 2:
        n, pos = varint(buf, pos, end)
        pos += n
    else:
        raise Malformed(f"field {field} has wire type {wire} (groups are not used)")
    if pos > end:
        raise Malformed(f"field {field} runs past the end of its message ({end})")
    return pos


def fields_of(buf, pos: int, end: int):
    """``(field, wire type, value)`` of each field in ``buf[pos:end]``; the value
    of a length-delimited field is its ``(start, stop)``, of a varint the integer, of the
    others None (skipped)."""
    while pos < end:
        key, pos = varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise Malformed(f"field number 0 at offset {pos}")
        if wire == 0:
            value, pos = varint(buf, pos, end)
            yield field, wire, value
        elif wire == 2:
            n, pos = varint(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise Malformed(f"field {field} of {n} bytes at offset {pos} runs past the "
                                 f"end of its message ({end})")
            yield field, wire, (pos, stop)
            pos = stop
        else:
            pos = _skip(buf, pos, end, wire, field)
            yield field, wire, None


def read_exact(source, offset: int, n: int):
    """``source.read`` checked: exactly ``n`` bytes (a short read would shift every
    offset after it, so it is an error here even if the source did not raise)."""
    got = source.read(offset, n)
    if len(got) != n:
        raise ProtocolError(f"the byte source of {source.size} bytes returned {len(got)} "
                            f"bytes at offset {offset}, asked for {n}: the payload changed "
                            "or the source is broken (the reader cannot go on)")
    return got


class Cursor:
    """A forward walk over ``source`` bytes below ``limit`` through one window: ``buf``
    holds the bytes ``[base, top)``, at most ``window`` plus a field header's tail.
    Walks nest (a mutation inside the prewrite value, a packed sequence inside a
    mutation): they share the window, and an outer walk picks it up again after each
    field it handed out (:meth:`fields`)."""

    __slots__ = ("source", "window", "limit", "buf", "base", "top")

    def __init__(self, source, window: int, limit: int, head=None):
        if window < 1:
            raise InvalidArgument(f"window must be >= 1 byte, got {window}")
        self.source = source
        self.window = window
        self.limit = limit
        self.buf, self.base = head if head is not None else (b"", 0)
        self.top = self.base + len(self.buf)

    def ensure(self, pos: int, need: int, end: int) -> None:
        """Hold ``[pos, min(pos + need, end))``: keep what the window has from ``pos``
        and read the next windows after it; a position past the window starts afresh
        (the bytes skipped are not read)."""
        want = min(pos + need, end)
        if self.base <= pos <= self.top:
            tail = self.buf[pos - self.base:]
        else:
            tail = b""
            self.top = pos
        buf = tail
        top = self.top
        while top < want:
            n = min(self.window, self.limit - top)
            got = read_exact(self.source, top, n)
            buf = bytes(buf) + got if len(buf) else got
            top += n
        self.buf, self.base, self.top = buf, pos, top

    def fields(self, pos: int, end: int):
        """:func:`fields_of` of ``[pos, end)`` read through the window (positions are
        the payload's)."""
        buf, base, top = self.buf, self.base, self.top
        while pos < end:
            if pos + HEADER_BYTES > top and top < end:
                self.ensure(pos, HEADER_BYTES, end)
                buf, base, top = self.buf, self.base, self.top
            # the header is in buf: whole, or up to the message's end
            lim = (top if top < end else end) - base
            i = pos - base
            key = buf[i]
            if key < 0x80:
                i += 1
            else:
                key, i = varint(buf, i, lim, base)
            field, wire = key >> 3, key & 7
            if field == 0:
                raise Malformed(f"field number 0 at offset {base + i}")
            if wire == 0:
                value = buf[i] if i < lim else 0x80
                if value < 0x80:
                    i += 1
                else:
                    value, i = varint(buf, i, lim, base)
                pos = base + i
                yield field, 0, value
            elif wire == 2:
                n = buf[i] if i < lim else 0x80
                if n < 0x80:
                    i += 1
                else:
                    n, i = varint(buf, i, lim, base)
                start = base + i
                pos = start + n
                if pos > end:
                    raise Malformed(f"field {field} of {n} bytes at offset {start} runs "
                                     f"past the end of its message ({end})")
                yield field, 2, (start, pos)
            elif wire == 1 or wire == 5:
                pos = base + i + (8 if wire == 1 else 4)
                if pos > end:
                    raise Malformed(f"field {field} runs past the end of its message "
                                     f"({end})")
                yield field, wire, None
            else:
                raise Malformed(f"field {field} has wire type {wire} (groups are not used)")
            if self.base != base or self.top != top:  # a nested walk moved the window
                buf, base, top = self.buf, self.base, self.top

    def mutation(self, pos: int, end: int, mut) -> None:
        """``mut``'s fields from the ``TableMutation`` at ``[pos, end)``: :meth:`fields`
        and :class:`WireMutation`'s reading in one loop (a row a field: the hot path of a
        large transaction's walk), positions kept relative to the window."""
        ins, upd, dele = mut.inserted_rows, mut.updated_rows, mut.deleted_rows
        ins_a, ins_b = ins._starts.append, ins._stops.append
        upd_a, upd_b = upd._starts.append, upd._stops.append
        del_a, del_b = dele._starts.append, dele._stops.append
        seq = mut.sequence
        buf, base, top = self.buf, self.base, self.top
        i, e, t = pos - base, end - base, top - base
        while i < e:
            if i + HEADER_BYTES > t and t < e:
                self.ensure(base + i, HEADER_BYTES, end)
                i += base
                buf, base, top = self.buf, self.base, self.top
                i, e, t = i - base, end - base, top - base
            lim = t if t < e else e
            key = buf[i]
            if key < 0x80:
                i += 1
            else:
                key, i = varint(buf, i, lim, base)
            field, wire = key >> 3, key & 7
            if wire == 2:
                n = buf[i] if i < lim else 0x80
                if n < 0x80:
                    i += 1
                else:
                    n, i = varint(buf, i, lim, base)
                start = i
                i += n
                if i > e:
                    raise Malformed(f"field {field} of {n} bytes at offset {base + start} "
                                     f"runs past the end of its message ({end})")
                if field == 2:
                    ins_a(base + start)
                    ins_b(base + i)
                elif field == 3:
                    upd_a(base + start)
                    upd_b(base + i)
                elif field == 6:
                    del_a(base + start)
                    del_b(base + i)
                elif field == 7:  # packed: read through the window, which it moves
                    i += base
                    self.packed((base + start, i), seq)
                    buf, base, top = self.buf, self.base, self.top
                    i, e, t = i - base, end - base, top - base
                elif field == 0:
                    raise Malformed(f"field number 0 at offset {base + start}")
            elif wire == 0:
                value = buf[i] if i < lim else 0x80
                if value < 0x80:
                    i += 1
                else:
                    value, i = varint(buf, i, lim, base)
                if field == 1:
                    mut.table_id = signed(value)
                elif field == 7:
                    if value in _MUTATION_TYPES:
                        seq.append(value)
                elif field == 0:
                    raise Malformed(f"field number 0 at offset {base + i}")
            elif wire == 1 or wire == 5:
                if field == 0:
                    raise Malformed(f"field number 0 at offset {base + i}")
                i += 8 if wire == 1 else 4
                if i > e:
                    raise Malformed(f"field {field} runs past the end of its message "
                                     f"({end})")
            else:
                raise Malformed(f"field {field} has wire type {wire} (groups are not used)")

    def packed(self, span: tuple[int, int], seq: array) -> None:
        """:func:`_packed` read through the window."""
        pos, end = span
        buf, base, top = self.buf, self.base, self.top
        while pos < end:
            if pos + 10 > top and top < end:
                self.ensure(pos, 10, end)
                buf, base, top = self.buf, self.base, self.top
            lim = (top if top < end else end) - base
            safe = lim if top >= end else lim - 10
            i = pos - base
            while True:  # the varints wholly in the window, without a check each
                v, i = varint(buf, i, lim, base)
                if v in _MUTATION_TYPES:
                    seq.append(v)
                if i >= safe:
                    break
            pos = base + i
