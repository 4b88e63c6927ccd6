"""``PumpStorage``: what the pump process asks of its storage (TiDB Binlog's ``Storage``).

The node (``pump/node.py``), the gRPC server, the HTTP status API, the pump's metrics
and ``actors/pump.py`` talk to a storage only through these members, and call each one
directly: every storage has all of them. Two implement it: the durable
:class:`~tidb_binlog.pump.storage.storage.Storage` (value log + LevelDB index) and the
in-memory :class:`~tidb_binlog.testing.memory_storage.MemoryStorage` of unit tests,
which does what it cannot do the real way simply (an async write that is done at once,
references served over its dict, no directory). ``tests/unit/test_pump_storage_protocol.py``
runs one contract over both and fails when either lacks a member.

Contract, shared by every member below:

- Keys: a Prewrite is stored under its ``start_ts``, a Commit and a fake binlog
  (``start_ts == commit_ts``) under their ``commit_ts``; a Rollback only settles its
  Prewrite. Only Prewrite, Commit and Rollback are storable, with ``start_ts > 0`` and a
  Commit's ``commit_ts > start_ts`` (``ProtocolError`` otherwise; drop probes before).
- Order (TiDB's sorter): ``max_commit_ts`` never decreases and rises past a commit only
  once every Prewrite stored before it has its Commit or Rollback; so the commits at or
  below it never change afterwards, and pulls serve them in strictly ascending
  ``commit_ts``. A write that returned is applied in the background, in order: reads see
  it once ``flush()`` returned (or ``wait_for_commit`` saw its commit).
- Served payloads: a Commit comes filled with its Prewrite's ``prewrite_key``,
  ``prewrite_value``, ``ddl_query``, ``ddl_job_id`` and ``ddl_schema_state``; a fake
  binlog as stored; a Commit whose Prewrite is not here (an orphan) is skipped, the pull
  position moving past it.
- GC: below ``gc_ts`` nothing is served (``PurgedError``).
- After ``close()`` writes, pulls and payload reads raise ``StorageError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio
    from pathlib import Path

    from tidb_binlog import binlog as bl
    from tidb_binlog.binlog_ref import BinlogRef
    from tidb_binlog.pump.storage.vlog_segment import FileRange

__all__ = ["PumpStorage", "REF_ITEM_BYTES"]

REF_ITEM_BYTES = 64
"""What a ``BinlogRef`` counts against a pull's ``max_bytes`` (about its pickled size)."""


class PumpStorage(Protocol):
    """The pump's binlog storage; see the module docstring for the shared contract."""

    @property
    def dir(self) -> Path | None:
        """The data directory (the streaming write spills under it), None without one."""
        ...

    @property
    def stores_payload(self) -> bool:
        """True: a write stores ``payload`` as given and reads only tp/start_ts/commit_ts
        of ``binlog`` (a header will do); False: it stores ``binlog`` and needs it whole."""
        ...

    @property
    def max_commit_ts(self) -> int:
        """The watermark: every commit at or below it has arrived (never decreases)."""
        ...

    @property
    def gc_ts(self) -> int:
        """Nothing below it is served; moved only by :meth:`gc`."""
        ...

    # -- writing ---------------------------------------------------------------------
    def write_binlog(self, binlog: bl.Binlog, payload: bytes | memoryview | None = None
                     ) -> None:
        """Store one binlog; returns only once it is durable (after its group's fdatasync).
        Thread-safe. ``payload`` is ``binlog`` serialized, when the caller has it.
        ``DiskSpaceError`` for a Prewrite while the disk guard refuses (Commits, Rollbacks
        and fake binlogs pass), ``ProtocolError`` for an unstorable binlog."""
        ...

    def write_binlog_async(self, binlog: bl.Binlog, payload: bytes | memoryview | None = None
                           ) -> asyncio.Future[None]:
        """:meth:`write_binlog` on an event loop's thread: refusals raised now, then a
        future of the running loop, done once the binlog is durable (after fdatasync)."""
        ...

    def write_binlog_file_async(self, binlog: bl.Binlog, source: FileRange, crc: int
                                ) -> asyncio.Future[None]:
        """:meth:`write_binlog_async` of a serialized binlog held in a file range
        (``binlog`` at least its header, ``crc`` the range's crc32c, checked by the
        caller); the file must stay unchanged until the future is done."""
        ...

    # -- reading ---------------------------------------------------------------------
    def pull_commits(self, since_commit_ts: int, max_bytes: int = 4 << 20,
                     max_count: int = 10_000, *, ref_above: int = 0, node_id: str = ""
                     ) -> tuple[list[tuple[int, bytes | BinlogRef]], int]:
        """``(batch, position)``: ``(commit_ts, payload)`` ascending in ``(since,
        max_commit_ts]`` (at least one item if any, then up to ``max_bytes`` /
        ``max_count``), and the position examined up to: every served binlog at or below
        it is in the batch or at or below ``since``. With ``ref_above > 0`` a Commit
        whose payload is that large comes as ``BinlogRef(node_id, ...)``, at most one,
        last. ``PurgedError`` when ``since < gc_ts``."""
        ...

    def pull_commit_binlogs(self, since_commit_ts: int, max_bytes: int = 4 << 20,
                            max_count: int = 10_000) -> list[tuple[int, bytes]]:
        """The batch of :meth:`pull_commits` without its position (every payload whole)."""
        ...

    def read_payload(self, commit_ts: int, offset: int, size: int) -> bytes | bytearray:
        """Bytes ``[offset, offset+size)`` of the payload a pull serves at ``commit_ts``
        (a ``BinlogRef``'s), looked up on every call: ``PurgedError`` at or below gc_ts,
        ``StorageError`` when nothing is served there, ``ProtocolError`` outside it."""
        ...

    def wait_for_commit(self, above_ts: int, timeout_s: float) -> int:
        """Block until ``max_commit_ts > above_ts``, the timeout or ``close()``; return it."""
        ...

    def get_binlog(self, ts: int) -> bl.Binlog | None:
        """The binlog stored under key ``ts`` (a Prewrite by start_ts), or None."""
        ...

    def all_matched(self) -> bool:
        """True when no Prewrite applied so far waits for its Commit or Rollback."""
        ...

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every write that returned is applied (readable); False on timeout."""
        ...

    # -- maintenance -------------------------------------------------------------------
    def gc(self, ts: int, *, wait: bool = False) -> None:
        """Move ``gc_ts`` up to ``ts`` (persisted first), then free what lies below it, in
        the background unless ``wait``; ignored unless ``gc_ts < ts < max_commit_ts``."""
        ...

    def available_space_bytes(self) -> int:
        """Free bytes where the storage writes (what the disk guard compares)."""
        ...

    def disk_guard_message(self) -> str:
        """The refusal a Prewrite gets now for lack of space (its ``DiskSpaceError``
        message), else ""."""
        ...

    def stats(self) -> dict:
        """At least ``max_commit_ts``, ``gc_ts``, ``pending_prewrites``, ``writes`` and
        ``available_bytes``."""
        ...

    def close(self) -> None:
        """Finish the writes in flight, release everything, wake waiters; idempotent."""
        ...
