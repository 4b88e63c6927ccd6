"""Recovery mode before a task starts: apply the relay log when the upstream is gone
(TiDB's ``feedByRelayLogIfNeed``)."""

from __future__ import annotations

from cluster.ray_join import join_cluster
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay.recover import recover_if_needed
from tidb_binlog.errors import UnavailableError

__all__ = ["recover_from_relay_log"]


def recover_from_relay_log(cfg, *, ray_address: str | None = None):
    """Recovery mode, before a task starts (TiDB's ``feedByRelayLogIfNeed``): the
    :class:`~tidb_binlog.drainer.relay.recover.RecoverySummary` when it ran (then do not
    start the task: the upstream is gone), else None.

    It runs when drainer.toml has ``[syncer.relay] log-dir``, the downstream checkpoint
    is not consistent, and joining Ray (``ray_address``, as :func:`join_cluster`) or
    asking the registry for its pumps fails: the relay log is applied in safe mode and
    the checkpoint saved consistent at the last relayed commit_ts.
    ``tidb-binlog drainer`` calls it first; call it before :meth:`Drainer.start`."""
    settings = TaskSettings.from_config(cfg, upstream_meta={})

    def upstream_error() -> str | None:
        try:
            registry, _ = join_cluster(cfg, ray_address=ray_address)
            registry.nodes("pumps")
        except UnavailableError as exc:
            return exc.message
        return None

    return recover_if_needed(settings, upstream_error)
