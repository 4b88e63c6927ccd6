"""Large payloads of the pump client: deadlines that scale with the size, the request
serialized once, and the message size limit's constants.

Deadlines that scale with the payload
    A Prewrite carries the whole transaction: 200 MB for a million small rows. A
    fixed 5 s deadline cut such a write off while the pump was still receiving and
    fsyncing it; the client then retried, the budget ran out, the transaction rolled
    back, and the pump had stored every abandoned copy. So each attempt's deadline is
    ``rpc_timeout_s + len(payload) / min_write_bytes_per_s`` and the Prewrite's budget
    ``write_timeout_s + len(payload) / min_write_bytes_per_s``
    (:func:`scaled_timeout_s`). ``min_write_bytes_per_s`` (default 8 MiB/s) is a
    conservative floor for "gRPC transfer + pump write + fdatasync" on a loaded
    machine, not an estimate: a 200 MB Prewrite gets 5 + 24 s per attempt, a 1 GiB one
    5 + 128 s, a 1 KB one 5.0001 s (small binlogs keep TiDB's deadlines). Raising the
    floor detects a stopped pump sooner for big payloads; lowering it tolerates a
    slower disk. The pump acknowledges a Prewrite it already stored for the same
    start_ts (same size and checksum) without writing it again, so an attempt that
    did time out costs the retry nothing at the pump.

Message size
    ``max_message_size_bytes`` (default 2^31 - 1, gRPC's int32 ceiling) is the
    channel's send and receive limit; a Prewrite above it raises ProtocolError before
    anything is sent. The pumps' own limit is ``max-message-size`` in pump.toml (same
    default); keep the client's at or below it.

A Prewrite of at least ``LARGE_REQUEST_BYTES`` is sent as a :class:`SerializedRequest`
(built once, reused by every attempt); one of at least ``stream_above_bytes``
(default ``DEFAULT_STREAM_ABOVE_BYTES``) through the streaming write.
"""

from __future__ import annotations

import google_crc32c

__all__ = ["DEFAULT_MIN_WRITE_BYTES_PER_S", "DEFAULT_STREAM_ABOVE_BYTES", "LARGE_REQUEST_BYTES",
           "SerializedRequest", "scaled_timeout_s"]

# The throughput floor the deadlines of big payloads are scaled by (see the module
# docstring): gRPC transfer + the pump's write and fdatasync, on a loaded machine.
DEFAULT_MIN_WRITE_BYTES_PER_S = 8 << 20


# A Prewrite this large is sent as a request serialized once by the client (no
# WriteBinlogReq message holding a copy of it, no serialization copy per attempt).
LARGE_REQUEST_BYTES = 1 << 20

# A binlog this large goes through the streaming write (WriteBinlogChunks, 4 MiB
# chunks sliced from the request buffer) when the pump serves it: neither gRPC on
# this side nor the pump holds it whole. Below it, one WriteBinlog message costs less.
DEFAULT_STREAM_ABOVE_BYTES = 8 << 20
_CRC_PIECE_BYTES = 1 << 20


class SerializedRequest:
    """A pre-serialized WriteBinlogReq; ``len()`` is its payload's size (what the
    deadlines scale with). The payload is the request's last ``size`` bytes; its
    crc32c is computed once, when it is first streamed."""

    __slots__ = ("request", "size", "_crc")

    def __init__(self, request: bytes, size: int):
        self.request = request
        self.size = size
        self._crc: int | None = None

    def __len__(self) -> int:
        return self.size

    def payload_view(self) -> memoryview:
        return memoryview(self.request)[len(self.request) - self.size:]

    def crc32c(self) -> int:
        if self._crc is None:
            self._crc = _crc32c(self.payload_view())
        return self._crc


def _crc32c(view: memoryview) -> int:
    """crc32c of a possibly large view in 1 MiB pieces (the library takes bytes only)."""
    crc = 0
    for off in range(0, len(view), _CRC_PIECE_BYTES):
        crc = google_crc32c.extend(crc, bytes(view[off:off + _CRC_PIECE_BYTES]))
    return crc


def scaled_timeout_s(base_s: float, nbytes: int, min_bytes_per_s: float) -> float:
    """``base_s`` plus the time ``nbytes`` take at ``min_bytes_per_s``: the deadline of an
    attempt (base ``rpc_timeout_s``) or a Prewrite's budget (base ``write_timeout_s``)."""
    return base_s + nbytes / min_bytes_per_s
