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

**Epochs** (:class:`EpochFence`): the sink's own calls to its SQL workers need the same
rule one level down. Ray restarts a killed worker (``max_restarts``) and hands the new
process every call submitted once the old one was known dead, with no error to the
caller; the calls in flight at the crash fail instead. So after a crash a worker may
run a call whose predecessors never ran (the chunks a large transaction held open, a
batch of an earlier commit_ts): committing it would move its progress row past rows
that are not downstream, and the replay would skip them. Each reset of the sink starts
a new *epoch* (a fresh random number) and tells every worker (``begin``); every call
carries the epoch it was sent in, and a worker runs a call only of the epoch it was
last told: a restarted worker knows none, so it refuses everything until the next
reset, and a call from before a reset is refused by its epoch.
"""

from __future__ import annotations

import secrets

from tidb_binlog.errors import BinlogError, InvalidArgument

__all__ = ["EpochFence", "PipelineReset", "SequenceGate", "new_epoch"]


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


def new_epoch() -> int:
    """A fresh pipeline epoch: random, so one never repeats an earlier one, also one of a
    sink that ran before a restart of its own."""
    return secrets.randbits(63) or 1


class EpochFence:
    """A SQL worker's side of the epochs (module doc): ``open(epoch)`` when the sink's
    reset starts one; ``check(epoch)`` before running a call sent in ``epoch``. ``who``
    names the worker in the errors."""

    def __init__(self, who: str):
        self.who = who
        self.epoch: int | None = None  # None: no reset seen by this process yet

    def open(self, epoch: int) -> None:
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch <= 0:
            raise InvalidArgument(f"{self.who}: a pipeline epoch is a positive int, not {epoch!r}")
        self.epoch = epoch

    def check(self, epoch: int) -> None:
        if self.epoch is None:
            raise PipelineReset(
                f"{self.who}: a call of pipeline epoch {epoch} arrived before this process "
                "was told of a reset: it restarted, and what it held (open chunks of a large "
                "transaction, calls lost in the crash) is gone; refused, the pipeline "
                "replays from the checkpoint")
        if epoch != self.epoch:
            raise PipelineReset(
                f"{self.who}: a call of pipeline epoch {epoch} arrived in epoch "
                f"{self.epoch}: it was sent before the pipeline's last reset; refused (the "
                "replay sends its parts again)")
