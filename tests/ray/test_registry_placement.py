"""The registry actor can be held on the head node (its data dir is on that disk), as
cluster/README.md's ray up walk-through does."""

from __future__ import annotations

import pytest

from cluster.registry import get_or_create_registry
from tidb_binlog.node import PUMP, NodeStatus

pytestmark = pytest.mark.timeout(120)


def test_registry_on_the_head_node(ray_local, tmp_path):
    ray = ray_local
    head = "node:__internal_head__"
    assert head in ray.cluster_resources()
    reg = get_or_create_registry(tmp_path / "registry", namespace="placement-test",
                                 resources={head: 0.001})
    try:
        reg.update_node(PUMP, NodeStatus("pump-a", "10.0.0.11:8250"))
        assert reg.node(PUMP, "pump-a").host == "10.0.0.11:8250"
    finally:
        ray.kill(reg.actor, no_restart=True)
