"""DrainerMetrics: every binlog_drainer_* name is registered, and the coordinator's counters
(DDL jobs, checkpoint saves) become ddl_jobs_total and event{type="savepoint"} across a
coordinator restart (its counters start from 0 again)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tidb_binlog.drainer.service.metrics import METRIC_NAMES, build_drainer_metrics


def samples(text: bytes) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def status(outstanding=0, ddl_jobs=0, savepoints=0):
    return {"outstanding": outstanding, "ddl_jobs": ddl_jobs, "savepoints": savepoints}


def test_every_name_is_registered():
    m = build_drainer_metrics()
    m.observe_binlog("p1", 1 << 18, 10, now_s=1.0)
    m.observe_coordinator(status())
    names = {fam.name for fam in text_string_to_metric_families(m.exposition().decode())}
    # histograms and counters are listed by their family name
    assert set(METRIC_NAMES) <= names


def test_coordinator_counters_follow_its_status_and_survive_its_restart():
    m = build_drainer_metrics()
    m.observe_coordinator(status(outstanding=3))
    s = samples(m.exposition())
    assert s[("binlog_drainer_queue_size", (("name", "workers"),))] == 3
    assert s[("binlog_drainer_ddl_jobs_total", ())] == 0
    assert s[("binlog_drainer_event_total", (("type", "savepoint"),))] == 0
    m.observe_coordinator(status(ddl_jobs=2, savepoints=5))
    m.observe_coordinator(status(ddl_jobs=3, savepoints=7))
    s = samples(m.exposition())
    assert s[("binlog_drainer_ddl_jobs_total", ())] == 3
    assert s[("binlog_drainer_event_total", (("type", "savepoint"),))] == 7
    m.observe_coordinator(status(ddl_jobs=1, savepoints=2))     # restarted: counts from 0
    s = samples(m.exposition())
    assert s[("binlog_drainer_ddl_jobs_total", ())] == 4
    assert s[("binlog_drainer_event_total", (("type", "savepoint"),))] == 9


def test_without_apply_side_names_the_savepoints_are_not_counted_here():
    m = build_drainer_metrics(apply_side=False)
    m.observe_coordinator(status(ddl_jobs=1, savepoints=4))
    s = samples(m.exposition())
    assert s[("binlog_drainer_ddl_jobs_total", ())] == 1
    assert not any(name.startswith("binlog_drainer_event") for name, _ in s)


def test_batch_histogram_exposes_what_a_histogram_does():
    """observe_many of a batch == Histogram.observe of each value: every bucket, count
    and sum, per label; values on a bucket bound count in it (le)."""
    import random

    from prometheus_client import CollectorRegistry, Histogram

    from tidb_binlog.drainer.service.metrics import BatchHistogram

    bounds = (16.0, 64.0, 256.0, 1024.0)
    ours_reg, ref_reg = CollectorRegistry(), CollectorRegistry()
    ours = BatchHistogram("x_size", "doc", ["nodeID"], bounds, ours_reg)
    ref = Histogram("x_size", "doc", ["nodeID"], buckets=bounds, registry=ref_reg)
    rnd = random.Random(5)
    for node in ("a", "b"):
        for _ in range(20):
            batch = [rnd.choice([0, 16, 17, 64, 65, 300, 1024, 5000]) for _ in range(rnd.randrange(0, 9))]
            ours.labels(node).observe_many(batch)
            for v in batch:
                ref.labels(node).observe(v)
        ours.labels(node).observe(64)
        ref.labels(node).observe(64)
    for node in ("a", "b"):
        for le in ("16.0", "64.0", "256.0", "1024.0", "+Inf"):
            labels = {"nodeID": node, "le": le}
            assert (ours_reg.get_sample_value("x_size_bucket", labels)
                    == ref_reg.get_sample_value("x_size_bucket", labels)), labels
        for suffix in ("_count", "_sum"):
            assert (ours_reg.get_sample_value("x_size" + suffix, {"nodeID": node})
                    == ref_reg.get_sample_value("x_size" + suffix, {"nodeID": node}))
