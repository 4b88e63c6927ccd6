"""The relay log (``[syncer.relay]``): every transaction durable on local disk before it is applied.

TiDB Binlog's ``drainer/relay`` and ``drainer/relay.go``. Pure Python, no Ray:

- :mod:`.record`: a translated :class:`~tidb_binlog.drainer.apply.dml.Txn` → a
  ``pb_binlog.Binlog`` record (the file sink's format, readable by reparo) carrying the
  schema version after it; a large transaction applied in chunks (exactly-once off) is
  one record per chunk (its number, and whether more follow);
- :mod:`.log`: :class:`RelayLog`, the writer the MySQL sink appends to (fdatasync before
  the batch reaches a worker) and the GC rule (a file goes once the saved checkpoint
  passed its last record; never the file being written);
- :mod:`.recover`: :func:`recover`, the start-up replay into the downstream when the
  checkpoint is not consistent and the upstream cannot be reached (a chunked transaction
  only with its last chunk in the log).
"""

from tidb_binlog.drainer.relay.log import DEFAULT_MAX_FILE_SIZE, RelayLog, relay_records
from tidb_binlog.drainer.relay.record import record_schema_version, txn_record
from tidb_binlog.drainer.relay.recover import RecoverySummary, recover

__all__ = ["RelayLog", "relay_records", "DEFAULT_MAX_FILE_SIZE", "txn_record",
           "record_schema_version", "recover", "RecoverySummary"]
