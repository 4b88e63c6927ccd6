"""The Commit/Rollback binlogs a pump client has in flight, and the bounded wait for them.

Owns the futures not resolved yet (``write_binlog_async``, ``write_finish_nowait``, a
batch's retries), each with its flush sequence number and the pump it goes to, what
:meth:`~tidb_binlog.pump_client.client.PumpClient.flush` waits for, and
:class:`PumpClientTimeout`.

Bounded waits
    Every wait of the public API ends: each RPC carries a deadline
    (``rpc_timeout_s``), so a killed pump (connection reset) fails its calls at
    once and a stopped one (SIGSTOP: the connection stays, nothing answers) at
    their deadline. ``PumpClient.flush`` and ``PumpClient.close`` take a
    ``timeout_s``; running out raises :class:`PumpClientTimeout` naming each pump
    and how many binlogs were in flight to it. Code that runs on gRPC's callback
    thread never blocks (see the README's threading model): a done-callback that
    waits stops every other completion of its channel.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures

from tidb_binlog.errors import UnavailableError

__all__ = ["InFlight", "PumpClientTimeout", "NO_PUMP"]

NO_PUMP = "(no pump)"  # in_flight key of a commit whose prewrite did not go through us


class PumpClientTimeout(UnavailableError, TimeoutError):
    """A bounded wait of the pump client (``flush``, ``close``) ran out.

    ``in_flight`` maps each pump's node id to how many Commit/Rollback binlogs were
    still being written to it (first attempts and retries). Also a ``TimeoutError``.
    """

    _fields = ("in_flight",)


class InFlight:
    """Commit/Rollback futures not resolved yet: future -> (flush sequence number, the
    pump it goes to). A retry inherits the number of the first attempt it continues,
    so a flush waits for it too.

    Guarded by the client's lock (``lock``), shared with its pump book, so a future is
    registered in the same lock section as the look-up of its pump. ``describe(node_id)``
    names a pump in error messages; it is called with the lock held.
    """

    __slots__ = ("_lock", "_describe", "_futures", "_seq")

    def __init__(self, lock: threading.Lock, describe: Callable[[str], str]):
        self._lock = lock
        self._describe = describe
        self._futures: dict[Future, tuple[int, str]] = {}
        self._seq = 0

    def add_locked(self, fut: Future, node_id: str, seq: int | None) -> int:
        """Register ``fut`` (the caller holds the lock) under ``seq``, a new number when
        None; return the number. The caller adds :meth:`discard` as its done-callback."""
        if seq is None:
            self._seq += 1
            seq = self._seq
        self._futures[fut] = (seq, node_id)
        return seq

    def discard(self, fut: Future) -> None:
        """The done-callback of a registered future (may run on gRPC's callback thread:
        takes the lock only)."""
        with self._lock:
            self._futures.pop(fut, None)

    def counts(self) -> dict[str, int]:
        """Binlogs not resolved yet, per pump."""
        with self._lock:
            return self._count(None)

    def _count(self, up_to: int | None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for fut, (seq, node_id) in self._futures.items():
            if (up_to is None or seq <= up_to) and not fut.done():
                counts[node_id] = counts.get(node_id, 0) + 1
        return dict(sorted(counts.items()))

    def flush(self, timeout_s: float, *, commit_retry_s: float) -> None:
        """Wait until every future registered before this call is resolved; raise
        :class:`PumpClientTimeout` after ``timeout_s`` (``commit_retry_s`` is named in
        its message)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            target = self._seq
        while True:
            with self._lock:
                waiting = [f for f, (seq, _) in self._futures.items()
                           if seq <= target and not f.done()]
            if not waiting:
                return
            _, not_done = wait_futures(waiting, timeout=max(deadline - time.monotonic(), 0.0))
            if not_done:
                raise self._timeout_error("flush", timeout_s, target, commit_retry_s)

    def _timeout_error(self, what: str, waited_s: float, up_to: int | None,
                       commit_retry_s: float) -> PumpClientTimeout:
        with self._lock:
            counts = self._count(up_to)
            where = {node: self._describe(node) for node in counts}
        total = sum(counts.values())
        per_pump = ", ".join(f"{where[node]}: {n}" for node, n in counts.items()) or "none left"
        return PumpClientTimeout(
            f"PumpClient.{what}: {total} Commit/Rollback binlog(s) still in flight after "
            f"{waited_s:g}s ({per_pump}); a commit is retried only on its prewrite's pump, "
            f"for up to commit_retry_s={commit_retry_s:g}s. Check those pumps "
            "(binlogctl -cmd pumps), or wait longer.", in_flight=counts)
