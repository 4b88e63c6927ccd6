"""PumpClient.close ends the registry watcher's long poll (no client thread calls the
registry after close), and a client never closed is closed at interpreter exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from tidb_binlog.node import PUMP, NodeStatus
from tidb_binlog.pump_client import PumpClient
from tidb_binlog.pump_client import client as client_module
from tidb_binlog.testing.registry import InMemoryRegistry


class CountingRegistry(InMemoryRegistry):
    """The in-memory registry, counting the watch calls that are inside it right now."""

    def __init__(self):
        super().__init__()
        self.inside = 0
        self.calls = 0

    def watch(self, kind, since_revision, timeout_s, stop=None):
        self.inside += 1
        self.calls += 1
        try:
            return super().watch(kind, since_revision, timeout_s, stop=stop)
        finally:
            self.inside -= 1


def test_close_ends_the_watchers_long_poll_at_once():
    reg = CountingRegistry()
    reg.update_node(PUMP, NodeStatus("pump-0", "127.0.0.1:1"))
    client = PumpClient(reg, watch_timeout_s=60.0, probe_interval_s=60.0)
    deadline = time.monotonic() + 10
    while reg.inside == 0 and time.monotonic() < deadline:  # the 60 s long poll started
        time.sleep(0.01)
    assert reg.inside == 1
    client.close(timeout_s=1.0)                     # within the long poll's 60 s
    assert reg.inside == 0                          # nobody is inside the registry now
    assert not [t for t in threading.enumerate() if t.name == "pump-client-watch"
                and t.is_alive()]
    calls = reg.calls
    time.sleep(0.3)
    assert reg.calls == calls
    client.close(timeout_s=1.0)                     # twice: harmless
    assert client not in client_module._OPEN_CLIENTS


def test_a_stopped_watch_returns_none():
    reg = InMemoryRegistry()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    assert reg.watch(PUMP, reg.revision(), 30.0, stop=stop) is None


def test_a_client_left_open_is_closed_at_interpreter_exit():
    script = textwrap.dedent("""
        import threading
        from tidb_binlog.node import PUMP, NodeStatus
        from tidb_binlog.pump_client import PumpClient
        from tidb_binlog.pump_client import client as client_module
        from tidb_binlog.testing.registry import InMemoryRegistry

        reg = InMemoryRegistry()
        reg.update_node(PUMP, NodeStatus("pump-0", "127.0.0.1:1"))
        client = PumpClient(reg, watch_timeout_s=60.0, probe_interval_s=60.0)
        original = client.close
        def close(*a, **kw):
            original(*a, **kw)
            alive = [t.name for t in threading.enumerate() if t.name.startswith("pump-client")
                     and t.is_alive()]
            print("closed at exit; client threads alive:", alive, flush=True)
        client.close = close
        print("leaving the client open", flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "closed at exit; client threads alive: []" in out.stdout, out.stdout + out.stderr
