"""MetricsMirror: our Prometheus metrics copied into another metrics system's gauges.

The pump and the drainer keep their metrics in prometheus-client registries (served on
their HTTP ``/metrics``, TiDB Binlog's names). On Ray, the same values should also show
in the Ray dashboard's metrics view and in Grafana through Ray's Prometheus export, which
only knows metrics made with ``ray.util.metrics``. This class reads our text exposition
and sets one gauge per sample name in the other system (``make_gauge`` makes them; the
Ray shell passes ``ray.util.metrics.Gauge``), so nothing in the pipeline changes.

Every sample becomes a gauge value, counters included (their running total: what a
``rate()`` over Ray's export needs). Histogram buckets are left out (``_sum`` and
``_count`` are kept: averages still work) to keep the series few; ``_created`` samples
are left out. A ``source`` tag (``pump-0``, ``<task>-merger``) says which actor reported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MetricsMirror", "GaugeLike"]

log = logging.getLogger(__name__)

SKIPPED_SUFFIXES = ("_bucket", "_created")


class GaugeLike(Protocol):
    def set(self, value: float, tags: dict[str, str] | None = None) -> None: ...


class MetricsMirror:
    """Copies the samples of a Prometheus text exposition into gauges made by
    ``make_gauge(name, description, tag_keys)``, tagged ``source``."""

    def __init__(self, make_gauge: Callable[[str, str, tuple[str, ...]], Any], source: str):
        self.make_gauge = make_gauge
        self.source = source
        self._gauges: dict[str, tuple[Any, frozenset[str]]] = {}
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        """What was last set: ``(name, sorted tags) -> value`` (for tests and debugging)."""

    def update(self, text: bytes | str) -> int:
        """Mirror every sample of ``text``; returns how many were set."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        count = 0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(SKIPPED_SUFFIXES):
                    continue
                tags = {**{k: str(v) for k, v in sample.labels.items()}, "source": self.source}
                entry = self._gauges.get(sample.name)
                if entry is None:
                    keys = tuple(sorted(tags))
                    entry = (self.make_gauge(sample.name, family.documentation or sample.name,
                                             keys), frozenset(keys))
                    self._gauges[sample.name] = entry
                gauge, keys = entry
                if frozenset(tags) != keys:  # a label set the gauge was not declared with
                    log.debug("metric %s: labels %s differ from %s; not mirrored",
                              sample.name, sorted(tags), sorted(keys))
                    continue
                gauge.set(float(sample.value), tags)
                self.values[(sample.name, tuple(sorted(tags.items())))] = float(sample.value)
                count += 1
        return count
