"""Reading a binlog directory: :func:`walk` (TiDB Binlog's ``binlogger.Walk``).

``walk(directory, from_pos)`` yields ``(pos, payload)`` for every valid record
at or after ``from_pos``, segment after segment in suffix order; ``pos`` is the
position just after the record, so ``walk(directory, pos)`` resumes after it.
``from_pos=None`` starts at the first segment there is.

What it does with bad bytes (counted in :class:`WalkStats`, never an IndexError):

- a corrupt record (magic or CRC mismatch, or a size that runs past the segment
  while a later magic exists) is skipped by seeking the next magic, and counted
  (``corrupt``; TiDB's ``corruption_binlog_count``); ``strict=True`` raises
  :class:`~tidb_binlog.errors.CorruptRecord` naming the file and offset instead;
- a partial record at the end of the *last* segment is a write in progress (or
  torn by a crash, or bytes lost from a copy): the walk ends there, nothing
  counted (``torn_tail``, and ``torn_at`` = the file, the offset where the cut
  record starts and its bytes there). Which of those it is the walk cannot tell;
  a reader that must know asks whether a writer holds the directory's lock
  (:func:`~tidb_binlog.binlogfile.binlogger.writer_holds_lock`);
- damage running to the end of an earlier segment is corruption: counted, and
  the walk goes on with the next segment (TiDB stops with an error there; a
  reader that must not skip anything passes ``strict=True``).

**Large records** (``inline_max``): a record whose payload is more than ``inline_max``
bytes is yielded not as bytes but as a :class:`RecordSource`, a
:class:`~tidb_binlog.binlog_ref.ByteSource` over the payload in the file: the walk
checked its CRC in 1 MiB blocks and kept nothing; the caller reads the payload in ranges
(e.g. through the bounded window of
:mod:`tidb_binlog.drainer.translate.wire` / ``pb_wire``). A source is valid until the
walk moves on (the next record, or the walk closed); reading it later raises
:class:`~tidb_binlog.errors.StorageError`. Without ``inline_max`` (the default) every
payload comes as bytes, as before.

Segments must be contiguous from the start segment on (TiDB's
``IsValidBinlog``), else :class:`~tidb_binlog.errors.StorageError`; so is a
``from_pos`` whose segment does not exist (garbage-collected, or never written).
Files are opened one at a time and closed when the walk leaves them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tidb_binlog.binlogfile.files import Pos, binlog_names, is_contiguous, parse_binlog_name
from tidb_binlog.binlogfile.framing import Damage, Record, RecordSpan, scan
from tidb_binlog.errors import CorruptRecord, InvalidArgument, StorageError

__all__ = ["walk", "WalkStats", "segments", "RecordSource"]

log = logging.getLogger(__name__)


@dataclass
class WalkStats:
    """What a walk met: records yielded, corrupt stretches skipped, and where."""

    records: int = 0
    corrupt: int = 0
    skipped_bytes: int = 0
    torn_tail: bool = False
    torn_at: tuple[str, int, int] | None = None  # (file, offset, bytes) of the cut record
    corruptions: list[tuple[str, int, str]] = field(default_factory=list)  # (file, offset, why)


class RecordSource:
    """A large record's payload in its segment file (a
    :class:`~tidb_binlog.binlog_ref.ByteSource`): :attr:`size` bytes,
    ``read(offset, n)`` by ``pread`` on the walk's open file. ``path`` and
    ``record_offset`` (the record's first byte) name it in errors. Valid until the walk
    moves on (module doc)."""

    __slots__ = ("path", "record_offset", "size", "_fd", "_base", "reads", "bytes_read")

    def __init__(self, path: Path, fd: int, span: RecordSpan):
        self.path = path
        self.record_offset = span.offset
        self.size = span.size
        self._fd = fd
        self._base = span.payload_offset
        self.reads = 0
        self.bytes_read = 0

    def read(self, offset: int, n: int) -> bytes:
        """Exactly ``min(n, size - offset)`` bytes from ``offset`` of the payload."""
        if offset < 0 or n < 0 or offset > self.size:
            raise InvalidArgument(f"read of {n} bytes at {offset} outside a payload of "
                                  f"{self.size} bytes")
        if self._fd is None:
            raise StorageError(f"the record at offset {self.record_offset} of {self.path} was "
                               "read after the walk moved on; read a large record before "
                               "asking for the next one")
        n = min(n, self.size - offset)
        parts = []
        at, left = self._base + offset, n
        while left:
            got = os.pread(self._fd, left, at)
            if not got:
                raise StorageError(f"{self.path} ends at {at} inside the record at offset "
                                   f"{self.record_offset} ({self.size} bytes of payload): "
                                   "the file was truncated while it was read")
            parts.append(got)
            at += len(got)
            left -= len(got)
        self.reads += 1
        self.bytes_read += n
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._fd = None


def segments(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(suffix, path)`` of every segment, in order."""
    d = Path(directory)
    return [(parse_binlog_name(n)[0], d / n) for n in binlog_names(d)]


def walk(directory: str | os.PathLike, from_pos: Pos | None = None, *,
         stats: WalkStats | None = None, strict: bool = False,
         single_segment: bool = False, inline_max: int | None = None
         ) -> Iterator[tuple[Pos, bytes | RecordSource]]:
    """Yield ``(pos after the record, payload)`` from ``from_pos`` on (see the module
    doc). ``single_segment`` stops at the end of ``from_pos``'s segment; a payload of
    more than ``inline_max`` bytes comes as a :class:`RecordSource`."""
    stats = stats if stats is not None else WalkStats()
    segs = segments(directory)
    if not segs:
        if from_pos is None or from_pos == Pos(0, 0):
            return
        raise StorageError(f"no binlog files in {directory}; cannot read from {from_pos}")
    if from_pos is None:
        from_pos = Pos(segs[0][0], 0)
    index = next((i for i, (s, _) in enumerate(segs) if s == from_pos.suffix), None)
    if index is None:
        raise StorageError(f"binlog file with suffix {from_pos.suffix} is not in {directory} "
                           f"(it holds suffixes {segs[0][0]}..{segs[-1][0]}); it was "
                           "garbage-collected or never written")
    todo = segs[index:index + 1] if single_segment else segs[index:]
    if not is_contiguous([p.name for _, p in todo]):
        raise StorageError(f"binlog files in {directory} are not contiguous from suffix "
                           f"{from_pos.suffix}: {[p.name for _, p in todo]}; a file is missing")
    last_suffix = segs[-1][0]
    offset = from_pos.offset
    for suffix, path in todo:
        yield from _walk_segment(path, suffix, offset, suffix == last_suffix, stats, strict,
                                 inline_max)
        offset = 0


def _walk_segment(path: Path, suffix: int, offset: int, is_last: bool, stats: WalkStats,
                  strict: bool, inline_max: int | None
                  ) -> Iterator[tuple[Pos, bytes | RecordSource]]:
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in finally; the generator may stop early
    except FileNotFoundError as exc:
        raise StorageError(f"binlog file {path} disappeared while reading (garbage-collected "
                           "meanwhile?)") from exc
    try:
        size = os.fstat(f.fileno()).st_size
        if offset > size:
            raise StorageError(f"position {offset} is past the end of {path} ({size} bytes)")
        for item in scan(f, offset, size, inline_max=inline_max):
            if isinstance(item, Record):
                stats.records += 1
                yield Pos(suffix, item.end), item.payload
                continue
            if isinstance(item, RecordSpan):
                stats.records += 1
                source = RecordSource(path, f.fileno(), item)
                try:
                    yield Pos(suffix, item.end), source
                finally:
                    source.close()
                continue
            if item.torn and is_last and item.reason == "partial":
                stats.torn_tail = True
                stats.torn_at = (str(path), item.offset, item.end - item.offset)
                return
            _corrupt(path, item, stats, strict)
    finally:
        f.close()


def _corrupt(path: Path, damage: Damage, stats: WalkStats, strict: bool) -> None:
    why = {"magic": "magic mismatch", "crc": "CRC mismatch",
           "partial": "record runs past the end of the file"}[damage.reason]
    if strict:
        upto = "to the end of the file" if damage.torn else "up to the next record"
        raise CorruptRecord(f"corrupt binlog record in {path} at offset {damage.offset}: {why} "
                            f"({damage.end - damage.offset} bytes {upto})",
                            path=str(path), offset=damage.offset)
    stats.corrupt += 1
    stats.skipped_bytes += damage.end - damage.offset
    stats.corruptions.append((str(path), damage.offset, why))
    log.error("corrupt binlog record in %s at offset %d (%s): skipped %d bytes to the next "
              "record", path, damage.offset, why, damage.end - damage.offset)
