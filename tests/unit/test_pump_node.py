"""PumpNode logic with fakes: states, WriteBinlog rules, fake binlogs, GC, offline, notify."""

from __future__ import annotations

import threading

import pytest

from tidb_binlog import binlog as bl
from tidb_binlog.errors import (
    ClusterIDMismatch,
    DiskSpaceError,
    ProtocolError,
    PurgedError,
    StateError,
    UnavailableError,
)
from tidb_binlog.node import CLOSING, DRAINER, OFFLINE, ONLINE, PAUSED, PAUSING, PUMP, NodeStatus
from tidb_binlog.pump.node import (
    NODE_ID_FILE,
    PumpNode,
    PumpNodeOptions,
    decide_gc,
    fake_binlog_due,
    lagging_drainers,
    needs_notify,
    next_state,
    resolve_node_id,
)
from tidb_binlog.testing.memory_storage import MemoryStorage
from tidb_binlog.testing.registry import InMemoryRegistry
from tidb_binlog.tso import compose, extract_physical


class FakeClock:
    def __init__(self, now_s: float = 1000.0):
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class FakeTSO:
    """Physical ms follows the fake clock so GC targets are predictable."""

    def __init__(self, clock: FakeClock, base_ms: int = 1_700_000_000_000):
        self.clock, self.base_ms, self.logical = clock, base_ms, 0

    def __call__(self, count: int = 1) -> int:
        self.logical += 1
        return compose(self.base_ms + int(self.clock() * 1000), self.logical)


def make_node(tmp_path, *, registry=None, cluster_id=7, notifier=None, **opts):
    clock = FakeClock()
    storage = MemoryStorage(stop_write_at_available_space_bytes=opts.pop("guard", 0))
    options = PumpNodeOptions(data_dir=str(tmp_path), advertise_addr="127.0.0.1:8250",
                              node_id="pump-1", cluster_id=cluster_id, **opts)
    node = PumpNode(options, storage, registry=registry, tso=FakeTSO(clock), clock=clock,
                    notifier=notifier or (lambda addr: None))
    return node, storage, clock


def pw(start_ts):
    return bl.encode(bl.prewrite(start_ts, b"pv%d" % start_ts, prewrite_key=b"k"))


def cm(start_ts, commit_ts):
    return bl.encode(bl.commit(start_ts, commit_ts))


# -- pure decisions ----------------------------------------------------------------
def test_resolve_node_id_prefers_file_then_config_then_hostname(tmp_path):
    assert resolve_node_id(tmp_path / "a", "cfg-id", "h:1") == "cfg-id"
    assert (tmp_path / "a" / NODE_ID_FILE).read_text().strip() == "cfg-id"
    assert resolve_node_id(tmp_path / "a", "other", "h:1") == "cfg-id"   # file wins
    generated = resolve_node_id(tmp_path / "b", "", "0.0.0.0:8250")
    assert generated.endswith(":8250") and generated != ":8250"


def test_next_state_only_from_online():
    assert next_state(ONLINE, "pause") == PAUSING
    assert next_state(ONLINE, "close") == CLOSING
    for state in (PAUSING, PAUSED, CLOSING, OFFLINE):
        with pytest.raises(StateError, match=f"state {state}"):
            next_state(state, "pause")
    with pytest.raises(StateError, match="unknown action"):
        next_state(ONLINE, "resume")


def test_needs_notify_only_for_new_or_offline():
    assert needs_notify(None)
    assert needs_notify(NodeStatus("p", "h:1", state=OFFLINE))
    assert not needs_notify(NodeStatus("p", "h:1", state=PAUSED))


def test_fake_binlog_due_accepts_fractions():
    assert not fake_binlog_due(10.2, 10.0, 0.25)
    assert fake_binlog_due(10.25, 10.0, 0.25)


def _drainer(node_id, cp, state=ONLINE):
    return NodeStatus(node_id, "h:8249", state=state, max_commit_ts=cp)


def test_decide_gc_held_back_and_forced():
    now = compose(10_000_000, 0)
    gc_s = 1000.0
    target = compose(10_000_000 - 1_000_000, 0)
    max_ts = compose(9_999_999, 0)
    d = decide_gc(now, gc_s, 0, max_ts, [])
    assert d.gc_ts == target and d.held_back_by == ()
    slow = compose(5_000_000, 0)
    drainers = [_drainer("slow", slow), _drainer("fast", max_ts),
                _drainer("gone", 1, state=OFFLINE)]
    d = decide_gc(now, gc_s, 0, max_ts, drainers)
    assert d.gc_ts == slow and d.held_back_by == ("slow",) and "held back" in d.reason
    d = decide_gc(now, gc_s, 0, max_ts, drainers, force=True)
    assert d.gc_ts == target and d.held_back_by == ("slow",) and "forced" in d.reason
    assert decide_gc(now, gc_s, target, max_ts, []).gc_ts is None        # nothing new
    assert decide_gc(now, gc_s, 0, target, []).gc_ts is None              # not below max


def test_lagging_drainers_ignores_offline():
    ds = [_drainer("a", 5), _drainer("b", 10), _drainer("c", 1, state=OFFLINE)]
    assert lagging_drainers(ds, 10) == ["a"]


# -- WriteBinlog rules -------------------------------------------------------------------
def test_write_rules(tmp_path):
    node, storage, _ = make_node(tmp_path)
    node.start(background=False)
    with pytest.raises(ClusterIDMismatch, match="cluster ID are mismatch, 8 vs 7"):
        node.write_binlog(8, pw(10))
    with pytest.raises(ProtocolError, match="malformed binlog payload"):
        node.write_binlog(7, b"\xff\xff\xff")
    node.write_binlog(7, bl.encode(bl.probe()))
    assert storage.writes == 0
    node.write_binlog(7, pw(10))
    node.write_binlog(7, cm(10, 11))
    assert storage.pull_commit_binlogs(0) and storage.max_commit_ts == 11
    assert bl.decode(storage.pull_commit_binlogs(0)[0][1]).prewrite_value == b"pv10"


def test_prewrite_refused_unless_online_commit_always_accepted(tmp_path):
    reg = InMemoryRegistry()
    node, storage, _ = make_node(tmp_path, registry=reg)
    node.start(background=False)
    node.write_binlog(node.cluster_id, pw(10))
    node.apply_action("pump-1", "pause")
    # pausing while the transaction in flight has no Commit yet (however long)
    assert not node.done.wait(0.5)
    assert node.state == PAUSING and reg.node(PUMP, "pump-1").state == PAUSING
    with pytest.raises(StateError, match="no online: pausing"):
        node.write_binlog(node.cluster_id, pw(20))
    node.write_binlog(node.cluster_id, cm(10, 11))             # the in-flight txn still finishes
    assert node.done.wait(5)
    assert node.state == PAUSED and reg.node(PUMP, "pump-1").state == PAUSED
    with pytest.raises(StateError, match="no online: paused"):
        node.write_binlog(node.cluster_id, pw(20))
    node.write_binlog(node.cluster_id, bl.encode(bl.fake(30)))
    assert [ts for ts, _ in storage.pull_commit_binlogs(0)] == [11, 30]


def test_a_stop_ends_pausing_paused(tmp_path):
    reg = InMemoryRegistry()
    node, _, _ = make_node(tmp_path, registry=reg)
    node.start(background=False)
    node.write_binlog(node.cluster_id, pw(10))                 # never committed
    node.apply_action("pump-1", "pause")
    assert node.state == PAUSING
    node.stop()
    assert node.state == PAUSED and reg.node(PUMP, "pump-1").state == PAUSED


def test_disk_guard_refuses_non_fake(tmp_path):
    node, storage, _ = make_node(tmp_path, guard=1 << 50)
    node.start(background=False)
    with pytest.raises(DiskSpaceError, match="no available space"):
        node.write_binlog(7, pw(10))
    node.write_fake_binlog()
    assert storage.writes == 1


def test_actions_only_for_this_node_and_only_online(tmp_path):
    node, _, _ = make_node(tmp_path)
    node.start(background=False)
    with pytest.raises(StateError, match="not this pump"):
        node.apply_action("pump-2", "pause")
    node.apply_action("pump-1", "pause")
    with pytest.raises(StateError):
        node.apply_action("pump-1", "close")


# -- periodic duties ------------------------------------------------------------------
def test_fake_binlog_only_after_idle_interval(tmp_path):
    node, storage, clock = make_node(tmp_path, gen_binlog_interval_s=0.5)
    node.start(background=False)
    assert storage.writes == 0
    clock.now_s += 0.4
    node.tick()
    assert storage.writes == 0
    node.write_binlog(7, cm(10, 11))             # a real write resets the idle timer
    clock.now_s += 0.4
    assert node.tick() == pytest.approx(0.1)
    assert storage.writes == 1
    clock.now_s += 0.1
    node.tick()
    assert storage.writes == 2
    assert storage.max_commit_ts > 11
    fake = storage.get_binlog(storage.max_commit_ts)
    assert bl.is_fake(fake) and fake.tp == bl.BinlogType.ROLLBACK
    assert node.metrics.fake_binlog_count._value.get() == 1


def test_heartbeat_publishes_max_commit_ts(tmp_path):
    reg = InMemoryRegistry()
    node, _, clock = make_node(tmp_path, registry=reg, heartbeat_interval_s=2.0)
    node.start(background=False)
    node.write_binlog(reg.cluster_id(), pw(10))
    node.write_binlog(reg.cluster_id(), cm(10, 11))
    clock.now_s += 2.0
    node.tick()
    rec = reg.node(PUMP, "pump-1")
    assert rec.state == ONLINE and rec.max_commit_ts == 11


def test_gc_held_back_by_drainer_checkpoint_unless_forced(tmp_path):
    reg = InMemoryRegistry()
    node, storage, clock = make_node(tmp_path, registry=reg, gc_s=10.0)
    node.start(background=False)
    base = node.get_ts()
    old = [compose(extract_physical(base) - 60_000 + i * 1000, 0) for i in range(40)]
    for ts in old:
        storage.write_binlog(bl.fake(ts))
    storage.write_binlog(bl.fake(node.get_ts()))
    reg.update_node(DRAINER, NodeStatus("d1", "127.0.0.1:1", max_commit_ts=old[5]))
    d = node.gc()
    assert d.gc_ts == old[5] and storage.gc_ts == old[5]
    assert node.metrics.drainer_purge_count.labels("d1")._value.get() == 1
    assert [ts for ts, _ in storage.pull_commit_binlogs(old[5])][0] == old[6]
    with pytest.raises(PurgedError):
        storage.pull_commit_binlogs(old[4])
    d = node.gc(force=True)
    assert d.gc_ts > old[-1] and storage.gc_ts == d.gc_ts
    assert node.metrics.drainer_purge_count.labels("d1")._value.get() == 2


def test_gc_runs_on_schedule(tmp_path):
    node, storage, clock = make_node(tmp_path, gc_s=1.0, gc_interval_s=3600.0,
                                     gen_binlog_interval_s=10_000.0)
    node.start(background=False)
    storage.write_binlog(bl.fake(node.get_ts()))
    clock.now_s += 100
    storage.write_binlog(bl.fake(node.get_ts()))
    node.tick()
    assert storage.gc_ts == 0
    clock.now_s += 3600
    storage.write_binlog(bl.fake(node.get_ts()))
    node.tick()
    assert storage.gc_ts > 0


# -- close → offline ------------------------------------------------------------------------
def test_close_waits_for_drainers_then_offline(tmp_path):
    reg = InMemoryRegistry()
    node, storage, _ = make_node(tmp_path, registry=reg, offline_fake_interval_s=0.01)
    node.start(background=False)
    reg.update_node(DRAINER, NodeStatus("d1", "127.0.0.1:1", max_commit_ts=0))
    node.apply_action("pump-1", "close")
    assert reg.node(PUMP, "pump-1").state in (CLOSING, OFFLINE)
    assert not node.done.wait(0.2)                 # drainer d1 has not caught up
    assert reg.node(PUMP, "pump-1").state == CLOSING
    reg.update_node(DRAINER, NodeStatus("d1", "127.0.0.1:1", max_commit_ts=1 << 62))
    assert node.done.wait(5)
    assert node.state == OFFLINE and reg.node(PUMP, "pump-1").state == OFFLINE


def test_close_waits_for_unmatched_prewrites(tmp_path):
    node, storage, _ = make_node(tmp_path)
    node.start(background=False)
    node.write_binlog(7, pw(10))
    node.apply_action("pump-1", "close")
    assert not node.done.wait(0.2)
    node.write_binlog(7, bl.encode(bl.rollback(10)))
    assert node.done.wait(5) and node.state == OFFLINE


def test_stop_pauses_and_closes_storage(tmp_path):
    reg = InMemoryRegistry()
    node, storage, _ = make_node(tmp_path, registry=reg)
    node.start()
    node.stop()
    assert reg.node(PUMP, "pump-1").state == PAUSED
    with pytest.raises(Exception, match="closed"):
        storage.write_binlog(bl.fake(5))


class _GatedHeartbeatRegistry(InMemoryRegistry):
    """Holds the duty thread's first heartbeat between reading and publishing the status."""

    def __init__(self):
        super().__init__()
        self.heartbeat_entered = threading.Event()
        self.release_heartbeat = threading.Event()
        self.paused_published = threading.Event()

    def update_node(self, kind, status, *, force=False):
        if threading.current_thread().name.startswith("pump-duties"):
            self.heartbeat_entered.set()
            assert self.release_heartbeat.wait(30), "test never released the heartbeat"
        super().update_node(kind, status, force=force)
        if status.state == PAUSED:
            self.paused_published.set()


def test_stop_has_the_last_word_over_an_in_flight_heartbeat(tmp_path):
    # The race behind a flaky test_stop_pauses_and_closes_storage: a heartbeat that read
    # state=online just before stop() published paused, and wrote it just after.
    reg = _GatedHeartbeatRegistry()
    node, _, _ = make_node(tmp_path, registry=reg)
    node.start()
    assert reg.heartbeat_entered.wait(30)          # status (online) read, not yet written
    stopper = threading.Thread(target=node.stop)
    stopper.start()
    assert reg.paused_published.wait(30)           # stop() published paused first ...
    reg.release_heartbeat.set()                    # ... then the stale online lands
    stopper.join(30)
    assert not stopper.is_alive()
    assert reg.node(PUMP, "pump-1").state == PAUSED


# -- notify on start -----------------------------------------------------------------------
def test_new_pump_notifies_online_drainers(tmp_path):
    reg = InMemoryRegistry()
    reg.update_node(DRAINER, NodeStatus("d1", "10.0.0.1:8249"))
    reg.update_node(DRAINER, NodeStatus("d2", "10.0.0.2:8249", state=PAUSED))
    called = []
    node, _, _ = make_node(tmp_path, registry=reg, notifier=called.append)
    node.start(background=False)
    assert called == ["10.0.0.1:8249"]
    node.stop()
    called.clear()
    node2, _, _ = make_node(tmp_path, registry=reg, notifier=called.append)
    node2.start(background=False)                  # previous state paused: no notify
    assert called == []


def test_notify_failure_goes_offline_and_refuses_to_start(tmp_path):
    reg = InMemoryRegistry()
    reg.update_node(DRAINER, NodeStatus("d1", "10.0.0.1:8249"))
    attempts = []

    def broken(addr):
        attempts.append(addr)
        raise ConnectionError("connection refused")

    node, _, _ = make_node(tmp_path, registry=reg, notifier=broken)
    with pytest.raises(UnavailableError, match="fail to notify all living drainer"):
        node.start(background=False)
    assert len(attempts) == 3
    assert reg.node(PUMP, "pump-1").state == OFFLINE


# -- pull and watermark ---------------------------------------------------------------------
def test_pull_watermark_exact_when_batch_is_cut(tmp_path):
    node, storage, _ = make_node(tmp_path)
    node.start(background=False)
    for i in range(10):
        node.write_binlog(7, pw(100 + 2 * i))
        node.write_binlog(7, cm(100 + 2 * i, 101 + 2 * i))
    batch, watermark = node.pull(0, max_bytes=1)
    assert [ts for ts, _ in batch] == [101] and watermark == 101
    batch, watermark = node.pull(101)
    assert [ts for ts, _ in batch] == list(range(103, 120, 2)) and watermark == 119
    batch, watermark = node.pull(119, timeout_s=0.01)
    assert batch == [] and watermark == 119


def test_pull_watermark_stops_below_unmatched_prewrite(tmp_path):
    node, storage, _ = make_node(tmp_path)
    node.start(background=False)
    node.write_binlog(7, pw(10))
    node.write_binlog(7, pw(12))
    node.write_binlog(7, cm(12, 13))               # 10 still unmatched: 13 not ready
    assert node.pull(0) == ([], 0)
    node.write_binlog(7, cm(10, 14))
    batch, watermark = node.pull(0)
    assert [ts for ts, _ in batch] == [13, 14] and watermark == 14
