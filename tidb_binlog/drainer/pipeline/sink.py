"""The sink contract: where the merged, translated batches of one task go.

TiDB Binlog's drainer has ``drainer/sync/syncer.go``'s ``Syncer`` interface (one per
``db-type``) and a checkpoint factory. Here a :class:`Sink` is the object behind the
pipeline's last actor: the MySQL :class:`~tidb_binlog.drainer.sinks.mysql.coordinator.Coordinator` (SQL workers,
exactly-once, an optional relay log in front),
:class:`~tidb_binlog.drainer.sinks.file.sink.BinlogFileSink` (pb records in binlog files)
and :class:`~tidb_binlog.drainer.sinks.parquet.sink.ParquetSink` (a Parquet lake); the
last two are :class:`~.gated.GatedSink` around their writer. A new sink adds one class
and its row in the sink table (:mod:`tidb_binlog.drainer.sinks.kinds`).

The merger drives every sink with the same calls, in this order:

- ``reset(replay)`` first, and again after any :class:`~.gate.PipelineReset`: forget
  everything in flight, load the durable checkpoint (``replay``: this start replays
  after a failure) and return it; the stream restarts right after it.
- ``apply(seq, batch)`` per merged batch, ``seq`` = 0, 1, 2, ... from each reset,
  through a :class:`~.gate.SequenceGate` (in order; none before the first reset; none
  after one that failed part-way). ``batch``: ``(commit_ts, item | None,
  schema_version)`` in commit order (``None``: a fake binlog or a skipped txn), as the
  keeper translated it (possibly packed, :mod:`tidb_binlog.packed`). Returns the
  checkpoint commit_ts after the batch was handed on.
- ``idle()`` when nothing new arrived: finish what is due (acks, a checkpoint save).
- ``close()`` once: wait for everything handed out, save the final checkpoint
  (``consistent`` when nothing is pending) and return it. A sink never reset since it
  started saves nothing and returns the saved checkpoint.
- ``status()`` at any time (from another thread): a :class:`SinkStatus`; its
  ``saved_commit_ts`` is the durable checkpoint the drainer node reports in its
  heartbeats (the pumps' GC keeps everything above it).
- ``apply_samples()`` at any time: the apply-time samples since the last call.

The durable checkpoint is the sink's: the downstream's ``tidb_binlog.checkpoint`` row,
the file sink's ``savepoint``; whatever the sink writes at or below it is never
written again after a reset (or is written again harmlessly: safe mode).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint

__all__ = ["Sink", "SinkStatus"]


@dataclass(frozen=True)
class SinkStatus:
    """What every sink reports (``Drainer.status`` and ``/metrics`` read it).

    ``commit_ts``: the checkpoint (everything at or below it applied);
    ``saved_commit_ts``: the *durable* checkpoint, what a restarted task would start
    after (0: none saved or loaded in this process yet); ``pending``:
    items handed out, not yet acknowledged; ``outstanding``: calls in flight to the
    sink's own workers; ``applied_rows``, ``ddl_jobs``, ``flushes``: what was applied;
    ``resets``: replays counted in the checkpoint (None: the sink does not count them,
    the merger's count stands); ``savepoints``: checkpoint saves in
    this process; ``last_apply_s``: wall time of the last batch. ``extra``: the sink's
    own keys (``records``, ``routed_batches``, ...).
    """

    commit_ts: int
    saved_commit_ts: int = 0
    schema_version: int = 0
    pending: int = 0
    applied_rows: int = 0
    flushes: int = 0
    outstanding: int = 0
    last_apply_s: float = 0.0
    ddl_jobs: int = 0
    resets: int | None = None
    savepoints: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The flat dict the actors answer ``status()`` with (the sink's keys last)."""
        out = asdict(self)
        extra = out.pop("extra")
        if out["resets"] is None:
            del out["resets"]
        out.update(extra)
        return out


class Sink(Protocol):
    """A task's destination; see the module doc for the calling rules."""

    def reset(self, replay: bool = False) -> Checkpoint: ...

    def start_point(self) -> Checkpoint | None:
        """The checkpoint the last reset started from (None before one)."""
        ...

    def apply(self, seq: int, batch) -> int: ...

    def idle(self) -> int: ...

    def close(self) -> Checkpoint: ...

    def status(self) -> SinkStatus: ...

    def apply_samples(self) -> list[tuple[int, float]]:
        """``(commit_ts, applied_at_s)`` of what was applied since the last call (the
        lag histogram; a sink that does not sample returns [])."""
        ...
