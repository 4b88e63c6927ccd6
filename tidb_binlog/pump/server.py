"""The pump process: storage + node + gRPC server + HTTP status server.

:func:`open_pump` assembles and starts a pump from a ``PumpConfig``; the standalone
``tidb-binlog pump`` command and ``actors.pump.PumpActor`` both call it.
:func:`serve_pump` listens first (gRPC on its own asyncio loop thread,
:mod:`.grpc_server`; then HTTP, :mod:`.http_status`) and only then starts the node
(registry record, Notify round, duties), so a pump is reachable before any drainer
hears of it. With port 0 and no status address, a picked gRPC port whose port + 1
(the HTTP default) is taken is re-picked, up to ``PORT_PAIR_ATTEMPTS`` times.

TLS, channels and Notify live in :mod:`.transport`; their names are re-exported
here for callers that import them from this module.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
from dataclasses import dataclass
from pathlib import Path

from tidb_binlog.errors import ConfigError
from tidb_binlog.pump.grpc_server import PumpGrpcServer, PumpServicer, build_server
from tidb_binlog.pump.http_status import StatusServer, derive_status_addr
from tidb_binlog.pump.metrics import PumpMetrics
from tidb_binlog.pump.node import PumpNode, PumpNodeOptions
from tidb_binlog.pump.storage import Storage, StorageMetrics, StorageOptions
from tidb_binlog.pump.transport import (
    MAX_GRPC_MESSAGE_BYTES,
    channel_credentials,
    http_ssl_context,
    make_notifier,
    notify_drainer,
    open_channel,
    server_credentials,
)
from tidb_binlog.security import server_allowed_cn
from tidb_binlog.tso import TimestampOracle

__all__ = [
    "MAX_GRPC_MESSAGE_BYTES",
    "PumpServicer",
    "PumpGrpcServer",
    "build_server",
    "server_credentials",
    "channel_credentials",
    "open_channel",
    "notify_drainer",
    "make_notifier",
    "PumpProcess",
    "serve_pump",
    "open_storage",
    "open_pump",
    "check_data_dir",
]

_http_ssl_context = http_ssl_context  # the name actors/drainer_node.py imports

log = logging.getLogger(__name__)

PORT_PAIR_ATTEMPTS = 20  # gRPC port 0 re-picks when the picked port + 1 is taken


# -- the whole pump process: storage + node + gRPC + HTTP ---------------------------------
@dataclass
class PumpProcess:
    """A running pump: its node, gRPC server and HTTP status server."""

    node: object
    grpc_server: PumpGrpcServer
    http_server: object | None

    @property
    def addr(self) -> str:
        return self.grpc_server.addr

    @property
    def status_addr(self) -> str:
        return self.http_server.addr if self.http_server is not None else ""

    def stop(self) -> None:
        """Stop serving, then stop the node (paused, storage closed)."""
        if self.http_server is not None:
            self.http_server.stop()
        self.grpc_server.stop()
        self.node.stop()


def serve_pump(node, addr: str, *, status_addr: str = "", socket_path: str = "",
               security=None, max_message_size_bytes: int = MAX_GRPC_MESSAGE_BYTES,
               http: bool = True, max_workers: int = 128) -> PumpProcess:
    """Listen (gRPC, then HTTP), then start the node so it goes online only once reachable.

    The node's advertised address must already be right; with port 0 in ``addr`` the
    caller builds the node after binding (see ``tidb_binlog.cli.pump``).
    """
    # With port 0 and no status_addr, HTTP goes on the picked port + 1, which nobody
    # checked was free: when it is taken, pick another gRPC port (another pair).
    repick = http and not status_addr and addr.rsplit(":", 1)[-1] == "0"
    for attempt in range(1, PORT_PAIR_ATTEMPTS + 1):
        grpc_server = build_server(node, addr, socket_path=socket_path, security=security,
                                   max_message_size_bytes=max_message_size_bytes,
                                   max_workers=max_workers)
        http_server = None
        if not http:
            break
        try:
            http_server = StatusServer(node, derive_status_addr(grpc_server.addr, status_addr),
                                       ssl_context=http_ssl_context(security),
                                       allowed_cn=server_allowed_cn(security))
            break
        except OSError as exc:
            grpc_server.stop(0)
            if not repick or exc.errno != errno.EADDRINUSE or attempt == PORT_PAIR_ATTEMPTS:
                raise _http_listen_error(derive_status_addr(grpc_server.addr, status_addr),
                                         status_addr, exc) from exc
            log.info("pump HTTP port %s+1 is taken; picking another gRPC port",
                     grpc_server.addr)
    if node.options.advertise_addr.rsplit(":", 1)[-1] == "0":
        node.options = dataclasses.replace(node.options, advertise_addr=grpc_server.addr)
    try:
        if http_server is not None:
            http_server.start()
        node.start()
    except BaseException:
        if http_server is not None:
            http_server.stop()
        grpc_server.stop(0)
        raise
    return PumpProcess(node, grpc_server, http_server)


def _http_listen_error(addr: str, status_addr: str, exc: OSError) -> ConfigError:
    """The HTTP status port cannot be bound: say which, why, and what to change."""
    where = ("status-addr" if status_addr else
             "the status port (the gRPC port + 1 by default; set --status-addr)")
    reason = "it is in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return ConfigError(f"cannot listen for the HTTP status API on {addr}: {reason}; stop the "
                       f"process holding it or choose another port for {where}",
                       key="status-addr")


def check_data_dir(data_dir: str) -> None:
    """Create ``data_dir`` and prove it writable (a probe file), or raise ConfigError
    naming it: a pump that cannot write its data dir must not start (it would fail
    deep inside the storage with a raw OS error instead)."""
    path = Path(data_dir)
    probe = path / ".write-probe"
    try:
        path.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"data-dir {str(path)!r} is not writable: {exc.strerror or exc}; "
                          "fix its permissions or choose another data-dir (data-dir in "
                          "pump.toml or --data-dir)", key="data-dir") from exc


def _by_name(cls, *sources):
    """``cls(**fields)`` taking each field from the first source that has that name;
    nested dataclass fields are built the same way from the sources' same-named parts."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        for src in sources:
            if src is None or not hasattr(src, f.name):
                continue
            value = getattr(src, f.name)
            default = cls.__dataclass_fields__[f.name]
            nested = default.default_factory if default.default_factory is not \
                dataclasses.MISSING else None
            if nested is not None and dataclasses.is_dataclass(nested) and \
                    not isinstance(value, nested):
                value = _by_name(nested, value)
            kwargs[f.name] = value
            break
    return cls(**kwargs)


def open_storage(cfg, *, resolver=None, current_ts=None, registry=None):
    """The durable ``tidb_binlog.pump.storage.Storage`` for ``cfg.data_dir``.

    ``StorageOptions`` fields are taken by name from ``cfg.storage``, then ``cfg``
    (``max_txn_timeout_s``); ``[storage.kv]`` fills the LevelDB options it shares.
    With a Prometheus ``registry`` (the pump's ``PumpMetrics.registry``) the storage
    metrics join it, minus the three gauges the pump refreshes itself at scrape time.
    """
    options = _by_name(StorageOptions, getattr(cfg, "storage", None), cfg)
    metrics = StorageMetrics(registry, gauges=False) if registry is not None else None
    return Storage(cfg.data_dir, options, resolver=resolver, current_ts=current_ts,
                   metrics=metrics)


def open_pump(cfg, *, registry=None, resolver=None, storage=None, status_addr: str = "",
              max_workers: int = 128) -> PumpProcess:
    """Assemble and start a pump from a ``PumpConfig``: storage, node, gRPC and HTTP.

    Without a registry the node is standalone (``cfg.cluster_id``, embedded TSO in
    ``<data_dir>/tso``). ``storage`` overrides the durable storage (tests).
    """
    check_data_dir(cfg.data_dir)
    options = PumpNodeOptions.from_config(cfg)
    tso = registry.get_ts if registry is not None else \
        TimestampOracle(Path(cfg.data_dir) / "tso").get_ts
    metrics = PumpMetrics()
    if storage is None:
        storage = open_storage(cfg, resolver=resolver, current_ts=tso, registry=metrics.registry)
    security = getattr(cfg, "security", None)
    node = PumpNode(options, storage, registry=registry, tso=tso,
                    notifier=make_notifier(security), metrics=metrics)
    try:
        status_addr = status_addr or getattr(cfg, "status_addr", "") or ""
        return serve_pump(node, cfg.addr, status_addr=status_addr,
                          socket_path=getattr(cfg, "socket", "") or "", security=security,
                          max_message_size_bytes=getattr(cfg, "max_message_size_bytes",
                                                         MAX_GRPC_MESSAGE_BYTES),
                          max_workers=max_workers)
    except BaseException:
        storage.close()
        raise
