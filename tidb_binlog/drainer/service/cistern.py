"""The drainer's ``binlog.Cistern`` gRPC service (TiDB's cistern.proto).

``Notify(NotifyReq) -> NotifyResp``
    A pump that comes online for the first time (or after being offline) calls
    it on every online drainer *before* it accepts writes.  The servicer calls
    ``on_notify()`` and answers only when it returned: with
    :func:`collector_notifier` that is once a collector refresh begun after the
    call has added the pump's source to the merge at the current position.  So
    every binlog the pump stores afterwards is merged (the Notify handshake).
    If ``on_notify`` fails or times out the RPC fails with ``UNAVAILABLE`` and
    the message; the pump retries, then refuses to start.

``DumpBinlog`` / ``DumpDDLJobs``
    Stubs in TiDB Binlog too: ``UNIMPLEMENTED`` with a message saying so.

Errors are answered through :func:`tidb_binlog.grpc_errors.abort` (an
``UnavailableError`` is ``UNAVAILABLE``, an ``Unimplemented`` ``UNIMPLEMENTED``).

:func:`serve_cistern` binds the drainer's ``addr`` (``host:port``; port 0
picks one) with TLS when ``security`` names a certificate, like the pump, and with
``cert-allowed-cn`` refuses every call of a TLS peer whose certificate's common name is
not listed (``PERMISSION_DENIED`` naming it; gRPC's Python server cannot check it in the
handshake, so it is checked per call, as on the pump).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc

from tidb_binlog.errors import BinlogError, ConfigError, UnavailableError, Unimplemented
from tidb_binlog.grpc_errors import abort
from tidb_binlog.proto import cistern_pb2, cistern_pb2_grpc
from tidb_binlog.pump.transport import server_credentials
from tidb_binlog.security import refused_peer, server_allowed_cn

__all__ = ["CisternServicer", "CisternServer", "serve_cistern", "collector_notifier"]

log = logging.getLogger(__name__)

_UNIMPLEMENTED = ("{name} is not implemented by this drainer (it is a stub in TiDB Binlog as "
                  "well); read the downstream or the drainer's file sink instead")


class CisternServicer(cistern_pb2_grpc.CisternServicer):
    """Answers ``Notify`` once ``on_notify()`` returned; see the module doc."""

    def __init__(self, on_notify: Callable[[], None], allowed_cn: tuple[str, ...] = ()):
        self.on_notify = on_notify
        self.allowed_cn = tuple(allowed_cn)
        self.notifications = 0

    def _check_peer(self, context) -> None:
        """``[security] cert-allowed-cn``: abort a TLS caller with another common name."""
        why = refused_peer(context.auth_context(), self.allowed_cn)
        if why is not None:
            log.warning("Cistern call from %s refused: %s", context.peer(), why)
            context.abort(grpc.StatusCode.PERMISSION_DENIED, why)

    def Notify(self, request, context):
        self._check_peer(context)
        peer = context.peer()
        log.info("Notify from %s: refreshing the pump list", peer)
        try:
            self.on_notify()
        except BinlogError as exc:
            log.warning("Notify from %s failed: %s", peer, exc)
            abort(context, UnavailableError(f"drainer could not merge the new pump: {exc}"))
        self.notifications += 1
        return cistern_pb2.NotifyResp()

    def DumpBinlog(self, request, context):
        self._check_peer(context)
        abort(context, Unimplemented(_UNIMPLEMENTED.format(name="DumpBinlog")))

    def DumpDDLJobs(self, request, context):
        self._check_peer(context)
        abort(context, Unimplemented(_UNIMPLEMENTED.format(name="DumpDDLJobs")))


def collector_notifier(collector, timeout_s: float = 10.0) -> Callable[[], None]:
    """``on_notify`` that asks ``collector`` for a refresh and waits until it was applied.

    The collector's owner keeps calling ``collector.step()`` (it sees the pending
    notify at once); raises UnavailableError if that does not happen in ``timeout_s``.
    """

    def on_notify() -> None:
        ticket = collector.notify()
        if not collector.wait(ticket, timeout_s):
            raise UnavailableError(f"the pump list refresh did not complete within {timeout_s} s "
                                   "(is the drainer's merge loop running?)")

    return on_notify


@dataclass
class CisternServer:
    """A started Cistern server; ``addr`` has the bound port."""

    server: grpc.Server
    servicer: CisternServicer
    port: int
    addr: str

    def stop(self, grace_s: float = 1.0) -> None:
        self.server.stop(grace_s).wait()


def serve_cistern(addr: str, on_notify: Callable[[], None], *, security=None,
                  max_workers: int = 8) -> CisternServer:
    """Bind and start the Cistern service on ``addr``."""

    servicer = CisternServicer(on_notify, server_allowed_cn(security))
    # No SO_REUSEPORT: a second drainer on the same addr must fail, not share the port.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="cistern-grpc"),
                         options=[("grpc.so_reuseport", 0)])
    cistern_pb2_grpc.add_CisternServicer_to_server(servicer, server)
    creds = server_credentials(security)
    try:
        port = server.add_insecure_port(addr) if creds is None else \
            server.add_secure_port(addr, creds)
    except RuntimeError as exc:
        raise ConfigError(f"drainer cannot listen on addr {addr!r}: {exc}", key="addr") from exc
    if port == 0:
        raise ConfigError(f"drainer cannot listen on addr {addr!r} (in use or not a local "
                          "address)", key="addr")
    server.start()
    bound = f"{addr.rsplit(':', 1)[0]}:{port}"
    log.info("drainer Cistern gRPC listening on %s%s", bound, " (TLS)" if creds else "")
    return CisternServer(server, servicer, port, bound)
