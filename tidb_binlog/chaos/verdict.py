"""What a chaos run checks at the end, as plain functions over plain rows.

- **Bank invariant**: transfers move money between accounts inside one
  transaction, so ``SUM(balance)`` is the same at every commit. Upstream it must
  hold whenever it is read; downstream once the checkpoint passed the last
  transfer (mid-stream a transfer's two rows may be applied by different
  workers, each in its own downstream transaction).
- **Audit (applied twice)**: downstream AFTER INSERT/UPDATE/DELETE triggers log
  ``(tbl, op, k, token)`` of every row change the drainer applies, inside its
  transaction. Every upstream write stamps a fresh token, so an image written
  twice (the same ``(tbl, op, k, token)`` logged twice) is a row change applied
  twice — what exactly-once forbids. (A REPLACE on a table with DELETE triggers
  logs a D of the old image and an I of the new one: distinct images.)
- **Recovery**: time from the end of a fault (at once for a kill or a restart; for
  a held fault, once it is lifted: SIGCONT sent, disk space back, the database or
  the paused pump being restarted) until the drainer's checkpoint passed a
  timestamp taken after it and its lag (now minus the checkpoint's physical time)
  is back under a threshold; p50/p99 per kind. The *outage* (from the injection,
  the hold included) is reported beside it: a held fault stalls the drainer for
  as long as it lasts by design (a stopped pump may hold binlogs nobody else has,
  so the merge must wait for it), which says nothing about how fast it recovers.
- **The RESULT line**: ``RESULT chaos faults=<n> diff=<n> lost=<n> dup=<n>
  recovery_p99_s=<s>``, the one line scripts grep.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["audit_duplicates", "bank_violation", "percentile", "RecoveryRecord",
           "recovery_table", "result_line", "audit_trigger_sql", "Verdict"]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def audit_duplicates(rows) -> list[tuple]:
    """``(tbl, op, k, token, times)`` for every audit image logged more than once."""
    counts = Counter(tuple(r) for r in rows)
    return sorted((*k, n) for k, n in counts.items() if n > 1)


def bank_violation(where: str, balances, expected_total: int, accounts: int) -> str | None:
    """None when the accounts add up, else a sentence saying what is off and where."""
    balances = list(balances)
    total = sum(balances)
    if len(balances) != accounts:
        return (f"{where}: {len(balances)} accounts instead of {accounts} (sum {total}, "
                f"expected {expected_total})")
    if total != expected_total:
        return f"{where}: sum of balances {total}, expected {expected_total}"
    return None


def audit_trigger_sql(database: str, table: str, key: str, token: str = "token") -> list[str]:
    """The three AFTER triggers logging ``table``'s applied row changes into
    ``chaos_audit.wlog`` (see the module docstring)."""
    out = []
    for event, op, img in (("INSERT", "I", "NEW"), ("UPDATE", "U", "NEW"),
                           ("DELETE", "D", "OLD")):
        out.append(f"CREATE TRIGGER `{database}`.`{table}_audit_{op}` AFTER {event} ON "
                   f"`{database}`.`{table}` FOR EACH ROW INSERT INTO chaos_audit.wlog "
                   f"(tbl, op, k, token) VALUES ('{table}', '{op}', {img}.`{key}`, "
                   f"{img}.`{token}`)")
    return out


@dataclass
class RecoveryRecord:
    """One injected fault and how long the drainer took to catch up after it."""

    kind: str
    target: str
    injected_at: float          # seconds since the run started
    recovery_s: float | None    # from the fault's end; None: not recovered within the timeout
    note: str = ""
    outage_s: float | None = None  # from the injection (the hold included)


def recovery_table(records: list[RecoveryRecord]
                   ) -> list[tuple[str, int, int, float, float, float]]:
    """Per kind: ``(kind, count, not recovered, recovery p50 s, recovery p99 s, outage
    p99 s)``, sorted by kind."""
    by_kind: dict[str, list[RecoveryRecord]] = {}
    for r in records:
        by_kind.setdefault(r.kind, []).append(r)
    out = []
    for kind in sorted(by_kind):
        times = [r.recovery_s for r in by_kind[kind] if r.recovery_s is not None]
        outages = [r.outage_s for r in by_kind[kind] if r.outage_s is not None]
        out.append((kind, len(by_kind[kind]), len(by_kind[kind]) - len(times),
                    percentile(times, 50), percentile(times, 99), percentile(outages, 99)))
    return out


@dataclass
class Verdict:
    """Everything the run's exit code depends on."""

    faults: int = 0
    diff: int = 0            # tables that differ
    lost: int = 0            # rows missing downstream or with stale values
    dup: int = 0             # row changes applied twice (audit) + rows extra downstream
    unrecovered: int = 0     # faults after which the lag never came back under the threshold
    problems: list[str] = field(default_factory=list)   # invariant breaks, task failures
    recoveries: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.diff or self.lost or self.dup or self.unrecovered or self.problems)

    @property
    def recovery_p99_s(self) -> float:
        return percentile(self.recoveries, 99)


def result_line(v: Verdict) -> str:
    return (f"RESULT chaos faults={v.faults} diff={v.diff} lost={v.lost} dup={v.dup} "
            f"recovery_p99_s={v.recovery_p99_s:.2f}")
