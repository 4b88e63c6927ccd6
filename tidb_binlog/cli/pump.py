"""``tidb-binlog pump``: run one pump as a plain process (no Ray), as TiDB would use it.

    tidb-binlog pump --config pump.toml [--addr 127.0.0.1:8250] [--data-dir data.pump]

With no registry configured the pump is standalone: the cluster id comes from
``cluster-id`` in pump.toml, timestamps from an embedded oracle persisted in
``<data-dir>/tso``, and it starts ``online``. With ``registry = "<ray
namespace>[/<actor name>]"`` it joins the running Ray cluster and takes the
cluster id, TSO and node records from that registry actor (the process itself
stays outside Ray). It logs where it listens (gRPC and
HTTP status), and on SIGTERM or SIGINT it stops serving, records ``paused`` and
closes the storage, then exits 0. A ``pause`` or ``close`` action through
``PUT /state/{nodeID}/{action}`` also ends the process once the node is
``paused`` / ``offline`` (TiDB's behaviour).

Logging follows pump.toml as TiDB's pump does: ``log-level`` (debug, info, warn,
error, fatal) unless the command's ``-L`` names another than the default info, and
``log-file`` (or ``--log-file``): every line goes to that file (appended, directory
created) instead of stderr. A data dir that cannot be written, or an address or
status port that cannot be bound, is a one-line error naming it, exit code 1.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from tidb_binlog.config import load_pump_config, split_registry
from tidb_binlog.errors import ConfigError
from tidb_binlog.logs import stamp_node

__all__ = ["register", "run", "load_config"]

log = logging.getLogger("tidb_binlog.pump")

# flag -> pump.toml key; flags override the file.
_FLAG_KEYS = {
    "addr": "addr",
    "advertise_addr": "advertise-addr",
    "socket": "socket",
    "data_dir": "data-dir",
    "node_id": "node-id",
    "cluster_id": "cluster-id",
    "heartbeat_interval": "heartbeat-interval",
    "gen_binlog_interval": "gen-binlog-interval",
    "gc": "gc",
    "max_message_size": "max-message-size",
    "registry": "registry",
    "log_file": "log-file",
}
_LEVELS = {"warn": logging.WARNING, "fatal": logging.CRITICAL}
_FORMAT = "[%(asctime)s] [%(levelname)s] [%(name)s] %(message)s"  # as cli/main.py


def register(sub) -> None:
    p = sub.add_parser("pump", help="run a pump (binlog store behind TiDB's gRPC Pump API)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--config", "-config", help="pump.toml")
    p.add_argument("--addr", help="gRPC listen address host:port (default 127.0.0.1:8250)")
    p.add_argument("--advertise-addr", help="address registered for clients (default addr)")
    p.add_argument("--status-addr", help="HTTP status address host:port (default: the gRPC "
                   "port + 1 on the same host)")
    p.add_argument("--socket", help="also serve gRPC on this unix socket")
    p.add_argument("--data-dir", help="data directory (default data.pump)")
    p.add_argument("--node-id", help="node id (default: data-dir/.node, else hostname:port)")
    p.add_argument("--cluster-id", type=int, help="cluster id (standalone mode)")
    p.add_argument("--heartbeat-interval", type=float, help="seconds between heartbeats")
    p.add_argument("--gen-binlog-interval", "--fake-binlog-interval", dest="gen_binlog_interval",
                   type=float, help="seconds of idleness before a fake binlog (fractions ok)")
    p.add_argument("--gc", help="keep binlogs this long: days (7) or a duration (8h)")
    p.add_argument("--max-message-size", type=int, help="gRPC message size limit in bytes")
    p.add_argument("--log-file", help="log to this file instead of stderr (pump.toml "
                   "log-file)")
    p.add_argument("--registry", help='registry actor "<ray namespace>[/<actor name>]" '
                   '(default: none, standalone)')
    p.set_defaults(func=run)


def load_config(args):
    """The frozen PumpConfig from ``--config`` with the given flags applied."""
    overrides = {key: getattr(args, flag) for flag, key in _FLAG_KEYS.items()
                 if getattr(args, flag, None) is not None}
    return load_pump_config(args.config, overrides)


def _registry(cfg):
    """None (standalone) unless ``registry = "<ray namespace>[/<actor name>]"`` is set:
    then join the running Ray cluster (``address="auto"``) and use its registry actor."""
    where = split_registry(cfg.registry)
    if where is None:
        return None
    # cluster/ imports ray: not at module level, the pure core (tidb_binlog/) must
    # import without ray (tests/unit/test_pure_core.py), a standalone pump runs without
    from cluster.registry import join_registry

    namespace, name = where
    return join_registry(namespace=namespace, name=name)


def setup_logging(cfg, cli_level: str | None = None) -> None:
    """Apply pump.toml's ``log-level`` and ``log-file`` to the root logger (see the
    module docstring); a log file that cannot be opened is a ConfigError naming it."""
    name = cli_level if cli_level and cli_level != "info" else cfg.log_level
    level = _LEVELS.get(name.lower(), getattr(logging, name.upper(), logging.INFO))
    root = logging.getLogger()
    root.setLevel(level)
    if not cfg.log_file:
        return
    path = Path(cfg.log_file)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"log-file {str(path)!r} cannot be opened: {exc.strerror or exc}; "
                          "fix its directory's permissions or choose another log-file",
                          key="log-file") from exc
    formatter = next((h.formatter for h in root.handlers if h.formatter), None)
    handler.setFormatter(formatter or logging.Formatter(_FORMAT))  # text or json, as chosen
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)


def run(args) -> int:
    # start-up time: the pump server (grpc, plyvel) adds ~0.2 s to every `tidb-binlog`
    # command, --help included; only `tidb-binlog pump` needs it
    from tidb_binlog.pump.server import open_pump

    cfg = load_config(args)
    setup_logging(cfg, getattr(args, "log_level", None))
    node = {"id": cfg.node_id or ""}  # the chosen id (data-dir/.node, ...) once open
    stamp_node(lambda: node["id"])
    stop = threading.Event()

    def on_signal(signum, frame):
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    # before the pump opens: it is online (and may be told to stop) the moment it serves,
    # and a SIGTERM then must be a clean stop, never Python's default exit
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    proc = open_pump(cfg, registry=_registry(cfg), status_addr=args.status_addr or "")
    node["id"] = proc.node.node_id
    log.info("pump %s serving gRPC on %s, HTTP status on %s%s", proc.node.node_id, proc.addr,
             proc.status_addr, f", unix socket {proc.grpc_server.socket_path}"
             if proc.grpc_server.socket_path else "")
    while not stop.is_set() and not proc.node.done.is_set():
        stop.wait(0.5)
    proc.stop()
    log.info("pump %s stopped (state %s)", proc.node.node_id, proc.node.state)
    return 0
