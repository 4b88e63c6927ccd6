"""``tidb-binlog drainer`` submitted as a Ray Job (``ray job submit -- tidb-binlog drainer
--config drainer.toml``) to a Ray head started for this test with ``ray start --head``:
a separate driver starts the registry and a detached pump there (the task API's
``connect`` + ``start_pumps``) and writes upstream rows, then exits; the job joins the
cluster through the ``RAY_ADDRESS`` Ray Jobs sets, finds the registry and the pump, and
replicates the rows; ``ray job stop`` ends it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from drainer_helpers import rows, wait_until

from tidb_binlog.testing.ray_head import HEAD_ENV, stop_ray_head

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO),
       "PATH": f"{BIN}:{os.environ['PATH']}"}


@pytest.fixture
def ray_head(tmp_path, free_port):
    """``(dashboard url, GCS address)`` of a Ray head in the foreground (``--block``),
    stopped by :func:`stop_ray_head` (the shape of tests/spark/test_cli_ray_job.py)."""
    gcs, dash = free_port(), free_port()
    temp = Path("/tmp") / f"rayjob-{os.getpid()}-{gcs}"  # Ray's socket paths < 108 bytes
    proc = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", "--num-cpus=2",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
         f"--dashboard-agent-listen-port={free_port()}",
         f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
         f"--runtime-env-agent-port={free_port()}", f"--ray-client-server-port={free_port()}",
         "--object-store-memory=200000000", f"--temp-dir={temp}", "--disable-usage-stats"],
        stdout=open(tmp_path / "ray-head.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True, env={**ENV, **HEAD_ENV})
    url = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/version", timeout=5)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "ray-head.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "Ray head did not come up"
                time.sleep(1)
        yield url, f"127.0.0.1:{gcs}"
    finally:
        stop_ray_head(proc, temp)


def ray_job(url: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ray"), "job", *args], env={**ENV, "RAY_ADDRESS": url},
                          capture_output=True, text=True, timeout=timeout)


def test_drainer_as_a_ray_job(ray_head, mariadb_factory, tmp_path, free_port):
    url, gcs = ray_head
    up_db, down_db = mariadb_factory("up"), mariadb_factory("down")
    setup = textwrap.dedent(f"""
        from cluster.api import connect
        from tidb_binlog.upstream import Upstream
        cluster = connect(address={gcs!r}, namespace="tidb-binlog",
                          registry_dir={str(tmp_path / 'registry')!r})
        cluster.start_pumps(1, {str(tmp_path / 'pumps')!r}, upstream={up_db.params()!r})
        client = cluster.pump_client()
        up = Upstream({up_db.params()!r}, client, cluster.get_ts)
        up.ddl("CREATE DATABASE shop")
        up.ddl("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(16))")
        with up.session("shop") as s, s.begin() as txn:
            txn.insert("t", [{{"id": i, "v": f"v{{i}}"}} for i in range(20)])
        up.close()
        client.close()
        print("ready", flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", setup], cwd=REPO, env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ready" in out.stdout, out.stderr[-3000:]

    d = down_db.params()
    config = tmp_path / "drainer.toml"
    config.write_text(textwrap.dedent(f"""
        addr = "127.0.0.1:{free_port()}"
        data-dir = "{tmp_path / 'drainer'}"
        initial-commit-ts = 0
        [syncer]
        db-type = "mysql"
        worker-count = 2
        [syncer.to]
        host = "{d['host']}"
        port = {d['port']}
        user = "{d['user']}"
        password = "{d['password']}"
    """))
    deadline = time.monotonic() + 180
    while True:  # the head's job agent comes up a while after its dashboard
        # Ray Jobs SIGKILLs 3 s after its SIGTERM unless told otherwise (the env of the
        # job's supervisor): give the drainer time for its final checkpoint
        job = ray_job(url, "submit", "--no-wait", "--runtime-env-json",
                      '{"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "120"}}', "--",
                      str(BIN / "tidb-binlog"), "drainer", "--config", str(config))
        text = job.stdout + job.stderr
        if "No available agent" not in text or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert job.returncode == 0, text[-3000:]
    job_id = next(w.strip("'") for w in text.split() if w.strip("'").startswith("raysubmit_"))
    try:
        def replicated():
            try:
                return rows(down_db, "shop.t") == rows(up_db, "shop.t")
            except Exception:  # noqa: BLE001 - the table is not there yet
                return False

        wait_until(replicated, timeout_s=240, what="the Ray Job drainer to replicate")
        assert ray_job(url, "status", job_id).stdout.count("RUNNING") >= 1
    finally:
        stop = ray_job(url, "stop", job_id)
    assert stop.returncode == 0, stop.stderr[-2000:]
    # stopped gracefully: the CLI's SIGTERM path saved the final checkpoint
    logs = wait_until(lambda: (lambda text: text if "stopped: checkpoint" in text else "")(
        ray_job(url, "logs", job_id).stdout), timeout_s=150, what="the drainer's final log")
    assert "consistent: True" in logs, logs[-3000:]
