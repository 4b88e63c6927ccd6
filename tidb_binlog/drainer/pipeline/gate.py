"""The sequence gate: a sink applies merged batches in order, and none after a failure.

The merger numbers the batches it hands out (0, 1, 2, ... from each reset) and keeps
up to ``max_inflight`` of them queued at the sink. Every sink (the coordinator, the
file sink, the next ones) must refuse:

- any batch before its first reset: a sink Ray restarted has not loaded the
  checkpoint, so it does not know where the stream is;
- a batch out of sequence: another pipeline actor restarted and the merger's numbering
  started again;
- every batch after one that failed part-way: the rest of that batch was never applied,
  and a later batch applied past the gap would move the checkpoint (or a worker's
  progress row) over it, so the replay would skip it.

Each refusal is a :class:`PipelineReset`: the merger resets the pipeline and replays
from the durable checkpoint. Written once here; :class:`SequenceGate` is the rule.
"""

from __future__ import annotations

from tidb_binlog.errors import BinlogError

__all__ = ["PipelineReset", "SequenceGate"]


class PipelineReset(BinlogError):
    """An actor of the pipeline restarted: replay from the durable checkpoint."""


class SequenceGate:
    """``check(seq)`` before applying batch ``seq``; ``passed()`` after it was applied;
    ``failed()`` when it failed part-way; ``open()`` at each reset. ``who`` names the
    sink in the errors."""

    def __init__(self, who: str):
        self.who = who
        self._loaded = False          # reset() ran at least once in this process
        self._expected: int | None = None  # None: closed (never opened, or after a failure)

    @property
    def loaded(self) -> bool:
        """Whether the sink was reset (loaded its checkpoint) in this process."""
        return self._loaded

    @property
    def is_open(self) -> bool:
        return self._expected is not None

    def open(self) -> None:
        """A reset: the next batch is 0."""
        self._loaded = True
        self._expected = 0

    def check(self, seq: int) -> None:
        if not self._loaded:
            raise PipelineReset(f"{self.who}: batch {seq} arrives before a reset, before the "
                                f"checkpoint was loaded (a restarted {self.who}); the "
                                "pipeline replays from it")
        if self._expected is None:
            raise PipelineReset(f"{self.who}: batch {seq} follows a failed batch; the "
                                "pipeline replays from the checkpoint")
        if seq != self._expected:
            raise PipelineReset(f"{self.who} expected batch {self._expected}, got {seq}: a "
                                "pipeline actor restarted")

    def passed(self) -> None:
        self._expected += 1

    def failed(self) -> None:
        """Refuse every batch until the next :meth:`open`."""
        self._expected = None
