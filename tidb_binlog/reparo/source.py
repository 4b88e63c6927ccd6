"""Reading a file-sink directory for a restore: which segments, which records, damage.

TiDB Binlog's reparo (``reparo/file.go``, ``read.go``) picks the segments whose records
can fall in ``[start_ts, stop_ts]`` by each segment's **first** commit_ts: the last
segment starting at or below ``start_ts`` (it may hold ``start_ts``), then every segment
starting in ``(start_ts, stop_ts]``; later ones are not opened. :func:`select_segments`
does the same; it reads only the first record of each segment.

:func:`read_records` then walks from the first picked segment and yields the records with
``start_ts <= commit_ts`` and (``stop_ts`` 0 = no end) ``commit_ts <= stop_ts``, each as
``(pos, pb.Binlog)``. The file sink writes in commit order, so the walk stops at the first
record past ``stop_ts`` instead of reading the rest (TiDB reads on to the end of the
picked files).

**Large records** (``large_record_bytes``, reparo.toml ``large-record-bytes``, default
8 MiB, 0 = off): a record of that many payload bytes or more is not read whole. The walk
checks its CRC in 1 MiB blocks and hands it on as a
:class:`~tidb_binlog.reparo.decode.LargeRecord` read in place through a 1 MiB window
(its events walked once here, so a malformed record fails as a whole one does);
:func:`read_records` yields it in place of the ``pb.Binlog``. The first record of a
segment (:func:`first_commit_ts`) is read the same way: only its top-level fields.

**Damage.** By default (``skip_corrupt=False``) a damaged record stops the read with
:class:`~tidb_binlog.errors.CorruptRecord` naming the file and the byte offset, as
TiDB's reparo stops (a restore that silently skips a transaction is not a restore).
With ``skip_corrupt=True`` the damaged stretch is skipped and recorded in ``stats``
(``corruptions``: file, offset, why).

**A torn tail** (a record cut short at the very end of the newest segment) ends the read
and is left in ``stats.torn_at`` (file, offset, bytes): whether it is a write in progress
(a drainer holds the directory's lock) or a transaction lost (a crash, a cut copy) is
the caller's to decide (:mod:`.runner`: an error unless ``allow-torn-tail``). A newest
segment that holds nothing but such a record is picked when no segment holds a valid
one, so the read meets the cut instead of reading nothing.

Bad input: a missing directory, a path that is not a directory, or a directory
without binlog segments raise :class:`~tidb_binlog.errors.StorageError` saying what
``data-dir`` must point at.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from tidb_binlog.binlog_ref import DEFAULT_REF_ABOVE_BYTES
from tidb_binlog.binlogfile import Pos, WalkStats, walk
from tidb_binlog.binlogfile.reader import segments
from tidb_binlog.drainer.translate.pb_wire import read_record_head
from tidb_binlog.errors import CorruptRecord, ProtocolError, StorageError
from tidb_binlog.proto import pb_binlog_pb2 as pb
from tidb_binlog.reparo.decode import LargeRecord, open_large_record, parse_binlog

__all__ = ["check_data_dir", "select_segments", "read_records", "first_commit_ts",
           "LARGE_RECORD_BYTES", "inline_max"]

LARGE_RECORD_BYTES = DEFAULT_REF_ABOVE_BYTES  # 8 MiB, as the drainer's large-binlog-bytes


def inline_max(large_record_bytes: int) -> int | None:
    """The walk's ``inline_max`` for a ``large-record-bytes`` setting (0 = off)."""
    return large_record_bytes - 1 if large_record_bytes > 0 else None

_POINT_AT = ("point data-dir at the directory the drainer's file sink writes "
             "(drainer.toml [syncer.to] dir, default its data-dir)")


def check_data_dir(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """The directory's segments ``(suffix, path)``; StorageError when there are none."""
    d = Path(directory)
    if not d.exists():
        raise StorageError(f"data-dir {d} does not exist; {_POINT_AT}")
    if not d.is_dir():
        raise StorageError(f"data-dir {d} is not a directory; {_POINT_AT}")
    segs = segments(d)
    if not segs:
        raise StorageError(f"data-dir {d} holds no binlog files (binlog-<16 digits>-"
                           f"<yyyymmddhhmmss>); {_POINT_AT}")
    return segs


def first_commit_ts(directory: str | os.PathLike, suffix: int, *,
                    skip_corrupt: bool = False,
                    large_record_bytes: int = LARGE_RECORD_BYTES) -> int | None:
    """The commit_ts of the first valid record of one segment (None: it has none).

    A segment with damage but no valid record is not an empty one: unless
    ``skip_corrupt``, that raises :class:`~tidb_binlog.errors.CorruptRecord` naming the
    file and offset, rather than leaving the whole file out of the restore."""
    return _first_record(directory, suffix, skip_corrupt, large_record_bytes)[0]


def _first_record(directory, suffix: int, skip_corrupt: bool, large_record_bytes: int
                  ) -> tuple[int | None, WalkStats]:
    """:func:`first_commit_ts` and what the walk of the segment met."""
    stats = WalkStats()
    for _, payload in walk(directory, Pos(suffix, 0), single_segment=True, stats=stats,
                           inline_max=inline_max(large_record_bytes)):
        if not isinstance(payload, bytes):
            return read_record_head(payload).commit_ts or 0, stats
        return _commit_ts(payload), stats
    if stats.corruptions and not skip_corrupt:
        path, offset, why = stats.corruptions[0]
        raise CorruptRecord(f"{path} holds no valid binlog record: damage at offset {offset} "
                            f"({why}); restore the file from a copy, or set skip-corrupt = "
                            "true to leave it out", path=path, offset=offset)
    return None, stats


def _commit_ts(payload: bytes) -> int:
    b = pb.Binlog()
    try:
        b.ParseFromString(payload)
    except Exception as exc:  # protobuf's DecodeError
        raise ProtocolError(f"binlog file record is not a pb_binlog.Binlog: {exc}") from exc
    return b.commit_ts


def select_segments(directory: str | os.PathLike, start_ts: int = 0, stop_ts: int = 0, *,
                    skip_corrupt: bool = False,
                    large_record_bytes: int = LARGE_RECORD_BYTES) -> list[tuple[int, Path]]:
    """The segments a restore of ``[start_ts, stop_ts]`` reads (see the module doc).

    A segment without a valid record (the empty one the sink opens after a rotation) is
    left out; TiDB counts it as starting at 0, which can drop the segment before it from
    its list. When no segment holds a valid record, a newest segment holding a record cut
    short is picked (module doc: "A torn tail")."""
    picked: list[tuple[int, Path]] = []
    latest: tuple[int, Path] | None = None
    valid = False
    segs = check_data_dir(directory)
    for suffix, path in segs:
        first, met = _first_record(directory, suffix, skip_corrupt, large_record_bytes)
        if first is None:
            if not valid and met.torn_at is not None and (suffix, path) == segs[-1]:
                return [(suffix, path)]
            continue
        valid = True
        if first <= start_ts:
            latest = (suffix, path)
            continue
        if stop_ts and first > stop_ts:
            break
        if latest is not None:
            picked.append(latest)
        latest = (suffix, path)
    if latest is not None:
        picked.append(latest)
    return picked


def read_records(directory: str | os.PathLike, start_ts: int = 0, stop_ts: int = 0, *,
                 stats: WalkStats | None = None, skip_corrupt: bool = False,
                 picked: list[tuple[int, Path]] | None = None,
                 large_record_bytes: int = 0
                 ) -> Iterator[tuple[Pos, pb.Binlog | LargeRecord]]:
    """``(pos after the record, Binlog)`` for every record in the range, in file order;
    with ``large_record_bytes`` a record that large comes as a :class:`LargeRecord`,
    valid until the next one is asked for (module doc). The default (0) reads every
    record whole, for callers that keep the records."""
    picked = (select_segments(directory, start_ts, stop_ts, skip_corrupt=skip_corrupt,
                              large_record_bytes=large_record_bytes)
              if picked is None else picked)
    if not picked:
        return
    for pos, payload in walk(directory, Pos(picked[0][0], 0), stats=stats,
                             strict=not skip_corrupt,
                             inline_max=inline_max(large_record_bytes)):
        try:
            b = (parse_binlog(payload) if isinstance(payload, bytes)
                 else open_large_record(payload))
        except ProtocolError as exc:
            raise ProtocolError(f"record ending at {pos} in {directory}: {exc}") from exc
        if b.commit_ts < start_ts:
            continue
        if stop_ts and b.commit_ts > stop_ts:
            return
        yield pos, b
