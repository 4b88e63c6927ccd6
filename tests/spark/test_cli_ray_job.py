"""``tidb-binlog spark diff`` submitted as a Ray Job (``ray job submit -- tidb-binlog spark
...``) to a Ray head started for this test: the job joins that cluster, starts its own
Spark there, prints the summary table and exits 0 on equal tables, 1 on a difference."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tidb_binlog.testing.ray_head import HEAD_ENV, stop_ray_head

pytestmark = pytest.mark.timeout(600)

BIN = Path(sys.executable).parent


@pytest.fixture
def ray_head(tmp_path, free_port):
    """A Ray head in the foreground (``--block``, its own session), stopped by
    :func:`~tidb_binlog.testing.ray_head.stop_ray_head`."""
    gcs, dash = free_port(), free_port()
    # A short temp dir: Ray's unix socket paths must stay under 108 bytes.
    temp = Path("/tmp") / f"rayjob-{os.getpid()}-{gcs}"
    # One auth mode for the head and the submitting client (Ray 2.60 turns token auth on
    # for a head started from the CLI; the client side may say otherwise).
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", "--num-cpus=3",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
         # Own ports for everything: other Ray clusters may run on this machine.
         f"--dashboard-agent-listen-port={free_port()}",
         f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
         f"--runtime-env-agent-port={free_port()}", f"--ray-client-server-port={free_port()}",
         "--object-store-memory=200000000", f"--temp-dir={temp}", "--disable-usage-stats"],
        stdout=open(tmp_path / "ray-head.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True, env={**env, **HEAD_ENV})
    url = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/version", timeout=5)
                break
            except urllib.error.HTTPError:  # it answers (401 with Ray's token auth on)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "ray-head.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "Ray head did not come up"
                time.sleep(1)
        yield url
    finally:
        stop_ray_head(proc, temp)


def test_diff_as_a_ray_job(ray_head, mariadb_pair, fresh_database, tmp_path):
    db = fresh_database(mariadb_pair.upstream, mariadb_pair.downstream)
    for server in mariadb_pair:
        conn = server.connect(db, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
            cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(500)])
        conn.close()
    up, down = mariadb_pair.upstream.params(), mariadb_pair.downstream.params()
    config = tmp_path / "spark.toml"
    config.write_text(f"""
[spark]
executor-memory = "768 MiB"
work-dir = "{tmp_path / 'work'}"
[upstream]
host = "{up['host']}"
port = {up['port']}
[downstream]
host = "{down['host']}"
port = {down['port']}
[diff]
tables = ["{db}"]
chunk-size = 100
fix-sql-file = "{tmp_path / 'fix.sql'}"
""")
    env = {**os.environ, "RAY_ADDRESS": ray_head, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}:{os.environ['PATH']}"}
    deadline = time.monotonic() + 180
    while True:  # the head's job agent comes up a while after its dashboard
        job = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--", str(BIN / "tidb-binlog"), "spark", "diff",
             "--config", str(config)], env=env, capture_output=True, text=True, timeout=500)
        out = job.stdout + job.stderr
        if "No available agent" not in out or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert job.returncode == 0, out[-4000:]
    assert f"{db}.t" in out and "equal" in out and "0 differing" in out, out[-4000:]
