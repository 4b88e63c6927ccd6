"""The read side of the pump storage: serving commits in commit_ts order.

:meth:`CommitReader.pull` walks the index's ``ts:`` keys in ``(since, upto]``
(``upto`` = the storage's ``max_commit_ts``: everything at or below it is
paired) and returns ``(commit_ts, payload)`` for

- each Commit, filled with its Prewrite's ``prewrite_key``, ``prewrite_value``,
  ``ddl_query``, ``ddl_job_id`` and ``ddl_schema_state`` (TiDB's
  ``feedPreWriteValue``), and
- each fake binlog (Rollback with ``start_ts == commit_ts``), unchanged.

Prewrites share the key space (indexed by start_ts) and are not served: every
key is read through a :class:`~tidb_binlog.pump.storage.vlog.BlockReader` (one ``pread`` of
256 KiB serves the records of a pass that lie near each other; a record outside it
costs one ``pread`` of header + 4 KiB); a payload starting ``08 00``
(tp = Prewrite) that fits whole is kept for its Commit later in the same pass
(it comes first: start_ts < commit_ts), so a Commit is filled without another
index lookup or read; a bigger Prewrite is not read further, and its Commit
looks it up through the index. The batch stops before the item that would take it past ``max_bytes``
(it always holds at least one item if any is ready) or at ``max_count`` items.

Damage stops the pull (:class:`~tidb_binlog.errors.DamagedBinlog`, counted in
``binlog_pump_storage_error_count{type=read_value}``): a record whose magic, length or
CRC does not check out, or that is not the binlog its index key names (a Prewrite's
start_ts, a Commit's or fake binlog's commit_ts: a stale index entry pointing at
another record), an entry recovery marked lost (:data:`~.index.LOST`: its bytes were
cut with a damaged tail), and a Commit whose Prewrite record is damaged or lost. It is raised, not
skipped, because the binlog was acknowledged: serving what comes after it would be a
silent gap downstream. The error names the ts; nothing after it is served until an
operator repairs the storage (see the README's "Damaged binlogs").

A Commit whose Prewrite is large (at least ``LARGE_PAYLOAD_BYTES``, 1 MiB) is filled by
splicing (:func:`spliced_commit`): the Prewrite's fields are sliced out of the record
as read and joined once with the Commit's own, byte for byte what protobuf would write,
without the three copies of the value that parsing, setting and serializing make.

With ``ref_above > 0`` a Commit whose filled payload would be that large comes as a
:class:`~tidb_binlog.binlog_ref.BinlogRef` instead, never built (:mod:`.payload_ref`
sizes it from the records' layout); :meth:`CommitReader.read_payload` reads ranges of it.

Skipped: a CRC-valid record that is not a binlog (a writer's bug; logged once, as
recovery ignores it). Skipped (TiDB's behaviour): a Commit whose Prewrite is not on this pump (never
written here, or purged by GC), logged once per start_ts and counted under
``type=feed_pre_write_value``, and Rollbacks. :meth:`CommitReader.pull` returns the
position it examined up to along with the batch, so a caller moves past skipped
keys instead of reading them again (a reader connected to a pump holding such a
Commit idles, it does not spin).
"""

from __future__ import annotations

import logging
import threading

from google.protobuf.message import DecodeError

from tidb_binlog import binlog as bl
from tidb_binlog.binlog_ref import BinlogRef
from tidb_binlog.errors import CorruptRecord, DamagedBinlog, ProtocolError, StorageError
from tidb_binlog.logs import txn
from tidb_binlog.pump.storage.index import LOST
from tidb_binlog.pump.storage.payload_ref import (
    LAYOUT_READ_BYTES,
    ServedLayout,
    read_range,
    served_layout,
)
from tidb_binlog.pump.storage.protocol import REF_ITEM_BYTES
from tidb_binlog.pump.storage.protowire import BINLOG_WIRE_TYPES, fields, varint

__all__ = ["CommitReader"]

log = logging.getLogger(__name__)

_COMMIT = bl.BinlogType.COMMIT
_PREWRITE_PREFIX = b"\x08\x00"  # a payload starting tp = Prewrite: not served by pulls
# One pread of header + this much per index key: a commit, a fake binlog and most
# prewrites fit whole (a pread of 4 KiB costs about what one of 256 bytes does).
_FIRST_READ_BYTES = 4096
# Prewrites read whole are kept (by start_ts) for their commit later in the same pass,
# instead of a second index lookup and pread; at most this many per pass.
_MAX_SEEN_PREWRITES = 4096
# Orphan commits already logged (by start_ts); forgotten wholesale past this many.
_MAX_REPORTED_ORPHANS = 100_000
LARGE_PAYLOAD_BYTES = 1 << 20  # the pump's threshold too (tidb_binlog.pump.wire)
_START_TS_TAG = 0x10  # field 2 (start_ts), varint: follows tp in every stored payload
# A filled Commit is at most its record + its Prewrite's record + this much (the
# "prewrite_value absent" field and ddl_job_id / ddl_schema_state the fill always writes)
_FILL_SLACK_BYTES = 32
_SKIP = object()  # _ref(): the binlog is skipped (its damaged prewrite was given up)
_MAX_LAYOUTS = 8  # served layouts kept for read_payload (a reader walks one at a time)


def _start_ts_of_prewrite(payload: bytes) -> int:
    """The start_ts of a payload starting ``08 00`` (tp = Prewrite), from its first
    bytes (the record may be read only partly); -1 if it is not where protobuf puts it."""
    if len(payload) < 4 or payload[2] != _START_TS_TAG:
        return -1
    value = shift = 0
    for byte in payload[3:13]:
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    return -1


def spliced_commit(c: bl.Binlog, raw: bytes) -> bytes | None:
    """Commit ``c`` filled with the fields of the serialized Prewrite ``raw`` (what
    :meth:`CommitReader.filled` does through protobuf), built by slicing ``raw``: one
    copy of its value. None when ``raw`` is not laid out as expected (the caller then
    goes through protobuf, which also reports damage)."""
    p: dict[int, object] = {}
    try:
        for number, wire, value in fields(raw):
            if BINLOG_WIRE_TYPES.get(number, wire) != wire:
                return None  # protobuf refuses it: the caller reports the damage
            p[number] = value  # last one wins, as protobuf's parse
    except ProtocolError:
        return None
    if p.get(1, 0) != bl.BinlogType.PREWRITE or p.get(2, 0) & ((1 << 64) - 1) \
            != c.start_ts & ((1 << 64) - 1):
        return None
    view = memoryview(raw)

    def raw_bytes(tag: bytes, span) -> list:
        return [tag, varint(span[1] - span[0]), view[span[0]:span[1]]]

    parts: list = []
    for number, name in ((1, "tp"), (2, "start_ts"), (3, "commit_ts")):
        if c.HasField(name):
            parts += (bytes((number << 3,)), varint(getattr(c, name)))
    if isinstance(p.get(4), tuple):
        parts += raw_bytes(b"\x22", p[4])
    elif c.HasField("prewrite_key"):
        parts += (b"\x22", varint(len(c.prewrite_key)), c.prewrite_key)
    parts += raw_bytes(b"\x2a", p[5]) if isinstance(p.get(5), tuple) else [b"\x2a\x00"]
    if isinstance(p.get(6), tuple):
        parts += raw_bytes(b"\x32", p[6])
    elif c.HasField("ddl_query"):
        parts += (b"\x32", varint(len(c.ddl_query)), c.ddl_query)
    for number in (7, 8):
        value = p.get(number, 0)
        if isinstance(value, tuple):
            return None
        parts += (bytes((number << 3,)), varint(value))
    return b"".join(parts)


class CommitReader:
    """Reads served binlogs from an index and a value log (see the module docstring)."""

    def __init__(self, index, vlog, metrics, *, skip_damaged_ts=frozenset()):
        self._index = index
        self._skip_damaged = frozenset(skip_damaged_ts)
        self._vlog = vlog
        self._metrics = metrics
        self._reported_orphans: set[int] = set()
        self._reported_skips: set[int] = set()
        self._reported_damage: set[int] = set()
        self._layouts: dict[int, ServedLayout] = {}  # commit_ts -> layout (read_payload)
        self._layouts_lock = threading.Lock()  # reads run on several actor threads

    def pull(self, since_commit_ts: int, upto_ts: int, max_bytes: int,
             max_count: int, *, ref_above: int = 0, node_id: str = ""
             ) -> tuple[list[tuple[int, bytes | BinlogRef]], int]:
        """``(commit_ts, payload)`` of commits and fake binlogs in ``(since, upto]``, and
        the position examined up to: every served binlog at or below it is in the batch
        or at or below ``since`` (``upto`` when the range was read to its end, else the
        last item's ts). Raises :class:`DamagedBinlog` at the first damaged key when it
        comes first, else returns the items before it (the next pull raises).

        With ``ref_above > 0`` a Commit whose served payload is ``ref_above`` bytes or
        more comes as ``BinlogRef(node_id, commit_ts, start_ts, size)``, its size
        computed from the records' layout (the payload is never built; its Prewrite's
        CRC is checked 4 MiB at a time). A reference counts :data:`REF_ITEM_BYTES`
        against ``max_bytes`` and ends the batch: at most one per batch, last (the
        reader fetches it separately, and a consumer that counts its ``len()`` = size
        then sees at most ``max_bytes`` of payloads plus one reference per batch)."""
        out: list[tuple[int, bytes | BinlogRef]] = []
        size = 0
        position = upto_ts
        seen: dict[int, bytes] = {}  # start_ts -> Prewrite payload read during this pass
        read_first = self._vlog.block_reader().read_first
        for ts, ptr in self._index.iter_range(since_commit_ts, upto_ts):
            try:
                if ptr == LOST:
                    raise self._lost("its record")
                payload, complete = read_first(ptr, _FIRST_READ_BYTES)
                if payload.startswith(_PREWRITE_PREFIX):
                    start_ts = _start_ts_of_prewrite(payload)
                    if start_ts != ts:
                        raise CorruptRecord(f"the record at {ptr.fid:06d}.vlog offset "
                                            f"{ptr.offset} is a prewrite with start_ts "
                                            f"{start_ts}, not the binlog the index names")
                    if complete and len(seen) < _MAX_SEEN_PREWRITES:
                        seen[ts] = payload
                    continue
                if ref_above > 0 and complete:
                    ref = self._ref(payload, ts, seen, ref_above, node_id)
                    if ref is _SKIP:
                        continue
                    if ref is not None:
                        if out and size + REF_ITEM_BYTES > max_bytes:
                            position = out[-1][0]
                            break
                        out.append((ts, ref))
                        position = ts
                        break
                if not complete:
                    payload = self._vlog.read(ptr)
                payload = self.filled(payload, ts, seen)
            except DecodeError as exc:
                # whole and CRC-valid, yet not a binlog: a writer stored a payload that did
                # not match its binlog (recovery ignores it the same way); not damage
                self._metrics.error_count.labels("read_value").inc()
                if ts not in self._reported_skips:
                    self._reported_skips.add(ts)
                    log.error("not serving ts %d: its record is not a binlog (%s)", ts, exc)
                continue
            except CorruptRecord as exc:
                if ts in self._skip_damaged:
                    self._skip_once(ts, exc)
                    continue
                if out:  # serve what comes before it first; the next pull starts here
                    position = out[-1][0]
                    break
                self._metrics.error_count.labels("read_value").inc()
                raise self._damaged(ts, ptr, exc) from exc
            if payload is None:
                continue
            if out and size + len(payload) > max_bytes:
                position = out[-1][0]
                break
            out.append((ts, payload))
            size += len(payload)
            if len(out) >= max_count:
                position = ts
                break
        return out, position

    def _ref(self, payload: bytes, ts: int, seen: dict[int, bytes], ref_above: int,
             node_id: str):
        """A :class:`BinlogRef` for the Commit record ``payload`` at ``ts`` when its
        served payload is ``ref_above`` bytes or more; None to serve it the ordinary way
        (small, a fake binlog, anything odd: :meth:`filled` decides and reports);
        :data:`_SKIP` when its damaged Prewrite was given up. Reads the Prewrite's
        record header and field headers, then its body 4 MiB at a time for the CRC."""
        c = bl.Binlog.FromString(payload)
        if c.tp != _COMMIT or c.commit_ts != ts:
            return None
        raw = seen.get(c.start_ts)
        if raw is not None and len(payload) + len(raw) + _FILL_SLACK_BYTES < ref_above:
            return None
        pptr = self._index.lookup(c.start_ts)
        if pptr is None or pptr == LOST or not self._vlog.has_file(pptr.fid):
            return None
        try:
            first, length, crc = self._vlog.record_start(pptr, LAYOUT_READ_BYTES)
            if len(payload) + length + _FILL_SLACK_BYTES < ref_above:
                return None
            layout = served_layout(self._vlog, c, pptr, first, length)
            if layout is None or layout.size < ref_above:
                return None
            self._vlog.verify_record(pptr, length, crc)
        except CorruptRecord as exc:
            return _SKIP if self._damaged_prewrite(c, ts, exc) is None else None
        self._layouts_put(ts, layout)
        return BinlogRef(node_id, ts, c.start_ts, layout.size)

    def _layouts_put(self, ts: int, layout: ServedLayout) -> None:
        with self._layouts_lock:
            layouts = self._layouts
            layouts.pop(ts, None)
            layouts[ts] = layout
            while len(layouts) > _MAX_LAYOUTS:
                del layouts[next(iter(layouts))]

    def read_payload(self, commit_ts: int, offset: int, size: int) -> bytes | bytearray:
        """Bytes ``[offset, offset+size)`` of the payload a pull serves for
        ``commit_ts`` (a Commit filled with its Prewrite's fields), read from the value
        log: the Commit record (small), the Prewrite's field headers, then only the
        requested range of its value (:mod:`.payload_ref`). The record is looked up by
        ``commit_ts`` through the index (the layouts of the last few are kept, in memory
        only, while their value-log file exists: the bytes they point at never change),
        so it works the same after a restart.
        Raises StorageError when nothing is served under ``commit_ts`` here,
        ProtocolError for a range outside the payload, CorruptRecord for a damaged
        record."""
        if offset < 0 or size < 0:
            raise ProtocolError(f"read of {size} bytes at offset {offset} of the binlog at "
                                f"commit_ts {commit_ts}: offset and size must be >= 0")
        with self._layouts_lock:
            layout = self._layouts.get(commit_ts)
        if layout is None or not self._vlog.has_file(layout.fid):
            layout = self._layout_of(commit_ts)
        if isinstance(layout, ServedLayout):
            total = layout.size
        else:
            total = len(layout)
        if offset + size > total:
            raise ProtocolError(f"read of {size} bytes at offset {offset} is past the end of "
                                f"the binlog at commit_ts {commit_ts} ({total} bytes): read "
                                "within the size its BinlogRef gives")
        if not isinstance(layout, ServedLayout):
            return layout[offset:offset + size]
        return read_range(self._vlog, layout, offset, size)

    def _layout_of(self, commit_ts: int) -> ServedLayout | bytes:
        """The layout of the binlog served at ``commit_ts`` (cached), or its payload
        itself when it is not a Commit laid out for splicing (a fake binlog, an odd
        Prewrite: small or rare; built as a pull would)."""
        def unknown(why: str) -> StorageError:
            return StorageError(f"no binlog is served at commit_ts {commit_ts} ({why}): it "
                                "was never on this pump, or was purged by GC; a reference is "
                                "good only on the pump whose pull made it: pull again from "
                                "the checkpoint")
        ptr = self._index.lookup(commit_ts)
        if ptr is None:
            raise unknown("no index entry")
        if ptr == LOST:
            raise self._lost("its record")
        if not self._vlog.has_file(ptr.fid):
            raise unknown(f"value log file {ptr.fid:06d}.vlog is gone")
        payload = self._vlog.read(ptr)
        if payload.startswith(_PREWRITE_PREFIX):
            raise unknown("the key names a Prewrite, which is not served")
        c = bl.Binlog.FromString(payload)
        if c.commit_ts != commit_ts:
            raise CorruptRecord(f"the record for commit_ts {commit_ts} is a binlog with "
                                f"commit_ts {c.commit_ts}, not the one the index names",
                                path=str(self._vlog.dir), offset=ptr.offset)
        if c.tp == _COMMIT:
            pptr = self._index.lookup(c.start_ts)
            if pptr is not None and pptr != LOST and self._vlog.has_file(pptr.fid):
                first, length, _ = self._vlog.record_start(pptr, LAYOUT_READ_BYTES)
                layout = served_layout(self._vlog, c, pptr, first, length)
                if layout is not None:
                    self._layouts_put(commit_ts, layout)
                    return layout
        filled = self.filled(payload, commit_ts)
        if filled is None:
            raise unknown("a Rollback, or a Commit whose Prewrite is not here")
        return filled

    def _skip_once(self, ts: int, exc: Exception) -> None:
        if ts not in self._reported_skips:
            self._reported_skips.add(ts)
            log.warning("skipping the damaged binlog at ts %d as configured (storage."
                        "skip-damaged-ts): %s", ts, exc)

    def _damaged(self, ts: int, ptr, exc: CorruptRecord) -> DamagedBinlog:
        path = exc.path or str(self._vlog.dir / f"{ptr.fid:06d}.vlog")
        offset = exc.offset
        if ptr == LOST:
            path, offset = str(self._vlog.dir), None
        msg = (f"pump storage cannot serve the binlog at ts {ts} ({exc}); pulls stop before "
               "it so no reader skips an acknowledged binlog: restore this pump's data dir "
               "from a copy, or let the drainers skip it with [storage] skip-damaged-ts = "
               f"[{ts}] in pump.toml (its transaction is then missing downstream)")
        if ts not in self._reported_damage:  # once per ts: a reader may ask again and again
            self._reported_damage.add(ts)
            log.error("%s", msg)
        if offset is None and ptr != LOST:
            offset = ptr.offset
        return DamagedBinlog(msg, path=path, offset=offset, ts=ts)

    def filled(self, payload: bytes, ts: int, seen: dict[int, bytes] | None = None
               ) -> bytes | None:
        """A Commit filled with its Prewrite's fields, a fake binlog as it is, None for
        what is not served (a Commit whose Prewrite is gone, a Rollback). The Prewrite
        comes from ``seen`` (read earlier in the same pass) or through the index.
        Raises CorruptRecord when the record is not the binlog key ``ts`` names or its
        Prewrite's record is damaged. Parse + set + marshal through protobuf's C
        parser: it keeps TiDB's field order and measured faster than splicing the
        serialized bytes in Python."""
        c = bl.Binlog.FromString(payload)
        if c.commit_ts != ts:
            raise CorruptRecord(f"the record there is a binlog of type {c.tp} with start_ts "
                                f"{c.start_ts}, commit_ts {c.commit_ts}, not the one the index "
                                "names")
        if c.tp != _COMMIT:
            return payload if c.start_ts == c.commit_ts else None  # fake passes through
        raw = seen.pop(c.start_ts, None) if seen else None
        if raw is None:
            ptr = self._index.lookup(c.start_ts)
            if ptr is None or (ptr != LOST and not self._vlog.has_file(ptr.fid)):
                self._orphan(ts, c.start_ts)
                return None
            try:
                if ptr == LOST:
                    raise self._lost("the record")
                raw = self._vlog.read(ptr)
            except CorruptRecord as exc:
                return self._damaged_prewrite(c, ts, exc)
        if len(raw) >= LARGE_PAYLOAD_BYTES:
            spliced = spliced_commit(c, raw)
            if spliced is not None:
                return spliced
        try:
            p = bl.Binlog.FromString(raw)
        except DecodeError as exc:
            return self._damaged_prewrite(c, ts, exc)
        if p.tp != bl.BinlogType.PREWRITE or p.start_ts != c.start_ts:
            raise CorruptRecord(f"the index entry of its prewrite (start_ts {c.start_ts}) "
                                f"points at another binlog (type {p.tp}, start_ts "
                                f"{p.start_ts})")
        if p.HasField("prewrite_key"):
            c.prewrite_key = p.prewrite_key
        c.prewrite_value = p.prewrite_value
        if p.HasField("ddl_query"):
            c.ddl_query = p.ddl_query
        c.ddl_job_id = p.ddl_job_id
        c.ddl_schema_state = p.ddl_schema_state
        return c.SerializeToString()

    def _damaged_prewrite(self, c: bl.Binlog, ts: int, exc: CorruptRecord | DecodeError
                          ) -> None:
        """None (skipped) when the Prewrite of Commit ``c`` was given up by the operator;
        else raise CorruptRecord naming it."""
        if c.start_ts in self._skip_damaged:  # given up with its prewrite's ts
            self._skip_once(ts, exc)
            return None
        where = (exc.path, exc.offset) if isinstance(exc, CorruptRecord) else (None, None)
        raise CorruptRecord(f"its prewrite (start_ts {c.start_ts}) is damaged: {exc}",
                            path=where[0], offset=where[1]) from exc

    def _lost(self, what: str) -> CorruptRecord:
        return CorruptRecord(f"{what} was cut from the value log when the pump recovered "
                             "from a damaged tail", path=str(self._vlog.dir), offset=None)

    def _orphan(self, commit_ts: int, start_ts: int) -> None:
        """A Commit whose Prewrite is not here: skipped, logged and counted once per
        start_ts (every later pass over it would say the same)."""
        reported = self._reported_orphans
        if start_ts in reported:
            return
        if len(reported) >= _MAX_REPORTED_ORPHANS:
            reported.clear()
        reported.add(start_ts)
        log.error("commit binlog at commit_ts %d: its prewrite (start_ts %d) is not on this "
                  "pump (never written here, or purged by GC); skipped", commit_ts, start_ts,
                  extra=txn(commit_ts))
        self._metrics.error_count.labels("feed_pre_write_value").inc()

    def get_binlog(self, ts: int) -> bl.Binlog | None:
        """The stored binlog under index key ``ts`` (P by start_ts, C by commit_ts)."""
        ptr = self._index.lookup(ts)
        return None if ptr is None or ptr == LOST else bl.decode(self._vlog.read(ptr))
