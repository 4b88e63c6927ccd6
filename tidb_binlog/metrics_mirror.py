"""MetricsMirror: our Prometheus metrics copied into another metrics system's gauges.

The pump and the drainer keep their metrics in prometheus-client registries (served on
their HTTP ``/metrics``, TiDB Binlog's names). On Ray, the same values should also show
in the Ray dashboard's metrics view and in Grafana through Ray's Prometheus export, which
only knows metrics made with ``ray.util.metrics``. This class reads our text exposition
and sets one gauge per sample name in the other system (``make_gauge`` makes them; the
Ray shell passes ``ray.util.metrics.Gauge``), so nothing in the pipeline changes.

Every sample becomes a gauge value, counters included (their running total: what a
``rate()`` over Ray's export needs); ``_created`` samples are left out. A ``source`` tag
(``pump-0``, ``<task>-merger``) says which actor reported.

Histograms. Given ``make_histogram`` (the Ray shell passes ``ray.util.metrics.Histogram``),
a Prometheus histogram ``X`` becomes a histogram ``X`` there with the same bucket
boundaries, so Ray's export has ``X_bucket``/``X_sum``/``X_count`` under the same names
and Grafana's ``histogram_quantile`` gives p90/p99. A histogram of that kind takes
observations, not counts, so each round carries the *new* count of every bucket (this
scrape's count minus the last one's) as that many observations of a value inside the
bucket: the midpoint of ``(lower, upper]`` (0 as the lower bound of the first bucket, and
twice the last boundary for ``+Inf``). The midpoint is never a boundary, so it lands in
the same bucket whatever side the other system's buckets include. What that keeps and
what it approximates:

- the bucket counts, hence the quantiles, are exact (as exact as Prometheus's own
  ``histogram_quantile``, which interpolates within a bucket anyway) and ``_count`` is
  exact;
- ``_sum`` (so an average) counts each observation at its bucket's midpoint, not at its
  value; the exact sum stays on the actor's own ``/metrics``;
- a round with more than ``max_observations`` new observations of one series (a busy
  pump: thousands of writes in 10 s) records that many, spread over the buckets in
  proportion (largest remainders): the quantiles stay right, ``_count`` and ``_sum``
  then fall short (a warning says so once per series). Each observation is one call
  into the other system; the cap bounds the mirror's cost per round;
- a count that went down (the process restarted under the same mirror) starts over
  from the new counts.

Without ``make_histogram`` a histogram's buckets are left out and its ``_sum`` and
``_count`` are mirrored as gauges (averages only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MetricsMirror", "GaugeLike", "HistogramLike", "bucket_observations"]

log = logging.getLogger(__name__)

SKIPPED_SUFFIXES = ("_bucket", "_created")
MAX_OBSERVATIONS = 5000
"""Default cap of the observations one histogram series records per round (see above)."""

_INF = float("inf")


class GaugeLike(Protocol):
    def set(self, value: float, tags: dict[str, str] | None = None) -> None: ...


class HistogramLike(Protocol):
    def observe(self, value: float, tags: dict[str, str] | None = None) -> None: ...


def _representative(lower: float, upper: float) -> float:
    """A value strictly inside the bucket ``(lower, upper]``."""
    if upper == _INF:
        return lower * 2 if lower > 0 else 1.0
    lower = max(lower, 0.0) if upper > 0 else lower
    return (lower + upper) / 2


def bucket_observations(bounds: tuple[float, ...], previous: list[int] | None,
                        cumulative: list[int], max_observations: int = MAX_OBSERVATIONS
                        ) -> tuple[list[tuple[float, int]], bool]:
    """The observations that carry one round's new counts of a histogram series.

    ``bounds``: the finite upper bounds, ascending (``+Inf`` implied last);
    ``cumulative``: this scrape's cumulative bucket counts (``len(bounds) + 1``, as
    Prometheus's ``_bucket`` samples); ``previous``: the last scrape's, or None.
    Returns ``[(value, times), ...]`` (each bucket's representative value and how many
    observations of it; buckets with none left out) and whether the cap scaled them.
    """
    per_bucket = [c - p for c, p in zip(cumulative, [0, *cumulative[:-1]], strict=True)]
    if previous is not None:
        before = [c - p for c, p in zip(previous, [0, *previous[:-1]], strict=True)]
        if all(n >= b for n, b in zip(per_bucket, before, strict=True)):
            per_bucket = [n - b for n, b in zip(per_bucket, before, strict=True)]
        # else: counts went down (a new process): every current count is new
    total = sum(per_bucket)
    scaled = total > max_observations
    if scaled:  # keep the proportions: largest remainders get the rounding
        shares = [n * max_observations / total for n in per_bucket]
        per_bucket = [int(x) for x in shares]
        short = max_observations - sum(per_bucket)
        for i in sorted(range(len(shares)), key=lambda i: shares[i] - per_bucket[i],
                        reverse=True)[:short]:
            per_bucket[i] += 1
    lowers = (-_INF, *bounds)
    uppers = (*bounds, _INF)
    return [(_representative(lo, hi), n)
            for lo, hi, n in zip(lowers, uppers, per_bucket, strict=True) if n > 0], scaled


class MetricsMirror:
    """Copies the samples of a Prometheus text exposition into gauges made by
    ``make_gauge(name, description, tag_keys)``, and its histograms into histograms
    made by ``make_histogram(name, description, boundaries, tag_keys)`` when given,
    tagged ``source``."""

    def __init__(self, make_gauge: Callable[[str, str, tuple[str, ...]], Any], source: str,
                 make_histogram: Callable[[str, str, tuple[float, ...], tuple[str, ...]], Any]
                 | None = None, max_observations: int = MAX_OBSERVATIONS):
        self.make_gauge = make_gauge
        self.make_histogram = make_histogram
        self.max_observations = max_observations
        self.source = source
        self._gauges: dict[str, tuple[Any, frozenset[str]]] = {}
        self._histograms: dict[str, tuple[Any, tuple[float, ...], frozenset[str]]] = {}
        self._last_counts: dict[tuple[str, tuple[tuple[str, str], ...]], list[int]] = {}
        self._capped: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        """What was last set: ``(name, sorted tags) -> value`` (for tests and debugging)."""
        self.observed: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        """Observations recorded so far per histogram series (for tests and debugging)."""

    def update(self, text: bytes | str) -> int:
        """Mirror every sample of ``text``; returns how many were set."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        count = 0
        for family in text_string_to_metric_families(text):
            if family.type == "histogram" and self.make_histogram is not None:
                count += self._histogram(family)
                continue
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

    # -- histograms -------------------------------------------------------------------------
    def _histogram(self, family) -> int:
        """Mirror one histogram family; returns how many series had new observations."""
        series: dict[tuple[tuple[str, str], ...], dict[float, int]] = {}
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue  # _sum/_count: the histogram there keeps its own
            labels = {k: str(v) for k, v in sample.labels.items() if k != "le"}
            tags = tuple(sorted({**labels, "source": self.source}.items()))
            series.setdefault(tags, {})[float(sample.labels["le"])] = int(sample.value)
        changed = 0
        for tags, by_bound in series.items():
            bounds = tuple(sorted(b for b in by_bound if b != _INF))
            if not bounds or bounds[0] <= 0:  # Ray's histograms take positive bounds only
                log.debug("histogram %s: bounds %s not all above 0; not mirrored",
                          family.name, bounds)
                continue
            entry = self._histograms.get(family.name)
            if entry is None:
                keys = tuple(k for k, _ in tags)
                made = self.make_histogram(family.name, family.documentation or family.name,
                                           bounds, keys)
                entry = self._histograms[family.name] = (made, bounds, frozenset(keys))
            histogram, declared, keys = entry
            if bounds != declared or frozenset(k for k, _ in tags) != keys or \
                    _INF not in by_bound:
                log.debug("histogram %s %s: buckets or labels differ from the declared "
                          "ones; not mirrored", family.name, tags)
                continue
            cumulative = [by_bound[b] for b in (*bounds, _INF)]
            key = (family.name, tags)
            observations, scaled = bucket_observations(
                bounds, self._last_counts.get(key), cumulative, self.max_observations)
            self._last_counts[key] = cumulative
            if scaled and key not in self._capped:
                self._capped.add(key)
                log.warning("histogram %s %s: more than %d new observations in one round; "
                            "mirrored in proportion (quantiles right, _count/_sum short of "
                            "the actor's own /metrics)", family.name, dict(tags),
                            self.max_observations)
            tag_dict = dict(tags)
            for value, times in observations:
                for _ in range(times):
                    histogram.observe(value, tag_dict)
            recorded = sum(times for _, times in observations)
            self.observed[key] = self.observed.get(key, 0) + recorded
            changed += recorded > 0
        return changed
