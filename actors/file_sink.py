"""The file sink's Ray actors (``db-type = "file"``): pb keeper and file-sink actor.

They take the schema keeper's and the coordinator's places in the pipeline (see
:mod:`actors.drainer`); the merger drives them with the same calls::

    PumpActor ×N ──pull──▶ MergerActor ──items──▶ PbKeeperActor ──records──▶ FileSinkActor
                                                                              │ append
                                                            [syncer.to] dir: binlog-<16 digits>-<date>

- :class:`PbKeeperActor` is a shell around :class:`~tidb_binlog.drainer.translate.pb_keeper.PbKeeper`
  (same ``reset(schema_version)``, history-job waiting and "refuse until placed" rule
  as the schema keeper): ``translate(items)`` returns ``(commit_ts, pb record bytes |
  None, schema_version)``, honouring ``ignore-schemas`` and ``ignore-txn-commit-ts``;
  ``translate_more(items)`` (what the merger calls) hands a transaction of more than
  ``txn-chunk-rows`` row changes out one ``RecordPart`` per call, which the sink
  spills and appends as one record at the last part.
- :class:`FileSinkActor` is a shell around
  :class:`~tidb_binlog.drainer.sinks.file.sink.BinlogFileSink`, the
  :class:`~tidb_binlog.drainer.pipeline.sink.Sink` of the files (``reset``, ``apply``
  through the pipeline's sequence gate, ``idle``, ``close``, ``status``).

**Failure model.** Both have ``max_restarts=-1``. The sink actor is pinned to
the node it was created on (it owns the directory). A restarted sink actor
refuses every batch until the merger's reset, which reopens the directory,
truncates what was written after the savepoint and replays from it: nothing is
lost and nothing is in the files twice (see :mod:`tidb_binlog.drainer.sinks.file.sink`).
"""

from __future__ import annotations

import dataclasses
import os

from actors.drainer import KeeperShell
from actors.process import setup_actor_logging
from actors.ray_calls import RayCalls
from tidb_binlog.binlogfile import SEGMENT_SIZE_BYTES
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.checkpoint.store import open_checkpoint_store
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.file.sink import BinlogFileSink, FileSink
from tidb_binlog.drainer.translate.pb_keeper import PbKeeper

__all__ = ["PbKeeperActor", "FileSinkActor", "start_sink_actors", "absolute_dirs"]


class PbKeeperActor(KeeperShell):
    """Translates merged binlogs into pb records with the right schema version."""

    keeper_class = PbKeeper


class SinkShell:
    """The Ray face of a :class:`~tidb_binlog.drainer.pipeline.sink.Sink` held in
    ``self.sink``: every call is one call into it (the file and Parquet sink actors)."""

    sink: object

    def reset(self, replay: bool = False) -> Checkpoint:
        return self.sink.reset(replay)

    def start_point(self) -> Checkpoint | None:
        return self.sink.start_point()

    def apply(self, seq: int, translated) -> int:
        return self.sink.apply(seq, translated)

    def idle(self) -> int:
        return self.sink.idle()

    def close(self) -> Checkpoint:
        return self.sink.close()

    def status(self) -> dict:
        return self.sink.status().as_dict()

    def apply_samples(self) -> list:
        return self.sink.apply_samples()

    def pid(self) -> int:
        return os.getpid()


class FileSinkActor(SinkShell):
    """Appends pb records to the binlog files and keeps the savepoint."""

    def __init__(self, settings: TaskSettings, cfg, *, store=None,
                 max_file_size_bytes: int | None = None):
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        to = cfg.syncer.to
        self.sink = BinlogFileSink(FileSink(
            to.dir, store if store is not None else open_checkpoint_store(cfg),
            max_file_size_bytes=max_file_size_bytes or SEGMENT_SIZE_BYTES,
            retention_s=to.retention_time_s, save_interval_s=settings.save_interval_s,
            initial_commit_ts=max(settings.initial_commit_ts, 0)))


def absolute_dirs(cfg):
    """``cfg`` with ``data-dir`` and ``[syncer.to] dir`` made absolute here (the actor
    may run with another working directory)."""
    to = dataclasses.replace(cfg.syncer.to, dir=os.path.abspath(cfg.syncer.to.dir or
                                                                 cfg.data_dir))
    syncer = dataclasses.replace(cfg.syncer, to=to)
    return dataclasses.replace(cfg, data_dir=os.path.abspath(cfg.data_dir), syncer=syncer)


def start_sink_actors(cfg, settings: TaskSettings, *, names: dict, opts: dict,
                      resources: dict[str, float] | None = None, layout=None):
    """``(keeper, sink, [])`` for db-type file (no SQL workers); the sink is pinned here
    (it owns the directory). ``names``: Ray actor names of the ``keeper`` and ``sink``
    (a named task); ``resources`` and ``layout`` are the MySQL sink's (unused)."""
    cfg = absolute_dirs(cfg)
    sink = RayCalls.start_actor(FileSinkActor, settings, cfg, options={
        **opts, "concurrency_groups": {"status": 1}, "scheduling_strategy": RayCalls.pinned(),
        "name": names.get("sink")})
    keeper = RayCalls.start_actor(PbKeeperActor, settings,
                                  options={**opts, "name": names.get("keeper")})
    return keeper, sink, []
