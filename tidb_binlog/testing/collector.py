"""``BinlogCollector``: an in-process binlog writer that keeps what it is given.

It has the pump client's ``write_binlog(binlog)`` API and stores the marshalled
bytes (so every binlog goes through the same protobuf encoding a pump receives).
``fail_next(n)`` makes the next ``n`` Prewrite writes raise, as an unreachable
pump would. Thread-safe.

A test double: it stands where a pump client would stand behind an ``Upstream``
(tests, ``bench/upstream.py``), so it lives with the other test support, not in the
upstream package.
"""

from __future__ import annotations

import threading

from tidb_binlog import binlog as bl
from tidb_binlog.errors import UnavailableError

__all__ = ["BinlogCollector"]


class BinlogCollector:
    def __init__(self, keep: bool = True):
        self.keep = keep
        self.count = 0
        self.bytes_total = 0
        self._payloads: list[bytes] = []
        self._fail = 0
        self._lock = threading.Lock()

    def fail_next(self, n: int = 1) -> None:
        with self._lock:
            self._fail = n

    def write_binlog(self, binlog: bl.Binlog) -> None:
        payload = bl.encode(binlog)
        with self._lock:
            if binlog.tp == bl.BinlogType.PREWRITE and self._fail:
                self._fail -= 1
                raise UnavailableError("BinlogCollector: simulated unavailable pump")
            self.count += 1
            self.bytes_total += len(payload)
            if self.keep:
                self._payloads.append(payload)

    def binlogs(self) -> list[bl.Binlog]:
        with self._lock:
            return [bl.decode(p) for p in self._payloads]

    def clear(self) -> None:
        with self._lock:
            self._payloads.clear()
