"""RegistryActor on a real local Ray: restart keeps state, watch wakes on change."""

from __future__ import annotations

import uuid

import pytest

ray = pytest.importorskip("ray")

from cluster.registry import (  # noqa: E402
    RayRegistryClient,
    connect_registry,
    get_or_create_registry,
)
from tidb_binlog.errors import StateError, UnavailableError  # noqa: E402
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, PUMP, NodeStatus  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def registry(local_ray, tmp_path):
    namespace = f"test-registry-{uuid.uuid4().hex[:8]}"
    client = get_or_create_registry(tmp_path / "registry", namespace=namespace)
    yield namespace, client
    ray.kill(client.actor, no_restart=True)


def _restart(client: RayRegistryClient) -> None:
    ray.kill(client.actor, no_restart=False)


def test_restart_keeps_records_cluster_id_and_tso(registry):
    namespace, reg = registry
    reg.update_node(PUMP, NodeStatus("pump-1", "127.0.0.1:8250", max_commit_ts=7))
    reg.update_node(DRAINER, NodeStatus("drainer-1", "127.0.0.1:8249", state=PAUSED))
    reg.kv_put("safe-point", "99")
    cluster_id, revision = reg.cluster_id(), reg.revision()
    last_ts = reg.get_ts(1000) + 999

    _restart(reg)

    assert reg.cluster_id() == cluster_id  # retried on the restarted actor
    assert reg.revision() == revision
    assert reg.node(PUMP, "pump-1").max_commit_ts == 7
    assert reg.node(DRAINER, "drainer-1").state == PAUSED
    assert reg.kv_get("safe-point") == "99"
    assert reg.get_ts() > last_ts
    # the name still resolves to the same, restarted actor
    assert connect_registry(namespace=namespace).cluster_id() == cluster_id


def test_get_or_create_reuses_the_running_actor(registry, tmp_path):
    namespace, reg = registry
    again = get_or_create_registry(tmp_path / "elsewhere", namespace=namespace)
    assert again.cluster_id() == reg.cluster_id()


def test_watch_wakes_on_change(registry):
    _, reg = registry
    reg.update_node(PUMP, NodeStatus("pump-1", "127.0.0.1:8250"))
    since = reg.revision()
    # A long poll far longer than the test's budget: only a change can end it in time.
    pending = reg.actor.watch.remote(PUMP, since, 3600.0)
    reg.update_node(DRAINER, NodeStatus("drainer-1", "h:1"))
    reg.update_node(PUMP, NodeStatus("pump-1", "127.0.0.1:8250", state=PAUSED))
    revision, pumps = ray.get(pending, timeout=120)
    assert revision >= since + 2
    assert [(p.node_id, p.state) for p in pumps] == [("pump-1", PAUSED)]


def test_watch_pending_across_a_restart_still_sees_the_change(registry):
    _, reg = registry
    reg.update_node(PUMP, NodeStatus("pump-1", "127.0.0.1:8250"))
    since = reg.revision()
    pending = reg.actor.watch.remote(PUMP, since, 3600.0)
    _restart(reg)
    reg.update_node(PUMP, NodeStatus("pump-2", "127.0.0.1:8251"))
    revision, pumps = ray.get(pending, timeout=120)
    assert revision > since
    assert [p.node_id for p in pumps] == ["pump-1", "pump-2"]


def test_errors_cross_the_actor_boundary_as_our_tree(registry):
    _, reg = registry
    reg.update_node(PUMP, NodeStatus("pump-1", "h:1", state=OFFLINE))
    with pytest.raises(StateError, match="cannot move from offline to paused") as info:
        reg.update_node(PUMP, NodeStatus("pump-1", "h:1", state=PAUSED))
    assert info.value.state == OFFLINE
    reg.update_node(PUMP, NodeStatus("pump-1", "h:1", state=ONLINE))


def test_client_pickles_into_other_tasks(registry):
    _, reg = registry

    @ray.remote(num_cpus=0)
    def take_timestamps(client: RayRegistryClient) -> tuple[int, int]:
        return client.cluster_id(), client.get_ts(10)

    cluster_id, first = ray.get(take_timestamps.remote(reg), timeout=120)
    assert cluster_id == reg.cluster_id()
    assert reg.get_ts() >= first + 10


def test_connect_without_registry_is_a_clear_error(local_ray):
    with pytest.raises(UnavailableError, match="no registry actor"):
        connect_registry(namespace=f"empty-{uuid.uuid4().hex[:8]}")
