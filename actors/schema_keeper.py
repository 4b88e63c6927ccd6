"""SchemaKeeperActor: decodes merged binlogs with the right schema version, as a Ray actor.

A shell around :class:`~tidb_binlog.drainer.translate.keeper.RowKeeper` (the schema rebuilt from
the upstream's DDL history, rows decoded, filters; in exactly-once mode the rows routed
over the workers with the flush points planned). Its result refs go straight to the
coordinator (``translate``) or, routed, one object per worker plus the plan
(``translate_routed``, called with ``num_returns = W + 2``: the last is ``more``, whether
it holds a large transaction's next chunks; see ``RowKeeper.translate_routed``).
"""

from __future__ import annotations

from actors.process import setup_actor_logging, tune_gc
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.translate.keeper import RowKeeper
from tidb_binlog.upstream.meta import UpstreamMeta

__all__ = ["SchemaKeeperActor"]


class SchemaKeeperActor:
    """Decodes merged binlogs into :class:`Txn` lists with the right schema version."""

    def __init__(self, settings: TaskSettings, schema_version: int = 0, meta=None):
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        self.keeper = RowKeeper(settings, meta if meta is not None
                                else UpstreamMeta(settings.upstream_meta), schema_version)
        tune_gc()

    def reset(self, schema_version: int) -> int:
        return self.keeper.reset(schema_version)

    def translate(self, items) -> list:
        return self.keeper.translate(items)

    def translate_routed(self, items, worker_count: int) -> tuple:
        return self.keeper.translate_routed(items, worker_count)

    def schema_version(self) -> int:
        return self.keeper.schema_version()
