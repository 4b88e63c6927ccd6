"""The pump node's decisions as pure functions (no I/O but the ``.node`` file).

- :func:`resolve_node_id`: ``data-dir/.node`` if present, else the configured
  id, else ``hostname:port`` of the advertise address; the chosen id is written
  to ``.node`` (:data:`NODE_ID_FILE`) so a restart keeps it.
- :func:`needs_notify`: a pump new to the registry, or whose record says
  ``offline``, must Notify the online drainers before it accepts writes.
- :func:`next_state`: the state an HTTP action (``pause`` / ``close``) moves an
  ``online`` pump to; any other state refuses actions.
- :func:`fake_binlog_due`: nothing written for ``gen_binlog_interval_s``.
- :func:`decide_gc`: ``TSO(now - gc_s)``, held back to the smallest checkpoint
  of a non-offline drainer unless forced, skipped when not above the current
  gc_ts or not below max_commit_ts.
- :func:`lagging_drainers`: non-offline drainers below a target ts.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from tidb_binlog.errors import StateError
from tidb_binlog.node import CLOSING, OFFLINE, ONLINE, PAUSING, NodeStatus
from tidb_binlog.tso import compose, extract_physical

__all__ = [
    "NODE_ID_FILE",
    "ACTIONS",
    "GCDecision",
    "resolve_node_id",
    "needs_notify",
    "next_state",
    "fake_binlog_due",
    "decide_gc",
    "lagging_drainers",
]

# File under data-dir holding this pump's node id. Invariant: once written it is
# never changed, so the registry record of a restarted pump stays the same.
NODE_ID_FILE = ".node"
ACTIONS = ("pause", "close")


def resolve_node_id(data_dir: str | Path, configured: str, advertise_addr: str) -> str:
    """``.node`` file, else ``configured``, else ``hostname:port``; persisted to ``.node``."""
    path = Path(data_dir) / NODE_ID_FILE
    if path.exists():
        saved = path.read_text().strip()
        if saved:
            return saved
    node_id = configured or f"{socket.gethostname()}:{advertise_addr.rsplit(':', 1)[-1]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(node_id + "\n")
    return node_id


def needs_notify(previous: NodeStatus | None) -> bool:
    """A new or re-added pump (no record, or ``offline``) must notify the drainers."""
    return previous is None or previous.state == OFFLINE


def next_state(state: str, action: str) -> str:
    """The state an HTTP action moves to; only an ``online`` node accepts actions."""
    if action not in ACTIONS:
        raise StateError(f"unknown action {action!r}; expected one of {ACTIONS}", state=state)
    if state != ONLINE:
        raise StateError(f"cannot {action} a pump in state {state}; only an online pump "
                         "accepts actions", state=state)
    return PAUSING if action == "pause" else CLOSING


def fake_binlog_due(now_s: float, last_write_s: float, interval_s: float) -> bool:
    """True when nothing (binlog or fake) was written for ``interval_s``."""
    return now_s - last_write_s >= interval_s


@dataclass(frozen=True)
class GCDecision:
    gc_ts: int | None          # None: do not GC this round
    held_back_by: tuple[str, ...] = ()
    reason: str = ""


def decide_gc(now_ts: int, gc_s: float, current_gc_ts: int, max_commit_ts: int,
              drainers: list[NodeStatus], force: bool = False) -> GCDecision:
    """Where GC may cut: ``TSO(now - gc_s)`` held back by non-offline drainers."""
    target = compose(max(extract_physical(now_ts) - int(gc_s * 1000), 0), 0)
    blockers = [d for d in drainers if d.state != OFFLINE and d.max_commit_ts < target]
    ids = tuple(sorted(d.node_id for d in blockers))
    reason = ""
    if blockers and not force:
        target = min(d.max_commit_ts for d in blockers)
        reason = f"held back by drainer checkpoint(s) {', '.join(ids)}"
    elif blockers:
        reason = f"forced past drainer checkpoint(s) {', '.join(ids)}"
    if target <= current_gc_ts:
        return GCDecision(None, ids, reason or "nothing older than gc_ts to collect")
    if target >= max_commit_ts:
        return GCDecision(None, ids, reason or "gc target is not below max_commit_ts")
    return GCDecision(target, ids, reason)


def lagging_drainers(drainers: list[NodeStatus], target_ts: int) -> list[str]:
    """Ids of non-offline drainers whose checkpoint is below ``target_ts``."""
    return [d.node_id for d in drainers if d.state != OFFLINE and d.max_commit_ts < target_ts]
