"""The pump client: what TiDB embeds to write binlogs to the pumps.

::

    from tidb_binlog.pump_client import PumpClient
    client = PumpClient(registry)                    # pumps from the registry, strategy "range"
    pump = client.write_binlog(prewrite_binlog)      # raises UnavailableError: do not commit
    client.write_binlog_async(commit_binlog)         # same pump as the prewrite; never raises
    client.flush(timeout_s=30)                       # PumpClientTimeout names pumps, counts
    client.close(timeout_s=5)

Modules: :mod:`.selector` (strategies range/hash/score/local), :mod:`.book`
(available/unavailable bookkeeping, start_ts ownership), :mod:`.transport`
(gRPC channel per pump, TLS, error translation), :mod:`.metrics`,
:mod:`.client` (the constructor and public entry points), :mod:`.writes` (the retry
rules; read its docstring for the exact rules), :mod:`.membership` (registry watcher,
probing), :mod:`.payload` (deadlines scaled by the payload size), :mod:`.inflight`
(what ``flush`` waits for), :mod:`.batch` (the batched path and
``write_finish_nowait``, which see the client only through the
:class:`~.batch.BatchClient` it declares, implemented by :mod:`.batch_side`).
"""

from tidb_binlog.pump_client.batch import WriteResult
from tidb_binlog.pump_client.book import DEFAULT_UNAVAILABLE_AFTER_ERRORS, PumpBook, PumpEntry
from tidb_binlog.pump_client.client import LOCAL_PUMP_ID, PumpClient
from tidb_binlog.pump_client.inflight import PumpClientTimeout
from tidb_binlog.pump_client.selector import (
    HASH,
    LOCAL,
    RANGE,
    SCORE,
    STRATEGIES,
    Selector,
    new_selector,
)
from tidb_binlog.pump_client.transport import (
    DEFAULT_MAX_MESSAGE_SIZE_BYTES,
    PumpChannel,
    PumpTLS,
)

__all__ = [
    "PumpClient",
    "PumpClientTimeout",
    "WriteResult",
    "PumpTLS",
    "PumpChannel",
    "PumpBook",
    "PumpEntry",
    "Selector",
    "new_selector",
    "RANGE",
    "HASH",
    "SCORE",
    "LOCAL",
    "STRATEGIES",
    "LOCAL_PUMP_ID",
    "DEFAULT_UNAVAILABLE_AFTER_ERRORS",
    "DEFAULT_MAX_MESSAGE_SIZE_BYTES",
]
