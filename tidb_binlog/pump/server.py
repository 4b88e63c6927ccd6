"""The ``binlog.Pump`` gRPC service (TiDB's pump.proto) over a :class:`PumpNode`.

``WriteBinlog(WriteBinlogReq{clusterID, payload}) -> WriteBinlogResp{errmsg}``
    The node's rules, in order: cluster id ("cluster ID are mismatch, <got> vs
    <expected>"), payload decoding ("malformed binlog payload ..."), the empty probe
    (start_ts == commit_ts == 0: acknowledged, not stored), Prewrite only while
    online ("no online: <state>"), then the storage (durable on return; "no
    available space ..." below the disk guard). Any refusal is an ``errmsg``
    (never a gRPC error), stores nothing, and counts
    ``binlog_pump_loss_binlog_count``. A payload above ``max_message_size_bytes``
    is refused by gRPC itself with ``RESOURCE_EXHAUSTED`` before it reaches us.

``PullBinlogs(PullBinlogReq{clusterID, startFrom.offset = last commit_ts})``
    Streams ``PullBinlogResp{entity{pos.offset = commit_ts, payload, meta{startTs,
    commitTs}}}`` for every commit above ``offset`` in commit_ts order, each Commit
    carrying its prewrite's value, and then waits for new commits on the storage's
    condition (``wait_for_commit``; no busy polling). Each stream reads its next
    batch on a prefetch thread while the current one is sent (one Entity per
    message, as TiDB's wire format has it), so storage reads and sends overlap; a
    batch is read only after the previous one, so order and exactly-once hold
    across batches. The stream ends when the
    client cancels or the server stops. A start below the storage's gc_ts aborts
    with ``OUT_OF_RANGE`` and the purge message (TiDB silently clamps; we refuse so
    a drainer never skips binlogs unknowingly); a wrong cluster id aborts with
    ``FAILED_PRECONDITION``.

Transport: a thread-pool ``grpc.server`` on ``addr`` (TLS when ``[security]``
names a certificate and key; with ``ssl-ca`` clients must present a certificate
signed by it), optionally also on a unix socket (insecure, local only), with
``max_message_size_bytes`` as both the receive and send limit.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from tidb_binlog import binlog as bl
from tidb_binlog.errors import BinlogError, ConfigError, PurgedError
from tidb_binlog.proto import cistern_pb2, cistern_pb2_grpc, pump_pb2, pump_pb2_grpc

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
]

log = logging.getLogger(__name__)

# gRPC's message limits are C ints: 2 GiB - 1 is the largest value it accepts.
MAX_GRPC_MESSAGE_BYTES = (1 << 31) - 1
SLOW_RPC_S = 1.0
PORT_PAIR_ATTEMPTS = 20  # gRPC port 0 re-picks when the picked port + 1 is taken


class PumpServicer(pump_pb2_grpc.PumpServicer):
    """Translates RPCs to :class:`~tidb_binlog.pump.node.PumpNode` calls and back."""

    def __init__(self, node, *, stopping: threading.Event | None = None,
                 pull_wait_s: float = 0.5, pull_batch_bytes: int = 4 << 20,
                 prefetch_threads: int = 16):
        self.node = node
        self.metrics = node.metrics
        self.stopping = stopping or threading.Event()
        self.pull_wait_s = pull_wait_s
        self.pull_batch_bytes = pull_batch_bytes
        # Batch reads run here, one ahead of each stream (see _pull).
        self._prefetch = futures.ThreadPoolExecutor(max_workers=prefetch_threads,
                                                    thread_name_prefix="pump-pull")
        self._write_ok = self.metrics.rpc_duration_s.labels("WriteBinlog", "succ")
        self._write_fail = self.metrics.rpc_duration_s.labels("WriteBinlog", "fail")

    def WriteBinlog(self, request, context):
        start_s = time.perf_counter()
        try:
            self.node.write_binlog(request.clusterID, request.payload)
        except BinlogError as exc:
            return self._failed(start_s, str(exc))
        except Exception as exc:   # a bug or foreign error: still an answer, and logged
            log.exception("WriteBinlog failed unexpectedly")
            return self._failed(start_s, f"internal error: {type(exc).__name__}: {exc}")
        elapsed_s = time.perf_counter() - start_s
        self._write_ok.observe(elapsed_s)
        if elapsed_s > SLOW_RPC_S:
            log.warning("WriteBinlog took %.3f s", elapsed_s)
        return pump_pb2.WriteBinlogResp()

    def close(self) -> None:
        """Release the prefetch threads (after the server stopped)."""
        self._prefetch.shutdown(wait=False, cancel_futures=True)

    def _failed(self, start_s: float, errmsg: str):
        self.metrics.loss_binlog_count.inc()
        self._write_fail.observe(time.perf_counter() - start_s)
        log.warning("WriteBinlog refused: %s", errmsg)
        return pump_pb2.WriteBinlogResp(errmsg=errmsg)

    def PullBinlogs(self, request, context):
        start_s = time.perf_counter()
        label = "succ"
        try:
            yield from self._pull(request, context)
        except Exception:
            label = "fail"
            raise
        finally:
            self.metrics.rpc_duration_s.labels("PullBinlogs", label).observe(
                time.perf_counter() - start_s)

    def _pull(self, request, context):
        if request.clusterID != self.node.cluster_id:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"cluster ID are mismatch, {request.clusterID} vs {self.node.cluster_id}")
        last = request.startFrom.offset
        log.info("PullBinlogs from %s starting after commit_ts %d", context.peer(), last)
        pull, size, wait_s = self.node.pull, self.pull_batch_bytes, self.pull_wait_s
        # While one batch is streamed, the next one is read on a prefetch thread.
        ahead = self._prefetch.submit(pull, last, size, wait_s)
        try:
            while not self.stopping.is_set() and context.is_active():
                try:
                    batch, _ = ahead.result()
                except PurgedError as exc:
                    log.error("drainer %s requested a purged binlog ts: %s", context.peer(), exc)
                    context.abort(grpc.StatusCode.OUT_OF_RANGE, str(exc))
                if batch:
                    last = batch[-1][0]
                ahead = self._prefetch.submit(pull, last, size, wait_s)
                for commit_ts, payload in batch:
                    yield pump_pb2.PullBinlogResp(entity=pump_pb2.Entity(
                        pos=pump_pb2.Pos(offset=commit_ts), payload=payload,
                        meta=pump_pb2.Meta(startTs=bl.Binlog.FromString(payload).start_ts,
                                           commitTs=commit_ts)))
        finally:
            ahead.cancel()  # a read already running ends within pull_wait_s, unused


# -- credentials -----------------------------------------------------------------------
def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read [security] {what} {path!r}: {exc}", key=what,
                          path=path) from exc


def _tls_parts(security) -> tuple[bytes | None, bytes | None, bytes | None]:
    ca = getattr(security, "ssl_ca", "") or ""
    cert = getattr(security, "ssl_cert", "") or ""
    key = getattr(security, "ssl_key", "") or ""
    if bool(cert) != bool(key):
        raise ConfigError("[security] ssl-cert and ssl-key must be given together",
                          key="ssl-cert" if not cert else "ssl-key")
    return (_read(ca, "ssl-ca") if ca else None, _read(cert, "ssl-cert") if cert else None,
            _read(key, "ssl-key") if key else None)


def server_credentials(security) -> grpc.ServerCredentials | None:
    """TLS server credentials from ``[security]``, or None when no certificate is set."""
    if security is None:
        return None
    ca, cert, key = _tls_parts(security)
    if cert is None:
        return None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


def channel_credentials(security) -> grpc.ChannelCredentials | None:
    """Client-side TLS credentials from ``[security]`` (CA, and our cert for mutual TLS)."""
    if security is None:
        return None
    ca, cert, key = _tls_parts(security)
    if ca is None and cert is None:
        return None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=cert)


def _message_options(max_message_size_bytes: int) -> list[tuple[str, int]]:
    size = min(max_message_size_bytes, MAX_GRPC_MESSAGE_BYTES)
    return [("grpc.max_receive_message_length", size), ("grpc.max_send_message_length", size)]


def open_channel(addr: str, security=None, max_message_size_bytes: int = MAX_GRPC_MESSAGE_BYTES):
    """A client channel to a pump or drainer, TLS when ``security`` names a CA."""
    creds = channel_credentials(security)
    options = _message_options(max_message_size_bytes)
    if creds is None:
        return grpc.insecure_channel(addr, options=options)
    return grpc.secure_channel(addr, creds, options=options)


def notify_drainer(addr: str, security=None, timeout_s: float = 3.0) -> None:
    """Call ``Cistern.Notify`` on the drainer at ``addr``; raises grpc.RpcError."""
    with open_channel(addr, security) as channel:
        cistern_pb2_grpc.CisternStub(channel).Notify(cistern_pb2.NotifyReq(), timeout=timeout_s)


def make_notifier(security=None, timeout_s: float = 3.0):
    return lambda addr: notify_drainer(addr, security, timeout_s)


# -- server ----------------------------------------------------------------------------
@dataclass
class PumpGrpcServer:
    """A started gRPC server: ``port`` is the bound TCP port (useful with port 0)."""

    server: grpc.Server
    servicer: PumpServicer
    port: int
    addr: str
    socket_path: str = ""

    def stop(self, grace_s: float = 1.0) -> None:
        self.servicer.stopping.set()
        self.server.stop(grace_s).wait()
        self.servicer.close()


def build_server(node, addr: str, *, socket_path: str = "", security=None,
                 max_message_size_bytes: int = MAX_GRPC_MESSAGE_BYTES, max_workers: int = 128,
                 pull_wait_s: float = 0.5) -> PumpGrpcServer:
    """Bind and start the Pump service on ``addr`` (``host:port``; port 0 picks one)."""
    servicer = PumpServicer(node, pull_wait_s=pull_wait_s, prefetch_threads=max_workers)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="pump-grpc"),
                         options=_message_options(max_message_size_bytes))
    pump_pb2_grpc.add_PumpServicer_to_server(servicer, server)
    creds = server_credentials(security)
    try:
        if creds is None:
            port = server.add_insecure_port(addr)
        else:
            port = server.add_secure_port(addr, creds)
    except RuntimeError as exc:
        raise ConfigError(f"cannot listen on addr {addr!r}: {exc}", key="addr") from exc
    if port == 0:
        raise ConfigError(f"cannot listen on addr {addr!r} (in use or not a local address)",
                          key="addr")
    if socket_path:
        Path(socket_path).unlink(missing_ok=True)
        server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    host = addr.rsplit(":", 1)[0]
    bound = f"{host}:{port}"
    log.info("pump gRPC listening on %s%s%s", bound, " (TLS)" if creds else "",
             f" and unix:{socket_path}" if socket_path else "")
    return PumpGrpcServer(server, servicer, port, bound, socket_path)


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
    from tidb_binlog.pump.http_status import StatusServer, derive_status_addr

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
                                       ssl_context=_http_ssl_context(security))
            break
        except OSError as exc:
            grpc_server.stop(0)
            if not repick or exc.errno != errno.EADDRINUSE or attempt == PORT_PAIR_ATTEMPTS:
                raise
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


def _http_ssl_context(security):
    import ssl

    if security is None or not getattr(security, "ssl_cert", ""):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(security.ssl_cert, security.ssl_key)
    if getattr(security, "ssl_ca", ""):
        ctx.load_verify_locations(security.ssl_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


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
    from tidb_binlog.pump.storage import Storage, StorageOptions
    from tidb_binlog.pump.storage_metrics import StorageMetrics

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
    from tidb_binlog.pump.metrics import PumpMetrics
    from tidb_binlog.pump.node import PumpNode, PumpNodeOptions
    from tidb_binlog.tso import TimestampOracle

    Path(cfg.data_dir).mkdir(parents=True, exist_ok=True)
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
