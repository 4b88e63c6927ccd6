"""The SQL workers' downstream connection: a real MySQL/TiDB, or an emulated TiDB.

:func:`open_downstream` is what :class:`~actors.syncer_workers.SqlWorkerActor` connects
through. With ``[syncer.to] emulated-tidb-registry`` (bidirectional replication between
two of our clusters) the downstream is the other cluster's TiDB emulator: its MariaDB is
``[syncer.to]`` host/port/user/password, its binlogs go to that cluster's pumps through
a pump client following its registry actor, with timestamps from that registry's TSO;
:class:`~tidb_binlog.drainer.sinks.mysql.emulated.EmulatedTidbDownstream` puts it behind
the calls the loader makes, so the loader does not know. The registry lookup is a Ray
call, hence this lives with the actors (nothing under ``tidb_binlog/`` imports ray).
"""

from __future__ import annotations

from cluster.registry import connect_registry
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE
from tidb_binlog.drainer.sinks.mysql.downstream import Downstream, DownstreamConfig
from tidb_binlog.drainer.sinks.mysql.emulated import EmulatedTidbDownstream
from tidb_binlog.pump_client import PumpClient
from tidb_binlog.upstream import Upstream
from tidb_binlog.upstream.tso_batch import TsoBatcher

__all__ = ["open_downstream", "emulated_upstream_factory"]


def emulated_upstream_factory(config: DownstreamConfig):
    """``() -> Upstream``: the emulated TiDB of the cluster ``config`` names."""
    namespace, _, name = config.emulated_tidb_registry.partition("/")
    params = {"host": config.host, "port": config.port, "user": config.user,
              "password": config.password}

    def open_upstream() -> Upstream:
        kw = {"name": name} if name else {}
        registry = connect_registry(namespace=namespace or DEFAULT_NAMESPACE, **kw)
        return Upstream(params, PumpClient(registry), TsoBatcher(registry.get_ts).get_ts)

    return open_upstream


def open_downstream(config: DownstreamConfig) -> Downstream | EmulatedTidbDownstream:
    """The downstream connection ``config`` describes (opened lazily by either class)."""
    if not config.emulated_tidb_registry:
        return Downstream(config)
    return EmulatedTidbDownstream(config, emulated_upstream_factory(config))
