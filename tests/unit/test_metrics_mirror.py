"""MetricsMirror: Prometheus samples copied into gauges of another system (a fake here;
ray.util.metrics in the actors)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tidb_binlog.metrics_mirror import MetricsMirror


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
