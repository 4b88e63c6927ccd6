"""Missing commits: settling prewrites whose Commit binlog never arrived.

A prewrite is *old* once it has waited ``max_txn_timeout_s``: by the injected
``clock`` since it was stored (re-fed prewrites restart at 0 after a reopen),
or, when ``current_ts`` is given, by the TSO distance ``current_ts() -
start_ts`` (TiDB's measure, which survives restarts), whichever says so first.
Each old prewrite is asked about through the ``resolver``
(``txn_status(start_ts, prewrite_key)``, counted in
``binlog_pump_storage_query_tikv_count``):

- committed at X → the storage writes that Commit binlog itself (durable, then
  indexed and paired like one sent by the upstream); the prewrite is not asked
  about again;
- rolled back → dropped from the sorter (nothing is served for it);
- unknown → keeps waiting; logged at most every 10 s.

Without a resolver old prewrites wait forever (logged at most every 10 s). An
upstream that cannot be reached (restarting) is asked again next round, logged at
most every 10 s without a traceback.
:meth:`MissingCommits.resolve_pending` is one round; :meth:`start` runs it every
``interval_s`` on a background thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tidb_binlog import binlog as bl
from tidb_binlog.errors import UnavailableError, UpstreamUnreachable
from tidb_binlog.logs import txn
from tidb_binlog.node import TxnStatus
from tidb_binlog.tso import extract_physical

__all__ = ["MissingCommits"]

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0


class MissingCommits:
    """Resolution rounds over the storage's waiting prewrites (see the module docstring).

    ``pending(now_s)`` lists the sorter's waiting prewrites with their age;
    ``drop(start_ts)`` settles one as rolled back; ``get_binlog(ts)`` and
    ``write_binlog(binlog)`` are the storage's.
    """

    def __init__(self, resolver, *, pending: Callable, drop: Callable, get_binlog: Callable,
                 write_binlog: Callable, metrics, max_txn_timeout_s: float,
                 clock=time.monotonic, current_ts: Callable | None = None):
        self._resolver = resolver
        self._pending = pending
        self._drop = drop
        self._get_binlog = get_binlog
        self._write_binlog = write_binlog
        self._metrics = metrics
        self._timeout_s = max_txn_timeout_s
        self._clock = clock
        self._current_ts = current_ts
        self._resolving: set[int] = set()   # start_ts whose Commit we wrote
        self._last_log_s = -LOG_EVERY_S
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval_s: float) -> None:
        def loop():
            while not self._stop.wait(interval_s):
                try:
                    self.resolve_pending()
                except (UpstreamUnreachable, UnavailableError) as exc:  # a restart upstream
                    self._log_waiting(f"cannot ask the upstream about unmatched prewrites "
                                      f"({exc}); asking again every {interval_s:g} s")
                except Exception:
                    log.exception("resolving unmatched prewrites failed; will retry")

        self._thread = threading.Thread(target=loop, daemon=True, name="pump-resolver")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def resolve_pending(self) -> int:
        """One resolution round; returns how many prewrites it settled."""
        timeout_s = self._timeout_s
        now_ms = extract_physical(self._current_ts()) if self._current_ts is not None else None
        old = [p for p in self._pending(self._clock()) if p.start_ts not in self._resolving and (
            p.age_s >= timeout_s
            or (now_ms is not None and now_ms - extract_physical(p.start_ts) >= timeout_s * 1000))]
        if not old:
            return 0
        if self._resolver is None:
            self._log_waiting(f"{len(old)} prewrites unmatched for over {timeout_s} s and no "
                              f"resolver is configured; oldest start_ts {old[0].start_ts}")
            return 0
        settled = 0
        for p in old:
            pre = self._get_binlog(p.start_ts)
            key = pre.prewrite_key if pre is not None else b""
            self._metrics.query_tikv_count.inc()
            status = self._resolver.txn_status(p.start_ts, key)
            if status.state == TxnStatus.COMMITTED:
                log.info("prewrite %d: commit binlog missing, upstream says committed at %d; "
                         "writing it", p.start_ts, status.commit_ts, extra=txn(status.commit_ts))
                self._write_binlog(bl.commit(p.start_ts, status.commit_ts))
                self._resolving.add(p.start_ts)  # matched once the indexer feeds it
                settled += 1
            elif status.state == TxnStatus.ROLLED_BACK:
                log.info("prewrite %d: upstream says rolled back; dropping it", p.start_ts)
                self._drop(p.start_ts)
                settled += 1
            else:
                self._log_waiting(f"prewrite {p.start_ts} unmatched for {p.age_s:.0f} s; upstream "
                                  f"status unknown ({status.detail}); still waiting")
        return settled

    def _log_waiting(self, msg: str) -> None:
        now = time.monotonic()
        if now - self._last_log_s >= LOG_EVERY_S:
            self._last_log_s = now
            log.warning(msg)
