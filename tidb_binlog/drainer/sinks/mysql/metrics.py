"""The SQL worker's metrics (inventory §2.14), and the no-op the loader uses by default.

:class:`LoaderMetrics` registers TiDB Binlog's drainer names in its own
``CollectorRegistry`` (one per process in the Ray shell; prometheus-client
appends ``_total`` to counters in the text format):

============================================== ==========================================
``binlog_drainer_execute_duration_time``       seconds per ``execute`` of one batch
``binlog_drainer_query_duration_time{type}``   seconds per downstream round trip of a DML
                                               transaction, statements + progress row +
                                               COMMIT in one script (``exec``), and per
                                               DDL commit (``commit``)
``binlog_drainer_event{type}``                 row changes and DDLs applied: ``Insert``,
                                               ``Update``, ``Delete``, ``DDL``
``binlog_drainer_error_count{type}``           ``transient`` (retried), ``permanent``,
                                               ``ddl_ignored``
============================================== ==========================================
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

__all__ = ["LoaderMetrics", "NullMetrics"]

_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class NullMetrics:
    """Records nothing (the loader's default)."""

    def observe_execute(self, seconds: float) -> None:
        pass

    def observe_query(self, kind: str, seconds: float) -> None:
        pass

    def count_event(self, kind: str, n: int = 1) -> None:
        pass

    def count_error(self, kind: str) -> None:
        pass


class LoaderMetrics(NullMetrics):
    """The drainer's apply-side metrics in a private registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.execute_duration_s = Histogram(
            "binlog_drainer_execute_duration_time", "Seconds to execute one worker batch",
            buckets=_BUCKETS_S, registry=r)
        self.query_duration_s = Histogram(
            "binlog_drainer_query_duration_time", "Seconds per downstream round trip (exec) or DDL commit",
            ["type"], buckets=_BUCKETS_S, registry=r)
        self.event = Counter("binlog_drainer_event", "Row changes and DDLs applied downstream",
                             ["type"], registry=r)
        self.error_count = Counter("binlog_drainer_error_count", "Downstream errors by kind",
                                   ["type"], registry=r)

    def observe_execute(self, seconds: float) -> None:
        self.execute_duration_s.observe(seconds)

    def observe_query(self, kind: str, seconds: float) -> None:
        self.query_duration_s.labels(kind).observe(seconds)

    def count_event(self, kind: str, n: int = 1) -> None:
        if n:
            self.event.labels(kind).inc(n)

    def count_error(self, kind: str) -> None:
        self.error_count.labels(kind).inc()

    def exposition(self) -> bytes:
        """The Prometheus text format of this registry."""
        return generate_latest(self.registry)
