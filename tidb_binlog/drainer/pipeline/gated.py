"""A single-writer sink as the pipeline's :class:`~.sink.Sink`: the gate written once.

The file sink and the Parquet sink each have one writer object that knows its format
(:class:`~tidb_binlog.drainer.sinks.file.sink.FileSink`,
:class:`~tidb_binlog.drainer.sinks.parquet.sink.ParquetLake`). What makes such a writer
a pipeline sink is the same for both, and lives here: batches through a
:class:`~.gate.SequenceGate` (refused before the first reset, out of sequence, or after
one that failed part-way), unpacked (:mod:`tidb_binlog.packed`), the start point kept,
the wall time of the last batch, and ``close()`` of a sink never reset answering the
saved checkpoint. A writer implements :class:`SinkWriter`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.pipeline.gate import SequenceGate
from tidb_binlog.drainer.pipeline.sink import SinkStatus
from tidb_binlog.packed import unpack

__all__ = ["GatedSink", "SinkWriter"]

log = logging.getLogger(__name__)


class SinkWriter(Protocol):
    """What :class:`GatedSink` drives below its gate."""

    directory: object
    """Where it writes (for the log lines)."""

    @property
    def is_open(self) -> bool:
        """Whether a reset opened it (and close did not end it yet)."""
        ...

    @property
    def applied_ts(self) -> int:
        """The highest commit_ts written or passed (what ``idle`` answers while closed)."""
        ...

    def reset(self) -> Checkpoint:
        """Forget everything in flight; load the durable checkpoint; return it."""
        ...

    def apply(self, items: list) -> int:
        """Write ``(commit_ts, item | None, schema_version)`` items in commit order;
        return the highest commit_ts written."""
        ...

    def idle(self) -> int: ...

    def close(self) -> Checkpoint:
        """Make everything durable, save the final checkpoint and return it."""
        ...

    def saved_checkpoint(self) -> Checkpoint:
        """The durable checkpoint as it is on disk (never reset in this process)."""
        ...

    def sink_status(self, last_apply_s: float) -> SinkStatus: ...


class GatedSink:
    """A :class:`SinkWriter` as the pipeline's :class:`~.sink.Sink`. ``who`` names the sink
    in the gate's errors and the log ("file sink", "parquet sink")."""

    who = "sink"

    def __init__(self, writer: SinkWriter, *, wall_clock: Callable[[], float] = time.time):
        self.writer = writer
        self.gate = SequenceGate(self.who)
        self.last_apply_s = 0.0
        self.start_checkpoint: Checkpoint | None = None
        self._wall_clock = wall_clock

    def reset(self, replay: bool = False) -> Checkpoint:
        """Forget everything in flight; the writer starts again at its durable checkpoint."""
        cp = self.writer.reset()
        self.gate.open()
        self.start_checkpoint = cp
        log.info("%s %s starts after commit_ts %d", self.who, self.writer.directory,
                 cp.commit_ts)
        return cp

    def start_point(self) -> Checkpoint | None:
        return self.start_checkpoint

    def apply(self, seq: int, batch) -> int:
        """Write one merged batch (``seq`` must follow the previous one)."""
        self.gate.check(seq)
        try:
            commit_ts = self.writer.apply(unpack(batch))
        except BaseException:
            self.gate.failed()
            raise
        self.gate.passed()
        self.last_apply_s = self._wall_clock()
        return commit_ts

    def idle(self) -> int:
        if not self.gate.is_open:
            return self.writer.applied_ts
        return self.writer.idle()

    def close(self) -> Checkpoint:
        """Make everything durable and return the final checkpoint; a sink never reset
        in this process wrote nothing: the saved one stands."""
        if not self.writer.is_open:
            return self.writer.saved_checkpoint()
        return self.writer.close()

    def status(self) -> SinkStatus:
        return self.writer.sink_status(self.last_apply_s)

    def apply_samples(self) -> list[tuple[int, float]]:
        return []  # one writer: the merger's own samples stand
