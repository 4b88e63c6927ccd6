"""The Parquet sink's Ray actors (``db-type = "parquet"``): keeper and sink actor.

They take the schema keeper's and the coordinator's places in the pipeline, as the
file sink's do (:mod:`actors.file_sink`)::

    PumpActor ×N ──pull──▶ MergerActor ──items──▶ ParquetKeeperActor ──changes──▶ ParquetSinkActor
                                                          <dir>/_manifest.json + <db>/<table>/date=.../*.parquet

- :class:`ParquetKeeperActor`: shell around
  :class:`~tidb_binlog.drainer.sinks.parquet.keeper.ParquetKeeper`.
- :class:`ParquetSinkActor`: shell around
  :class:`~tidb_binlog.drainer.sinks.parquet.sink.ParquetSink`; pinned to the node
  that created it (it owns the directory).

**Failure model.** Both have ``max_restarts=-1``. A restarted sink actor refuses
batches until the merger's reset, which reads the manifest, deletes the files it does
not list and replays after its commit_ts: no change lost, none twice.
"""

from __future__ import annotations

from actors.drainer import KeeperShell
from actors.file_sink import SinkShell, absolute_dirs
from actors.process import setup_actor_logging
from actors.ray_calls import RayCalls
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.sinks.parquet.keeper import ParquetKeeper
from tidb_binlog.drainer.sinks.parquet.sink import ParquetLake, ParquetSink

__all__ = ["ParquetKeeperActor", "ParquetSinkActor", "start_sink_actors"]


class ParquetKeeperActor(KeeperShell):
    """Translates merged binlogs into row changes with their column types."""

    keeper_class = ParquetKeeper


class ParquetSinkActor(SinkShell):
    """Writes the change files and the manifest (the checkpoint)."""

    def __init__(self, settings: TaskSettings, cfg):
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        pq = cfg.syncer.to.parquet
        self.sink = ParquetSink(ParquetLake(
            cfg.syncer.to.dir, flush_rows=pq.flush_rows, flush_bytes=pq.flush_bytes,
            flush_interval_s=pq.flush_interval_s, compression=pq.compression,
            initial_commit_ts=max(settings.initial_commit_ts, 0)))


def start_sink_actors(cfg, settings: TaskSettings, *, names: dict, opts: dict,
                      resources: dict[str, float] | None = None, layout=None):
    """``(keeper, sink, [])`` for db-type parquet (no SQL workers); the sink is pinned
    here (it owns the lake). ``names``: Ray actor names of the ``keeper`` and ``sink``
    (a named task); ``resources`` and ``layout`` are the MySQL sink's (unused)."""
    cfg = absolute_dirs(cfg)
    sink = RayCalls.start_actor(ParquetSinkActor, settings, cfg, options={
        **opts, "concurrency_groups": {"status": 1}, "scheduling_strategy": RayCalls.pinned(),
        "name": names.get("sink")})
    keeper = RayCalls.start_actor(ParquetKeeperActor, settings,
                                  options={**opts, "name": names.get("keeper")})
    return keeper, sink, []
