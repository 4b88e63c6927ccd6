"""Prometheus metrics of the pump storage (inventory §1.6, under ``binlog_pump_storage_``).

Pass a :class:`StorageMetrics` to ``Storage(metrics=...)``; without one, the
storage uses :func:`default_metrics`, a single instance on the module-level
:data:`REGISTRY` (shared by every storage in the process). prometheus-client
appends ``_total`` to counter names in the text format.

==================================================== ===============================================
``binlog_pump_storage_write_binlog_duration_time{type}`` seconds; ``to_disk`` (write), ``fsync``,
                                                     ``batch`` (whole group incl. ack), ``rotate``
``binlog_pump_storage_write_binlog_size{type}``      bytes per group (``batch``)
``binlog_pump_storage_error_count{type}``            ``write_binlog_batch``, ``batch_write_kv``,
                                                     ``read_value``, ``feed_pre_write_value``
``binlog_pump_storage_max_commit_ts``                physical ms of max_commit_ts
``binlog_pump_storage_gc_ts`` / ``_done_gc_ts``      physical ms of the persisted / applied gc ts
``binlog_pump_storage_deleted_kv_total``             index keys deleted by GC
``binlog_pump_storage_storage_size_bytes{type}``     ``capacity`` / ``available`` of the data dir
``binlog_pump_storage_slow_chaser_count{type}``      ``turned_on``, ``turned_off``, ``catch_up``
``binlog_pump_storage_query_tikv_count``             resolver queries for unmatched prewrites
``binlog_pump_storage_corruption_skipped_bytes``     value-log bytes skipped as corrupt, never served
==================================================== ===============================================

The three gauges ``max_commit_ts``, ``gc_ts`` and ``storage_size_bytes`` carry the
same names as the server's ``PumpMetrics``; build with ``gauges=False`` when both
share one registry.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["REGISTRY", "StorageMetrics", "default_metrics"]

REGISTRY = CollectorRegistry()
_DURATION_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                       0.5, 1, 2.5, 5)
_SIZE_BUCKETS_BYTES = tuple(2 ** i for i in range(8, 25, 2))
_default: StorageMetrics | None = None
_default_lock = threading.Lock()


class _NoGauge:
    """Stands in for a gauge that is not registered (``gauges=False``)."""

    def labels(self, *args, **kw):
        return self

    def set(self, value):
        pass


class StorageMetrics:
    """The storage's metric family, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None, *, gauges: bool = True):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        p = "binlog_pump_storage_"
        self.write_duration_s = Histogram(
            p + "write_binlog_duration_time", "Storage write durations in seconds", ["type"],
            buckets=_DURATION_BUCKETS_S, registry=r)
        self.write_size_bytes = Histogram(
            p + "write_binlog_size", "Bytes written per value-log group", ["type"],
            buckets=_SIZE_BUCKETS_BYTES, registry=r)
        self.error_count = Counter(p + "error_count", "Storage errors", ["type"], registry=r)
        self.done_gc_ts = Gauge(p + "done_gc_ts", "Physical ms of the last applied GC",
                                registry=r)
        self.deleted_kv = Counter(p + "deleted_kv", "Index keys deleted by GC", registry=r)
        self.slow_chaser_count = Counter(p + "slow_chaser_count", "Slow chaser events",
                                         ["type"], registry=r)
        self.query_tikv_count = Counter(p + "query_tikv_count",
                                        "Resolver queries for unmatched prewrites", registry=r)
        self.duplicate_prewrite_count = Counter(
            p + "duplicate_prewrite_count",
            "Prewrites acknowledged without writing: the same one was stored or in flight",
            registry=r)
        self.corruption_skipped_bytes = Counter(
            p + "corruption_skipped_bytes", "Value-log bytes skipped as corrupt", registry=r)
        if gauges:
            self.max_commit_ts = Gauge(p + "max_commit_ts", "Physical ms of max commit ts",
                                       registry=r)
            self.gc_ts = Gauge(p + "gc_ts", "Physical ms of the gc ts", registry=r)
            self.storage_size_bytes = Gauge(p + "storage_size_bytes", "Data dir size",
                                            ["type"], registry=r)
        else:
            self.max_commit_ts = self.gc_ts = self.storage_size_bytes = _NoGauge()

    def value(self, name: str, labels: dict | None = None) -> float:
        """A sample's current value (0.0 if absent); for tests and ``stats()``."""
        v = self.registry.get_sample_value(name, labels or {})
        return 0.0 if v is None else v


def default_metrics() -> StorageMetrics:
    """The process-wide instance on :data:`REGISTRY` (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = StorageMetrics(REGISTRY)
        return _default
