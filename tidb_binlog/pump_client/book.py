"""The pump client's bookkeeping: which pumps exist, which take writes, who owns a txn.

Pure and single-threaded (the client holds its lock around every call).

Available and unavailable
    A pump is *available* (offered to the selector) when its registry state is
    ``online`` and it has not failed ``unavailable_after_errors`` writes in a row.
    Reaching that count moves it to the *unavailable* list; the client probes
    unavailable pumps whose state is ``online`` and :meth:`PumpBook.mark_available`
    brings one back when a probe succeeds. A registry change of state decides
    too: any state to ``online`` makes a pump available with a clean error count
    (TiDB's rule), ``online`` to anything else makes it unavailable. A pump
    that disappears from the registry listing counts as ``offline``; its entry is
    kept so pending commits can still reach it.

Ownership
    :meth:`remember` records which pump took the prewrite of ``start_ts``;
    :meth:`owner` answers for the Commit/Rollback; :meth:`forget` drops it once
    the commit is written or given up.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass

from tidb_binlog.errors import InvalidArgument
from tidb_binlog.node import OFFLINE, ONLINE, NodeStatus
from tidb_binlog.pump_client.selector import Selector

__all__ = ["DEFAULT_UNAVAILABLE_AFTER_ERRORS", "PumpEntry", "PumpBook"]

# TiDB's pump client gives up on a pump after this many failed writes in a row.
DEFAULT_UNAVAILABLE_AFTER_ERRORS = 10


@dataclass
class PumpEntry:
    node_id: str
    addr: str
    state: str = ONLINE
    score: int = 0
    errors: int = 0  # consecutive failed writes
    available: bool = True


class PumpBook:
    def __init__(self, selector: Selector, *,
                 unavailable_after_errors: int = DEFAULT_UNAVAILABLE_AFTER_ERRORS):
        if unavailable_after_errors < 1:
            raise InvalidArgument("unavailable_after_errors must be at least 1")
        self._selector = selector
        self._threshold = unavailable_after_errors
        self._pumps: dict[str, PumpEntry] = {}
        self._owners: dict[int, str] = {}

    # -- membership ------------------------------------------------------------

    def apply_statuses(self, statuses: Iterable[NodeStatus], *, complete: bool = True) -> list[str]:
        """Reconcile with registry records; return a line per availability change.

        ``complete`` means ``statuses`` lists every pump, so pumps missing from it
        are treated as offline.
        """
        events: list[str] = []
        seen: set[str] = set()
        for st in statuses:
            seen.add(st.node_id)
            entry = self._pumps.get(st.node_id)
            if entry is None:
                entry = PumpEntry(st.node_id, st.host, st.state, st.score,
                                  available=st.state == ONLINE)
                self._pumps[st.node_id] = entry
                events.append(f"new pump {st.node_id} at {st.host} ({st.state})")
                continue
            entry.addr, entry.score = st.host, st.score
            events += self._set_state(entry, st.state)
        if complete:
            for entry in self._pumps.values():
                if entry.node_id not in seen:
                    events += self._set_state(entry, OFFLINE)
        self._refresh()
        return events

    def _set_state(self, entry: PumpEntry, state: str) -> list[str]:
        before, entry.state = entry.state, state
        if state == before:
            return []
        if state == ONLINE:
            entry.available, entry.errors = True, 0
            return [f"pump {entry.node_id} is online again: available"]
        was_available, entry.available = entry.available, False
        return [f"pump {entry.node_id} is {state}: unavailable"] if was_available else []

    def _refresh(self) -> None:
        self._selector.set_pumps([(e.node_id, e.score) for e in self._pumps.values()
                                  if e.available])

    def entry(self, node_id: str) -> PumpEntry | None:
        return self._pumps.get(node_id)

    def entries(self) -> list[PumpEntry]:
        return [self._pumps[k] for k in sorted(self._pumps)]

    def available(self) -> list[str]:
        return sorted(k for k, e in self._pumps.items() if e.available)

    @property
    def available_count(self) -> int:
        return sum(1 for e in self._pumps.values() if e.available)

    def unavailable(self) -> list[str]:
        return sorted(k for k, e in self._pumps.items() if not e.available)

    def probe_candidates(self) -> list[PumpEntry]:
        """Unavailable pumps whose registry state is online: worth a probe."""
        return [e for e in self.entries() if not e.available and e.state == ONLINE]

    # -- selection and outcomes -------------------------------------------------

    def select(self, start_ts: int, attempt: int = 0,
               tried: Set[str] = frozenset()) -> PumpEntry | None:
        node_id = self._selector.select(start_ts, attempt, tried)
        return None if node_id is None else self._pumps[node_id]

    def record_success(self, node_id: str) -> None:
        entry = self._pumps.get(node_id)
        if entry is not None:
            entry.errors = 0

    def record_failure(self, node_id: str) -> bool:
        """Count a failed write; True when this failure made the pump unavailable."""
        entry = self._pumps.get(node_id)
        if entry is None:
            return False
        entry.errors += 1
        if entry.available and entry.errors >= self._threshold:
            entry.available = False
            self._refresh()
            return True
        return False

    def mark_available(self, node_id: str) -> bool:
        """A probe succeeded: back to the available list if still online."""
        entry = self._pumps.get(node_id)
        if entry is None or entry.state != ONLINE or entry.available:
            return False
        entry.available, entry.errors = True, 0
        self._refresh()
        return True

    # -- ownership -------------------------------------------------------------

    def remember(self, start_ts: int, node_id: str) -> None:
        self._owners[start_ts] = node_id

    def owner(self, start_ts: int) -> PumpEntry | None:
        node_id = self._owners.get(start_ts)
        return None if node_id is None else self._pumps.get(node_id)

    def forget(self, start_ts: int) -> None:
        self._owners.pop(start_ts, None)

    @property
    def pending_count(self) -> int:
        """Prewrites whose Commit/Rollback has not been written (or given up) yet."""
        return len(self._owners)
