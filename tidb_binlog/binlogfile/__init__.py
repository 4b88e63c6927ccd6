"""TiDB Binlog's binlog file format (``pkg/binlogfile``): framed records in numbered segments.

Used by the drainer's file sink (``db-type = "file"``, payloads are
``pb_binlog.Binlog``), and meant for the reparo-style restore and the relay log.

- :mod:`~tidb_binlog.binlogfile.framing`: the record (magic, size, payload, CRC-32C).
- :mod:`~tidb_binlog.binlogfile.files`: segment names, :class:`Pos`.
- :mod:`~tidb_binlog.binlogfile.reader`: :func:`walk` from a position, corruption counted.
- :mod:`~tidb_binlog.binlogfile.binlogger`: :class:`Binlogger`, the one writer of a
  directory (lock, torn-tail repair, rotation, sync, truncate, GC);
  :func:`writer_holds_lock`: whether one has the directory open.

Nothing here imports ray.
"""

from tidb_binlog.binlogfile.binlogger import (
    LOCK_FILE,
    LOCK_WAIT_S,
    SEGMENT_SIZE_BYTES,
    Binlogger,
    writer_holds_lock,
)
from tidb_binlog.binlogfile.files import (
    Pos,
    binlog_name,
    binlog_names,
    is_contiguous,
    parse_binlog_name,
)
from tidb_binlog.binlogfile.framing import MAGIC, RECORD_OVERHEAD, encode_record
from tidb_binlog.binlogfile.reader import RecordSource, WalkStats, walk

__all__ = ["Binlogger", "SEGMENT_SIZE_BYTES", "LOCK_FILE", "LOCK_WAIT_S", "writer_holds_lock",
           "Pos", "binlog_name", "binlog_names", "is_contiguous", "parse_binlog_name", "MAGIC",
           "RECORD_OVERHEAD", "encode_record", "RecordSource", "WalkStats", "walk"]
