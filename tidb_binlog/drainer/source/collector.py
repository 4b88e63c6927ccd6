"""Pump discovery: which pumps the drainer merges, decided from the registry's records.

TiDB Binlog's ``drainer/collector.go``, split into a pure decision function and a
small step-driven driver.

**plan(records, sources, latest_ts) -> list[Action]** compares the registry's pump
records (:class:`~tidb_binlog.node.NodeStatus`) with the merge sources the drainer
has (:class:`SourceView` by node id) and returns what to change, in node-id order.
Per record:

============================ ======================================================
source absent, state not     ``AddSource(node_id, host, start_after_ts=latest_ts)``:
``offline``                  pulled from the merge position (a new pump announces
                             itself through Notify before it accepts writes, so
                             nothing it stores is at or below that position)
source absent, ``paused``    ``AddSource`` then ``PauseSource``
source absent, ``offline``,  ``AddSource`` then ``DrainSource(node_id, until_ts=
final ``maxCommitTS`` above  maxCommitTS)``: the pump went offline after our
the merge position           checkpoint (we were stopped, or restarted from an
                             older checkpoint), so it holds binlogs we have not
                             applied; it is pulled up to its final maxCommitTS,
                             then retired.  Not when it was already drained to
                             that ts in this run (``drained``)
source absent, ``offline``,  nothing: everything it holds is at or below the
``maxCommitTS`` at or below  merge position (adding it would stall the merge on a
the merge position           pump that will never send anything)
state ``paused``             ``PauseSource`` (stop pulling; the merge stalls until
                             the pump is back: no pump may be skipped)
state ``online``/``closing`` ``ResumeSource`` if we paused it (a closing pump waits
                             for us to catch up, so we must keep pulling)
state ``pausing``            nothing
host changed                 ``MoveSource(node_id, host)``: reconnect, same position
state ``offline``            ``RetireSource`` once the source's shown position is
                             >= the record's ``maxCommitTS`` (the pump's final
                             one): the merger stops waiting for it and pulling
                             stops; until then ``DrainSource`` (once) and it is
                             pulled like any other (and resumed if paused)
retired, nothing buffered    ``RemoveSource`` (forget it); if the record is back
                             online (a re-added pump with the same id) an
                             ``AddSource`` follows in the same plan
============================ ======================================================

*The offline rule* differs from TiDB's on purpose: TiDB removes the source as
soon as the record says ``offline``, relying on the closing pump having waited
until every online drainer's checkpoint reached its final maxCommitTS.  A drainer
that was behind or restarting at that moment would lose the tail; waiting for the
source's own position to reach the final maxCommitTS costs nothing when the
drainer is caught up and closes that gap otherwise.  A record with
``maxCommitTS`` 0 retires at once.  A source whose record vanished from the
registry is left as it is (TiDB never deletes records).

**Collector** drives :func:`plan`: :meth:`Collector.step` refreshes when a
Notify is pending, when a draining source reached its ``until_ts`` (so it is
retired at once, not a detect interval later: the merge waits for it until
then), or ``detect_interval_s`` passed since the last refresh (and
immediately on the first step: the shell keeps the merge paused until
:attr:`Collector.started`). While a source is paused the merge waits for it,
and a pump coming back from ``paused`` sends no Notify (TiDB's pump notifies
only when it was new or ``offline``): the refresh is then due every
``paused_refresh_s`` (:data:`PAUSED_REFRESH_S`, 1 s) instead, so the pump is
pulled again within a second of its record saying ``online``, not up to a
detect interval later (TiDB waits the detect interval).  :meth:`Collector.notify` (any thread) returns a
ticket; :meth:`Collector.wait` blocks until a refresh that *started after* that
notify has applied its actions: the Cistern ``Notify`` handshake.  The actions
are applied through a :class:`SourceTarget`; :class:`MergerSources` is the one
over a :class:`~tidb_binlog.drainer.source.merge.Merger` and a pump-source factory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, Protocol

from tidb_binlog.errors import InvalidArgument
from tidb_binlog.node import CLOSING, OFFLINE, ONLINE, PAUSED, NodeStatus

__all__ = [
    "AddSource",
    "PauseSource",
    "ResumeSource",
    "MoveSource",
    "RetireSource",
    "RemoveSource",
    "DrainSource",
    "Action",
    "SourceView",
    "plan",
    "SourceTarget",
    "MergerSources",
    "Collector",
    "PAUSED_REFRESH_S",
]

log = logging.getLogger(__name__)

PAUSED_REFRESH_S = 1.0
"""How often the pump list is read while a source is paused (the merge waits for it)."""


class AddSource(NamedTuple):
    node_id: str
    host: str
    start_after_ts: int


class PauseSource(NamedTuple):
    node_id: str


class ResumeSource(NamedTuple):
    node_id: str


class MoveSource(NamedTuple):
    node_id: str
    host: str


class RetireSource(NamedTuple):
    node_id: str


class RemoveSource(NamedTuple):
    node_id: str


class DrainSource(NamedTuple):
    """The pump is offline: pull it up to ``until_ts`` (its final maxCommitTS), then retire."""

    node_id: str
    until_ts: int


Action = (AddSource | PauseSource | ResumeSource | MoveSource | RetireSource | RemoveSource
          | DrainSource)


class SourceView(NamedTuple):
    """What :func:`plan` needs to know about one merge source."""

    host: str
    position_ts: int        # the merger's shown ts for it: nothing at or below will come
    paused: bool = False    # we stopped pulling it
    retired: bool = False   # marked offline in the merger, no longer pulled
    buffered: int = 0       # items it still holds in the merger
    drain_until_ts: int = 0  # the DrainSource ts it is pulled up to (0: none)


def plan(records: Iterable[NodeStatus], sources: Mapping[str, SourceView],
         latest_ts: int, drained: Mapping[str, int] | None = None) -> list[Action]:
    """The actions that bring ``sources`` in line with ``records``; see the module doc.

    ``drained`` maps the node ids of sources retired and removed in this run to the
    position they had reached (an offline pump already drained is not added again).
    """
    drained = drained or {}
    actions: list[Action] = []
    for r in sorted(records, key=lambda rec: rec.node_id):
        src = sources.get(r.node_id)
        if src is None:
            if r.state != OFFLINE:
                actions.append(AddSource(r.node_id, r.host, latest_ts))
                if r.state == PAUSED:
                    actions.append(PauseSource(r.node_id))
            elif r.max_commit_ts > max(latest_ts, drained.get(r.node_id, 0)):
                actions.append(AddSource(r.node_id, r.host, latest_ts))
                actions.append(DrainSource(r.node_id, r.max_commit_ts))
            continue
        if src.retired:
            if src.buffered == 0:
                actions.append(RemoveSource(r.node_id))
                if r.state != OFFLINE:
                    actions.append(AddSource(r.node_id, r.host, latest_ts))
                    if r.state == PAUSED:
                        actions.append(PauseSource(r.node_id))
            continue
        if src.host != r.host:
            actions.append(MoveSource(r.node_id, r.host))
        if r.state == PAUSED:
            if not src.paused:
                actions.append(PauseSource(r.node_id))
        elif r.state in (ONLINE, CLOSING):
            if src.paused:
                actions.append(ResumeSource(r.node_id))
        elif r.state == OFFLINE:
            if src.position_ts >= r.max_commit_ts:
                actions.append(RetireSource(r.node_id))
                if src.buffered == 0:
                    actions.append(RemoveSource(r.node_id))
            else:
                if src.drain_until_ts != r.max_commit_ts:
                    actions.append(DrainSource(r.node_id, r.max_commit_ts))
                if src.paused:
                    actions.append(ResumeSource(r.node_id))
    return actions


class SourceTarget(Protocol):
    """Where the collector's actions take effect (the MergerActor's state)."""

    @property
    def latest_ts(self) -> int: ...

    def views(self) -> dict[str, SourceView]: ...

    def drained(self) -> dict[str, int]: ...

    def retire_due(self) -> bool: ...

    def apply(self, action: Action) -> None: ...


class MergerSources:
    """A :class:`SourceTarget` over a Merger and ``open_source(node_id, host, since_ts)``.

    ``sources`` holds one pump source (see ``pump_source.py``) per merge source that
    is not retired; :meth:`pullable` lists the ones to fetch from now.
    :meth:`drained` remembers, per retired node id, the position it was retired at,
    until the node is added again.
    """

    def __init__(self, merger, open_source: Callable[[str, str, int], object]):
        self.merger = merger
        self._open = open_source
        self.sources: dict[str, object] = {}
        self._hosts: dict[str, str] = {}
        self._paused: set[str] = set()
        self._retired: set[str] = set()
        self._until: dict[str, int] = {}     # draining (offline) sources: final ts
        self._drained: dict[str, int] = {}   # retired in this run: position at retirement

    @property
    def latest_ts(self) -> int:
        return self.merger.latest_ts

    def views(self) -> dict[str, SourceView]:
        positions = self.merger.positions()
        return {name: SourceView(self._hosts.get(name, ""), pos, name in self._paused,
                                 name in self._retired, self.merger.buffered(name),
                                 self._until.get(name, 0))
                for name, pos in positions.items()}

    def drained(self) -> dict[str, int]:
        return dict(self._drained)

    def retire_due(self) -> bool:
        """Whether a draining source has shown its final ts (a refresh retires it)."""
        if not self._until:
            return False
        positions = self.merger.positions()
        return any(positions.get(n, 0) >= ts for n, ts in self._until.items())

    def pullable(self) -> dict[str, object]:
        """Sources to fetch from: neither paused nor retired."""
        return {n: s for n, s in self.sources.items() if n not in self._paused}

    def apply(self, action: Action) -> None:
        node = action.node_id
        if isinstance(action, AddSource):
            self.merger.add_source(node, action.start_after_ts)
            self.sources[node] = self._open(node, action.host, action.start_after_ts)
            self._hosts[node] = action.host
            self._drained.pop(node, None)
        elif isinstance(action, DrainSource):
            self._until[node] = action.until_ts
        elif isinstance(action, PauseSource):
            self._paused.add(node)
        elif isinstance(action, ResumeSource):
            self._paused.discard(node)
        elif isinstance(action, MoveSource):
            self._close(node)
            self.sources[node] = self._open(node, action.host, self.merger.positions()[node])
            self._hosts[node] = action.host
        elif isinstance(action, RetireSource):
            self._drained[node] = self.merger.positions()[node]
            self._until.pop(node, None)
            self.merger.mark_offline(node)
            self._close(node)
            self._retired.add(node)
            self._paused.discard(node)
        elif isinstance(action, RemoveSource):
            self.merger.remove_source(node)
            self._close(node)
            self._retired.discard(node)
            self._paused.discard(node)
            self._hosts.pop(node, None)
            self._until.pop(node, None)
        else:
            raise InvalidArgument(f"unknown collector action {action!r}")

    def _close(self, node: str) -> None:
        source = self.sources.pop(node, None)
        if source is not None:
            source.close()

    def close(self) -> None:
        for node in list(self.sources):
            self._close(node)


class Collector:
    """Refreshes the merge sources from the registry on Notify and every detect interval."""

    def __init__(self, list_pumps: Callable[[], list[NodeStatus]], target: SourceTarget, *,
                 detect_interval_s: float = 5.0, paused_refresh_s: float = PAUSED_REFRESH_S,
                 clock: Callable[[], float] = time.monotonic):
        self._list_pumps = list_pumps
        self.target = target
        self.detect_interval_s = detect_interval_s
        self.paused_refresh_s = paused_refresh_s
        self._paused_after_refresh = False  # the last refresh left a source paused
        self._clock = clock
        self._cond = threading.Condition()
        self._requested = 0          # tickets handed out by notify()
        self._completed = 0          # every ticket <= this has been served
        self._last_refresh_s: float | None = None
        self._retire_due_after_refresh = False  # the last refresh left one due (no record)
        self.refreshes = 0

    @property
    def started(self) -> bool:
        """True once the first refresh applied its actions."""
        return self.refreshes > 0

    def notify(self) -> int:
        """Ask for a refresh now (thread-safe); returns a ticket for :meth:`wait`."""
        with self._cond:
            self._requested += 1
            return self._requested

    def served(self, ticket: int) -> bool:
        with self._cond:
            return self._completed >= ticket

    def wait(self, ticket: int, timeout_s: float) -> bool:
        """Block until a refresh begun after ``ticket`` was issued has been applied."""
        with self._cond:
            return self._cond.wait_for(lambda: self._completed >= ticket, timeout_s)

    def due_in_s(self) -> float:
        """Seconds until the next refresh is due (0: now)."""
        with self._cond:
            pending = self._requested > self._completed
        if pending or self._last_refresh_s is None:
            return 0.0
        if (self.target is not None and not self._retire_due_after_refresh
                and self.target.retire_due()):
            return 0.0
        interval = self.detect_interval_s
        if self._paused_after_refresh:  # the merge waits for it: look for it coming back
            interval = min(interval, self.paused_refresh_s)
        return max(0.0, self._last_refresh_s + interval - self._clock())

    def step(self) -> list[Action]:
        """Refresh if due; returns the actions applied (empty when not due)."""
        if self.due_in_s() > 0:
            return []
        return self.refresh()

    def refresh(self) -> list[Action]:
        """List the pumps, plan, apply; then serve every ticket issued before it began.

        A failure (registry unreachable, a source that cannot open) propagates; the
        pending tickets stay pending, so the next step retries.
        """
        with self._cond:
            covering = self._requested
        records = self._list_pumps()
        target = self.target
        actions = plan(records, target.views(), target.latest_ts, target.drained())
        for action in actions:
            log.info("collector: %s", action)
            target.apply(action)
        self._last_refresh_s = self._clock()
        # Still due after a refresh means the plan could not retire it (its record
        # vanished): do not refresh on every step for it.
        self._retire_due_after_refresh = target.retire_due()
        self._paused_after_refresh = any(v.paused for v in target.views().values())
        self.refreshes += 1
        with self._cond:
            self._completed = max(self._completed, covering)
            self._cond.notify_all()
        return actions
