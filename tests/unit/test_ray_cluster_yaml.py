"""cluster/ray-cluster.yaml passes Ray's own cluster-config validation (what `ray up`
runs first: defaults filled in, schema checked) and keeps the placement the README
describes: one pump resource per worker, the package installed by setup_commands."""

from __future__ import annotations

from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parents[2] / "cluster" / "ray-cluster.yaml"


def test_ray_validates_the_cluster_yaml():
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load(CONFIG.read_text())
    config = prepare_config(raw)
    validate_config(config)
    assert config["provider"]["type"] == "local"
    assert config["provider"]["head_ip"] and len(config["provider"]["worker_ips"]) == 2


def test_pumps_one_per_worker_and_the_package_installed():
    raw = yaml.safe_load(CONFIG.read_text())
    assert raw["max_workers"] == len(raw["provider"]["worker_ips"])
    assert any("pip install" in c and "-e ." in c for c in raw["setup_commands"])
    assert any("""--resources='{"tidb_binlog_pump": 1}'""" in c
               for c in raw["worker_start_ray_commands"])
    assert not any("tidb_binlog_pump" in c for c in raw["head_start_ray_commands"])
    assert any("/var/lib/tidb-binlog/pump" in c for c in raw["worker_setup_commands"])


def test_nodes_get_the_token_and_the_venv_on_path():
    """What the by-hand `ray up` run (cluster/README.md, "Tried on") needed: `ray down` runs
    a bare `ray stop` on the head, which fails unless the venv is on PATH in ~/.bashrc
    (Ray's shells source it), and Ray 2.60 token auth needs RAY_AUTH_MODE=token and the
    token on every node for workers and drivers to join."""
    raw = yaml.safe_load(CONFIG.read_text())
    bashrc = [c for c in raw["setup_commands"] if "~/.bashrc" in c]
    assert bashrc and "tidb-binlog-ray/.venv/bin:$PATH" in bashrc[0]
    assert "RAY_AUTH_MODE=token" in bashrc[0]
    assert raw["file_mounts"].get("/home/tidb/.ray/auth_token") == "~/.ray/auth_token"
