"""The task driver's pump feeds: one per merge source, polled without blocking.

``poll() -> [(items, watermark)]`` returns what arrived since the last poll (each
pair ready for ``Merger.push``), ``refs()`` the Ray refs worth waiting on when idle,
``close()`` stops it.

- :class:`ActorFeed`: a PumpActor through
  :class:`~tidb_binlog.drainer.source.pump_source.ActorPumpSource` (pipelined pulls, at
  most 2 outstanding; its Ray calls passed in, ``actors.ray_calls.PumpPullCalls``). When the pump actor is unavailable (dead, restarting) it
  logs, counts ``binlog_drainer_error_count{type="pump_unavailable"}`` and pulls
  again after :data:`RETRY_S` from its last watermark; the merge waits meanwhile.
  Any other error (a pump refusing the request) propagates: the task stops.
  ``ref_above`` > 0: Commit binlogs of that many bytes or more arrive as
  :class:`~tidb_binlog.binlog_ref.BinlogRef` items (never fetched here: the keeper
  reads them from the pump); the metrics count their ``len()``, the payload's size.
- A pump that cannot serve an acknowledged binlog (damaged storage) raises
  :class:`~tidb_binlog.errors.DamagedBinlog`, through either feed: counted in
  ``binlog_drainer_error_count{type="pump_damaged_binlog"}``, logged, and raised
  with the pump's node id and the ts, so the task stops before the gap (status
  ``failed`` with that error) and never merges past it.
- :class:`GrpcFeed`: a standalone pump through
  :class:`~tidb_binlog.drainer.source.pump_source.GrpcPumpSource` (which reconnects by
  itself and raises only fatal errors).

Both record, per pulled batch, ``binlog_drainer_pump_position{nodeID}`` (the
watermark), ``binlog_reach_duration_time{nodeID}`` of the batch's newest binlog
(a per-batch sample keeps the cost off the per-binlog path) and
``read_binlog_size{nodeID}`` of each binlog.
"""

from __future__ import annotations

import logging
import time

from tidb_binlog.drainer.source.pump_source import ActorPumpSource, PullCalls, damaged_error
from tidb_binlog.errors import DamagedBinlog, UnavailableError
from tidb_binlog.tso import extract_physical

__all__ = ["ActorFeed", "GrpcFeed", "RETRY_S"]

log = logging.getLogger(__name__)

RETRY_S = 1.0   # a pump (or the registry) that failed is tried again after this
FIRST_PULL_BYTES = 64 << 10  # a feed's first pull: the merge starts before the pump read 4 MiB


def _damaged(metrics, node_id: str, exc: DamagedBinlog) -> DamagedBinlog:
    """Count and log a damaged binlog on pump ``node_id``; the error to raise (one
    naming the pump, without the Ray wrapper an actor call adds)."""
    cause = getattr(exc, "cause", None) or exc  # a RayTaskError(DamagedBinlog) wraps it
    metrics.error_count.labels("pump_damaged_binlog").inc()
    err = cause if str(cause).startswith(f"pump {node_id}") else damaged_error(
        f"pump {node_id}", cause.message, ts=cause.ts, path=cause.path, offset=cause.offset)
    log.error("%s", err)
    return err


def _observe(metrics, node_id: str, items: list, watermark: int) -> None:
    """Per pulled batch: position, reach time of its newest binlog, sizes."""
    metrics.pump_position.labels(node_id).set(extract_physical(watermark))
    if items:
        commit_ts = items[-1][0]
        metrics.binlog_reach_duration_s.labels(node_id).observe(
            max(0.0, time.time() - extract_physical(commit_ts) / 1000))
        metrics.read_binlog_size_bytes.labels(node_id).observe_many(
            [len(payload) for _, payload in items])


class ActorFeed:
    """A PumpActor, pipelined; restarted from the last watermark after a failure."""

    def __init__(self, node_id: str, actor, since_ts: int, max_bytes: int, metrics,
                 calls: PullCalls, *, ref_above: int = 0):
        self.node_id = node_id
        self.since_ts = since_ts
        self.metrics = metrics
        self.source = ActorPumpSource(actor, calls, node_id=node_id,
                                      max_bytes=max_bytes, pull_timeout_s=0.5,
                                      max_outstanding=2, first_max_bytes=FIRST_PULL_BYTES,
                                      ref_above=ref_above)
        self._retry_at: float | None = None
        self.source.start_fetch(since_ts)

    def poll(self) -> list[tuple[list, int]]:
        if self._retry_at is not None:
            if time.monotonic() < self._retry_at:
                return []
            self._retry_at = None
            self.source.start_fetch(self.since_ts)
        try:
            fetched = self.source.poll(0.0)
        except DamagedBinlog as exc:
            raise _damaged(self.metrics, self.node_id, exc) from None
        except UnavailableError as exc:
            log.warning("pump %s: %s; pulling again in %.0f s from %d", self.node_id, exc,
                        RETRY_S, self.since_ts)
            self.metrics.error_count.labels("pump_unavailable").inc()
            self._retry_at = time.monotonic() + RETRY_S
            return []
        out = []
        for f in fetched:
            _observe(self.metrics, self.node_id, f.items, f.watermark)
            self.since_ts = f.watermark
            out.append((f.items, f.watermark))
        return out

    def refs(self) -> list:
        return self.source.pending_refs()

    def close(self) -> None:
        self.source.close()


class GrpcFeed:
    """A standalone pump over ``PullBinlogs`` (reconnects by itself)."""

    def __init__(self, node_id: str, source, since_ts: int, max_bytes: int, metrics):
        self.node_id = node_id
        self.source = source
        self.since_ts = since_ts
        self.max_bytes = max_bytes
        self.metrics = metrics

    def poll(self) -> list[tuple[list, int]]:
        try:
            items, watermark = self.source.fetch(self.since_ts, self.max_bytes, 0.0)
        except DamagedBinlog as exc:
            raise _damaged(self.metrics, self.node_id, exc) from None
        if not items and watermark <= self.since_ts:
            return []
        _observe(self.metrics, self.node_id, items, watermark)
        self.since_ts = watermark
        return [(items, watermark)]

    def refs(self) -> list:
        return []

    def close(self) -> None:
        self.source.close()
