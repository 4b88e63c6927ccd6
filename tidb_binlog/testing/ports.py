"""Free TCP ports for tests that must name a port before something listens on it.

A port from ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, which
every other process draws from too (each outgoing connection, each server started with
port 0): on a busy host, or with the suite on two pytest-xdist workers, another process
can take it between the pick and the use ("Address already in use"). These ports are
picked below the ephemeral range instead, where only explicit binds land, and each
pytest-xdist worker (``$PYTEST_XDIST_WORKER`` ``gwN`` of ``$PYTEST_XDIST_WORKER_COUNT``)
has a slice of its own, so two workers never pick the same one.
"""

from __future__ import annotations

import os
import random
import socket

from tidb_binlog.errors import LocalServerError

__all__ = ["free_port"]

# below: registered services, and Ray's worker ports (10002-19999 by default), which a
# `ray start` refuses to overlap with the ports it is given
_LOWEST = 20_000


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _slice() -> range:
    start = _ephemeral_start()
    if start - _LOWEST < 1_000:  # an unusual range: nothing safe below it
        return range(0)
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    width = (start - _LOWEST) // max(count, 1)
    lo = _LOWEST + index % max(count, 1) * width
    return range(lo, lo + width)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, consecutive: int = 1, attempts: int = 200) -> int:
    """A port ``p`` with ``p .. p + consecutive - 1`` free on 127.0.0.1 now (a pump's or a
    drainer's HTTP status listens on its gRPC port + 1: ``consecutive=2``)."""
    ports = _slice()
    for _ in range(attempts):
        if len(ports) > consecutive:
            port = random.randrange(ports.start, ports.stop - consecutive)
        else:  # no safe slice: the kernel's pick, as a last resort
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if all(_bindable(port + i) for i in range(consecutive)):
            return port
    raise LocalServerError(f"no {consecutive} consecutive free port(s) on 127.0.0.1 in "
                           f"{attempts} tries", name="ports")
