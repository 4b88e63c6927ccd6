"""RegistryState and InMemoryRegistry: records, transitions, liveness, persistence, watch."""

from __future__ import annotations

import json
import threading

import pytest

from tidb_binlog.errors import StateError, StorageError
from tidb_binlog.node import (
    CLOSING,
    DRAINER,
    OFFLINE,
    ONLINE,
    PAUSED,
    PAUSING,
    PUMP,
    NodeStatus,
)
from tidb_binlog.registry import (
    SNAPSHOT_FILE,
    RegistryState,
    analyze_node_id,
    node_key,
)
from tidb_binlog.testing.registry import InMemoryRegistry
from tidb_binlog.tso import compose, extract_physical


class FakeClock:
    def __init__(self, ms: int = 1_700_000_000_000):
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def pump(node_id: str = "pump-1", state: str = ONLINE, **kw) -> NodeStatus:
    return NodeStatus(node_id=node_id, host=f"127.0.0.1:{8250 + int(node_id[-1])}", state=state, **kw)


def test_keys_follow_tidb_layout():
    assert node_key(PUMP, "p1") == "/tidb-binlog/v1/pumps/p1"
    assert node_key(DRAINER, "d:8249") == "/tidb-binlog/v1/drainers/d:8249"
    assert analyze_node_id("/tidb-binlog/v1/pumps/p1") == "p1"
    assert analyze_node_id("/tidb-binlog/pumps/host:8250") == "host:8250"  # TiDB's old layout
    with pytest.raises(ValueError, match="not a registry node key"):
        analyze_node_id("/tidb-binlog/v1/other/x")
    with pytest.raises(ValueError, match="unknown node kind"):
        node_key("pump", "p1")


def test_create_or_update_bumps_revision_and_keeps_one_record():
    st = RegistryState()
    assert st.revision == 0
    r1 = st.update_node(PUMP, pump(max_commit_ts=5))
    r2 = st.update_node(PUMP, pump(max_commit_ts=9))
    assert (r1, r2) == (1, 2)
    [rec] = st.nodes(PUMP)
    assert rec.max_commit_ts == 9
    assert st.nodes(DRAINER) == []
    assert st.node(PUMP, "pump-9") is None


def test_cluster_id_is_random_nonzero_u64():
    a, b = RegistryState(), RegistryState()
    assert 0 < a.cluster_id < 1 << 64
    assert a.cluster_id != b.cluster_id


@pytest.mark.parametrize("before,after", [
    (ONLINE, PAUSING), (PAUSING, PAUSED), (PAUSED, ONLINE), (ONLINE, CLOSING),
    (CLOSING, OFFLINE), (OFFLINE, ONLINE), (ONLINE, PAUSED), (ONLINE, OFFLINE), (ONLINE, ONLINE),
])
def test_allowed_transitions(before, after):
    st = RegistryState()
    st.update_node(PUMP, pump(state=before))
    st.update_node(PUMP, pump(state=after))
    assert st.node(PUMP, "pump-1").state == after


@pytest.mark.parametrize("before,after", [
    (OFFLINE, PAUSED), (OFFLINE, CLOSING), (PAUSED, PAUSING), (CLOSING, PAUSED), (PAUSING, OFFLINE),
])
def test_forbidden_transitions_raise_unless_forced(before, after):
    st = RegistryState()
    st.update_node(PUMP, pump(state=before))
    with pytest.raises(StateError, match=f"cannot move from {before} to {after}") as info:
        st.update_node(PUMP, pump(state=after))
    assert info.value.state == before
    assert st.node(PUMP, "pump-1").state == before
    st.update_node(PUMP, pump(state=after), force=True)
    assert st.node(PUMP, "pump-1").state == after


def test_liveness_is_derived_from_update_ts_staleness():
    clock = FakeClock()
    st = RegistryState(alive_timeout_s=10, clock_ms=clock)
    st.update_node(PUMP, pump(update_ts=compose(clock.ms, 0), is_alive=False))
    assert st.node(PUMP, "pump-1").is_alive  # the writer's is_alive is ignored
    clock.ms += 10_000
    assert st.node(PUMP, "pump-1").is_alive
    clock.ms += 1
    assert not st.node(PUMP, "pump-1").is_alive
    st.update_node(PUMP, pump(update_ts=compose(clock.ms, 0)))
    assert st.nodes(PUMP)[0].is_alive
    st.update_node(PUMP, pump(state=OFFLINE, update_ts=compose(clock.ms, 0)))
    assert not st.node(PUMP, "pump-1").is_alive  # offline is never alive


def test_zero_update_ts_is_stamped_with_a_fresh_tso():
    clock = FakeClock()
    st = RegistryState(clock_ms=clock)
    st.update_node(PUMP, pump())
    rec = st.node(PUMP, "pump-1")
    assert extract_physical(rec.update_ts) >= clock.ms
    assert rec.is_alive


def test_changes_since_reports_only_changed_records_of_kind():
    st = RegistryState()
    st.update_node(PUMP, pump("pump-1"))
    rev = st.update_node(PUMP, pump("pump-2"))
    st.update_node(DRAINER, NodeStatus("d1", "h:8249"))
    assert st.changes_since(PUMP, rev) == (3, [])
    rev4 = st.update_node(PUMP, pump("pump-1", state=PAUSED))
    now, changed = st.changes_since(PUMP, rev)
    assert now == rev4 and [c.node_id for c in changed] == ["pump-1"]
    assert [c.node_id for c in st.changes_since(PUMP, 0)[1]] == ["pump-1", "pump-2"]
    # A revision from a registry whose data was lost: everything is reported.
    assert len(st.changes_since(PUMP, 999)[1]) == 2


def test_tso_batch_allocation_is_consecutive_and_monotonic():
    st = RegistryState()
    first = st.get_ts(10)
    nxt = st.get_ts()
    assert nxt >= first + 10


def test_restart_keeps_records_cluster_id_revision_kv_and_tso(tmp_path):
    st = RegistryState(tmp_path)
    st.update_node(PUMP, pump("pump-1", score=7, label={"zone": "a"}, max_commit_ts=42))
    st.update_node(DRAINER, NodeStatus("d1", "h:8249", state=PAUSED))
    st.kv_put("drainer/d1/safe-point", "123")
    last_ts = st.get_ts(5) + 4
    before = (st.cluster_id, st.revision, st.nodes(PUMP), st.nodes(DRAINER))

    again = RegistryState(tmp_path)
    assert (again.cluster_id, again.revision, again.nodes(PUMP), again.nodes(DRAINER)) == before
    assert again.kv_get("drainer/d1/safe-point") == "123"
    assert again.get_ts() > last_ts
    assert again.update_node(PUMP, pump("pump-3")) == before[1] + 1


def test_snapshot_uses_tidb_json_names(tmp_path):
    st = RegistryState(tmp_path)
    st.update_node(PUMP, pump("pump-1", max_commit_ts=42))
    doc = json.loads((tmp_path / SNAPSHOT_FILE).read_text())
    value = json.loads(doc["nodes"]["/tidb-binlog/v1/pumps/pump-1"]["value"])
    assert set(value) == {"nodeId", "host", "state", "isAlive", "score", "label",
                          "maxCommitTS", "updateTS"}
    assert doc["clusterID"] == st.cluster_id


def test_corrupt_snapshot_is_a_clear_error(tmp_path):
    RegistryState(tmp_path)
    (tmp_path / SNAPSHOT_FILE).write_text("{not json")
    with pytest.raises(StorageError, match="registry snapshot .* is unreadable"):
        RegistryState(tmp_path)


def test_failed_persist_leaves_state_unchanged(tmp_path, monkeypatch):
    st = RegistryState(tmp_path)
    st.update_node(PUMP, pump("pump-1"))

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tidb_binlog.registry.os.replace", disk_full)
    with pytest.raises(StorageError, match="cannot persist .*No space left"):
        st.update_node(PUMP, pump("pump-2"))
    with pytest.raises(StorageError):
        st.kv_put("k", "v")
    assert st.revision == 1 and [n.node_id for n in st.nodes(PUMP)] == ["pump-1"]
    assert st.kv_get("k") is None
    monkeypatch.undo()
    assert RegistryState(tmp_path).revision == 1


def test_in_memory_watch_returns_at_once_when_behind():
    reg = InMemoryRegistry()
    reg.update_node(PUMP, pump("pump-1"))
    rev, nodes = reg.watch(PUMP, 0, timeout_s=30)
    assert rev == 1 and [n.node_id for n in nodes] == ["pump-1"]


def test_in_memory_watch_times_out_with_current_records():
    reg = InMemoryRegistry()
    reg.update_node(PUMP, pump("pump-1"))
    rev, nodes = reg.watch(PUMP, 1, timeout_s=0)
    assert rev == 1 and len(nodes) == 1


def test_in_memory_watch_wakes_on_change_from_another_thread():
    reg = InMemoryRegistry()
    reg.update_node(PUMP, pump("pump-1"))
    started = threading.Event()
    result = []

    def watcher():
        started.set()
        result.append(reg.watch(PUMP, 1, timeout_s=60))

    t = threading.Thread(target=watcher)
    t.start()
    started.wait()
    reg.update_node(DRAINER, NodeStatus("d1", "h:1"))  # other kind: no wake-up result
    reg.update_node(PUMP, pump("pump-1", state=PAUSED))
    t.join(timeout=60)
    assert not t.is_alive()
    rev, nodes = result[0]
    assert rev == 3 and nodes[0].state == PAUSED


def test_in_memory_registry_persists(tmp_path):
    reg = InMemoryRegistry(tmp_path)
    reg.update_node(PUMP, pump("pump-1"))
    reg.kv_put("k", "v")
    again = InMemoryRegistry(tmp_path)
    assert again.cluster_id() == reg.cluster_id()
    assert again.node(PUMP, "pump-1").host == "127.0.0.1:8251"
    assert again.kv_get("k") == "v" and again.revision() == 2
