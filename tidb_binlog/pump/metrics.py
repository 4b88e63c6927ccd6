"""Server-side pump metrics (inventory §1.6), one Prometheus registry per pump.

Each :class:`PumpMetrics` owns its own ``CollectorRegistry`` so several pumps in
one process (tests, benchmarks) do not share counters. ``GET /metrics`` serves
:meth:`PumpMetrics.exposition`. Names follow TiDB Binlog's under ``binlog_pump_``;
prometheus-client appends ``_total`` to counters in the text format (so
``binlog_pump_loss_binlog_count`` is exposed as ``binlog_pump_loss_binlog_count_total``).

=============================================== ============================================
``binlog_pump_rpc_duration_seconds{method,label}`` WriteBinlog / PullBinlogs latency; label
                                                  ``succ`` or ``fail``
``binlog_pump_loss_binlog_count``                 WriteBinlog calls answered with an errmsg
``binlog_pump_detected_drainer_binlog_purge_count{id}`` GC rounds held back (or forced past)
                                                  by drainer ``id``'s checkpoint
``binlog_pump_fake_binlog_count``                 fake binlogs written by the generator
``binlog_pump_storage_gc_ts``                     physical ms of the storage gc_ts
``binlog_pump_storage_max_commit_ts``             physical ms of the storage max_commit_ts
``binlog_pump_storage_storage_size_bytes{type}``  ``available`` free bytes of the data dir
=============================================== ============================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tidb_binlog.tso import extract_physical

if TYPE_CHECKING:
    from tidb_binlog.pump.storage.protocol import PumpStorage

__all__ = ["PumpMetrics", "CONTENT_TYPE_LATEST"]

_RPC_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class PumpMetrics:
    """The pump's server-side metric family, registered in a private registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.rpc_duration_s = Histogram(
            "binlog_pump_rpc_duration_seconds", "Bucketed histogram of pump RPC durations",
            ["method", "label"], buckets=_RPC_BUCKETS_S, registry=r)
        self.loss_binlog_count = Counter(
            "binlog_pump_loss_binlog_count", "WriteBinlog calls that failed", registry=r)
        self.drainer_purge_count = Counter(
            "binlog_pump_detected_drainer_binlog_purge_count",
            "GC rounds where a drainer checkpoint held GC back (or was passed when forced)",
            ["id"], registry=r)
        self.fake_binlog_count = Counter(
            "binlog_pump_fake_binlog_count", "Fake binlogs written by the pump", registry=r)
        self.gc_ts = Gauge("binlog_pump_storage_gc_ts",
                           "Physical ms of the storage gc ts", registry=r)
        self.max_commit_ts = Gauge("binlog_pump_storage_max_commit_ts",
                                   "Physical ms of the storage max commit ts", registry=r)
        self.storage_size_bytes = Gauge("binlog_pump_storage_storage_size_bytes",
                                        "Storage size of the data dir", ["type"], registry=r)

    def observe_storage(self, storage: PumpStorage) -> None:
        """Refresh the storage gauges from ``storage`` (called before each scrape)."""
        self.gc_ts.set(extract_physical(storage.gc_ts))
        self.max_commit_ts.set(extract_physical(storage.max_commit_ts))
        self.storage_size_bytes.labels("available").set(storage.available_space_bytes())

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric in this registry."""
        return generate_latest(self.registry)
