"""Pump selection strategies for Prewrite binlogs (Commit/Rollback follow their prewrite).

Each selector sees the *available* pumps as ``(node_id, score)`` pairs, ordered
by node id so every strategy is deterministic for a given input, and answers
``select(start_ts, attempt, tried)`` with a node id or ``None`` when no pump is
available. ``attempt`` counts the failed tries of this binlog so far and
``tried`` names the pumps they went to.

``range`` (default)
    Round robin: each prewrite goes to the pump after the previous choice. On a
    retry it skips pumps this binlog already tried while an untried one is left.
``hash``
    ``(start_ts + attempt) mod N``: a transaction's first choice depends only on
    its start_ts; each retry moves one pump on (TiDB's formula).
``score``
    Weighted random. A pump's weight is ``max(score, 1)``, where ``score`` is the
    value the pump reports in its registry record (higher = more spare capacity:
    load, free disk). Pumps reporting 0 (TiDB's pumps always do) share evenly; a
    pump reporting 0 beside pumps reporting 100 still gets a 1/101 share, so it
    is never starved while it stays online. Retries draw again among the pumps
    not yet tried (all of them once every pump was tried).
``local``
    Always the single local pump (a unix socket path), TiDB's ``local unix``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence, Set

from tidb_binlog.errors import InvalidArgument

__all__ = ["RANGE", "HASH", "SCORE", "LOCAL", "STRATEGIES", "Selector", "new_selector"]

RANGE = "range"
HASH = "hash"
SCORE = "score"
LOCAL = "local"
STRATEGIES = (RANGE, HASH, SCORE, LOCAL)


class Selector:
    """Base: holds the available pumps; subclasses implement :meth:`select`."""

    def __init__(self) -> None:
        self._pumps: list[tuple[str, int]] = []

    def set_pumps(self, pumps: Sequence[tuple[str, int]]) -> None:
        self._pumps = sorted(pumps)

    @property
    def pumps(self) -> list[str]:
        return [node_id for node_id, _ in self._pumps]

    def select(self, start_ts: int, attempt: int = 0, tried: Set[str] = frozenset()) -> str | None:
        raise NotImplementedError


class RangeSelector(Selector):
    def __init__(self) -> None:
        super().__init__()
        self._last: str | None = None

    def select(self, start_ts: int, attempt: int = 0, tried: Set[str] = frozenset()) -> str | None:
        ids = self.pumps
        if not ids:
            return None
        # The first pump after the last choice (by node id), so a changed pump list
        # keeps the rotation going instead of restarting at the first pump.
        start = next((i for i, node_id in enumerate(ids) if self._last is not None
                      and node_id > self._last), 0)
        order = ids[start:] + ids[:start]
        choice = next((node_id for node_id in order if node_id not in tried), order[0])
        self._last = choice
        return choice


class HashSelector(Selector):
    def select(self, start_ts: int, attempt: int = 0, tried: Set[str] = frozenset()) -> str | None:
        ids = self.pumps
        if not ids:
            return None
        return ids[(start_ts + attempt) % len(ids)]


class ScoreSelector(Selector):
    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__()
        self._rng = rng or random.Random()

    def select(self, start_ts: int, attempt: int = 0, tried: Set[str] = frozenset()) -> str | None:
        pool = [(node_id, score) for node_id, score in self._pumps if node_id not in tried]
        pool = pool or self._pumps
        if not pool:
            return None
        weights = [max(score, 1) for _, score in pool]
        return self._rng.choices([node_id for node_id, _ in pool], weights=weights)[0]


class LocalSelector(Selector):
    def select(self, start_ts: int, attempt: int = 0, tried: Set[str] = frozenset()) -> str | None:
        return self._pumps[0][0] if self._pumps else None


def new_selector(strategy: str, *, rng: random.Random | None = None) -> Selector:
    """The selector of a strategy name; InvalidArgument (a ValueError) names the supported
    ones."""
    if strategy == RANGE:
        return RangeSelector()
    if strategy == HASH:
        return HashSelector()
    if strategy == SCORE:
        return ScoreSelector(rng)
    if strategy == LOCAL:
        return LocalSelector()
    raise InvalidArgument(f"unknown pump selection strategy {strategy!r}; "
                          f"choose one of {', '.join(STRATEGIES)}")
