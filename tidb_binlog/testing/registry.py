"""An in-process registry: :class:`tidb_binlog.node.RegistryClient` without Ray.

:class:`InMemoryRegistry` serves the pure :class:`~tidb_binlog.registry.RegistryState`
to threads of one process: every call holds one lock, and :meth:`watch` waits on
a ``threading.Condition`` that every change notifies, so watchers wake at once
and never poll. Give it a ``data_dir`` and it persists exactly like the Ray
actor (a standalone pump or drainer process can use it as its registry);
without one it lives in memory, for unit tests.

Example::

    reg = InMemoryRegistry()
    reg.update_node(PUMP, NodeStatus("pump-1", "127.0.0.1:8250"))
    rev, pumps = reg.watch(PUMP, 0, timeout_s=0)    # returns at once: pump-1 is new
"""

from __future__ import annotations

import os
import threading
import time

from tidb_binlog.node import WATCH_STOP_CHECK_S, NodeStatus
from tidb_binlog.registry import DEFAULT_ALIVE_TIMEOUT_S, RegistryState

__all__ = ["InMemoryRegistry"]


class InMemoryRegistry:
    """Thread-safe registry over :class:`RegistryState` (implements ``RegistryClient``)."""

    def __init__(self, data_dir: str | os.PathLike | None = None, *,
                 alive_timeout_s: float = DEFAULT_ALIVE_TIMEOUT_S, **state_options):
        self._state = RegistryState(data_dir, alive_timeout_s=alive_timeout_s, **state_options)
        self._changed = threading.Condition(threading.Lock())

    def cluster_id(self) -> int:
        with self._changed:
            return self._state.cluster_id

    def revision(self) -> int:
        with self._changed:
            return self._state.revision

    def get_ts(self, count: int = 1) -> int:
        with self._changed:
            return self._state.get_ts(count)

    def update_node(self, kind: str, status: NodeStatus, *, force: bool = False) -> None:
        with self._changed:
            self._state.update_node(kind, status, force=force)
            self._changed.notify_all()

    def nodes(self, kind: str) -> list[NodeStatus]:
        with self._changed:
            return self._state.nodes(kind)

    def node(self, kind: str, node_id: str) -> NodeStatus | None:
        with self._changed:
            return self._state.node(kind, node_id)

    def watch(self, kind: str, since_revision: int, timeout_s: float,
              stop: threading.Event | None = None) -> tuple[int, list[NodeStatus]] | None:
        """Wait until a ``kind`` record changes after ``since_revision`` or the timeout
        passes; return the current revision and every current ``kind`` record (None
        once ``stop`` is set)."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._changed:
            while True:
                if stop is not None and stop.is_set():
                    return None
                revision, changed = self._state.changes_since(kind, since_revision)
                remaining = deadline - time.monotonic()
                if changed or remaining <= 0:
                    return revision, self._state.nodes(kind)
                self._changed.wait(remaining if stop is None
                                   else min(remaining, WATCH_STOP_CHECK_S))

    def kv_get(self, key: str) -> str | None:
        with self._changed:
            return self._state.kv_get(key)

    def kv_put(self, key: str, value: str) -> None:
        with self._changed:
            self._state.kv_put(key, value)
            self._changed.notify_all()
