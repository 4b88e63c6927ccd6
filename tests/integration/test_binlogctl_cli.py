"""`tidb-binlog binlogctl` as a process: TiDB's single-dash flags, encrypt without a
cluster, and a clear exit 1 when no Ray answers (instead of ray.init's minutes of retries)."""

from __future__ import annotations

import subprocess
import sys

from tidb_binlog.binlogctl.encrypt import decrypt

CLI = [sys.executable, "-m", "tidb_binlog.cli.main", "binlogctl"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_encrypt_with_tidb_flags_needs_no_cluster():
    got = run("-cmd", "encrypt", "-text", "s3cret")
    assert got.returncode == 0, got.stderr
    assert decrypt(got.stdout.strip()) == "s3cret"


def test_no_ray_at_the_address_is_one_clear_error(free_port):
    port = free_port()
    got = run("-cmd", "pumps", "--ray-address", f"127.0.0.1:{port}")
    assert got.returncode == 1
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in got.stderr
    assert "--ray-address" in got.stderr


def test_an_unknown_command_exits_1_naming_the_choices():
    got = run("-cmd", "remove-pump")
    assert got.returncode == 1 and "-cmd 'remove-pump' is unknown" in got.stderr
