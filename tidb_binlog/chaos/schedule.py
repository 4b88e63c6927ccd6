"""The seeded fault schedule of ``tidb-binlog chaos``: same seed → same schedule.

A schedule is a list of :class:`Fault`. The runner (``cluster/chaos.py``) injects
them **one at a time**: wait ``gap_s``, inject, hold the fault for ``hold_s`` where
the kind has a duration (a stopped process, a full disk, a paused pump, a database
that is down), end it, then wait until the drainer's lag is back under the
recovered threshold before the next one. One fault at a time makes each recovery
time attributable to one cause, and a failing run replayable from its seed.

The kinds are dealt in seeded shuffled rounds (every kind once per round, in a new
order each round) so even a short run covers many different kinds, and the targets
(which pump, which SQL worker, which actor to restart) are drawn from the same
``random.Random(seed)``. Nothing here depends on wall-clock time: the schedule is
made before the run starts and written to the run directory.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

from tidb_binlog.errors import ConfigError, InvalidArgument

__all__ = ["Fault", "FAULT_KINDS", "ACTOR_KINDS", "make_schedule", "parse_kinds",
           "schedule_to_json", "schedule_from_json"]

ACTOR_KINDS = ("pump", "merger", "keeper", "coordinator", "worker", "registry")
"""Actor kinds a kill -9 or a Ray restart can hit."""

FAULT_KINDS = (
    *(f"kill9-{k}" for k in ACTOR_KINDS),   # SIGKILL of the actor's process; Ray restarts it
    "restart-actor",         # ray.kill(actor, no_restart=False) of a random actor kind
    "kill9-downstream-db",   # SIGKILL of the downstream MariaDB, restart on the same data dir
    "kill9-upstream-db",     # SIGKILL of the upstream MariaDB, restart on the same data dir
    "sigstop-pump",          # SIGSTOP of a pump past the heartbeat timeout, then SIGCONT
    "disk-full-pump",        # the pump's disk guard trips (threshold raised), then restored
    "pause-pump",            # PUT /state/{id}/pause on its HTTP API, resumed by a restart
)

# How long each kind is held before it is ended (seconds, drawn uniformly).
_HOLD_S = {
    "kill9-downstream-db": (2.0, 6.0),
    "kill9-upstream-db": (2.0, 6.0),
    "sigstop-pump": (12.0, 15.0),   # the registry's alive timeout is 10 s
    "disk-full-pump": (3.0, 8.0),
    "pause-pump": (3.0, 8.0),
}


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: the ``no``-th, of ``kind``, at ``target``."""

    no: int
    kind: str
    target: str       # "pump-1", "worker-2", "merger", "downstream", ... (see make_schedule)
    gap_s: float      # quiet time before it is injected
    hold_s: float     # how long it lasts before it is ended (0: instantaneous)

    def describe(self) -> str:
        hold = f" for {self.hold_s:.1f} s" if self.hold_s else ""
        return f"#{self.no} {self.kind} {self.target}{hold}"


def parse_kinds(text: str | None) -> tuple[str, ...]:
    """``"kill9-pump,pause-pump"`` → the kinds; ConfigError naming an unknown one."""
    if not text:
        return FAULT_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise ConfigError(f"unknown fault kind(s) {unknown}; choose from "
                          f"{', '.join(FAULT_KINDS)}", key="--faults")
    return kinds


def _target(kind: str, rng: random.Random, pumps: int, workers: int) -> str:
    actor = kind.removeprefix("kill9-")
    if kind == "restart-actor":
        actor = rng.choice(ACTOR_KINDS)
    if kind.endswith("-db"):
        return kind.split("-")[1]              # "downstream" / "upstream"
    if actor == "pump" or kind.endswith("-pump"):
        return f"pump-{rng.randrange(pumps)}"
    if actor == "worker":
        return f"worker-{rng.randrange(workers)}"
    return actor                                # merger, keeper, coordinator, registry


def make_schedule(seed: int, count: int, *, kinds: tuple[str, ...] = FAULT_KINDS,
                  pumps: int = 2, workers: int = 4, gap_s: tuple[float, float] = (2.0, 6.0)
                  ) -> list[Fault]:
    """``count`` faults for ``seed`` (see the module docstring)."""
    if pumps < 1 or workers < 1:
        raise InvalidArgument(f"need at least one pump and one worker, got {pumps} and "
                              f"{workers}")
    rng = random.Random(seed)
    faults: list[Fault] = []
    deck: list[str] = []
    while len(faults) < count:
        if not deck:
            deck = list(kinds)
            rng.shuffle(deck)
        kind = deck.pop()
        lo, hi = _HOLD_S.get(kind, (0.0, 0.0))
        faults.append(Fault(no=len(faults) + 1, kind=kind,
                            target=_target(kind, rng, pumps, workers),
                            gap_s=round(rng.uniform(*gap_s), 2),
                            hold_s=round(rng.uniform(lo, hi), 2) if hi else 0.0))
    return faults


def schedule_to_json(faults: list[Fault]) -> str:
    return json.dumps([asdict(f) for f in faults], indent=1)


def schedule_from_json(text: str) -> list[Fault]:
    return [Fault(**d) for d in json.loads(text)]
