"""Binlog file names and positions (TiDB Binlog's ``pkg/binlogfile/file.go``).

A directory holds segments named ``binlog-<index>-<yyyymmddhhmmss>``: ``index``
is the 16-digit zero-padded suffix (0, 1, 2, ... with no gaps), the date is the
local time the segment was created. Older names parse too:

==============================================  ===========================
name                                            parsed (suffix, ts)
==============================================  ===========================
``binlog-0000000000000007-20240102030405``      (7, 0)
``binlog-0000000000000007`` (legacy, no date)   (7, 0)
``binlog-0000000000000007-20181010101010-407623959013752832.tar.gz``
                                                (7, 407623959013752832)
==============================================  ===========================

Anything else in the directory (``.lock``, ``savepoint``, ``*.tmp``, other
files) is not a segment and is ignored by :func:`binlog_names`.

A :class:`Pos` ``(suffix, offset)`` names a place in the directory: the
segment's suffix and a byte offset in it. Positions the writer and the reader
hand out point just *after* a record (TiDB's convention), so walking from a
returned position continues with the next record.
"""

from __future__ import annotations

import datetime
import os
import re
from typing import NamedTuple

from tidb_binlog.errors import InvalidArgument, StorageError

__all__ = ["Pos", "PREFIX", "DATETIME_FORMAT", "binlog_name", "parse_binlog_name",
           "binlog_names", "is_contiguous", "BadBinlogName"]

PREFIX = "binlog-"
DATETIME_FORMAT = "%Y%m%d%H%M%S"  # Go's "20060102150405"
_DIGITS = re.compile(r"^\d{1,20}$")


class BadBinlogName(StorageError, ValueError):
    """A file name that is not a binlog segment name: listings skip it (also a
    ``ValueError``, for callers that parse a name they were handed)."""


class Pos(NamedTuple):
    """A place in a binlog directory: segment suffix and byte offset (binlog.Pos)."""

    suffix: int
    offset: int


def binlog_name(index: int, when: datetime.datetime | None = None) -> str:
    """``binlog-%016d-<yyyymmddhhmmss>`` in local time (``when`` defaults to now)."""
    if index < 0:
        raise InvalidArgument(f"binlog file index must be >= 0, got {index}")
    when = when or datetime.datetime.now()
    return f"{PREFIX}{index:016d}-{when.strftime(DATETIME_FORMAT)}"


def parse_binlog_name(name: str) -> tuple[int, int]:
    """``(suffix, ts)`` of a segment name; ts is 0 unless the name is the archived
    ``.tar.gz`` form. Raises :class:`BadBinlogName` for anything else."""
    if not name.startswith(PREFIX):
        raise BadBinlogName(f"{name!r} does not start with {PREFIX!r}")
    items = name.split("-")
    if len(items) not in (2, 3, 4) or not _DIGITS.match(items[1]):
        raise BadBinlogName(f"{name!r} is not binlog-<index>[-<datetime>[-<ts>.tar.gz]]")
    index = int(items[1])
    ts = 0
    if len(items) == 4:
        head = items[3].split(".")[0]
        if not _DIGITS.match(head):
            raise BadBinlogName(f"{name!r}: the archived form needs a numeric ts, got {head!r}")
        ts = int(head)
    return index, ts


def binlog_names(directory: str | os.PathLike) -> list[str]:
    """The segment names in ``directory``, ordered by suffix (others are skipped).
    A missing directory has none."""
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list the binlog directory {directory}: {exc}") from exc
    out = []
    for name in entries:
        if name.endswith((".lock", "checkpoint", ".tmp")):
            continue
        try:
            out.append((parse_binlog_name(name)[0], name))
        except BadBinlogName:
            continue
    out.sort()
    return [name for _, name in out]


def is_contiguous(names: list[str]) -> bool:
    """True when the suffixes of the (ordered) names follow one another without a gap
    (TiDB's ``IsValidBinlog``)."""
    suffixes = [parse_binlog_name(n)[0] for n in names]
    return all(b == a + 1 for a, b in zip(suffixes, suffixes[1:], strict=False))
