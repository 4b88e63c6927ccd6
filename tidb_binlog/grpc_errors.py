"""gRPC status codes and the error tree: the one translation of each side.

A server answers one of our errors with :func:`abort` (its status code from
:func:`status_of`); a caller turns the ``grpc.RpcError`` it gets back into ours with
:func:`from_rpc_error`, the original kept as ``__cause__``. The two tables are each
other's inverse, so a pump's refusal arrives at the drainer as the class the pump raised:

=========================  ======================  =========================================
ours                       status code             who
=========================  ======================  =========================================
``ClusterIDMismatch``      ``FAILED_PRECONDITION``  a pull with another cluster id
``PurgedError``            ``OUT_OF_RANGE``        a pull from below the pump's gc_ts
``DamagedBinlog``          ``DATA_LOSS``           a pull that reached a damaged binlog
``Unimplemented``          ``UNIMPLEMENTED``       a method the peer lacks (TiDB's pump has
                                                   no ``WriteBinlogChunks``; Cistern's stubs)
``ProtocolError``          ``INVALID_ARGUMENT``,   a request no peer would take (gRPC says
                           ``RESOURCE_EXHAUSTED``  ``RESOURCE_EXHAUSTED`` for one too large)
``UnavailableError``       ``UNAVAILABLE`` and     refused, reset, deadline exceeded,
                           every other code        cancelled: another try or peer may do
=========================  ======================  =========================================

Callers: the pump client's channel (``pump_client/transport.py``), the drainer's pull of
a standalone pump (``drainer/source/pump_source.py``) and the pump's Notify of a drainer
(``pump/transport.py``). Servers: the pump's ``binlog.Pump`` service
(``pump/grpc_server.py``) and the drainer's Cistern (``drainer/service/cistern.py``). A
server's refusal of a TLS peer's common name (``PERMISSION_DENIED``) is not an error of
ours and is aborted with as it is; so are the pump's write refusals, which TiDB's protocol
carries in the answer's ``errmsg``, not as a status.
"""

from __future__ import annotations

import re

import grpc

from tidb_binlog.errors import (
    BinlogError,
    ClusterIDMismatch,
    DamagedBinlog,
    ProtocolError,
    PurgedError,
    StateError,
    UnavailableError,
    Unimplemented,
)
from tidb_binlog.security import tls_hint

__all__ = ["status_of", "abort", "from_rpc_error", "damaged_error"]

# Most specific first: status_of takes the first class the error is an instance of.
_STATUS = (
    (ClusterIDMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (DamagedBinlog, grpc.StatusCode.DATA_LOSS),
    (PurgedError, grpc.StatusCode.OUT_OF_RANGE),
    (Unimplemented, grpc.StatusCode.UNIMPLEMENTED),
    (ProtocolError, grpc.StatusCode.INVALID_ARGUMENT),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (StateError, grpc.StatusCode.UNAVAILABLE),
)
_REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)


# -- servers -----------------------------------------------------------------------------

def status_of(exc: BinlogError) -> grpc.StatusCode:
    """The status code a server answers ``exc`` with (``INTERNAL`` for the rest)."""
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def abort(context, exc: BinlogError):
    """End the call with ``exc`` as its status and details. On a ``grpc.aio`` context
    this returns the coroutine to await; a synchronous context raises here."""
    return context.abort(status_of(exc), str(exc))


# -- callers -----------------------------------------------------------------------------

def from_rpc_error(exc: grpc.RpcError, where: str, addr: str, *, client_tls: bool = False,
                   client_cert: bool = False, section: str = "security",
                   cluster_id: int | None = None, since_ts: int | None = None) -> BinlogError:
    """A failed call to the peer ``where`` (``"pump pump-1 at h:8250"``) at ``addr`` as
    our error. An error that looks like a TLS mismatch says what to set (``client_tls``,
    ``client_cert``: what this caller used; ``section``: its config section).
    ``cluster_id``, ``since_ts``: the caller's, named by a mismatch or a purge."""
    code = exc.code() if hasattr(exc, "code") else None
    detail = (exc.details() if hasattr(exc, "details") else str(exc)) or ""
    name = code.name if code is not None else "UNKNOWN"
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return ClusterIDMismatch(f"{where} refused cluster id {cluster_id}: {detail}; check "
                                 "the cluster-id this side was given", expected=None,
                                 got=cluster_id)
    if code == grpc.StatusCode.OUT_OF_RANGE:
        return PurgedError(f"{where} has purged binlogs after commit_ts {since_ts}: {detail}; "
                           "restart the drainer from a newer initial-commit-ts (and re-sync "
                           "the downstream)", requested_ts=since_ts, gc_ts=None)
    if code == grpc.StatusCode.DATA_LOSS:
        return damaged_error(where, detail)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return Unimplemented(f"{where} does not serve the call: {detail}")
    if code in _REFUSED:
        return ProtocolError(f"{where} refused the request: {name}: {detail}")
    hint = tls_hint(addr, detail, client_tls=client_tls, client_cert=client_cert,
                    section=section)
    return UnavailableError(f"{where}: {name}: {detail}{hint}")


def damaged_error(where: str, detail: str, *, ts: int | None = None, path: str | None = None,
                  offset: int | None = None) -> DamagedBinlog:
    """The drainer's error for a pump (``where``) that cannot serve an acknowledged binlog
    (its storage's message, ``detail``, names the ts): the merge stops before it, never
    past it. Also what the actor pull raises (``drainer/source/feeds.py``)."""
    if ts is None:
        m = re.search(r"binlog at ts (\d+)", detail)
        ts = int(m.group(1)) if m else None
    return DamagedBinlog(f"{where} cannot serve an acknowledged binlog: {detail}; the drainer "
                         "stops before it (its checkpoint stays below it); after the pump's "
                         "storage is repaired, start the drainer again", path=path,
                         offset=offset, ts=ts)
