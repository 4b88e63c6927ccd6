"""How far each pump and drainer is behind, and the node tables binlogctl prints.

The question operators ask most is "how far behind are my pump and drainer?".
All positions are TSOs (physical ms << 18 | logical), so a lag is the difference
of two physical parts:

- **pump**: its ``maxCommitTS`` (the newest commit it stores; an idle online pump
  writes a fake binlog every ``gen-binlog-interval`` and publishes the value with
  each heartbeat) against the TSO now. Meaningful only for an ``online`` pump: a
  paused or offline one stops writing by design, so it shows ``-``.
- **drainer**: its ``maxCommitTS`` (the saved checkpoint) against the TSO now
  ("behind TSO") and against each non-offline pump's ``maxCommitTS`` ("behind
  pumps": what it still has to read from that pump; 0 when it has everything the
  pump had at its last heartbeat). Shown for every drainer but an offline one:
  a paused drainer still holds back pump GC, so its lag matters.

Records come from the registry with ``isAlive`` derived there; a node that is not
offline but misses heartbeats shows ``<state> (not alive)``: it still counts for
the merge and for pump GC (it is expected back) until it is put offline. A node
killed with SIGKILL leaves its record as it was (``online``), as TiDB's does in
etcd (written with plain puts, no lease: TiDB's binlogctl then shows ``online``
with an old UpdateTime); ``(not alive)`` is ours. A stopped node (SIGTERM) writes
``paused`` itself.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from tidb_binlog.node import OFFLINE, ONLINE, NodeStatus
from tidb_binlog.tso import extract_physical

__all__ = ["NodeLag", "pump_lag_s", "drainer_lag", "render_table", "pump_rows", "drainer_rows",
           "format_ts_time"]


def _behind_s(newer_ts: int, older_ts: int) -> float:
    """Seconds from ``older_ts`` to ``newer_ts`` (never negative: clocks of heartbeats
    and the TSO call are not taken at one instant)."""
    return max(0.0, (extract_physical(newer_ts) - extract_physical(older_ts)) / 1000.0)


def pump_lag_s(pump: NodeStatus, now_ts: int) -> float | None:
    """Seconds the pump's newest stored commit is behind the TSO ``now_ts``; None
    unless the pump is online (only an online pump keeps its position moving)."""
    if pump.state != ONLINE or pump.max_commit_ts <= 0:
        return None
    return _behind_s(now_ts, pump.max_commit_ts)


@dataclass(frozen=True)
class NodeLag:
    """A drainer's checkpoint against the TSO and against each pump."""

    behind_tso_s: float | None
    behind_pumps_s: dict[str, float]


def drainer_lag(drainer: NodeStatus, now_ts: int, pumps: list[NodeStatus]) -> NodeLag:
    """Lag of ``drainer`` (None/empty for an offline one, which no longer replicates)."""
    if drainer.state == OFFLINE:
        return NodeLag(None, {})
    cp = drainer.max_commit_ts
    behind_pumps = {p.node_id: _behind_s(p.max_commit_ts, cp)
                    for p in pumps if p.state != OFFLINE}
    return NodeLag(_behind_s(now_ts, cp), behind_pumps)


def format_ts_time(ts: int, tz: datetime.tzinfo = datetime.UTC) -> str:
    """The wall-clock time of a TSO's physical part, to the second, or ``-`` for 0."""
    if ts <= 0:
        return "-"
    t = datetime.datetime.fromtimestamp(extract_physical(ts) / 1000.0, tz)
    return t.strftime("%Y-%m-%d %H:%M:%S %Z")


def _state(node: NodeStatus) -> str:
    if node.state != OFFLINE and not node.is_alive:
        return f"{node.state} (not alive)"
    return node.state


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def pump_rows(pumps: list[NodeStatus], now_ts: int, *,
              show_offline: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows of ``-cmd pumps``: TiDB's columns plus the lag behind the TSO and
    the pump's own error message (``ErrMsg``: e.g. its disk guard refusing Prewrites)."""
    header = ["NodeID", "Address", "State", "MaxCommitTS", "UpdateTime", "BehindTSO(s)",
              "ErrMsg"]
    rows = [[p.node_id, p.host, _state(p), str(p.max_commit_ts), format_ts_time(p.update_ts),
             _seconds(pump_lag_s(p, now_ts)), p.err_msg or "-"]
            for p in pumps if show_offline or p.state != OFFLINE]
    return header, rows


def drainer_rows(drainers: list[NodeStatus], pumps: list[NodeStatus], now_ts: int, *,
                 show_offline: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows of ``-cmd drainers``: TiDB's columns plus the checkpoint's lag
    behind the TSO and behind each non-offline pump (``pump-0 0.3, pump-1 0.0``)."""
    header = ["NodeID", "Address", "State", "MaxCommitTS", "UpdateTime", "BehindTSO(s)",
              "BehindPumps(s)"]
    rows = []
    for d in drainers:
        if d.state == OFFLINE and not show_offline:
            continue
        lag = drainer_lag(d, now_ts, pumps)
        per_pump = ", ".join(f"{pid} {_seconds(s)}" for pid, s in sorted(lag.behind_pumps_s.items()))
        rows.append([d.node_id, d.host, _state(d), str(d.max_commit_ts),
                     format_ts_time(d.update_ts), _seconds(lag.behind_tso_s), per_pump or "-"])
    return header, rows


def render_table(header: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table (one line per node), or a line saying there is none."""
    if not rows:
        return "(no nodes; -show-offline-nodes lists offline ones too)\n"
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *rows]]
    return "\n".join(lines) + "\n"
