"""A large Commit binlog read field by field from its serialized bytes (no protobuf message).

Protobuf parses a whole message: a ``Binlog`` of a 1 GiB transaction is one copy of its
``prewrite_value``, reading that field another, the parsed ``PrewriteValue`` a third,
next to the payload the keeper was handed (the schema keeper held ~5x a large
transaction's size this way). :func:`read_binlog` reads only the ``Binlog``'s scalar
fields and points into the payload for ``prewrite_value``; :class:`WirePrewrite` walks
that value once, noting where each row image of each ``TableMutation`` starts and ends
(16 bytes a row), and hands each row out as its own small ``bytes`` when asked. What it
holds is the payload plus those offsets, whatever the transaction's size.

**From a source, through a window** (a binlog served by reference,
:mod:`tidb_binlog.binlog_ref`: no process may hold it whole). :func:`read_binlog_from`
and :meth:`WirePrewrite.from_source` read the same fields from a
:class:`~tidb_binlog.binlog_ref.ByteSource`: the walk reads the bytes forward in
windows of at most ``window`` bytes (one ``read`` each; a field header straddling two
windows keeps the old window's tail, under 20 bytes, and appends the next; a field's
data the walk skips, such as a row image, is never read), noting row offsets as above;
a chunk's rows are then read by range (:class:`_RowReader`: one ``read`` per run of
rows in byte order, from the first asked to the last, at most ``window`` bytes unless a
single row is larger, and wasting at most about as many bytes as it returns, so rows of
two lists interleaved in the bytes take smaller reads). What it holds is the offsets
plus one window (plus, while rows are read one at a time, a few row blocks of at most
1 MiB each); the bytes it reads for a whole walk plus all rows are about twice the
prewrite value's. Both paths walk a mutation with the same loop
(:meth:`_Cursor.mutation`; bytes are a cursor's one window, which never reads).

The reading is protobuf's (proto2, ``tidb_binlog/proto/binlog.proto``): fields in any
order, a repeated scalar packed or not, the last value of a scalar field wins, unknown
fields (wire types 0, 1, 2, 5) skipped, an enum value the enum does not name dropped
(proto2 keeps it as an unknown field: ``sequence`` never shows it), int64 as two's
complement. Malformed bytes raise :class:`~tidb_binlog.errors.ProtocolError` before any
row is handed out, as the protobuf parse did (through a window too: a varint or a field
header across two windows is read whole, a length running past its message's end is
refused whatever window it ends in). ``tests/unit/test_drainer_wire_prewrite.py`` and
``tests/unit/test_drainer_wire_source.py`` check the reading against protobuf's.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from functools import partial
from itertools import islice
from operator import ge

from tidb_binlog.errors import ProtocolError

__all__ = ["WireBinlog", "WirePrewrite", "WireMutation", "SourceSlice", "read_binlog",
           "read_binlog_from", "read_large", "DEFAULT_WINDOW"]

_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_MUTATION_TYPES = frozenset(range(5))  # binlog.MutationType: Insert .. DeleteRow
_BINLOG_TYPES = frozenset(range(5))  # binlog.BinlogType: Prewrite .. PostDDL

# The window a walk over a ByteSource reads through by default (the keeper's
# REF_WINDOW_BYTES is the one that counts in the drainer)
DEFAULT_WINDOW = 8 << 20
_HEADER = 20  # a field's key and its varint value or length: at most 10 + 10 bytes
_ROW_BLOCK = 1 << 20  # at most this much read ahead for rows asked one at a time
_ROW_BLOCKS = 4  # row blocks kept (one per row list in use, and one spare)


class _Malformed(Exception):
    """A wire-format error at a byte offset (turned into ProtocolError by the caller)."""


def _varint(buf, pos: int, end: int, base: int = 0) -> tuple[int, int]:
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
            raise _Malformed(f"varint longer than 10 bytes at offset {base + pos}")
    raise _Malformed(f"truncated varint at offset {base + pos}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value & _SIGN else value


def _skip(buf, pos: int, end: int, wire: int, field: int) -> int:
    """The position after an unknown field's value."""
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    elif wire == 2:
        n, pos = _varint(buf, pos, end)
        pos += n
    else:
        raise _Malformed(f"field {field} has wire type {wire} (groups are not used)")
    if pos > end:
        raise _Malformed(f"field {field} runs past the end of its message ({end})")
    return pos


def _fields(buf, pos: int, end: int):
    """``(field, wire type, value)`` of each field in ``buf[pos:end]``; the value
    of a length-delimited field is its ``(start, stop)``, of a varint the integer, of the
    others None (skipped)."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _Malformed(f"field number 0 at offset {pos}")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wire, value
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise _Malformed(f"field {field} of {n} bytes at offset {pos} runs past the "
                                 f"end of its message ({end})")
            yield field, wire, (pos, stop)
            pos = stop
        else:
            pos = _skip(buf, pos, end, wire, field)
            yield field, wire, None


def _read(source, offset: int, n: int):
    """``source.read`` checked: exactly ``n`` bytes (a short read would shift every
    offset after it, so it is an error here even if the source did not raise)."""
    got = source.read(offset, n)
    if len(got) != n:
        raise ProtocolError(f"the byte source of {source.size} bytes returned {len(got)} "
                            f"bytes at offset {offset}, asked for {n}: the payload changed "
                            "or the source is broken (the reader cannot go on)")
    return got


class _Cursor:
    """A forward walk over ``source`` bytes below ``limit`` through one window: ``buf``
    holds the bytes ``[base, top)``, at most ``window`` plus a field header's tail.
    Walks nest (a mutation inside the prewrite value, a packed sequence inside a
    mutation): they share the window, and an outer walk picks it up again after each
    field it handed out (:meth:`fields`)."""

    __slots__ = ("source", "window", "limit", "buf", "base", "top")

    def __init__(self, source, window: int, limit: int, head=None):
        if window < 1:
            raise ValueError(f"window must be >= 1 byte, got {window}")
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
            got = _read(self.source, top, n)
            buf = bytes(buf) + got if len(buf) else got
            top += n
        self.buf, self.base, self.top = buf, pos, top

    def fields(self, pos: int, end: int):
        """:func:`_fields` of ``[pos, end)`` read through the window (positions are
        the payload's)."""
        buf, base, top = self.buf, self.base, self.top
        while pos < end:
            if pos + _HEADER > top and top < end:
                self.ensure(pos, _HEADER, end)
                buf, base, top = self.buf, self.base, self.top
            # the header is in buf: whole, or up to the message's end
            lim = (top if top < end else end) - base
            i = pos - base
            key = buf[i]
            if key < 0x80:
                i += 1
            else:
                key, i = _varint(buf, i, lim, base)
            field, wire = key >> 3, key & 7
            if field == 0:
                raise _Malformed(f"field number 0 at offset {base + i}")
            if wire == 0:
                value = buf[i] if i < lim else 0x80
                if value < 0x80:
                    i += 1
                else:
                    value, i = _varint(buf, i, lim, base)
                pos = base + i
                yield field, 0, value
            elif wire == 2:
                n = buf[i] if i < lim else 0x80
                if n < 0x80:
                    i += 1
                else:
                    n, i = _varint(buf, i, lim, base)
                start = base + i
                pos = start + n
                if pos > end:
                    raise _Malformed(f"field {field} of {n} bytes at offset {start} runs "
                                     f"past the end of its message ({end})")
                yield field, 2, (start, pos)
            elif wire == 1 or wire == 5:
                pos = base + i + (8 if wire == 1 else 4)
                if pos > end:
                    raise _Malformed(f"field {field} runs past the end of its message "
                                     f"({end})")
                yield field, wire, None
            else:
                raise _Malformed(f"field {field} has wire type {wire} (groups are not used)")
            if self.base != base or self.top != top:  # a nested walk moved the window
                buf, base, top = self.buf, self.base, self.top

    def mutation(self, pos: int, end: int, mut: WireMutation) -> None:
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
            if i + _HEADER > t and t < e:
                self.ensure(base + i, _HEADER, end)
                i += base
                buf, base, top = self.buf, self.base, self.top
                i, e, t = i - base, end - base, top - base
            lim = t if t < e else e
            key = buf[i]
            if key < 0x80:
                i += 1
            else:
                key, i = _varint(buf, i, lim, base)
            field, wire = key >> 3, key & 7
            if wire == 2:
                n = buf[i] if i < lim else 0x80
                if n < 0x80:
                    i += 1
                else:
                    n, i = _varint(buf, i, lim, base)
                start = i
                i += n
                if i > e:
                    raise _Malformed(f"field {field} of {n} bytes at offset {base + start} "
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
                    raise _Malformed(f"field number 0 at offset {base + start}")
            elif wire == 0:
                value = buf[i] if i < lim else 0x80
                if value < 0x80:
                    i += 1
                else:
                    value, i = _varint(buf, i, lim, base)
                if field == 1:
                    mut.table_id = _signed(value)
                elif field == 7:
                    if value in _MUTATION_TYPES:
                        seq.append(value)
                elif field == 0:
                    raise _Malformed(f"field number 0 at offset {base + i}")
            elif wire == 1 or wire == 5:
                if field == 0:
                    raise _Malformed(f"field number 0 at offset {base + i}")
                i += 8 if wire == 1 else 4
                if i > e:
                    raise _Malformed(f"field {field} runs past the end of its message "
                                     f"({end})")
            else:
                raise _Malformed(f"field {field} has wire type {wire} (groups are not used)")

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
                v, i = _varint(buf, i, lim, base)
                if v in _MUTATION_TYPES:
                    seq.append(v)
                if i >= safe:
                    break
            pos = base + i


class SourceSlice:
    """``[start, stop)`` of a :class:`~tidb_binlog.binlog_ref.ByteSource`: the
    ``prewrite_value`` of a :func:`read_binlog_from` binlog, which
    :class:`WirePrewrite` walks through ``window`` (starting from ``head``, the window
    the binlog's own walk held there, so those bytes are not read twice). ``len`` is its
    size in bytes, as ``len(binlog.prewrite_value)`` of a message."""

    __slots__ = ("source", "start", "stop", "window", "head")

    def __init__(self, source, start: int, stop: int, window: int = DEFAULT_WINDOW,
                 head=None):
        if not 0 <= start <= stop <= source.size:
            raise ValueError(f"[{start}, {stop}) is not within the source's {source.size} "
                             "bytes")
        self.source = source
        self.start = start
        self.stop = stop
        self.window = window
        self.head = head

    def __len__(self) -> int:
        return self.stop - self.start


class WireBinlog:
    """The ``Binlog`` fields the keeper reads, from its payload; ``prewrite_value`` is a
    ``memoryview`` into the payload (no copy), or a :class:`SourceSlice` of the source
    it was read from. Duck-types ``binlog_pb2.Binlog`` for
    :meth:`~tidb_binlog.drainer.translate.txn.Translator.may_exceed` and
    :meth:`~tidb_binlog.drainer.translate.txn.Translator.translate_chunks`."""

    __slots__ = ("tp", "start_ts", "commit_ts", "ddl_job_id", "prewrite_value")

    def __init__(self, tp: int, start_ts: int, commit_ts: int, ddl_job_id: int,
                 prewrite_value: memoryview | SourceSlice):
        self.tp = tp
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.ddl_job_id = ddl_job_id
        self.prewrite_value = prewrite_value


def _binlog_fields(fields, on_value=None):
    """``(tp, start_ts, commit_ts, ddl_job_id, (pv start, pv stop))`` from a Binlog's
    fields; None without a known ``tp``. ``on_value`` is called when the
    ``prewrite_value`` field is reached (the source walk notes its window there)."""
    tp = None
    start_ts = commit_ts = ddl_job_id = 0
    pv = (0, 0)
    for field, wire, value in fields:
        if wire == 0:
            if field == 1:
                if value in _BINLOG_TYPES:
                    tp = value
            elif field == 2:
                start_ts = _signed(value)
            elif field == 3:
                commit_ts = _signed(value)
            elif field == 7:
                ddl_job_id = _signed(value)
        elif wire == 2 and field == 5:
            pv = value
            if on_value is not None:
                on_value(value)
    return None if tp is None else (tp, start_ts, commit_ts, ddl_job_id, pv)


def read_binlog(payload: bytes) -> WireBinlog | None:
    """The binlog's scalar fields and a view of its ``prewrite_value``; None when the bytes
    are not a well-formed binlog with ``tp`` (the caller then parses them with protobuf,
    which raises the error it always raised)."""
    view = memoryview(payload)
    try:
        got = _binlog_fields(_fields(view, 0, len(view)))
    except _Malformed:
        return None
    if got is None:
        return None
    tp, start_ts, commit_ts, ddl_job_id, (a, b) = got
    return WireBinlog(tp, start_ts, commit_ts, ddl_job_id, view[a:b])


def read_binlog_from(source, window: int = DEFAULT_WINDOW) -> WireBinlog | None:
    """:func:`read_binlog` of the payload a
    :class:`~tidb_binlog.binlog_ref.ByteSource` reads: the binlog's fields walked
    through reads of at most ``window`` bytes (the ``prewrite_value``'s bytes skipped,
    not read), its ``prewrite_value`` a :class:`SourceSlice` that
    :class:`WirePrewrite` walks the same way. None when the payload is not a
    well-formed binlog with ``tp`` (the caller parses it with protobuf, which raises
    the error it always raised). Errors of the source itself pass through."""
    cur = _Cursor(source, window, source.size)
    head = []

    def note(span):  # the window where prewrite_value starts: its walk starts with it
        if cur.base <= span[0] <= cur.top:
            head[:] = [(cur.buf, cur.base)]

    try:
        got = _binlog_fields(cur.fields(0, source.size), note)
    except _Malformed:
        return None
    if got is None:
        return None
    tp, start_ts, commit_ts, ddl_job_id, (a, b) = got
    return WireBinlog(tp, start_ts, commit_ts, ddl_job_id,
                      SourceSlice(source, a, b, window, head[0] if head else None))


def read_large(payload, above: int, window: int = DEFAULT_WINDOW) -> WireBinlog | None:
    """A payload of more than ``above`` bytes read in place: :func:`read_binlog` of bytes
    (or a view), :func:`read_binlog_from` of a
    :class:`~tidb_binlog.binlog_ref.ByteSource` through ``window``. None for a smaller
    payload, or one that is not a well-formed binlog (the caller parses it whole with
    protobuf, which raises the error it always raised). What every keeper that streams a
    large transaction (row, pb, Parquet) reads first, whichever form it was handed."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return read_binlog(payload) if len(payload) > above else None
    return read_binlog_from(payload, window) if payload.size > above else None


class _Rows:
    """A repeated bytes field read in place: ``len``, ``rows[i]``, ``rows[i:j]`` (new
    ``bytes`` each time, as protobuf's accessors return)."""

    __slots__ = ("_buf", "_starts", "_stops")

    def __init__(self, buf: memoryview):
        self._buf = buf
        self._starts = array("q")
        self._stops = array("q")

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):
        if isinstance(index, slice):
            buf = self._buf
            return [bytes(buf[a:b]) for a, b in zip(self._starts[index], self._stops[index],
                                                    strict=True)]
        return bytes(self._buf[self._starts[index]:self._stops[index]])

    def __iter__(self):
        buf = self._buf
        for a, b in zip(self._starts, self._stops, strict=True):
            yield bytes(buf[a:b])


def _run(starts, stops, i: int, bound: int) -> int:
    """The end ``j`` of the run of rows from ``i`` that one read covers: rows in byte
    order, the span ``[starts[i], stops[j-1])`` at most ``bound`` bytes (the first row
    alone may be larger), and what the span holds besides the rows (their headers,
    rows of another list between them) at most the rows' bytes plus 16 a row."""
    first = starts[i]
    n = len(starts)
    # the usual shape (a list's rows one after another): the longest run within bound
    # found by bisection and checked whole at C speed; the row-by-row walk otherwise
    j = max(bisect_right(stops, first + bound, i, n), i + 1)
    if j > i + 1:
        run_starts, run_stops = starts[i:j], stops[i:j]
        in_order = all(map(ge, islice(run_starts, 1, None), run_stops))
        used = sum(run_stops) - sum(run_starts)
        if in_order and stops[j - 1] - first <= 2 * used + 16 * (j - i):
            return j
    last = stops[i]
    used = last - first
    j = i + 1
    while j < n:
        a, b = starts[j], stops[j]
        if a < last:
            break
        used += b - a
        if b - first > bound or b - first > 2 * used + 16 * (j - i + 1):
            break
        last = b
        j += 1
    return j


class _RowReader:
    """Rows read by range from a source, shared by a prewrite value's row lists:
    :meth:`rows` for a chunk's slice (one read per run, see :func:`_run`), :meth:`row`
    for rows asked one at a time (a block of the following rows of the same list is
    read ahead and kept; at most :data:`_ROW_BLOCKS` blocks)."""

    __slots__ = ("source", "window", "blocks")

    def __init__(self, source, window: int):
        self.source = source
        self.window = window
        self.blocks: list[tuple[int, int, bytes | memoryview]] = []

    def rows(self, starts, stops) -> list[bytes]:
        out: list[bytes] = []
        i, n = 0, len(starts)
        while i < n:
            j = _run(starts, stops, i, self.window)
            first = starts[i]
            buf = memoryview(_read(self.source, first, stops[j - 1] - first))
            out.extend([bytes(buf[a - first:b - first])
                        for a, b in zip(starts[i:j], stops[i:j], strict=True)])
            i = j
        return out

    def row(self, starts, stops, index: int) -> bytes:
        a, b = starts[index], stops[index]
        for lo, hi, buf in self.blocks:
            if lo <= a and b <= hi:
                return bytes(buf[a - lo:b - lo])
        index %= len(starts)
        j = _run(starts, stops, index, min(self.window, _ROW_BLOCK))
        hi = stops[j - 1]
        buf = memoryview(_read(self.source, a, hi - a))
        self.blocks.append((a, hi, buf))
        if len(self.blocks) > _ROW_BLOCKS:
            del self.blocks[0]
        return bytes(buf[:b - a])


class _SourceRows:
    """:class:`_Rows` whose bytes are read from a source when asked (:class:`_RowReader`)."""

    __slots__ = ("_reader", "_starts", "_stops")

    def __init__(self, reader: _RowReader):
        self._reader = reader
        self._starts = array("q")
        self._stops = array("q")

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._reader.rows(self._starts[index], self._stops[index])
        return self._reader.row(self._starts, self._stops, index)

    def __iter__(self):
        step = 4096
        for lo in range(0, len(self._starts), step):
            yield from self[lo:lo + step]


class WireMutation:
    """One ``TableMutation`` as read in place: ``table_id``, ``inserted_rows``,
    ``updated_rows``, ``deleted_rows`` (row lists, see :class:`_Rows`) and ``sequence``
    (the known ``MutationType`` values, in order)."""

    __slots__ = ("table_id", "inserted_rows", "updated_rows", "deleted_rows", "sequence")

    def __init__(self, cur: _Cursor, start: int, stop: int, rows) -> None:
        """The mutation at ``[start, stop)`` walked by ``cur``; ``rows()`` makes an
        empty row list (:class:`_Rows` over the bytes, :class:`_SourceRows` over a
        source)."""
        self.table_id = 0
        self.inserted_rows = rows()
        self.updated_rows = rows()
        self.deleted_rows = rows()
        self.sequence = array("b")  # MutationType values (0..4): a byte each
        cur.mutation(start, stop, self)


class WirePrewrite:
    """A serialized ``PrewriteValue`` read in place: ``schema_version`` and ``mutations``
    (:class:`WireMutation`). Its whole structure is checked here, so a malformed value
    fails before any row is used.

    ``value``: the bytes (or a view of them), or a :class:`SourceSlice` (see
    :meth:`from_source`): then the value is walked through its window and the rows are
    read from the source when asked."""

    def __init__(self, value: bytes | memoryview | SourceSlice):
        self.schema_version = 0
        if isinstance(value, SourceSlice):
            self._walk_source(value)
            return
        buf = value if isinstance(value, memoryview) else memoryview(value)
        spans = []
        try:
            for field, wire, val in _fields(buf, 0, len(buf)):
                if field == 1 and wire == 0:
                    self.schema_version = _signed(val)
                elif field == 2 and wire == 2:
                    spans.append(val)
            # the bytes are the cursor's one window: nothing is ever read
            cur = _Cursor(None, max(len(buf), 1), len(buf), (buf, 0))
            rows = partial(_Rows, buf)
            self.mutations = [WireMutation(cur, a, b, rows) for a, b in spans]
        except _Malformed as exc:
            raise ProtocolError(f"malformed prewrite value ({len(buf)} bytes): {exc}") from None

    @classmethod
    def from_source(cls, source, start: int = 0, stop: int | None = None,
                    window: int = DEFAULT_WINDOW) -> WirePrewrite:
        """The ``PrewriteValue`` at ``[start, stop)`` of a
        :class:`~tidb_binlog.binlog_ref.ByteSource` (``stop`` None: its end), walked
        through reads of at most ``window`` bytes."""
        return cls(SourceSlice(source, start, source.size if stop is None else stop, window))

    def _walk_source(self, value: SourceSlice) -> None:
        """One pass over the value: the mutations walked where the prewrite value's
        walk reaches them, in the same window (each byte read at most once)."""
        cur = _Cursor(value.source, value.window, value.stop, value.head)
        rows = partial(_SourceRows, _RowReader(value.source, value.window))
        mutations = []
        try:
            for field, wire, val in cur.fields(value.start, value.stop):
                if field == 1 and wire == 0:
                    self.schema_version = _signed(val)
                elif field == 2 and wire == 2:
                    mutations.append(WireMutation(cur, *val, rows))
        except _Malformed as exc:
            raise ProtocolError(f"malformed prewrite value ({len(value)} bytes at offset "
                                f"{value.start} of the payload): {exc}") from None
        self.mutations = mutations
