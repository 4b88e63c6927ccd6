"""``tidb-binlog drainer``: run one replication task on Ray, as TiDB's drainer process.

    tidb-binlog drainer --config drainer.toml [--addr 127.0.0.1:8249] [--node-id ID]

It first checks the downstream (connect, create and read the checkpoint table):
a refusal (access denied, a missing privilege) exits 1 at once saying what to
check; a downstream that does not answer is retried every second for 30 s, then
it exits 1. Then it joins Ray as ``ray.init()`` would (``--ray-address``, else
``$RAY_ADDRESS``, else the cluster ``ray start`` recorded on this host, else it
starts a local Ray; ``--ray-address auto`` joins any Ray running here) and logs
which cluster and why; an address where nothing answers, or a cluster asking for
an auth token, exits 1 saying what to set. It finds the
registry actor named by drainer.toml's ``registry`` (``"<ray namespace>[/<actor
name>]"``, default namespace ``tidb-binlog``), and starts the task: it follows
the registry's pumps, serves Cistern gRPC on ``addr`` and HTTP status on the
port + 1 (``--status-addr``), and keeps its registry record ``online`` with the
saved checkpoint. It logs where it listens and runs until SIGTERM or SIGINT,
then stops gracefully: final consistent checkpoint, state ``paused``, exit 0.
``PUT /state/{nodeID}/pause|close`` also ends it (``paused`` / ``offline``).
When the task fails (a downstream refusing a statement, an unsupported DDL),
it records ``paused`` and exits 1 with the error.

With a relay log (``[syncer.relay] log-dir``) it first reads the checkpoint: when
it is not consistent (the last run was killed) and the registry and its pumps
cannot be reached, it applies the relay log to the downstream in safe mode,
marks the checkpoint consistent at the last relayed commit_ts, logs what it did
and exits 0 without starting the task (recovery mode).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from tidb_binlog.errors import UnavailableError

__all__ = ["register", "run", "load_config"]

log = logging.getLogger("tidb_binlog.drainer")

# flag -> drainer.toml key; flags override the file.
_FLAG_KEYS = {
    "addr": "addr",
    "advertise_addr": "advertise-addr",
    "data_dir": "data-dir",
    "node_id": "node-id",
    "registry": "registry",
    "initial_commit_ts": "initial-commit-ts",
    "detect_interval": "detect-interval",
    "worker_count": "syncer.worker-count",
    "txn_batch": "syncer.txn-batch",
    "safe_mode": "syncer.safe-mode",
    "txn_atomic": "syncer.txn-atomic",
    "loopback_control": "syncer.loopback-control",
    "channel_id": "syncer.channel-id",
    "sync_ddl": "syncer.sync-ddl",
    "relay_log_dir": "syncer.relay.log-dir",
    "relay_max_file_size": "syncer.relay.max-file-size",
}


def register(sub) -> None:
    p = sub.add_parser("drainer", help="run a drainer (replicate the pumps' binlogs downstream)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--config", "-config",
                   help="drainer.toml; [syncer] db-type picks the sink: mysql, tidb, file (pb "
                        "binlog files) or parquet (a change-log lake); examples: "
                        "config/drainer.toml, drainer-file.toml, drainer-parquet.toml; "
                        "which tables replicate, events ignored and names routed: [syncer] "
                        "replicate-do-db, [[syncer.replicate-do-table]], "
                        "[[syncer.ignore-table]], ignore-schemas, "
                        "[syncer.binlog-filter-rule.<name>], [[syncer.table-migrate-rule]] "
                        "(commented examples in config/drainer.toml)")
    p.add_argument("--addr", help="Cistern gRPC listen address host:port (default "
                   "127.0.0.1:8249)")
    p.add_argument("--advertise-addr", help="address registered for pumps (default addr)")
    p.add_argument("--status-addr", help="HTTP status address host:port (default: the gRPC "
                   "port + 1 on the same host)")
    p.add_argument("--data-dir", help="data directory (default data.drainer)")
    p.add_argument("--node-id", help="node id (default hostname:port)")
    p.add_argument("--registry", help='registry actor "<ray namespace>[/<actor name>]"')
    p.add_argument("--ray-address", help="Ray cluster to join, host:port of its GCS, or "
                   "'auto' for any Ray running on this host (default $RAY_ADDRESS, else the "
                   "cluster `ray start` recorded here, else a new local Ray)")
    p.add_argument("--initial-commit-ts", type=int,
                   help="start ts when no checkpoint exists (-1 = now)")
    p.add_argument("--detect-interval", type=float, help="seconds between pump discovery rounds")
    p.add_argument("-c", "--worker-count", dest="worker_count", type=int,
                   help="SQL workers (syncer.worker-count; default: this machine's CPUs, "
                        "1 to 16)")
    p.add_argument("--txn-batch", type=int, help="DMLs per downstream transaction")
    p.add_argument("--safe-mode", action="store_const", const=True, default=None,
                   help="REPLACE / DELETE+REPLACE instead of INSERT / UPDATE")
    p.add_argument("--txn-atomic", action="store_const", const=True, default=None,
                   help="apply each upstream transaction as one downstream transaction, so "
                   "the downstream is always at a transaction-consistent state (syncer."
                   "txn-atomic; default off: a transaction's rows are spread over the "
                   "workers, which is faster; cost: bench/drainer.py --txn-atomic)")
    p.add_argument("--loopback-control", action="store_const", const=True, default=None,
                   help="bidirectional replication (syncer.loopback-control): every "
                   "downstream transaction also updates this channel's row of "
                   "retl._drainer_repl_mark, and transactions that carry the channel's mark "
                   "(written by the other direction's drainer) are not replicated back")
    p.add_argument("--channel-id", type=int, metavar="N",
                   help="the loop-control channel (syncer.channel-id, default 0): give both "
                   "drainers of one bidirectional pair the same N")
    p.add_argument("--no-sync-ddl", dest="sync_ddl", action="store_const", const=False,
                   default=None, help="do not apply DDL downstream (syncer.sync-ddl = "
                   "false); set on the direction towards the side where DDL is run, so a "
                   "DDL does not come back")
    p.add_argument("--relay-log-dir", metavar="DIR",
                   help="relay log directory ([syncer.relay] log-dir; default off): every "
                   "transaction is written there before it is applied; when the checkpoint "
                   "is not consistent and the registry/pumps cannot be reached, the drainer "
                   "applies it to the downstream, marks the checkpoint consistent and exits 0")
    p.add_argument("--relay-max-file-size", type=int, metavar="BYTES",
                   help="size of one relay log file ([syncer.relay] max-file-size, "
                   "default 10485760)")
    p.set_defaults(func=run)


def load_config(args):
    """The frozen DrainerConfig from ``--config`` with the given flags applied."""
    # lazy: `tidb-binlog --help` and the other commands never load the drainer's modules
    from tidb_binlog.config import load_drainer_config

    overrides = {key: getattr(args, flag) for flag, key in _FLAG_KEYS.items()
                 if getattr(args, flag, None) is not None}
    return load_drainer_config(args.config, overrides)


def run(args) -> int:
    # lazy: cluster.drainer imports ray (seconds); only this command pays for it
    from cluster.drainer import Drainer, check_downstream, join_cluster
    from tidb_binlog.drainer.pipeline.settings import TaskSettings  # lazy: pymysql, as above

    cfg = load_config(args)
    Path(cfg.data_dir).mkdir(parents=True, exist_ok=True)
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    if settings.kind.needs_downstream:  # before Ray: a bad downstream ends it
        check_downstream(settings)
        if settings.relay_dir and _recovered_from_relay_log(cfg, args.ray_address):
            return 0
    registry, namespace = join_cluster(cfg, ray_address=args.ray_address)
    stop = threading.Event()

    def on_signal(signum, frame):
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    drainer = Drainer.start(cfg, registry=registry, namespace=namespace, addr=cfg.addr,
                            status_addr=args.status_addr or "")
    log.info("drainer %s serving Cistern gRPC on %s, HTTP status on %s", drainer.node_id,
             drainer.addr, drainer.status_addr)
    state = drainer.task_state()
    while not stop.is_set() and state["state"] not in ("failed", "stopped"):
        stop.wait(0.5)
        state = drainer.task_state()
    result = drainer.stop()
    if state["state"] == "failed" or "error" in result:
        raise UnavailableError(f"replication task failed: {result.get('error', state['error'])}"
                               f"; drainer {drainer.node_id} recorded paused, fix the cause "
                               "and start it again (it resumes from its checkpoint)")
    record = registry.node("drainers", drainer.node_id)
    log.info("drainer %s stopped: checkpoint %s (consistent: %s), state %s", drainer.node_id,
             result.get("commit_ts"), result.get("consistent"),
             record.state if record is not None else "unknown")
    return 0


def _recovered_from_relay_log(cfg, ray_address: str | None) -> bool:
    """Recovery mode (see the module doc): whether it ran (then the drainer exits)."""
    # lazy: cluster.drainer imports ray (seconds); only this command pays for it
    from cluster.drainer import recover_from_relay_log

    summary = recover_from_relay_log(cfg, ray_address=ray_address)
    if summary is None:
        return False
    log.info("%s. Exiting: start the drainer again once the registry and the pumps are "
             "back; it resumes from checkpoint %d", summary.describe(), summary.to_ts)
    return True
