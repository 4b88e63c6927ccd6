"""Transport helpers shared by the pump, the drainer and tools: TLS, channels, Notify.

- :func:`server_credentials` / :func:`channel_credentials`: gRPC TLS from a
  ``[security]`` section (``ssl-ca``, ``ssl-cert``, ``ssl-key``): a certificate
  and key turn TLS on; with ``ssl-ca`` the server requires client certificates
  signed by it. ``ssl-cert`` without ``ssl-key`` (or the reverse) is a
  :class:`~tidb_binlog.errors.ConfigError` naming the missing key; an unreadable
  file is one naming the file.
- :func:`http_ssl_context`: the same for the HTTP status servers.
- :func:`open_channel`: a client channel, TLS when ``security`` names a CA,
  with ``max_message_size_bytes`` as both the send and receive limit (gRPC's
  own ceiling is 2 GiB - 1, :data:`MAX_GRPC_MESSAGE_BYTES`).
- :func:`notify_drainer`: one ``Cistern.Notify`` call; a failed one raises
  :func:`tidb_binlog.grpc_errors.from_rpc_error`'s error (``UnavailableError`` mostly).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from tidb_binlog.errors import ConfigError
from tidb_binlog.grpc_errors import from_rpc_error
from tidb_binlog.proto import cistern_pb2, cistern_pb2_grpc
from tidb_binlog.security import tls_enabled

__all__ = [
    "MAX_GRPC_MESSAGE_BYTES",
    "server_credentials",
    "channel_credentials",
    "http_ssl_context",
    "message_options",
    "open_channel",
    "notify_drainer",
    "make_notifier",
]

# gRPC's message limits are C ints: 2 GiB - 1 is the largest value it accepts.
MAX_GRPC_MESSAGE_BYTES = (1 << 31) - 1


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


def message_options(max_message_size_bytes: int) -> list[tuple[str, int]]:
    """gRPC channel/server options limiting both directions to the given size."""
    size = min(max_message_size_bytes, MAX_GRPC_MESSAGE_BYTES)
    return [("grpc.max_receive_message_length", size), ("grpc.max_send_message_length", size)]


def open_channel(addr: str, security=None, max_message_size_bytes: int = MAX_GRPC_MESSAGE_BYTES):
    """A client channel to a pump or drainer, TLS when ``security`` names a CA."""
    creds = channel_credentials(security)
    options = message_options(max_message_size_bytes)
    if creds is None:
        return grpc.insecure_channel(addr, options=options)
    return grpc.secure_channel(addr, creds, options=options)


def notify_drainer(addr: str, security=None, timeout_s: float = 3.0) -> None:
    """Call ``Cistern.Notify`` on the drainer at ``addr``; a failure is our error."""
    with open_channel(addr, security) as channel:
        try:
            cistern_pb2_grpc.CisternStub(channel).Notify(cistern_pb2.NotifyReq(),
                                                         timeout=timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, f"drainer at {addr}", addr,
                                 client_tls=tls_enabled(security),
                                 client_cert=bool(getattr(security, "ssl_cert", ""))) from exc


def make_notifier(security=None, timeout_s: float = 3.0):
    return lambda addr: notify_drainer(addr, security, timeout_s)


def http_ssl_context(security):
    """An ``ssl.SSLContext`` for an HTTP status server, or None without a certificate."""
    if security is None or not getattr(security, "ssl_cert", ""):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(security.ssl_cert, security.ssl_key)
    if getattr(security, "ssl_ca", ""):
        ctx.load_verify_locations(security.ssl_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
