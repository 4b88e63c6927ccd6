"""Which pumps a pump client writes to, and which of them are available: the registry
watcher, the prober, and the membership queries. :class:`Membership` is a part of
:class:`~tidb_binlog.pump_client.client.PumpClient` (a base class of it).

Pumps come from the registry (every record of kind ``pumps``, followed by a
watcher thread that long-polls ``RegistryClient.watch``), from a static address
list, or are the single local unix socket (strategy ``local``); the client's
constructor applies the first list and starts the threads.

Unavailable pumps and probing
    ``unavailable_after_errors`` failed writes in a row move a pump to the
    unavailable list (see :mod:`.book`). A prober thread sends the empty probe
    binlog (``start_ts == commit_ts == 0``) to every unavailable pump whose
    registry state is ``online`` each ``probe_interval_s`` (TiDB: 30 s) and
    brings back the ones that answer; :meth:`Membership.probe_now` runs one round.

What :class:`Membership` uses of the client: ``cluster_id``, ``rpc_timeout_s``,
``_lock``, ``_book``, ``_closed`` and ``_channel`` (of :class:`.writes.WritePath`).
"""

from __future__ import annotations

import logging

from tidb_binlog.binlog import encode, probe
from tidb_binlog.errors import BinlogError
from tidb_binlog.node import PUMP, NodeStatus, RegistryClient
from tidb_binlog.pump_client import metrics

__all__ = ["Membership"]

log = logging.getLogger("tidb_binlog.pump_client")


class Membership:
    """The pump list and its upkeep in :class:`~tidb_binlog.pump_client.client.PumpClient`
    (see the module docstring for the attributes it uses)."""

    def probe_now(self) -> list[str]:
        """Probe every unavailable online pump once; return the ones brought back."""
        with self._lock:
            candidates = self._book.probe_candidates()
        payload = encode(probe())
        back = []
        for entry in candidates:
            if self._closed.is_set():  # close() waits for this thread: one probe at most
                break
            channel = self._channel(entry)
            channel.reset()
            try:
                errmsg = channel.write(self.cluster_id, payload, self.rpc_timeout_s)
            except BinlogError as exc:
                errmsg = str(exc)
            if errmsg:
                metrics.PROBE_TOTAL.labels("error").inc()
                log.debug("probe of pump %s failed: %s", entry.node_id, errmsg)
                continue
            metrics.PROBE_TOTAL.labels("ok").inc()
            with self._lock:
                if self._book.mark_available(entry.node_id):
                    back.append(entry.node_id)
                    log.info("pump %s answered the probe: available again", entry.node_id)
        return back

    def available_pumps(self) -> list[str]:
        with self._lock:
            return self._book.available()

    def unavailable_pumps(self) -> list[str]:
        with self._lock:
            return self._book.unavailable()

    def _apply(self, records: list[NodeStatus], *, complete: bool) -> None:
        with self._lock:
            events = self._book.apply_statuses(records, complete=complete)
        for line in events:
            log.info("pump client: %s", line)

    def _watch_loop(self, registry: RegistryClient, revision: int, timeout_s: float) -> None:
        # the long poll returns None soon after close() sets _closed: the thread never
        # outlives close() inside a registry call (on Ray, a call that runs while the
        # interpreter exits and Ray's core worker shuts down is reported as a crash)
        while not self._closed.is_set():
            try:
                got = registry.watch(PUMP, revision, timeout_s, stop=self._closed)
            except Exception as exc:  # noqa: BLE001 - the registry may restart; keep following
                if self._closed.is_set():
                    return
                log.warning("watching the registry failed, retrying in 1 s: %s", exc)
                self._closed.wait(1.0)
                continue
            if got is None:
                return
            revision, records = got
            self._apply(records, complete=True)

    def _probe_loop(self, interval_s: float) -> None:
        while not self._closed.wait(interval_s):
            try:
                self.probe_now()
            except Exception:  # noqa: BLE001 - logged; the next round tries again
                log.exception("probing unavailable pumps failed")
