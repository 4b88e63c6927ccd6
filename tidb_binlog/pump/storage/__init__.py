"""The pump's durable, ordered binlog storage: TiDB Binlog's ``pump/storage`` package.

Only the pump process uses it (``tidb_binlog.pump.server.open_storage`` builds one
from pump.toml, ``PumpNode`` writes to and pulls from it through the ``PumpStorage``
protocol, :mod:`.protocol`, which the in-memory test storage implements too). The
names callers need are handed on here, so ``from tidb_binlog.pump.storage import
Storage`` stays the public path; modules inside this package import each other
directly, never through here.
"""

from tidb_binlog.pump.storage.metrics import StorageMetrics
from tidb_binlog.pump.storage.protocol import PumpStorage
from tidb_binlog.pump.storage.storage import Storage, StorageOptions

__all__ = ["PumpStorage", "Storage", "StorageMetrics", "StorageOptions"]
