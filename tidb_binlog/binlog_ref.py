"""A large Commit binlog passed by reference: the pump keeps it, readers fetch ranges.

A transaction of hundreds of MB or more must not be held whole by any process on its
way from the pump to the sinks (TiDB Binlog and TiCDC users ran out of memory there).
Within one Ray cluster a PumpActor therefore serves a Commit binlog of
``ref_above`` bytes or more not as its payload but as a :class:`BinlogRef`: the
merger orders it by ``commit_ts`` like any other item and hands the reference on
untouched, and the keeper reads the payload in ranges from the pump actor that holds
it (``PumpActor.read_payload(commit_ts, offset, size)``), walking it with a bounded
window (:class:`tidb_binlog.drainer.translate.wire.WirePrewrite.from_source`).

The payload read through a reference is byte for byte the one ``pull`` would have
returned: the Commit binlog with its prewrite value filled in (TiDB Binlog's
PullBinlogs entity). Only our own actors exchange references; a standalone pump
serving TiDB's gRPC ``PullBinlogs`` sends every binlog whole, as TiDB's pump.proto
defines (one entity per binlog).

Nothing here imports Ray: the pump side (``tidb_binlog/pump``) makes references, the
drainer side reads them through a :class:`ByteSource` whose calls the actor shell
passes in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tidb_binlog.errors import InvalidArgument

__all__ = ["BinlogRef", "ByteSource", "BytesSource", "DEFAULT_REF_ABOVE_BYTES",
           "is_ref"]

# A Commit binlog of this many bytes or more is served by reference (the drainer's
# `[syncer] large-binlog-bytes`; 0 turns references off: every payload whole).
DEFAULT_REF_ABOVE_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class BinlogRef:
    """Where to read a large Commit binlog: the pump node that serves it, its
    ``commit_ts`` (the key the pump reads it by) and its payload's size in bytes."""

    node_id: str
    commit_ts: int
    start_ts: int
    size: int

    def __len__(self) -> int:
        # the merger and the batch-size accounting treat an item's len() as its bytes
        return self.size


def is_ref(payload: object) -> bool:
    return type(payload) is BinlogRef


class ByteSource(Protocol):
    """Random reads of one payload: :attr:`size` bytes, read ``[offset, offset+n)``."""

    size: int

    def read(self, offset: int, n: int) -> bytes | memoryview:
        """Exactly ``min(n, size - offset)`` bytes from ``offset`` (raise on a short read)."""
        ...


class BytesSource:
    """A :class:`ByteSource` over bytes already in memory (small payloads, tests)."""

    __slots__ = ("_buf", "size")

    def __init__(self, buf: bytes | memoryview):
        self._buf = memoryview(buf)
        self.size = len(self._buf)

    def read(self, offset: int, n: int) -> memoryview:
        if offset < 0 or n < 0 or offset > self.size:
            raise InvalidArgument(f"read of {n} bytes at {offset} outside a payload of "
                                  f"{self.size} bytes")
        return self._buf[offset:offset + n]
