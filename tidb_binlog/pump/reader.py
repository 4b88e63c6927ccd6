"""The read side of the pump storage: serving commits in commit_ts order.

:meth:`CommitReader.pull` walks the index's ``ts:`` keys in ``(since, upto]``
(``upto`` = the storage's ``max_commit_ts``: everything at or below it is
paired) and returns ``(commit_ts, payload)`` for

- each Commit, filled with its Prewrite's ``prewrite_key``, ``prewrite_value``,
  ``ddl_query``, ``ddl_job_id`` and ``ddl_schema_state`` (TiDB's
  ``feedPreWriteValue``), and
- each fake binlog (Rollback with ``start_ts == commit_ts``), unchanged.

Prewrites share the key space (indexed by start_ts) and are not served: every
key is read through a :class:`~tidb_binlog.pump.vlog.BlockReader` (one ``pread`` of
256 KiB serves the records of a pass that lie near each other; a record outside it
costs one ``pread`` of header + 4 KiB); a payload starting ``08 00``
(tp = Prewrite) that fits whole is kept for its Commit later in the same pass
(it comes first: start_ts < commit_ts), so a Commit is filled without another
index lookup or read; a bigger Prewrite is not read further, and its Commit
looks it up through the index. The batch stops before the item that would take it past ``max_bytes``
(it always holds at least one item if any is ready) or at ``max_count`` items.

Never served: a record whose CRC does not match (logged, counted in
``binlog_pump_storage_error_count{type=read_value}``) and a Commit whose
Prewrite is not on this pump (never written here, or purged by GC; counted
under ``type=feed_pre_write_value``).
"""

from __future__ import annotations

import logging

from google.protobuf.message import DecodeError

from tidb_binlog import binlog as bl
from tidb_binlog.errors import CorruptRecord

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


class CommitReader:
    """Reads served binlogs from an index and a value log (see the module docstring)."""

    def __init__(self, index, vlog, metrics):
        self._index = index
        self._vlog = vlog
        self._metrics = metrics

    def pull(self, since_commit_ts: int, upto_ts: int, max_bytes: int,
             max_count: int) -> list[tuple[int, bytes]]:
        """``(commit_ts, payload)`` of commits and fake binlogs in ``(since, upto]``."""
        out: list[tuple[int, bytes]] = []
        size = 0
        seen: dict[int, bytes] = {}  # start_ts -> Prewrite payload read during this pass
        read_first = self._vlog.block_reader().read_first
        for ts, ptr in self._index.iter_range(since_commit_ts, upto_ts):
            try:
                payload, complete = read_first(ptr, _FIRST_READ_BYTES)
                if payload.startswith(_PREWRITE_PREFIX):
                    if complete and len(seen) < _MAX_SEEN_PREWRITES:
                        seen[ts] = payload
                    continue
                if not complete:
                    payload = self._vlog.read(ptr)
                payload = self.filled(payload, ts, seen)
            except (CorruptRecord, DecodeError) as exc:
                log.error("not serving ts %d: %s", ts, exc)
                self._metrics.error_count.labels("read_value").inc()
                continue
            if payload is None:
                continue
            if out and size + len(payload) > max_bytes:
                break
            out.append((ts, payload))
            size += len(payload)
            if len(out) >= max_count:
                break
        return out

    def filled(self, payload: bytes, ts: int, seen: dict[int, bytes] | None = None
               ) -> bytes | None:
        """A Commit filled with its Prewrite's fields, a fake binlog as it is, None for
        what is not served (a Commit whose Prewrite is gone). The Prewrite comes from
        ``seen`` (read earlier in the same pass) or through the index. Parse + set +
        marshal through protobuf's C parser: it keeps TiDB's field order and measured
        faster than splicing the serialized bytes in Python."""
        c = bl.Binlog.FromString(payload)
        if c.tp != _COMMIT:
            return payload if c.start_ts == c.commit_ts else None  # fake passes through
        raw = seen.pop(c.start_ts, None) if seen else None
        if raw is None:
            ptr = self._index.lookup(c.start_ts)
            if ptr is None or not self._vlog.has_file(ptr.fid):
                log.error("commit binlog at commit_ts %d: its prewrite (start_ts %d) is not on "
                          "this pump (never written here, or purged by GC); skipped", ts,
                          c.start_ts)
                self._metrics.error_count.labels("feed_pre_write_value").inc()
                return None
            raw = self._vlog.read(ptr)
        p = bl.Binlog.FromString(raw)
        if p.HasField("prewrite_key"):
            c.prewrite_key = p.prewrite_key
        c.prewrite_value = p.prewrite_value
        if p.HasField("ddl_query"):
            c.ddl_query = p.ddl_query
        c.ddl_job_id = p.ddl_job_id
        c.ddl_schema_state = p.ddl_schema_state
        return c.SerializeToString()

    def get_binlog(self, ts: int) -> bl.Binlog | None:
        """The stored binlog under index key ``ts`` (P by start_ts, C by commit_ts)."""
        ptr = self._index.lookup(ts)
        return None if ptr is None else bl.decode(self._vlog.read(ptr))
