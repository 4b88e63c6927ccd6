"""The MySQL/TiDB sink's Ray actors (``db-type = "mysql"`` or ``"tidb"``): the schema
keeper, the coordinator and the SQL workers, started by :func:`start_sink_actors`.

The sink's shell in the sink table (:mod:`tidb_binlog.drainer.sinks.kinds`), as
:mod:`actors.file_sink` and :mod:`actors.parquet_sink` are for theirs; the actor
classes live in :mod:`actors.drainer` (:class:`~actors.drainer.SchemaKeeperActor`,
:class:`~actors.drainer.CoordinatorActor`) and :mod:`actors.syncer_workers`.
"""

from __future__ import annotations

from actors.drainer import CoordinatorActor, SchemaKeeperActor
from actors.ray_calls import RayCalls
from actors.syncer_workers import start_sql_workers
from tidb_binlog.drainer.pipeline.settings import TaskSettings

__all__ = ["start_sink_actors"]


def start_sink_actors(cfg, settings: TaskSettings, *, names: dict, opts: dict,
                      resources: dict[str, float] | None = None, layout=None):
    """``(keeper, coordinator, workers)``: ``settings.worker_count`` SQL workers, then the
    coordinator and the schema keeper. ``names``: the Ray actor names of a named task
    (``keeper``, ``sink``, and ``task`` for the workers' ``<task>-worker-<i>``); its
    actors get no handles of each other and look their peers up by name. ``layout``:
    the downstream check's worker-layout decision (a safe-mode window to replay)."""
    worker_overrides = {}
    if layout is not None and layout.safe_mode:  # another count's replay window
        worker_overrides["safe_mode_until_ts"] = layout.safe_mode_until_ts
    task = names.get("task")
    workers = start_sql_workers(settings, name_prefix=task, namespace=opts.get("namespace"),
                                lifetime=opts.get("lifetime"), resources=resources,
                                **worker_overrides)
    try:
        coordinator = RayCalls.start_actor(
            CoordinatorActor, settings, None if task else workers,
            options={**opts, "concurrency_groups": {"status": 1}, "name": names.get("sink"),
                     # its relay log is a local directory: keep it on this node
                     **({"scheduling_strategy": RayCalls.pinned()}
                        if settings.relay_dir else {"resources": resources})})
        keeper = RayCalls.start_actor(SchemaKeeperActor, settings,
                                      options={**opts, "name": names.get("keeper"),
                                               "resources": resources})
    except BaseException:
        for worker in workers:
            RayCalls.kill(worker)
        raise
    return keeper, coordinator, workers
