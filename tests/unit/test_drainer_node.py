"""The drainer node's pure parts: metrics merging, node ids, settings, the registry record
life cycle (no sockets, no Ray: the servers are covered by tests/ray/test_drainer_service.py)."""

from __future__ import annotations

import socket

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.service.node import (
    DrainerNode,
    ServiceSettings,
    merge_expositions,
    resolve_node_id,
)
from tidb_binlog.errors import BinlogError, StateError, UnavailableError
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED
from tidb_binlog.testing.registry import InMemoryRegistry


def worker_text(inserts: int, deletes: int, seconds: list[float]) -> bytes:
    r = CollectorRegistry()
    event = Counter("binlog_drainer_event", "events", ["type"], registry=r)
    duration = Histogram("binlog_drainer_execute_duration_time", "s", buckets=(0.1, 1),
                         registry=r)
    event.labels("Insert").inc(inserts)
    if deletes:
        event.labels("Delete").inc(deletes)
    for s in seconds:
        duration.observe(s)
    Counter("binlog_drainer_error_count", "errors", ["type"], registry=r)  # no samples
    return generate_latest(r)


def samples(text: bytes) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text.decode()) for s in fam.samples}


def test_merge_sums_equal_series_and_keeps_the_others():
    merged = merge_expositions([worker_text(3, 0, [0.05]), worker_text(4, 2, [0.5, 2.0])])
    got = samples(merged)
    assert got[("binlog_drainer_event_total", (("type", "Insert"),))] == 7
    assert got[("binlog_drainer_event_total", (("type", "Delete"),))] == 2
    assert got[("binlog_drainer_execute_duration_time_bucket", (("le", "0.1"),))] == 1
    assert got[("binlog_drainer_execute_duration_time_bucket", (("le", "1.0"),))] == 2
    assert got[("binlog_drainer_execute_duration_time_count", ())] == 3
    assert got[("binlog_drainer_execute_duration_time_sum", ())] == pytest.approx(2.55)
    assert not any(name.endswith("_created") for name, _ in got)
    text = merged.decode()
    assert text.count("# TYPE binlog_drainer_event_total counter") == 1
    assert "_created" not in text
    assert "# HELP binlog_drainer_error_count" in text  # a family without samples stays


def test_node_id_is_configured_or_hostname_port():
    assert resolve_node_id("d1", "10.0.0.1:8249") == "d1"
    assert resolve_node_id("", "10.0.0.1:8249") == f"{socket.gethostname()}:8249"
    generated = resolve_node_id("", "127.0.0.1:0")
    assert generated.startswith(f"{socket.gethostname()}:drainer-")
    assert generated != resolve_node_id("", "127.0.0.1:0")


def test_service_settings_follow_an_overridden_addr():
    cfg = load_drainer_config(None, {"addr": "127.0.0.1:9000", "detect-interval": 7,
                                     "synced-check-time": 2})
    s = ServiceSettings.from_config(cfg, namespace="ns")
    assert (s.addr, s.advertise_addr, s.detect_interval_s, s.synced_check_time_s) == \
        ("127.0.0.1:9000", "127.0.0.1:9000", 7.0, 120.0)
    s = ServiceSettings.from_config(cfg, namespace="ns", addr="127.0.0.1:0", node_id="x")
    assert (s.addr, s.advertise_addr, s.node_id) == ("127.0.0.1:0", "127.0.0.1:0", "x")
    cfg = load_drainer_config(None, {"addr": "0.0.0.0:9000", "advertise-addr": "10.1.1.1:9000"})
    assert ServiceSettings.from_config(cfg, namespace="ns").advertise_addr == "10.1.1.1:9000"


class Saved:
    def __init__(self, ts):
        self.ts = ts

    def __call__(self):
        if isinstance(self.ts, BinlogError):
            raise self.ts
        return self.ts


def node(reg, saved):
    settings = ServiceSettings(node_id="d1", addr="127.0.0.1:8249",
                               advertise_addr="127.0.0.1:8249", heartbeat_interval_s=3600)
    return DrainerNode(settings, reg, checkpoint_ts=saved)


def test_record_goes_online_follows_the_saved_checkpoint_and_ends_paused():
    reg, saved = InMemoryRegistry(), Saved(100)
    n = node(reg, saved)
    n.register(90)
    rec = reg.node(DRAINER, "d1")
    assert (rec.state, rec.host, rec.max_commit_ts, rec.is_alive) == \
        (ONLINE, "127.0.0.1:8249", 90, True)
    n.heartbeat()
    assert reg.node(DRAINER, "d1").max_commit_ts == 100
    saved.ts = UnavailableError("downstream down")
    n.heartbeat()                                   # keeps the last value, still beats
    assert reg.node(DRAINER, "d1").max_commit_ts == 100
    n.close(PAUSED, 120)
    rec = reg.node(DRAINER, "d1")
    assert (rec.state, rec.max_commit_ts) == (PAUSED, 120)
    with pytest.raises(StateError, match="only while online"):
        n.check_action("close")


def test_close_action_records_offline():
    reg = InMemoryRegistry()
    n = node(reg, Saved(5))
    n.register(5)
    n.check_action("close")
    n.close(OFFLINE, 7)
    rec = reg.node(DRAINER, "d1")
    assert (rec.state, rec.is_alive, rec.max_commit_ts) == (OFFLINE, False, 7)


class FailingWrites(InMemoryRegistry):
    """A registry whose record writes fail while ``failing`` is set."""

    def __init__(self):
        super().__init__()
        self.failing = False
        self.writes = 0

    def update_node(self, kind, status):
        if self.failing:
            raise UnavailableError("registry actor unreachable")
        self.writes += 1
        return super().update_node(kind, status)


def lossy_node(reg, max_failures, on_lost):
    settings = ServiceSettings(node_id="d1", addr="127.0.0.1:8249",
                               advertise_addr="127.0.0.1:8249", heartbeat_interval_s=3600,
                               heartbeat_max_failures=max_failures)
    return DrainerNode(settings, reg, checkpoint_ts=Saved(100), on_lost=on_lost)


def test_a_failure_streak_shorter_than_the_limit_keeps_beating():
    reg, lost = FailingWrites(), []
    n = lossy_node(reg, 3, lost.append)
    n.register(90)
    for _ in range(3):                      # two failures, a success, two failures, ...
        reg.failing = True
        assert n.beat() and n.beat()
        reg.failing = False
        assert n.beat()
        assert n.heartbeat_failures == 0
    assert lost == [] and n.lost is None
    assert reg.node(DRAINER, "d1").max_commit_ts == 100


def test_the_registry_lost_for_max_failures_beats_stops_the_task_with_the_way_out():
    reg, lost = FailingWrites(), []
    n = lossy_node(reg, 4, lost.append)
    n.register(90)
    assert n.beat()
    reg.failing = True
    assert [n.beat() for _ in range(4)] == [True, True, True, False]
    assert len(lost) == 1 and lost[0] is n.lost
    text = str(n.lost)
    assert isinstance(n.lost, UnavailableError)
    assert "did not answer 4 heartbeats in a row since 20" in text   # an ISO date
    assert "registry actor unreachable" in text
    assert "cannot learn of this drainer" in text and "GC" in text
    assert "Restart the task once the registry is back" in text
    assert "checkpoint (100)" in text
    reg.failing = False                     # too late: the node stays lost
    assert not n.beat() and len(lost) == 1


def test_the_heartbeat_thread_ends_and_reports_when_the_registry_is_lost():
    import threading

    reg, done = FailingWrites(), threading.Event()
    errors = []
    settings = ServiceSettings(node_id="d1", addr="127.0.0.1:8249",
                               advertise_addr="127.0.0.1:8249", heartbeat_interval_s=0.01,
                               heartbeat_max_failures=3)
    n = DrainerNode(settings, reg, checkpoint_ts=Saved(100),
                    on_lost=lambda exc: (errors.append(exc), done.set()))
    n.register(90)
    reg.failing = True
    assert done.wait(30), "the heartbeat never gave up"
    n._thread.join(30)
    assert not n._thread.is_alive()
    assert "did not answer 3 heartbeats" in str(errors[0])


def test_max_failures_must_be_positive():
    with pytest.raises(BinlogError, match="heartbeat_max_failures"):
        lossy_node(InMemoryRegistry(), 0, None)
