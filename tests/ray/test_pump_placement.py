"""Placement options of the task API's pumps, on the session's local Ray: a pump placed
by a custom resource runs where it is offered; bad placements are refused at once with
what to do (a resource no node offers would otherwise leave the pump pending forever).
The multi-node behaviour (a node dying and coming back) is tests/ray/test_multinode.py."""

from __future__ import annotations

import pytest

from actors.pump import start_pump_actor
from cluster.api import Cluster
from cluster.registry import get_or_create_registry
from tidb_binlog.errors import ConfigError

pytestmark = pytest.mark.timeout(180)

NS = "pump-placement-test"


@pytest.fixture
def api(ray_local, tmp_path):
    registry = get_or_create_registry(tmp_path / "registry", namespace=NS)
    cluster = Cluster(registry, NS)
    yield cluster
    for name in ray_local.util.list_named_actors(all_namespaces=True):
        if name["namespace"] == NS:
            ray_local.kill(ray_local.get_actor(name["name"], namespace=NS), no_restart=True)


def test_a_pump_asks_for_a_resource_its_node_offers(api, ray_local, tmp_path):
    # the head is the only node: its automatic node:<ip> resource places the pump there
    ip = ray_local.util.get_node_ip_address()
    assert api.start_pump("pump-x", tmp_path / "pumps",
                          resources={f"node:{ip}": 0.001}) == "pump-x"
    assert [p.node_id for p in api.pumps()] == ["pump-x"]
    assert (tmp_path / "pumps" / "pump-x").is_dir()

    with pytest.raises(ConfigError, match="pump 'pump-x' runs already"):
        api.start_pump("pump-x", tmp_path / "pumps")


def test_bad_placements_are_refused_with_what_to_do(api, tmp_path):
    with pytest.raises(ConfigError, match=r"no alive Ray node offers them.*ray start "
                                          r"--resources"):
        api.start_pump("pump-y", tmp_path / "pumps", resources={"pump-host-9": 1})
    with pytest.raises(ConfigError, match="2 placements for 3 pumps"):
        api.start_pumps(3, tmp_path / "pumps", resources=[{"a": 1}, {"b": 1}])
    assert api.pumps() == []
    with pytest.raises(ValueError, match="either by node_id or by resources"):
        start_pump_actor(None, node_id="abc", resources={"a": 1})
