"""``tidb-binlog pump`` with bad input: a data dir it cannot write, a taken port, and
pump.toml's ``log-file`` / ``log-level`` (which used to be accepted and ignored).

Each bad input must end the process with exit code 1 and one clear line on stderr
naming the path or port and what to do (no traceback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tidb_binlog.testing.pump_process import PumpProcess, two_free_ports

pytestmark = pytest.mark.integration

_ROOT = Path(__file__).resolve().parents[2]


def _run_pump(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "pump.toml"
    cfg.write_text('cluster-id = 7\ngen-binlog-interval = 3600\n'
                   '[storage]\nstop-write-at-available-space = "1 MiB"\n')
    env = dict(os.environ, PYTHONPATH=str(_ROOT))
    return subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "pump", "--config",
                           str(cfg), *flags], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_data_dir_that_cannot_be_written(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    data_dir = tmp_path / "a-file" / "data"
    port = two_free_ports()
    res = _run_pump(tmp_path, "--data-dir", str(data_dir), "--addr", f"127.0.0.1:{port}")
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines()[-1] == (
        f"tidb-binlog pump: ConfigError: data-dir '{data_dir}' is not writable: Not a "
        "directory; fix its permissions or choose another data-dir (data-dir in pump.toml or "
        "--data-dir)")
    assert "Traceback" not in res.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only directory anyway")
def test_read_only_data_dir(tmp_path):
    data_dir = tmp_path / "ro"
    data_dir.mkdir(mode=0o500)
    res = _run_pump(tmp_path, "--data-dir", str(data_dir),
                    "--addr", f"127.0.0.1:{two_free_ports()}")
    assert res.returncode == 1
    assert res.stderr.splitlines()[-1] == (
        f"tidb-binlog pump: ConfigError: data-dir '{data_dir}' is not writable: Permission "
        "denied; fix its permissions or choose another data-dir (data-dir in pump.toml or "
        "--data-dir)")


@pytest.mark.parametrize("taken", ["grpc", "status"])
def test_taken_port(tmp_path, taken):
    port = two_free_ports()
    busy = port if taken == "grpc" else port + 1
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        res = _run_pump(tmp_path, "--data-dir", str(tmp_path / "data"),
                        "--addr", f"127.0.0.1:{port}")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    expected = {
        "grpc": f"tidb-binlog pump: ConfigError: cannot listen on addr '127.0.0.1:{port}' (in "
                "use or not a local address); stop the process holding it or choose another "
                "addr (addr in pump.toml or --addr)",
        "status": f"tidb-binlog pump: ConfigError: cannot listen for the HTTP status API on "
                  f"127.0.0.1:{port + 1}: it is in use; stop the process holding it or choose "
                  "another port for the status port (the gRPC port + 1 by default; set "
                  "--status-addr)",
    }[taken]
    assert res.stderr.splitlines()[-1] == expected


@pytest.mark.parametrize("level", ["debug", "warn"])
def test_log_file_and_log_level_from_pump_toml(tmp_path, level):
    log_file = tmp_path / "logs" / "pump.log"
    p = PumpProcess({"cluster-id": 7, "gen-binlog-interval": 3600,
                     "storage.stop-write-at-available-space": "1 MiB",
                     "log-file": str(log_file), "log-level": level}, tmp_path)
    try:
        p.start()
        assert p.terminate() == 0
    finally:
        p.close()
    text = log_file.read_text()
    stderr = p.log_path.read_text()
    assert "serving gRPC on" not in stderr  # the file, not stderr, gets the lines
    if level == "debug":
        assert f"serving gRPC on {p.addr}" in text and "[INFO]" in text and "[DEBUG]" in text
    else:
        assert "[INFO]" not in text and "[DEBUG]" not in text
