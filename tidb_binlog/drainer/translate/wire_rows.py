"""The row lists of a ``TableMutation`` read in place (:mod:`.wire`): :class:`Rows` over
the payload's bytes, :class:`SourceRows` over a
:class:`~tidb_binlog.binlog_ref.ByteSource`, whose rows :class:`RowReader` reads by range
(one read per run of rows in byte order, :func:`_run`; rows asked one at a time from a
few cached blocks). Each row is handed out as its own ``bytes``, as protobuf's
accessors return it.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from itertools import islice
from operator import ge

from tidb_binlog.drainer.translate.wire_fields import read_exact

__all__ = ["Rows", "SourceRows", "RowReader"]

_ROW_BLOCK = 1 << 20  # at most this much read ahead for rows asked one at a time
_ROW_BLOCKS = 4  # row blocks kept (one per row list in use, and one spare)


class Rows:
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


class RowReader:
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
            buf = memoryview(read_exact(self.source, first, stops[j - 1] - first))
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
        buf = memoryview(read_exact(self.source, a, hi - a))
        self.blocks.append((a, hi, buf))
        if len(self.blocks) > _ROW_BLOCKS:
            del self.blocks[0]
        return bytes(buf[:b - a])


class SourceRows:
    """:class:`Rows` whose bytes are read from a source when asked (:class:`RowReader`)."""

    __slots__ = ("_reader", "_starts", "_stops")

    def __init__(self, reader: RowReader):
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
