"""The drainer's Prometheus metrics (inventory §2.14), built in one place.

:func:`build_drainer_metrics` registers TiDB Binlog's ``binlog_drainer_*`` names
on a given ``CollectorRegistry`` (a fresh private one by default, so several
drainers in one process do not share values) and returns them as a
:class:`DrainerMetrics`.  ``GET /metrics`` serves :meth:`DrainerMetrics.exposition`.
prometheus-client appends ``_total`` to counters in the text format (so
``binlog_drainer_event`` is exposed as ``binlog_drainer_event_total``); TSO
gauges hold the physical milliseconds of the ts, as TiDB's do.

============================================== ==============================================
``binlog_drainer_pump_position{nodeID}``       physical ms of the last commit_ts pulled
``binlog_drainer_binlog_reach_duration_time``  seconds from commit (physical time) to the
``{nodeID}``                                   binlog reaching the drainer
``binlog_drainer_read_binlog_size{nodeID}``    bytes per binlog read from a pump
``binlog_drainer_checkpoint_tso``              physical ms of the saved checkpoint
``binlog_drainer_checkpoint_delay_seconds``    now minus the checkpoint's physical time
``binlog_drainer_disorder_binlog_count``       binlogs dropped by the merge as out of order
``binlog_drainer_ddl_jobs_total``              DDL jobs applied (a gauge, as in TiDB)
``binlog_drainer_queue_size{name}``            items waiting: ``merger_buffer``,
                                               ``syncer_input``, ``workers``
``binlog_drainer_execute_duration_time``       seconds per worker batch executed *
``binlog_drainer_query_duration_time{type}``   seconds per ``exec`` / ``commit`` statement *
``binlog_drainer_event{type}``                 ``Insert|Update|Delete|DDL|savepoint`` *
``binlog_drainer_error_count{type}``           errors by kind *
============================================== ==============================================

\\* the apply-side names, also registered by ``loader_metrics.LoaderMetrics`` in the
SQL workers; pass ``apply_side=False`` to leave them out of a registry that a
``LoaderMetrics`` already uses.

Who updates what (every name is updated by some path of a running task): the
merger's pump feeds (``pump_position``, ``binlog_reach_duration_time``,
``read_binlog_size``, ``error_count{type="pump_unavailable"}``), the merger
(``disorder_binlog_count``, ``queue_size``, ``checkpoint_*`` from the saved
checkpoint), the SQL workers (``execute_duration_time``, ``query_duration_time``,
``event{type=Insert|Update|Delete|DDL}``, ``error_count{type=transient|permanent|
ddl_ignored}``) and the coordinator's counters, read from its status at each
scrape by :meth:`DrainerMetrics.observe_coordinator`: ``ddl_jobs_total`` (DDL jobs
applied) and ``event{type="savepoint"}`` (checkpoint saves).  A restarted
coordinator counts from 0 again; :class:`_Follower` keeps the exposed totals
growing across that.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tidb_binlog.errors import InvalidArgument
from tidb_binlog.tso import extract_physical

__all__ = ["DrainerMetrics", "BatchHistogram", "build_drainer_metrics", "CONTENT_TYPE_LATEST",
           "METRIC_NAMES"]

_DURATION_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                       5, 10, 30)
_REACH_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256)
_SIZE_BUCKETS_BYTES = tuple(float(16 << (2 * i)) for i in range(12))  # 16 B .. 64 MiB

METRIC_NAMES = (
    "binlog_drainer_pump_position", "binlog_drainer_binlog_reach_duration_time",
    "binlog_drainer_read_binlog_size", "binlog_drainer_checkpoint_tso",
    "binlog_drainer_checkpoint_delay_seconds", "binlog_drainer_disorder_binlog_count",
    "binlog_drainer_ddl_jobs_total", "binlog_drainer_queue_size",
    "binlog_drainer_execute_duration_time", "binlog_drainer_query_duration_time",
    "binlog_drainer_event", "binlog_drainer_error_count",
)


class BatchHistogram:
    """A labelled Prometheus histogram fed whole batches: ``labels(v).observe_many(values)``
    costs a sort and one ``bisect`` per bucket instead of a locked update per value
    (``read_binlog_size`` sees every binlog the merger pulls, thousands per batch).
    Exposed through the registry's custom-collector interface with the series a
    ``prometheus_client.Histogram`` has (``_bucket{le}``, ``_count``, ``_sum``)."""

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str],
                 buckets: Iterable[float], registry: CollectorRegistry):
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], _BatchChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> _BatchChild:
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise InvalidArgument(f"{self.name} takes labels {self.labelnames}, got {values}")
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = _BatchChild(self.bounds)
            return child

    def collect(self):
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            children = list(self._children.items())
        for key, child in children:
            counts, total = child.snapshot()
            cumulative, buckets = 0, []
            for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(list(key), buckets, total)
        yield family

    def describe(self):
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]


class _BatchChild:
    __slots__ = ("_bounds", "_counts", "_sum", "_lock")

    def __init__(self, bounds: tuple[float, ...]):
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # per bucket (not cumulative); last = +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        self.observe_many((value,))

    def observe_many(self, values: Iterable[float]) -> None:
        ordered = sorted(values)
        if not ordered:
            return
        per_bucket, lo = [], 0
        for bound in self._bounds:  # values <= bound fall in the bucket (le semantics)
            hi = bisect_right(ordered, bound, lo)
            per_bucket.append(hi - lo)
            lo = hi
        per_bucket.append(len(ordered) - lo)
        total = sum(ordered)
        with self._lock:
            counts = self._counts
            for i, n in enumerate(per_bucket):
                counts[i] += n
            self._sum += total

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self._counts), self._sum


class _Follower:
    """A running total of a counter that another process reports and may reset to 0
    (a restarted actor): a value below the last one seen counts from 0 again."""

    def __init__(self) -> None:
        self.last = 0
        self.total = 0

    def follow(self, value: int) -> int:
        """Take the reported ``value``; return how much the total grew."""
        delta = value - self.last if value >= self.last else value
        self.last = value
        self.total += delta
        return delta


@dataclass
class DrainerMetrics:
    """The metric objects; apply-side ones are None when built with ``apply_side=False``."""

    registry: CollectorRegistry
    pump_position: Gauge
    binlog_reach_duration_s: Histogram
    read_binlog_size_bytes: BatchHistogram
    checkpoint_tso: Gauge
    checkpoint_delay_s: Gauge
    disorder_binlog_count: Counter
    ddl_jobs_total: Gauge
    queue_size: Gauge
    execute_duration_s: Histogram | None = None
    query_duration_s: Histogram | None = None
    event: Counter | None = None
    error_count: Counter | None = None

    def __post_init__(self) -> None:
        self._ddl_jobs = _Follower()
        self._savepoints = _Follower()

    def observe_binlog(self, node_id: str, commit_ts: int, size_bytes: int,
                       now_s: float) -> None:
        """One binlog read from pump ``node_id`` at wall-clock ``now_s``."""
        physical_ms = extract_physical(commit_ts)
        self.pump_position.labels(node_id).set(physical_ms)
        self.binlog_reach_duration_s.labels(node_id).observe(max(0.0, now_s - physical_ms / 1000))
        self.read_binlog_size_bytes.labels(node_id).observe(size_bytes)

    def set_checkpoint(self, commit_ts: int, now_s: float) -> None:
        physical_ms = extract_physical(commit_ts)
        self.checkpoint_tso.set(physical_ms)
        self.checkpoint_delay_s.set(max(0.0, now_s - physical_ms / 1000))

    def observe_coordinator(self, status: dict) -> None:
        """The coordinator's status (``CoordinatorActor.status()``) at a scrape:
        ``queue_size{name="workers"}`` = its outstanding worker batches,
        ``ddl_jobs_total`` and ``event{type="savepoint"}`` follow its ``ddl_jobs`` and
        ``savepoints`` counters (see the module doc)."""
        self.queue_size.labels("workers").set(status["outstanding"])
        self._ddl_jobs.follow(int(status.get("ddl_jobs", 0)))
        self.ddl_jobs_total.set(self._ddl_jobs.total)
        saved = self._savepoints.follow(int(status.get("savepoints", 0)))
        if self.event is not None:
            # Created at 0 on the first scrape, so the series exists before a save.
            self.event.labels("savepoint").inc(saved)

    def exposition(self) -> bytes:
        """The Prometheus text format of this registry."""
        return generate_latest(self.registry)


def build_drainer_metrics(registry: CollectorRegistry | None = None, *,
                          apply_side: bool = True) -> DrainerMetrics:
    """Register the drainer metrics on ``registry`` (a new private one by default)."""
    r = registry if registry is not None else CollectorRegistry()
    m = DrainerMetrics(
        registry=r,
        pump_position=Gauge("binlog_drainer_pump_position",
                            "Physical ms of the last commit ts pulled from each pump",
                            ["nodeID"], registry=r),
        binlog_reach_duration_s=Histogram(
            "binlog_drainer_binlog_reach_duration_time",
            "Seconds from a binlog's commit to its arrival in the drainer", ["nodeID"],
            buckets=_REACH_BUCKETS_S, registry=r),
        read_binlog_size_bytes=BatchHistogram(
            "binlog_drainer_read_binlog_size", "Bytes of each binlog read from a pump",
            ["nodeID"], buckets=_SIZE_BUCKETS_BYTES, registry=r),
        checkpoint_tso=Gauge("binlog_drainer_checkpoint_tso",
                             "Physical ms of the saved checkpoint", registry=r),
        checkpoint_delay_s=Gauge("binlog_drainer_checkpoint_delay_seconds",
                                 "Seconds the checkpoint is behind now", registry=r),
        disorder_binlog_count=Counter("binlog_drainer_disorder_binlog_count",
                                      "Binlogs the merge dropped as out of order", registry=r),
        ddl_jobs_total=Gauge("binlog_drainer_ddl_jobs_total", "DDL jobs applied", registry=r),
        queue_size=Gauge("binlog_drainer_queue_size", "Items waiting in each queue", ["name"],
                         registry=r),
    )
    if apply_side:
        m.execute_duration_s = Histogram(
            "binlog_drainer_execute_duration_time", "Seconds to execute one worker batch",
            buckets=_DURATION_BUCKETS_S, registry=r)
        m.query_duration_s = Histogram(
            "binlog_drainer_query_duration_time", "Seconds per downstream statement or commit",
            ["type"], buckets=_DURATION_BUCKETS_S, registry=r)
        m.event = Counter("binlog_drainer_event", "Row changes, DDLs and savepoints applied",
                          ["type"], registry=r)
        m.error_count = Counter("binlog_drainer_error_count", "Errors by kind", ["type"],
                                registry=r)
    return m
