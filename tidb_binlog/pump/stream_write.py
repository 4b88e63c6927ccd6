"""The pump's side of ``binlog_stream.PumpStream/WriteBinlogChunks`` (pump_stream.proto):
a large binlog received in chunks into a spill file, never whole in memory.

Why: over TiDB's unary ``WriteBinlog`` a 200 MB Prewrite arrives as ONE gRPC message,
and gRPC Python hands it over as the C core's slices copied into a ``bytearray`` and
copied again into ``bytes``: the pump peaked at 3x the binlog's size to receive it. Our
pump client streams such a binlog in chunks of at most :data:`CHUNK_BYTES`; each chunk
is written to a :class:`SpillFile` as it arrives (the pump's memory is bounded by a few
chunks, whatever the binlog's size), checked against the size and crc32c the first
message announced, and the value log appends the record from the file
(:class:`~tidb_binlog.pump.storage.vlog.FileRange`: ``copy_file_range``, in the kernel).

Spill files live in ``<data-dir>/spill/`` and have no name while in use (``O_TMPFILE``,
or created and unlinked at once where the file system lacks it): a crash or a cancelled
stream leaves nothing behind, the kernel frees the blocks when the last descriptor
closes. :func:`clear_spill_dir` removes anything a crash between create and unlink left
(the servicer calls it at start-up).

:func:`parse_chunk` is the gRPC request deserializer: it reads a ``BinlogChunk``'s
fields from the message bytes (no protobuf message holding a copy of ``data``) and falls
back to protobuf for anything else, which raises for malformed bytes.
"""

from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path

import google_crc32c

from tidb_binlog.errors import ProtocolError, StateError
from tidb_binlog.proto import pump_stream_pb2
from tidb_binlog.pump.storage.protowire import fields
from tidb_binlog.pump.storage.vlog_segment import FileRange

__all__ = ["CHUNK_BYTES", "SPILL_DIR_NAME", "Chunk", "SpillFile", "clear_spill_dir",
           "parse_chunk", "looks_like_prewrite"]

log = logging.getLogger(__name__)

# The most data one BinlogChunk carries (the client's chunk size). The server accepts
# up to its gRPC message limit per chunk; what matters is that the client keeps them small.
CHUNK_BYTES = 4 << 20
SPILL_DIR_NAME = "spill"
_CRC_PIECE_BYTES = 1 << 20


class Chunk:
    """One received ``BinlogChunk``: header fields (zero when absent) and its data."""

    __slots__ = ("cluster_id", "total_size", "crc32c", "data")

    def __init__(self, cluster_id: int, total_size: int, crc32c: int, data):
        self.cluster_id = cluster_id
        self.total_size = total_size
        self.crc32c = crc32c
        self.data = data


def parse_chunk(message: bytes) -> Chunk:
    """The request deserializer of ``WriteBinlogChunks``: ``data`` is a memoryview into
    ``message`` (no copy); unknown fields or wire types fall back to protobuf."""
    cluster_id = total = crc = 0
    data = memoryview(b"")
    try:
        for number, wire, value in fields(message):
            if wire == 0 and number in (1, 2, 3):
                if number == 1:
                    cluster_id = value
                elif number == 2:
                    total = value
                else:
                    crc = value & 0xFFFFFFFF
            elif number == 4 and wire == 2:
                data = memoryview(message)[value[0]:value[1]]
            else:  # another field: protobuf's parse
                return _parsed_chunk(message)
    except ProtocolError:  # malformed: protobuf's parse says how
        return _parsed_chunk(message)
    return Chunk(cluster_id, total, crc, data)


def _parsed_chunk(message: bytes) -> Chunk:
    m = pump_stream_pb2.BinlogChunk.FromString(message)
    return Chunk(m.clusterID, m.total_size, m.crc32c, memoryview(m.data))


def looks_like_prewrite(head) -> bool:
    """Whether a serialized ``binlog.Binlog`` starting with ``head`` is a Prewrite as
    TiDB and protobuf write one (``08 00``: tp = Prewrite first). Only an early hint
    (a paused pump refuses a streamed Prewrite before receiving all of it); the binlog
    is checked fully once received."""
    return bytes(head[:2]) == b"\x08\x00"


def clear_spill_dir(path: str | os.PathLike) -> int:
    """Remove what a crash left in the spill directory (normally nothing: spill files
    have no name while in use); the number of files removed. Creates the directory."""
    spill = Path(path)
    spill.mkdir(parents=True, exist_ok=True)
    removed = 0
    for leftover in spill.iterdir():
        try:
            leftover.unlink()
            removed += 1
        except IsADirectoryError:
            log.warning("spill directory %s holds a directory %s; left alone", spill, leftover)
        except FileNotFoundError:
            pass
    if removed:
        log.info("removed %d spill files an earlier run left in %s", removed, spill)
    return removed


class _OwnedFd:
    """An open file descriptor closed when the last reference to it goes (the spill
    and any :class:`FileRange` queued for the value log share it)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def __del__(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SpillFile:
    """An unnamed file in ``directory`` that a streamed binlog is written to, chunk by
    chunk, with its size and running crc32c."""

    def __init__(self, directory: str | os.PathLike):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._fd: _OwnedFd | None = _OwnedFd(_open_unnamed(directory))
        self.size = 0
        self.crc = 0

    def write(self, data) -> None:
        """Append ``data`` (any bytes-like) to the file and the checksum."""
        fd = self._require().fd
        view = memoryview(data).cast("B")
        written, n = 0, view.nbytes
        while written < n:
            written += os.write(fd, view[written:])
        for off in range(0, n, _CRC_PIECE_BYTES):   # the checksum library takes bytes only
            self.crc = google_crc32c.extend(self.crc, bytes(view[off:off + _CRC_PIECE_BYTES]))
        self.size += n

    def check(self, total_size: int, crc32c: int) -> None:
        """Raise ProtocolError unless the file holds ``total_size`` bytes summing to
        ``crc32c`` (what the stream's first message announced)."""
        if self.size != total_size:
            raise ProtocolError(f"streamed binlog is {self.size} bytes, the stream announced "
                                f"{total_size}: the stream was cut short or is malformed; "
                                "not stored (the client retries)")
        if self.crc != crc32c:
            raise ProtocolError(f"streamed binlog of {self.size} bytes has crc32c "
                                f"{self.crc:#010x}, the stream announced {crc32c:#010x}: "
                                "corrupted in transit; not stored (the client retries)")

    def read_head(self, nbytes: int) -> bytes:
        """The first ``nbytes`` of the file (or all of it, when shorter)."""
        return os.pread(self._require().fd, nbytes, 0)

    def read_all(self) -> bytes:
        """The whole file in memory (tests: the pump hands the storage :meth:`source`)."""
        return os.pread(self._require().fd, self.size, 0)

    def mapped(self) -> mmap.mmap:
        """A read-only map of the file: header fields are read from it, touching only
        the pages they are on (the caller closes it)."""
        return mmap.mmap(self._require().fd, self.size, prot=mmap.PROT_READ)

    def source(self) -> FileRange:
        """The whole file as a value-log append source (keeps the file open)."""
        return FileRange(self._require(), 0, self.size)

    def discard(self) -> None:
        """Drop this reference to the file; it is freed once a queued append is done."""
        self._fd = None

    def _require(self) -> _OwnedFd:
        if self._fd is None:
            raise StateError("spill file already discarded")
        return self._fd


def _open_unnamed(directory: Path) -> int:
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            return os.open(directory, flags | tmpfile, 0o600)
        except OSError:
            pass   # a file system without O_TMPFILE: a named file, unlinked at once
    name = directory / f"chunked-{os.getpid()}-{id(directory):x}-{os.urandom(6).hex()}.spill"
    fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.unlink(name)
    except OSError:
        os.close(fd)
        raise
    return fd
