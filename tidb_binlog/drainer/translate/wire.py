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
a chunk's rows are then read by range (:class:`~.wire_rows.RowReader`: one ``read`` per run of
rows in byte order, from the first asked to the last, at most ``window`` bytes unless a
single row is larger, and wasting at most about as many bytes as it returns, so rows of
two lists interleaved in the bytes take smaller reads). What it holds is the offsets
plus one window (plus, while rows are read one at a time, a few row blocks of at most
1 MiB each); the bytes it reads for a whole walk plus all rows are about twice the
prewrite value's. Both paths walk a mutation with the same loop
(:meth:`~.wire_fields.Cursor.mutation`; bytes are a cursor's one window, which never
reads).

The reading is protobuf's (proto2, ``tidb_binlog/proto/binlog.proto``): fields in any
order, a repeated scalar packed or not, the last value of a scalar field wins, unknown
fields (wire types 0, 1, 2, 5) skipped, an enum value the enum does not name dropped
(proto2 keeps it as an unknown field: ``sequence`` never shows it), int64 as two's
complement. Malformed bytes raise :class:`~tidb_binlog.errors.ProtocolError` before any
row is handed out, as the protobuf parse did (through a window too: a varint or a field
header across two windows is read whole, a length running past its message's end is
refused whatever window it ends in). ``tests/unit/test_drainer_wire_prewrite.py`` and
``tests/unit/test_drainer_wire_source.py`` check the reading against protobuf's.

This module holds the message readers (``Binlog``, ``PrewriteValue``,
``TableMutation``); the varint and field reader and the windowed cursor are
:mod:`.wire_fields`', the row lists :mod:`.wire_rows`'.
"""

from __future__ import annotations

from array import array
from functools import partial

from tidb_binlog.drainer.translate.wire_fields import (
    Cursor,
    Malformed,
    fields_of,
    signed,
)
from tidb_binlog.drainer.translate.wire_rows import RowReader, Rows, SourceRows
from tidb_binlog.errors import InvalidArgument, ProtocolError

__all__ = ["WireBinlog", "WirePrewrite", "WireMutation", "SourceSlice", "read_binlog",
           "read_binlog_from", "read_large", "DEFAULT_WINDOW"]

_BINLOG_TYPES = frozenset(range(5))  # binlog.BinlogType: Prewrite .. PostDDL

# The window a walk over a ByteSource reads through by default (the keeper's
# REF_WINDOW_BYTES is the one that counts in the drainer)
DEFAULT_WINDOW = 8 << 20


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
            raise InvalidArgument(f"[{start}, {stop}) is not within the source's {source.size} "
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
                start_ts = signed(value)
            elif field == 3:
                commit_ts = signed(value)
            elif field == 7:
                ddl_job_id = signed(value)
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
        got = _binlog_fields(fields_of(view, 0, len(view)))
    except Malformed:
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
    cur = Cursor(source, window, source.size)
    head = []

    def note(span):  # the window where prewrite_value starts: its walk starts with it
        if cur.base <= span[0] <= cur.top:
            head[:] = [(cur.buf, cur.base)]

    try:
        got = _binlog_fields(cur.fields(0, source.size), note)
    except Malformed:
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


class WireMutation:
    """One ``TableMutation`` as read in place: ``table_id``, ``inserted_rows``,
    ``updated_rows``, ``deleted_rows`` (row lists, see :class:`Rows`) and ``sequence``
    (the known ``MutationType`` values, in order)."""

    __slots__ = ("table_id", "inserted_rows", "updated_rows", "deleted_rows", "sequence")

    def __init__(self, cur: Cursor, start: int, stop: int, rows) -> None:
        """The mutation at ``[start, stop)`` walked by ``cur``; ``rows()`` makes an
        empty row list (:class:`Rows` over the bytes, :class:`SourceRows` over a
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
            for field, wire, val in fields_of(buf, 0, len(buf)):
                if field == 1 and wire == 0:
                    self.schema_version = signed(val)
                elif field == 2 and wire == 2:
                    spans.append(val)
            # the bytes are the cursor's one window: nothing is ever read
            cur = Cursor(None, max(len(buf), 1), len(buf), (buf, 0))
            rows = partial(Rows, buf)
            self.mutations = [WireMutation(cur, a, b, rows) for a, b in spans]
        except Malformed as exc:
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
        cur = Cursor(value.source, value.window, value.stop, value.head)
        rows = partial(SourceRows, RowReader(value.source, value.window))
        mutations = []
        try:
            for field, wire, val in cur.fields(value.start, value.stop):
                if field == 1 and wire == 0:
                    self.schema_version = signed(val)
                elif field == 2 and wire == 2:
                    mutations.append(WireMutation(cur, *val, rows))
        except Malformed as exc:
            raise ProtocolError(f"malformed prewrite value ({len(value)} bytes at offset "
                                f"{value.start} of the payload): {exc}") from None
        self.mutations = mutations
