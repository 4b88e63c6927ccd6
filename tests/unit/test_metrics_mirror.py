"""MetricsMirror: Prometheus samples copied into gauges of another system (a fake here;
ray.util.metrics in the actors)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tidb_binlog.metrics_mirror import MetricsMirror, bucket_observations


class FakeGauge:
    def __init__(self, name, description, tag_keys):
        self.name, self.description, self.tag_keys = name, description, tag_keys
        self.values = {}

    def set(self, value, tags=None):
        assert set(tags) == set(self.tag_keys), (tags, self.tag_keys)
        self.values[tuple(sorted(tags.items()))] = value


def test_counters_gauges_and_histograms_are_mirrored_with_a_source_tag():
    r = CollectorRegistry()
    Counter("binlog_drainer_event", "events", ["type"], registry=r).labels("insert").inc(3)
    Gauge("binlog_pump_max_commit_ts", "ts", registry=r).set(42)
    Histogram("binlog_drainer_execute_duration_time", "s", registry=r).observe(0.5)
    made = {}
    mirror = MetricsMirror(lambda n, d, k: made.setdefault(n, FakeGauge(n, d, k)), "pump-0")
    assert mirror.update(generate_latest(r)) > 0
    assert made["binlog_drainer_event_total"].values == {
        (("source", "pump-0"), ("type", "insert")): 3.0}
    assert made["binlog_pump_max_commit_ts"].values == {(("source", "pump-0"),): 42.0}
    assert made["binlog_drainer_execute_duration_time_sum"].values[(("source", "pump-0"),)] == 0.5
    assert made["binlog_drainer_execute_duration_time_count"].values[
        (("source", "pump-0"),)] == 1.0
    assert not any(n.endswith(("_bucket", "_created")) for n in made)
    assert made["binlog_pump_max_commit_ts"].description == "ts"


def test_a_second_update_sets_the_same_gauges_again():
    r = CollectorRegistry()
    g = Gauge("x_value", "x", registry=r)
    made = {}
    mirror = MetricsMirror(lambda n, d, k: made.setdefault(n, FakeGauge(n, d, k)), "s")
    g.set(1)
    mirror.update(generate_latest(r))
    g.set(2)
    mirror.update(generate_latest(r).decode())
    assert len(made) == 1 and mirror.values[("x_value", (("source", "s"),))] == 2.0


# -- histograms: same buckets in the other system, new counts carried as observations ------
class FakeHistogram:
    """Buckets observations by ``boundaries`` like Ray's histograms (lower-inclusive:
    the opposite of Prometheus's ``le``, which the representative values must survive)."""

    def __init__(self, name, description, boundaries, tag_keys):
        self.name, self.boundaries, self.tag_keys = name, tuple(boundaries), tag_keys
        self.counts = {}
        self.sums = {}

    def observe(self, value, tags=None):
        assert set(tags) == set(self.tag_keys), (tags, self.tag_keys)
        key = tuple(sorted(tags.items()))
        counts = self.counts.setdefault(key, [0] * (len(self.boundaries) + 1))
        counts[sum(value >= b for b in self.boundaries)] += 1
        self.sums[key] = self.sums.get(key, 0.0) + value

    def cumulative(self, key):
        out, total = [], 0
        for n in self.counts[key]:
            total += n
            out.append(total)
        return out


def prom_cumulative(registry, name, **labels):
    """Prometheus's own cumulative bucket counts of one series (le ascending, +Inf last)."""
    text = generate_latest(registry).decode()
    rows = []
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{") and all(f'{k}="{v}"' in line
                                                       for k, v in labels.items()):
            le = line.split('le="')[1].split('"')[0]
            rows.append((float(le), int(float(line.rsplit(" ", 1)[1]))))
    return [n for _, n in sorted(rows)]


def histogram_mirror(source="merger", **kw):
    made = {}
    mirror = MetricsMirror(lambda n, d, k: made.setdefault(n, FakeGauge(n, d, k)), source,
                           make_histogram=lambda n, d, b, k: made.setdefault(
                               n, FakeHistogram(n, d, b, k)), **kw)
    return mirror, made


def test_histograms_are_mirrored_with_the_same_buckets_and_exact_counts():
    r = CollectorRegistry()
    bounds = (0.001, 0.01, 0.1, 1.0)
    h = Histogram("binlog_drainer_query_duration_time", "s", ["type"], buckets=bounds,
                  registry=r)
    mirror, made = histogram_mirror()
    # values on the boundaries too: Prometheus counts 0.01 in le=0.01, Ray-like buckets
    # would put 0.01 itself in the next one; the midpoints never sit on a boundary
    for v in (0.0005, 0.001, 0.01, 0.01, 0.05, 0.5, 5.0):
        h.labels("commit").observe(v)
    mirror.update(generate_latest(r))
    for v in (0.002, 0.2, 0.2, 100.0):
        h.labels("commit").observe(v)
    h.labels("dml").observe(0.02)
    mirror.update(generate_latest(r))
    mirror.update(generate_latest(r))  # nothing new: nothing observed again

    hist = made["binlog_drainer_query_duration_time"]
    assert hist.boundaries == bounds and set(hist.tag_keys) == {"source", "type"}
    key = (("source", "merger"), ("type", "commit"))
    assert hist.cumulative(key) == prom_cumulative(r, "binlog_drainer_query_duration_time",
                                                   type="commit")
    assert hist.cumulative((("source", "merger"), ("type", "dml"))) == [0, 0, 1, 1, 1]
    assert mirror.observed[("binlog_drainer_query_duration_time", key)] == 11
    # the histogram there keeps its own _sum/_count: no gauges of those names
    assert not any(n.endswith(("_sum", "_count", "_bucket")) for n in made)


def test_bucket_observations_carry_the_new_counts_at_a_value_inside_each_bucket():
    bounds = (0.5, 1.0)
    obs, scaled = bucket_observations(bounds, None, [2, 2, 5])
    assert obs == [(0.25, 2), (2.0, 3)] and not scaled  # first bucket (0, 0.5], +Inf: 2x
    obs, _ = bucket_observations(bounds, [2, 2, 5], [2, 4, 8])
    assert obs == [(0.75, 2), (2.0, 1)]
    assert bucket_observations(bounds, [2, 4, 8], [2, 4, 8]) == ([], False)
    # counts went down: a new process; everything it counted is new
    assert bucket_observations(bounds, [2, 4, 8], [1, 1, 1]) == ([(0.25, 1)], False)


def test_a_busy_round_is_capped_in_proportion():
    obs, scaled = bucket_observations((1.0, 2.0), None, [600, 900, 1000], max_observations=10)
    assert scaled and sum(n for _, n in obs) == 10
    assert dict(obs) == {0.5: 6, 1.5: 3, 4.0: 1}


def test_a_capped_series_warns_once(caplog):
    r = CollectorRegistry()
    h = Histogram("x_seconds", "x", buckets=(1.0,), registry=r)
    mirror, made = histogram_mirror(max_observations=3)
    for _ in range(10):
        h.observe(0.5)
    with caplog.at_level("WARNING"):
        mirror.update(generate_latest(r))
        for _ in range(10):
            h.observe(0.5)
        mirror.update(generate_latest(r))
    assert made["x_seconds"].cumulative((("source", "merger"),)) == [6, 6]
    assert sum("more than 3 new observations" in m for m in caplog.messages) == 1
