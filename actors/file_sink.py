"""The file sink's Ray actors (``db-type = "file"``): pb keeper and file-sink actor.

They take the schema keeper's and the coordinator's places in the pipeline of
:mod:`actors.drainer`; the merger drives them with the same calls::

    PumpActor ×N ──pull──▶ MergerActor ──items──▶ PbKeeperActor ──records──▶ FileSinkActor
                                                                              │ append
                                                            [syncer.to] dir: binlog-<16 digits>-<date>

- :class:`PbKeeperActor` is a :class:`~actors.schema_keeper.SchemaKeeperActor` (same
  ``reset(schema_version)``, same history-job waiting, same "refuse until
  placed" rule after a restart) whose ``translate(items)`` returns
  ``(commit_ts, pb record bytes | None, schema_version)``
  (:class:`~tidb_binlog.drainer.pb_translate.PbTranslator`), honouring
  ``ignore-schemas`` and ``ignore-txn-commit-ts``.
- :class:`FileSinkActor` owns a :class:`~tidb_binlog.drainer.pb_sink.FileSink`:
  ``reset() -> Checkpoint``, ``apply(seq, translated) -> commit_ts`` (refusing a
  batch out of sequence, or any batch after a failed one, with
  :class:`~actors.ray_calls.PipelineReset`, as the coordinator does),
  ``idle()``, ``close()``, ``status()`` (the coordinator's keys, read by the
  merger and ``Drainer.status``, plus the sink's).

**Failure model.** Both have ``max_restarts=-1``. The sink actor is pinned to
the node it was created on (it owns the directory). A restarted sink actor
refuses every batch until the merger's reset, which reopens the directory,
truncates what was written after the savepoint and replays from it: nothing is
lost and nothing is in the files twice (see :mod:`tidb_binlog.drainer.pb_sink`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

from actors.ray_calls import PipelineReset, RayCalls
from actors.schema_keeper import SchemaKeeperActor
from tidb_binlog import binlog as bl
from tidb_binlog.drainer.checkpoint import Checkpoint
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.packed import unpack

__all__ = ["PbKeeperActor", "FileSinkActor", "start_file_sink_actors", "absolute_dirs"]

log = logging.getLogger(__name__)


class PbKeeperActor(SchemaKeeperActor):
    """Translates merged binlogs into pb records with the right schema version."""

    _pb = None

    def translate(self, items) -> list[tuple[int, bytes | None, int]]:
        """``(commit_ts, payload)`` in commit order (possibly packed,
        :mod:`tidb_binlog.packed`) → ``(commit_ts, record | None,
        schema_version)``. PipelineReset when restarted since the last reset()."""
        if not self._placed:
            raise PipelineReset("the pb keeper restarted: its schema must be rebuilt at the "
                                "checkpoint before it translates")
        pb = self._pb_translator()
        out = []
        for commit_ts, payload in unpack(items):
            if commit_ts in self._ignored_ts:
                log.warning("skipping the transaction at commit_ts %s (ignore-txn-commit-ts)",
                            commit_ts)
                out.append((commit_ts, None, 0))
                continue
            record = pb.translate(bl.decode(payload))
            out.append((commit_ts, record, self.translator.keeper.schema_version))
        return out

    def _pb_translator(self):
        from tidb_binlog.drainer.pb_translate import PbTranslator

        if self._pb is None or self._pb.translator is not self.translator:
            self._pb = PbTranslator(self.translator, ignore_schemas=self.settings.ignore_schemas,
                                    tz=self.settings.tzinfo())
        return self._pb


class FileSinkActor:
    """Appends pb records to the binlog files and keeps the savepoint."""

    def __init__(self, settings: TaskSettings, cfg, *, store=None,
                 max_file_size_bytes: int | None = None):
        from tidb_binlog.binlogfile import SEGMENT_SIZE_BYTES
        from tidb_binlog.drainer.checkpoint_store import open_checkpoint_store
        from tidb_binlog.drainer.pb_sink import FileSink

        self.settings = settings
        to = cfg.syncer.to
        self.sink = FileSink(to.dir, store if store is not None else open_checkpoint_store(cfg),
                             max_file_size_bytes=max_file_size_bytes or SEGMENT_SIZE_BYTES,
                             retention_s=to.retention_time_s,
                             save_interval_s=settings.save_interval_s,
                             initial_commit_ts=max(settings.initial_commit_ts, 0))
        self.last_apply_s = 0.0
        self._expected_seq: int | None = None  # refuse batches until reset()
        self.start_checkpoint: Checkpoint | None = None

    def reset(self) -> Checkpoint:
        """Forget everything in flight; the files end at the durable checkpoint."""
        cp = self.sink.reset()
        self._expected_seq = 0
        self.start_checkpoint = cp
        log.info("file sink %s starts after commit_ts %d", self.sink.directory, cp.commit_ts)
        return cp

    def start_point(self) -> Checkpoint | None:
        return self.start_checkpoint

    def apply(self, seq: int, translated: list[tuple[int, bytes | None, int]]) -> int:
        """Append one merged batch (``seq`` must follow the previous one)."""
        if self._expected_seq is None:
            raise PipelineReset(f"file sink: batch {seq} arrives before a reset or after a "
                                "failed batch; the pipeline replays from the checkpoint")
        if seq != self._expected_seq:
            raise PipelineReset(f"file sink expected batch {self._expected_seq}, got {seq}: a "
                                "pipeline actor restarted")
        try:
            commit_ts = self.sink.apply(translated)
        except BaseException:
            self._expected_seq = None
            raise
        self._expected_seq += 1
        self.last_apply_s = time.time()
        return commit_ts

    def idle(self) -> int:
        if self._expected_seq is None:
            return self.sink.written_ts
        return self.sink.idle()

    def close(self) -> Checkpoint:
        """Sync and save the final (consistent) checkpoint."""
        if self.sink.binlogger is None:  # never reset: nothing written; the saved one stands
            from tidb_binlog.drainer.checkpoint import start_commit_ts

            return start_commit_ts(self.sink.store.load(), self.sink.initial_commit_ts)
        return self.sink.close()

    def status(self) -> dict:
        st = self.sink.status()
        st.update(pending=0, applied_rows=st["records"], flushes=0, outstanding=0,
                  last_apply_s=self.last_apply_s, ddl_jobs=st["ddl_records"])
        return st

    def apply_samples(self) -> list:
        return []

    def pid(self) -> int:
        return os.getpid()


def absolute_dirs(cfg):
    """``cfg`` with ``data-dir`` and ``[syncer.to] dir`` made absolute here (the actor
    may run with another working directory)."""
    to = dataclasses.replace(cfg.syncer.to, dir=os.path.abspath(cfg.syncer.to.dir or
                                                                 cfg.data_dir))
    syncer = dataclasses.replace(cfg.syncer, to=to)
    return dataclasses.replace(cfg, data_dir=os.path.abspath(cfg.data_dir), syncer=syncer)


def start_file_sink_actors(cfg, settings: TaskSettings, **opts):
    """``(keeper, sink)`` actor handles for db-type file; the sink is pinned here."""
    cfg = absolute_dirs(cfg)
    sink = RayCalls.start_actor(FileSinkActor, settings, cfg, options={
        **opts, "concurrency_groups": {"status": 1}, "scheduling_strategy": RayCalls.pinned()})
    keeper = RayCalls.start_actor(PbKeeperActor, settings, options=opts)
    return keeper, sink
