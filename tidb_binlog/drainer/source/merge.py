"""K-way merge of the pumps' binlog streams by commit_ts.

Each *source* (one pump) delivers items ``(commit_ts, payload)`` in strictly
ascending commit_ts; the payload is opaque here.  The shell feeds the kernel with
:meth:`Merger.push` and drains it with :meth:`Merger.pop_ready_pairs` (the pushed
pairs themselves) or :meth:`Merger.pop_ready` (the same items as
:class:`MergedItem`, tagged with their source); there are no threads, clocks or
I/O.

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
buffered item is ready.  ``limit`` caps the items *emitted* by one call (dropped
items do not count); the call stops right after the ``limit``-th.

**Dropped items** (each counted in :attr:`Merger.counters`):

- ``stale``: pushed at or below the source's own shown ts (a resent batch after a
  retried pull, or a source breaking its promise); dropped at push.
- ``duplicates``: commit_ts equal to the last emitted one: the same transaction
  retried by TiDB on a second pump after a write timeout.  The first in
  ``(commit_ts, source name)`` order is emitted; a copy is dropped even when it
  becomes ready only in a later call.
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

**Storage.**  A source buffers its pairs in a list plus a head index (the first
unconsumed one); the list is compacted once the head passes half of it, so
consuming is O(1) and the memory is freed in amortised O(1) per item.  ``push``
of a strictly ascending batch above the shown ts (what a pump sends: checked at C
speed) extends the list in one call; any other batch goes item by item, dropping
the stale ones.

**Strategies.**  All three give identical output and counters after every call.
``heap`` keeps one head per source in a binary heap (O(log k) per item, TiDB's
production choice); ``linear`` scans the heads (O(k) per item, TiDB's
``normal``).  ``runs`` (the default) works on whole runs rather than items, for
the drainer's shape (a few pumps, batches of thousands): per source it finds the
ready prefix (commit_ts <= the safe ts) with ``bisect``, cuts the prefixes so
that exactly the first ``limit`` items in ``(commit_ts, source name)`` order are
taken (a binary search on each prefix for where the global rank reaches
``limit``), concatenates them in source-name order and sorts them with the stable
``list.sort`` by commit_ts (ties keep source-name order), then drops
duplicates/out-of-order ones against :attr:`Merger.latest_ts`: in one step when
the sorted run is strictly ascending above it (the usual case), else item by
item.  When drops leave fewer than ``limit`` emitted, it takes the next cut.  The
per-item work is then C loops (slicing, sorting, ``set``), several times cheaper
than ``heap``'s Python loop per item.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import islice
from operator import itemgetter, lt
from typing import Any, NamedTuple

from tidb_binlog.errors import ConfigError, StateError

__all__ = ["MergedItem", "Merger", "STRATEGIES"]

STRATEGIES = ("heap", "linear", "runs")

_TS = itemgetter(0)


class MergedItem(NamedTuple):
    commit_ts: int
    source: str
    payload: Any


class _Source:
    """One source's buffer: ``items[head:]`` are the pairs not yet consumed."""

    __slots__ = ("name", "serial", "items", "head", "shown_ts", "offline")

    def __init__(self, name: str, serial: int, start_after_ts: int):
        self.name = name
        self.serial = serial
        self.items: list[tuple[int, Any]] = []
        self.head = 0
        self.shown_ts = start_after_ts
        self.offline = False

    def pending(self) -> int:
        return len(self.items) - self.head

    def compact(self) -> None:
        """Drop the consumed pairs once they are at least half the list (amortised O(1))."""
        if self.head and 2 * self.head >= len(self.items):
            del self.items[:self.head]
            self.head = 0


class _HeapHeads:
    """Heads in a heap of ``(commit_ts, name, serial)``; stale entries skipped lazily."""

    def __init__(self):
        self._heap: list[tuple[int, str, int]] = []

    def set_head(self, src: _Source) -> None:
        if src.head < len(src.items):
            heapq.heappush(self._heap, (src.items[src.head][0], src.name, src.serial))

    def peek(self, sources: dict[str, _Source]) -> _Source | None:
        heap = self._heap
        while heap:
            ts, name, serial = heap[0]
            src = sources.get(name)
            if (src is not None and src.serial == serial and src.head < len(src.items)
                    and src.items[src.head][0] == ts):
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
        best_key = None
        for src in sources.values():
            if src.head < len(src.items):
                key = (src.items[src.head][0], src.name)
                if best is None or key < best_key:
                    best, best_key = src, key
        return best

    def pop(self) -> None:
        pass


class Merger:
    """The merge kernel; see the module docstring."""

    def __init__(self, start_ts: int = 0, strategy: str = "runs"):
        if strategy not in STRATEGIES:
            raise ConfigError(f"unknown merge strategy {strategy!r}; use one of {STRATEGIES}",
                              key="merge-strategy")
        self.strategy = strategy
        self._heads: _HeapHeads | _LinearHeads | None = None  # runs: bisects every buffer
        if strategy == "heap":
            self._heads = _HeapHeads()
        elif strategy == "linear":
            self._heads = _LinearHeads()
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
        return src.pending()

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
            return self._source(name).pending()
        return sum(src.pending() for src in self._sources.values())

    def _source(self, name: str) -> _Source:
        src = self._sources.get(name)
        if src is None:
            raise StateError(f"merge source {name!r} is unknown; add_source({name!r}) first "
                             f"(known: {sorted(self._sources)})", state="absent")
        return src

    # -- data -------------------------------------------------------------

    def push(self, name: str, items: Iterable[tuple[int, Any]],
             watermark: int | None = None) -> int:
        """Buffer ``items`` (ascending ``(commit_ts, payload)`` pairs, kept as given) from
        ``name``; returns how many were kept."""
        src = self._source(name)
        was_empty = src.head >= len(src.items)
        shown = src.shown_ts
        batch = items if isinstance(items, list) else list(items)
        kept = 0
        if batch:
            ts = [commit_ts for commit_ts, _ in batch]  # also checks they are pairs
            if ts[0] > shown and all(map(lt, ts, islice(ts, 1, None))):
                # a pump's batch: strictly ascending above the shown ts, nothing stale
                src.items.extend(batch)
                shown = ts[-1]
                kept = len(batch)
            else:
                append = src.items.append
                for item, commit_ts in zip(batch, ts, strict=True):
                    if commit_ts <= shown:
                        self.counters["stale"] += 1
                        continue
                    append(item)
                    shown = commit_ts
                    kept += 1
        if watermark is not None and watermark > shown:
            shown = watermark
        src.shown_ts = shown
        if was_empty and kept and self._heads is not None:
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
        """Emit, in order, every buffered item the emission rule allows (at most ``limit``),
        as :class:`MergedItem` with its source's name."""
        return self._pop(limit, True)

    def pop_ready_pairs(self, limit: int | None = None) -> list[tuple[int, Any]]:
        """Like :meth:`pop_ready`, but return the pushed ``(commit_ts, payload)`` pairs
        themselves: no per-item object is built (what the merger actor hands on)."""
        return self._pop(limit, False)

    def _pop(self, limit: int | None, tagged: bool) -> list:
        if limit is not None and limit <= 0:
            return []
        if self._heads is None:
            out = self._pop_runs(limit, tagged)
        else:
            out = self._pop_heads(limit, tagged)
        for src in self._sources.values():
            src.compact()
        self.counters["emitted"] += len(out)
        return out

    def _pop_heads(self, limit: int | None, tagged: bool) -> list:
        """``heap`` and ``linear``: one item at a time from the smallest head."""
        safe = self.safe_ts
        out: list = []
        counters = self.counters
        latest = self._latest_ts
        heads, sources = self._heads, self._sources
        while limit is None or len(out) < limit:
            src = heads.peek(sources)
            if src is None:
                break
            item = src.items[src.head]
            commit_ts = item[0]
            if safe is not None and commit_ts > safe:
                break
            src.head += 1
            heads.pop()
            heads.set_head(src)
            if commit_ts > latest:
                out.append(MergedItem(commit_ts, src.name, item[1]) if tagged else item)
                latest = commit_ts
            elif commit_ts == latest:
                counters["duplicates"] += 1
            else:
                counters["out_of_order"] += 1
        self._latest_ts = latest
        return out

    def _pop_runs(self, limit: int | None, tagged: bool) -> list:
        """``runs``: whole ready prefixes, cut to ``limit``, sorted, then deduplicated."""
        safe = self.safe_ts
        # [source, start, end] of every non-empty ready prefix, in source-name order
        runs: list[list] = []
        total = 0
        for name in sorted(self._sources):
            src = self._sources[name]
            items, head = src.items, src.head
            end = len(items) if safe is None else bisect_right(items, safe, head, len(items),
                                                               key=_TS)
            if end > head:
                runs.append([src, head, end])
                total += end - head
        out: list = []
        want = total if limit is None else limit
        while runs and want > 0:
            cuts = _cut(runs, want) if total > want else [run[2] for run in runs]
            chunk: list = []
            for run, cut in zip(runs, cuts, strict=True):
                src, start = run[0], run[1]
                if tagged:
                    name = src.name
                    chunk += [MergedItem(t, name, p) for t, p in src.items[start:cut]]
                else:
                    chunk += src.items[start:cut]
                src.head = run[1] = cut
            runs = [run for run in runs if run[1] < run[2]]
            total -= len(chunk)
            if len(cuts) > 1:
                chunk.sort(key=_TS)  # stable: equal commit_ts stay in source-name order
            want -= self._emit(chunk, out, distinct=len(cuts) == 1)
        return out

    def _emit(self, chunk: list, out: list, distinct: bool) -> int:
        """Append the items of the sorted ``chunk`` above :attr:`latest_ts` to ``out``, each
        commit_ts once, counting the others; returns how many were appended.  ``distinct``:
        the chunk is one source's run, so its commit_ts are already strictly ascending."""
        if not chunk:
            return 0
        latest = self._latest_ts
        ts = list(map(_TS, chunk))
        if ts[0] > latest and (distinct or len(set(ts)) == len(ts)):  # strictly ascending
            out += chunk
            self._latest_ts = ts[-1]
            return len(chunk)
        counters = self.counters
        emitted = 0
        for item, commit_ts in zip(chunk, ts, strict=True):
            if commit_ts > latest:
                out.append(item)
                latest = commit_ts
                emitted += 1
            elif commit_ts == latest:
                counters["duplicates"] += 1
            else:
                counters["out_of_order"] += 1
        self._latest_ts = latest
        return emitted


def _cut(runs: list[list], want: int) -> list[int]:
    """Per run ``[source, start, end]`` (in source-name order, each strictly ascending),
    the end index such that together they hold exactly the first ``want`` items in
    ``(commit_ts, source name)`` order; ``want`` < the runs' total.

    The global rank of a run's item is how many items of the other runs come before it
    (earlier-named runs: commit_ts <= it, later-named: commit_ts < it) plus its index in
    its run; it grows along the run, so each run's cut is a binary search for the first
    item ranked >= ``want``.  Nothing past ``start + want`` can be in, so every search is
    bounded by it: O(k^2 log^2 want) key lookups, none per emitted item."""
    bounds = [(run[0].items, run[1], min(run[2], run[1] + want)) for run in runs]
    cuts = []
    for j, (items, start, end) in enumerate(bounds):
        lo, hi = start, end  # find the first index in [start, end) ranked >= want
        while lo < hi:
            mid = (lo + hi) // 2
            ts = items[mid][0]
            rank = mid - start
            for i, (other, o_start, o_end) in enumerate(bounds):
                if i < j:
                    rank += bisect_right(other, ts, o_start, o_end, key=_TS) - o_start
                elif i > j:
                    rank += bisect_left(other, ts, o_start, o_end, key=_TS) - o_start
                if rank >= want:
                    break
            if rank >= want:
                hi = mid
            else:
                lo = mid + 1
        cuts.append(lo)
    return cuts
