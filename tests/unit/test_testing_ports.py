"""Test ports come from below the kernel's ephemeral range, a slice per xdist worker."""

from __future__ import annotations

import socket

from tidb_binlog.testing import ports


def test_ports_are_below_the_ephemeral_range_and_free(monkeypatch):
    start = ports._ephemeral_start()
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    seen = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        seen[worker] = ports._slice()
        port = ports.free_port(consecutive=2)
        assert port in seen[worker] and port + 1 < start
        with socket.socket() as a, socket.socket() as b:  # both free right now
            a.bind(("127.0.0.1", port))
            b.bind(("127.0.0.1", port + 1))
    assert not set(seen["gw0"]) & set(seen["gw1"])  # two workers never pick the same
