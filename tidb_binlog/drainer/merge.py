"""K-way merge of the pumps' binlog streams by commit_ts.

Each *source* (one pump) delivers items ``(commit_ts, payload)`` in strictly
ascending commit_ts; the payload is opaque here.  The shell feeds the kernel with
:meth:`Merger.push` and drains it with :meth:`Merger.pop_ready`; there are no
threads, clocks or I/O.

**Watermarks.**  ``push(name, items, watermark)`` may carry the source's
``max_commit_ts``: the source promises to send nothing at or below it later.
The *shown* ts of a source is the highest of its ``start_after_ts``, every
watermark and every commit_ts it pushed; the source will never send anything at
or below it.

**Emission rule.**  ``pop_ready`` emits the buffered items in ascending
``(commit_ts, source name)`` order, and emits an item with commit_ts ``T`` only
when every online (not offline) source has shown a ts >= ``T``.  So nothing can
arrive later that should have come first.  A source that has shown nothing new
holds everybody back: a paused or slow pump stalls the merge (TiDB does the same;
fake binlogs keep idle pumps' watermarks moving).  With no online source, every
buffered item is ready.

**Dropped items** (each counted in :attr:`Merger.counters`):

- ``stale``: pushed at or below the source's own shown ts (a resent batch after a
  retried pull, or a source breaking its promise); dropped at push.
- ``duplicates``: commit_ts equal to the last emitted one: the same transaction
  retried by TiDB on a second pump after a write timeout.  The first in
  ``(commit_ts, source name)`` order is emitted.
- ``out_of_order``: commit_ts below the last emitted one (TiDB's
  ``disorder_binlog_count``): only possible from a source added with a
  ``start_after_ts`` below :attr:`Merger.latest_ts`, or pushing after it was
  marked offline.

``emitted`` counts the items returned.

**Sources come and go while running.**  ``add_source(name)`` starts a source after
:attr:`Merger.latest_ts` (the last emitted commit_ts): the Notify handshake adds a
new pump here *before* it may accept writes, so its first write is above the
merge position and the merge waits for it.  ``mark_offline(name)`` stops waiting
for a source (its buffered items still merge in order); ``remove_source(name)``
forgets it and discards what it still buffers (callers mark offline first and
remove once :meth:`Merger.buffered` says it is drained).

**Strategies.**  ``heap`` keeps one head per source in a binary heap
(O(log k) per item, TiDB's production choice); ``linear`` scans the heads
(O(k) per item, TiDB's ``normal``).  Both give identical output.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any, NamedTuple

from tidb_binlog.errors import ConfigError, StateError

__all__ = ["MergedItem", "Merger", "STRATEGIES"]

STRATEGIES = ("heap", "linear")


class MergedItem(NamedTuple):
    commit_ts: int
    source: str
    payload: Any


class _Source:
    __slots__ = ("name", "serial", "items", "shown_ts", "offline")

    def __init__(self, name: str, serial: int, start_after_ts: int):
        self.name = name
        self.serial = serial
        self.items: deque[tuple[int, Any]] = deque()
        self.shown_ts = start_after_ts
        self.offline = False


class _HeapHeads:
    """Heads in a heap of ``(commit_ts, name, serial)``; stale entries skipped lazily."""

    def __init__(self):
        self._heap: list[tuple[int, str, int]] = []

    def set_head(self, src: _Source) -> None:
        if src.items:
            heapq.heappush(self._heap, (src.items[0][0], src.name, src.serial))

    def peek(self, sources: dict[str, _Source]) -> _Source | None:
        heap = self._heap
        while heap:
            ts, name, serial = heap[0]
            src = sources.get(name)
            if src is not None and src.serial == serial and src.items and src.items[0][0] == ts:
                return src
            heapq.heappop(heap)  # source removed, or an entry superseded
        return None

    def pop(self) -> None:
        heapq.heappop(self._heap)


class _LinearHeads:
    """Heads found by scanning every source."""

    def set_head(self, src: _Source) -> None:
        pass

    def peek(self, sources: dict[str, _Source]) -> _Source | None:
        best = None
        for src in sources.values():
            if src.items and (best is None or (src.items[0][0], src.name)
                              < (best.items[0][0], best.name)):
                best = src
        return best

    def pop(self) -> None:
        pass


class Merger:
    """The merge kernel; see the module docstring."""

    def __init__(self, start_ts: int = 0, strategy: str = "heap"):
        if strategy not in STRATEGIES:
            raise ConfigError(f"unknown merge strategy {strategy!r}; use one of {STRATEGIES}",
                              key="merge-strategy")
        self.strategy = strategy
        self._heads = _HeapHeads() if strategy == "heap" else _LinearHeads()
        self._sources: dict[str, _Source] = {}
        self._serial = 0
        self._latest_ts = start_ts
        self.counters = {"emitted": 0, "duplicates": 0, "out_of_order": 0, "stale": 0}

    # -- sources ----------------------------------------------------------

    def add_source(self, name: str, start_after_ts: int | None = None) -> int:
        """Add an online source that sends only commit_ts > the returned start ts."""
        if name in self._sources:
            raise StateError(f"merge source {name!r} already exists; remove it first",
                             state="present")
        start = self._latest_ts if start_after_ts is None else start_after_ts
        self._serial += 1
        self._sources[name] = _Source(name, self._serial, start)
        return start

    def mark_offline(self, name: str) -> None:
        """Stop waiting for ``name``; its buffered items still merge."""
        self._source(name).offline = True

    def remove_source(self, name: str) -> int:
        """Forget ``name``; returns how many buffered items were discarded."""
        src = self._source(name)
        del self._sources[name]
        return len(src.items)

    def sources(self) -> list[str]:
        return list(self._sources)

    def positions(self) -> dict[str, int]:
        """Shown ts of every source (the drainer's ``PumpPos``)."""
        return {name: src.shown_ts for name, src in self._sources.items()}

    def is_offline(self, name: str) -> bool:
        return self._source(name).offline

    def buffered(self, name: str | None = None) -> int:
        """Items waiting in one source, or in all of them."""
        if name is not None:
            return len(self._source(name).items)
        return sum(len(src.items) for src in self._sources.values())

    def _source(self, name: str) -> _Source:
        src = self._sources.get(name)
        if src is None:
            raise StateError(f"merge source {name!r} is unknown; add_source({name!r}) first "
                             f"(known: {sorted(self._sources)})", state="absent")
        return src

    # -- data -------------------------------------------------------------

    def push(self, name: str, items: Iterable[tuple[int, Any]],
             watermark: int | None = None) -> int:
        """Buffer ``items`` (ascending) from ``name``; returns how many were kept."""
        src = self._source(name)
        was_empty = not src.items
        kept = 0
        shown = src.shown_ts
        for commit_ts, payload in items:
            if commit_ts <= shown:
                self.counters["stale"] += 1
                continue
            src.items.append((commit_ts, payload))
            shown = commit_ts
            kept += 1
        if watermark is not None and watermark > shown:
            shown = watermark
        src.shown_ts = shown
        if was_empty and src.items:
            self._heads.set_head(src)
        return kept

    @property
    def latest_ts(self) -> int:
        """The last emitted commit_ts (the start ts at first): where a new source starts."""
        return self._latest_ts

    @property
    def safe_ts(self) -> int | None:
        """Items at or below this may be emitted; None when no source is online."""
        online = [src.shown_ts for src in self._sources.values() if not src.offline]
        return min(online) if online else None

    def pop_ready(self, limit: int | None = None) -> list[MergedItem]:
        """Emit, in order, every buffered item the emission rule allows (at most ``limit``)."""
        safe = self.safe_ts
        out: list[MergedItem] = []
        counters = self.counters
        latest = self._latest_ts
        while limit is None or len(out) < limit:
            src = self._heads.peek(self._sources)
            if src is None:
                break
            commit_ts, payload = src.items[0]
            if safe is not None and commit_ts > safe:
                break
            src.items.popleft()
            self._heads.pop()
            self._heads.set_head(src)
            if commit_ts > latest:
                out.append(MergedItem(commit_ts, src.name, payload))
                latest = commit_ts
            elif commit_ts == latest:
                counters["duplicates"] += 1
            else:
                counters["out_of_order"] += 1
        self._latest_ts = latest
        counters["emitted"] += len(out)
        return out
