"""A Prometheus histogram mirrored into Ray (actors/ray_calls.mirror_metrics) reaches Ray's
Prometheus export as ``ray_<its name>`` (Ray's prefix: the name cluster/monitoring's
Ray-export rules and dashboard use) with the same buckets and counts, so Grafana's
histogram_quantile gives p90/p99 from Ray's export."""

from __future__ import annotations

import re
import sys
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from actors.ray_calls import RayCalls, mirror_metrics

pytestmark = [pytest.mark.timeout(300)]

NAME = "binlog_test_mirror_duration_seconds"
BOUNDS = (0.01, 0.1, 1.0)
VALUES = (0.005, 0.01, 0.05, 0.05, 0.5, 3.0)


class HistogramSource:
    """An actor with a Prometheus histogram, mirrored into Ray every second."""

    def __init__(self):
        self.registry = CollectorRegistry()
        hist = Histogram(NAME, "a test histogram", ["type"], buckets=BOUNDS,
                         registry=self.registry)
        for v in VALUES:
            hist.labels("commit").observe(v)
        self.mirror = mirror_metrics("hist-source", lambda: generate_latest(self.registry),
                                     interval_s=1.0)

    def observed(self) -> dict:
        return {str(k): v for k, v in self.mirror.observed.items()}


def _export(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode("utf-8", "replace")
    except OSError:
        return ""


def test_a_mirrored_histogram_has_its_buckets_in_rays_export(ray_local):
    ray = ray_local
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    actor = RayCalls.start_actor(HistogramSource, options={"num_cpus": 0})
    try:
        port = ray._private.worker._global_node.metrics_export_port  # private: test only
        pattern = re.compile(rf'^ray_{NAME}_bucket\{{([^}}]*)\}} (\S+)$', re.M)
        deadline = time.monotonic() + 120
        buckets: dict[float, float] = {}
        while time.monotonic() < deadline:
            text = _export(port)
            buckets = {}
            for labels, value in pattern.findall(text):
                if 'source="hist-source"' in labels and 'type="commit"' in labels:
                    le = re.search(r'le="([^"]+)"', labels).group(1)
                    buckets[float(le)] = float(value)
            if buckets and max(buckets.values()) >= len(VALUES):
                break
            time.sleep(1)
        assert ray.get(actor.observed.remote())  # the mirror observed in the actor
        assert buckets, f"no ray_{NAME}_bucket series in Ray's export on port {port}"
        assert re.search(rf"^{NAME}_bucket", text, re.M) is None  # never without the prefix
        # Prometheus's le-cumulative counts of VALUES: le=0.01: 2, 0.1: 4, 1.0: 5, +Inf: 6
        assert [buckets[b] for b in (*BOUNDS, float("inf"))] == [2, 4, 5, 6]
    finally:
        RayCalls.kill(actor)
