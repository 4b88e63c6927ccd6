"""A multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): pumps
placed one per worker node by a custom resource, the task's actors on another (its
merger on the head); under
a write load one pump's node is killed and comes back (the pump restarts there on the
same data dir, nothing is lost), then a new node with a new pump joins and is merged.
Upstream and downstream end equal.

The cluster and its driver run in a subprocess (tests/ray/multinode_driver.py): a
process holds one Ray connection, and this session's local Ray is another cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tidb_binlog.compare import compare_databases

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def test_pump_node_dies_comes_back_and_a_new_pump_joins_under_load(mariadb_factory,
                                                                    tmp_path):
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    env = {**os.environ, "PYTHONPATH": REPO, "RAY_AUTH_MODE": "disabled",
           "RAY_raylet_start_wait_time_s": "120"}
    # the parameters (a password among them) go on stdin, not the command line
    args = json.dumps({"work_dir": str(tmp_path), "upstream": up_db.params(),
                       "downstream": down_db.params()})
    proc = subprocess.run([sys.executable, os.path.join(HERE, "multinode_driver.py")],
                          input=args, cwd=REPO, env=env, text=True, capture_output=True,
                          timeout=540)
    if proc.returncode != 0:  # pytest.fail: an assert's message would be cut short
        pytest.fail(f"the multi-node driver failed (exit {proc.returncode})\n--- stdout\n"
                    f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}")
    print(proc.stdout)  # the driver's timed steps (pytest -s shows them)
    result = json.loads(proc.stdout.rsplit("RESULT ", 1)[1].splitlines()[0])
    assert sorted(result["pumps"]) == ["pump-0", "pump-1", "pump-2"]
    assert result["committed"] > result["committed_before_comeback"] > 0

    with up_db.connect() as up, down_db.connect() as down:
        cmp = compare_databases(up, down, ["shop"])
    assert cmp.equal, [line for d in cmp.diffs for line in d.details()]
    assert cmp.rows == result["committed"]
