"""Ray token authentication left on: a real ``ray start --head`` with ``RAY_AUTH_MODE=token``
and a token; ``tidb-binlog drainer`` joining it without the token exits 1 with our hint
(what to set), and the task API (``cluster.api.connect``) joins it with the token and
without it is refused with the same hint. Each driver is a subprocess with its own
``HOME`` (no ``~/.ray/auth_token`` of the machine's other Ray sessions)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tidb_binlog.testing.ray_head import HEAD_ENV, stop_ray_head

pytestmark = pytest.mark.timeout(300)

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
HINT = "set RAY_AUTH_MODE=token and"
# a driver's environment: no Ray address or token of the test run's own
_BASE_ENV = {k: v for k, v in os.environ.items()
             if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}


@pytest.fixture
def token_head(tmp_path, free_port):
    """``(GCS address, token, driver env)`` of a Ray head with token auth, in the
    foreground (``--block``, its own session): stopped by SIGTERM, what is left killed."""
    token = uuid.uuid4().hex
    gcs = free_port()
    temp = Path("/tmp") / f"raytok-{os.getpid()}-{gcs}"  # Ray's socket paths < 108 bytes
    home = tmp_path / "home"
    home.mkdir()
    env = {**_BASE_ENV, "HOME": str(home), "PYTHONPATH": str(REPO),
           "PATH": f"{BIN}:{os.environ['PATH']}"}
    log_path = tmp_path / "ray-head.log"
    proc = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", "--num-cpus=1",
         "--include-dashboard=false", f"--dashboard-agent-listen-port={free_port()}",
         f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
         f"--runtime-env-agent-port={free_port()}", f"--ray-client-server-port={free_port()}",
         "--object-store-memory=100000000", f"--temp-dir={temp}", "--disable-usage-stats"],
        stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**env, **HEAD_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})
    try:
        deadline = time.monotonic() + 180
        while "This command will now block" not in log_path.read_text(errors="replace"):
            if proc.poll() is not None:
                pytest.skip("Ray's token authentication could not start here: "
                            + log_path.read_text(errors="replace")[-1500:])
            assert time.monotonic() < deadline, "the Ray head did not come up"
            time.sleep(0.5)
        yield f"127.0.0.1:{gcs}", token, env
    finally:
        stop_ray_head(proc, temp)


def _connect(address: str, env: dict, registry_dir: Path) -> subprocess.Popen:
    code = ("from cluster.api import connect\n"
            f"c = connect({address!r}, 'token-test', registry_dir={str(registry_dir)!r})\n"
            "print('cluster id', c.registry.cluster_id())\n")
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _last_line(proc: subprocess.Popen) -> tuple[int, str, str]:
    """(exit code, last stderr line, stderr tail) once ``proc`` ended."""
    out, err = proc.communicate(timeout=150)
    lines = err.strip().splitlines()
    return proc.returncode, (lines[-1] if lines else ""), err[-3000:] + out[-500:]


def test_a_token_cluster_refuses_drivers_without_the_token_with_our_hint(
        token_head, mariadb, tmp_path):
    address, token, env = token_head
    # the CLI checks the downstream first, so it gets a real one
    config = tmp_path / "drainer.toml"
    config.write_text(f'data-dir = "{tmp_path / "data"}"\n[syncer]\nexactly-once = false\n'
                      f'[syncer.to]\nhost = "127.0.0.1"\nport = {mariadb.port}\n'
                      'user = "root"\npassword = ""\n')
    # Ray retries a refused driver for ~20 s before it gives up: the three run side by side
    cli = subprocess.Popen([sys.executable, "-m", "tidb_binlog.cli.main", "drainer",
                            "--config", str(config), "--ray-address", address],
                           cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    refused = _connect(address, env, tmp_path / "registry")
    joined = _connect(address, {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token},
                      tmp_path / "registry")

    code, _, tail = _last_line(joined)
    assert code == 0 and "cluster id " in tail, tail
    code, last, tail = _last_line(refused)
    assert code != 0 and last.startswith("tidb_binlog.errors.UnavailableError") \
        and HINT in last, tail
    code, last, tail = _last_line(cli)
    assert code == 1 and last.startswith("tidb-binlog drainer: UnavailableError: ") \
        and HINT in last, tail
