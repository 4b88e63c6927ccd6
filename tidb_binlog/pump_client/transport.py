"""One gRPC channel per pump, the pump client's one place grpc errors become ours.

:class:`PumpChannel` speaks TiDB's ``binlog.Pump/WriteBinlog``: it returns the
pump's ``errmsg`` ("" = stored) or raises (through
:func:`tidb_binlog.grpc_errors.from_rpc_error`):

- :class:`~tidb_binlog.errors.ProtocolError` for ``RESOURCE_EXHAUSTED`` and
  ``INVALID_ARGUMENT`` (the message is too large or malformed: another pump
  would refuse it too, so the client does not retry it elsewhere);
- :class:`~tidb_binlog.errors.Unimplemented` (an ``UnavailableError``) for
  ``UNIMPLEMENTED``: not a pump, or one of another build (see below);
- :class:`~tidb_binlog.errors.UnavailableError` for everything else (refused,
  reset, deadline exceeded, ...). On ``UNAVAILABLE`` the channel is dropped and
  the next call dials afresh, so a restarted pump is found at once instead of
  after gRPC's reconnect backoff (TiDB resets its client the same way).

Dropping a channel never closes it on the calling thread. ``grpc.Channel.close()``
cancels the channel's other calls and then waits until their completions have been
delivered, and gRPC delivers them on the channel's own callback thread: run there (a
done-callback seeing ``UNAVAILABLE`` while other calls are in flight, the case of a
pump killed under load) it waits for itself forever, and no other callback of that
channel runs again. So :meth:`PumpChannel.reset` only swaps the channel out and a
short-lived daemon thread closes the old one; its in-flight calls end ``CANCELLED``
(an ``UnavailableError`` like any other, so prewrites fail over and commits retry).

Large binlogs (:meth:`PumpChannel.write_stream`) go through our own client-streaming
``binlog_stream.PumpStream/WriteBinlogChunks`` (pump_stream.proto) in chunks of 4 MiB
sliced from the caller's buffer, so gRPC never copies the binlog whole; a pump that
answers ``UNIMPLEMENTED`` (another build, TiDB's) raises
:class:`~tidb_binlog.errors.Unimplemented` and the channel remembers it until it is
reset (the client then uses ``WriteBinlog``).

Addresses are ``host:port`` or a unix socket (``unix:/path`` or a bare absolute
path). TLS is optional (:class:`PumpTLS`); message size limits apply to both
directions.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from tidb_binlog.errors import BinlogError, ConfigError, UnavailableError, Unimplemented
from tidb_binlog.grpc_errors import from_rpc_error
from tidb_binlog.proto import pump_pb2, pump_pb2_grpc
from tidb_binlog.security import client_tls_paths

__all__ = ["DEFAULT_MAX_MESSAGE_SIZE_BYTES", "PumpTLS", "PumpChannel", "grpc_target",
           "channel_options", "close_in_background", "write_request_bytes",
           "write_request_head", "chunk_messages", "STREAM_CHUNK_BYTES"]

# gRPC's largest message (a signed 32-bit length); TiDB's own limit is the same order.
DEFAULT_MAX_MESSAGE_SIZE_BYTES = (1 << 31) - 1

log = logging.getLogger("tidb_binlog.pump_client")

_WRITE_METHOD = "/binlog.Pump/WriteBinlog"
_STREAM_METHOD = "/binlog_stream.PumpStream/WriteBinlogChunks"
STREAM_CHUNK_BYTES = 4 << 20  # data per BinlogChunk (pump_stream.proto)
_U64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    value &= _U64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_request_head(cluster_id: int, payload_size: int) -> bytes:
    """The bytes of a serialized ``WriteBinlogReq`` that come before its payload."""
    head = b"\x08" + _varint(cluster_id) if cluster_id else b""
    return head + b"\x12" + _varint(payload_size)


def write_request_bytes(cluster_id: int, parts: list) -> bytes:
    """The serialized ``WriteBinlogReq{clusterID, payload}`` whose payload is the
    concatenation of ``parts``, built with ONE copy of them (what protobuf writes:
    ``08 <clusterID> 12 <len> payload``). ``parts`` is emptied, so once the caller
    drops its own references the parts are freed while the request is in flight."""
    size = sum(len(p) for p in parts)
    request = b"".join([write_request_head(cluster_id, size), *parts])
    parts.clear()
    return request


def chunk_messages(cluster_id: int, payload: memoryview, crc32c: int,
                   chunk_bytes: int = STREAM_CHUNK_BYTES):
    """Serialized ``BinlogChunk`` messages of ``payload`` (a memoryview): the first with
    clusterID, total_size and crc32c. Each message is built when gRPC asks for it, from
    a slice of ``payload`` (one copy of at most ``chunk_bytes``, freed once sent)."""
    total = len(payload)
    head = b"".join((b"\x08" + _varint(cluster_id) if cluster_id else b"",
                     b"\x10" + _varint(total) if total else b"",
                     b"\x18" + _varint(crc32c) if crc32c else b""))
    for off in range(0, max(total, 1), chunk_bytes):
        piece = payload[off:off + chunk_bytes]
        yield b"".join((head, b"\x22", _varint(len(piece)), piece))
        head = b""


@dataclass(frozen=True)
class PumpTLS:
    """PEM files for TLS to the pumps (``[security] ssl-ca/ssl-cert/ssl-key``)."""

    ca_path: str | None
    cert_path: str | None = None
    key_path: str | None = None

    @classmethod
    def from_security(cls, security, section: str = "security") -> PumpTLS | None:
        """From a ``[security]``-shaped section (files checked readable); None when it
        asks for no TLS (no ssl-ca, no ssl-cert)."""
        paths = client_tls_paths(security, section)
        if paths is None:
            return None
        ca, cert, key = paths
        return cls(ca or None, cert or None, key or None)

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None, key: str) -> bytes | None:
            if path is None:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as exc:
                raise ConfigError(f"cannot read {key} {path}: {exc}", key=key, path=path) from exc

        if (self.cert_path is None) != (self.key_path is None):
            raise ConfigError("ssl-cert and ssl-key must be given together", key="ssl-cert")
        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_path, "ssl-ca"),
            private_key=read(self.key_path, "ssl-key"),
            certificate_chain=read(self.cert_path, "ssl-cert"))


def grpc_target(addr: str) -> str:
    """A gRPC target for ``host:port``, ``unix:/path`` or ``/path``."""
    if addr.startswith("/"):
        return f"unix:{addr}"
    return addr


def channel_options(max_message_size_bytes: int) -> list[tuple[str, int]]:
    """Channel arguments of every pump channel (sync and aio)."""
    return [
        ("grpc.max_send_message_length", max_message_size_bytes),
        ("grpc.max_receive_message_length", max_message_size_bytes),
        ("grpc.enable_retries", 0),  # the pump client does its own retries
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]


class PumpChannel:
    """A lazily dialled, resettable channel to one pump."""

    def __init__(self, node_id: str, addr: str, *, tls: PumpTLS | None = None,
                 max_message_size_bytes: int = DEFAULT_MAX_MESSAGE_SIZE_BYTES):
        self.node_id = node_id
        self.addr = addr
        self._tls = tls
        self._options = channel_options(max_message_size_bytes)
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        # The bound WriteBinlog multicallable; read without the lock on the hot path
        # (None until dialled and after reset()).
        self._call = None
        self._raw_call = None  # the same method taking a pre-serialized request
        self._stream_call = None  # WriteBinlogChunks (pump_stream.proto)
        # False once the pump answered UNIMPLEMENTED to a streamed write (until reset)
        self.streams = True

    def _dial(self):
        with self._lock:
            if self._call is None:
                target = grpc_target(self.addr)
                if self._tls is None:
                    self._channel = grpc.insecure_channel(target, options=self._options)
                else:
                    self._channel = grpc.secure_channel(target, self._tls.credentials(),
                                                        options=self._options)
                self._call = pump_pb2_grpc.PumpStub(self._channel).WriteBinlog
                self._raw_call = self._channel.unary_unary(
                    _WRITE_METHOD, request_serializer=None,  # bytes as they are
                    response_deserializer=pump_pb2.WriteBinlogResp.FromString)
                self._stream_call = self._channel.stream_unary(
                    _STREAM_METHOD, request_serializer=None,
                    # WriteBinlogChunksResp has WriteBinlogResp's wire form
                    response_deserializer=pump_pb2.WriteBinlogResp.FromString)
            return self._call

    def write(self, cluster_id: int, payload: bytes, timeout_s: float) -> str:
        """Send one WriteBinlog; the pump's errmsg ("" = stored)."""
        call = self._call or self._dial()
        try:
            return call(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=payload),
                        timeout=timeout_s).errmsg
        except grpc.RpcError as exc:
            raise self.translate(exc) from exc
        except ValueError as exc:  # grpc: "Cannot invoke RPC on closed channel!"
            raise self._reset_race(exc) from exc

    def write_request(self, request: bytes, timeout_s: float) -> str:
        """Send a pre-serialized ``WriteBinlogReq`` (:func:`write_request_bytes`): no
        protobuf message holding a copy of a large payload, no serialization copy."""
        call = self._raw_call
        if call is None:
            self._dial()
            call = self._raw_call
            if call is None:  # another thread reset the channel right after the dial
                raise self._reset_race(ValueError("reset while dialling"))
        try:
            return call(request, timeout=timeout_s).errmsg
        except grpc.RpcError as exc:
            raise self.translate(exc) from exc
        except ValueError as exc:  # grpc: "Cannot invoke RPC on closed channel!"
            raise self._reset_race(exc) from exc

    def write_stream(self, cluster_id: int, payload: memoryview, crc32c: int,
                     timeout_s: float) -> str:
        """Send one binlog through ``WriteBinlogChunks`` in chunks sliced from
        ``payload``; the pump's errmsg ("" = stored). Raises :class:`~tidb_binlog.errors.Unimplemented`
        when the pump lacks the service (and remembers it: :attr:`streams`)."""
        call = self._stream_call
        if call is None:
            self._dial()
            call = self._stream_call
            if call is None:
                raise self._reset_race(ValueError("reset while dialling"))
        try:
            return call(chunk_messages(cluster_id, payload, crc32c), timeout=timeout_s).errmsg
        except grpc.RpcError as exc:
            err = self.translate(exc)
            if isinstance(err, Unimplemented):
                self.streams = False
                log.info("%s (WriteBinlogChunks); large binlogs go through WriteBinlog", err)
            raise err from exc
        except ValueError as exc:  # grpc: "Cannot invoke RPC on closed channel!"
            raise self._reset_race(exc) from exc

    def write_future(self, cluster_id: int, payload: bytes, timeout_s: float) -> grpc.Future:
        """Start a WriteBinlog without waiting; finish it with :meth:`result`."""
        call = self._call or self._dial()
        try:
            return call.future(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=payload),
                               timeout=timeout_s)
        except ValueError as exc:
            raise self._reset_race(exc) from exc

    def result(self, future: grpc.Future, wait_s: float | None = None) -> str:
        """The errmsg of a call started by :meth:`write_future`.

        In a done-callback the future is finished and this does not wait. On the
        caller's thread pass ``wait_s``: the call's own deadline ends it, but if gRPC
        failed to deliver the completion the caller must not wait forever.
        """
        try:
            return future.result(timeout=wait_s).errmsg
        except grpc.RpcError as exc:
            raise self.translate(exc) from exc
        except grpc.FutureTimeoutError:
            future.cancel()
            raise UnavailableError(f"pump {self.node_id} at {self.addr}: no completion of the "
                                   f"WriteBinlog call within {wait_s:g}s (past its deadline); "
                                   "the call was cancelled") from None

    def _reset_race(self, exc: ValueError) -> UnavailableError:
        """Another thread reset (closed) the channel while this call used it."""
        return UnavailableError(f"pump {self.node_id} at {self.addr}: the channel was reset "
                                f"during the call ({exc}); the next attempt dials again")

    def translate(self, exc: grpc.RpcError) -> BinlogError:
        """A failed call as our error (:func:`~tidb_binlog.grpc_errors.from_rpc_error`):
        ProtocolError when no pump would take the binlog, Unimplemented for a method the
        pump lacks, UnavailableError otherwise (the channel is dropped on UNAVAILABLE)."""
        if hasattr(exc, "code") and exc.code() == grpc.StatusCode.UNAVAILABLE:
            self.reset()
        tls = self._tls
        return from_rpc_error(exc, f"pump {self.node_id} at {self.addr}", self.addr,
                              client_tls=tls is not None,
                              client_cert=tls is not None and tls.cert_path is not None)

    def reset(self) -> threading.Thread | None:
        """Drop the channel; the next call dials again. Never blocks: safe on gRPC's
        callback thread (see the module docstring). Returns the thread closing the old
        channel (None when there was none), for a caller that may wait for it."""
        with self._lock:
            channel, self._channel, self._call = self._channel, None, None
            self._raw_call = self._stream_call = None
            self.streams = True  # a restarted pump may be another build
        if channel is None:
            return None
        return close_in_background(channel, f"{self.node_id} at {self.addr}")

    def close(self) -> threading.Thread | None:
        """Drop the channel for good (a later call would dial again); see :meth:`reset`."""
        return self.reset()


def close_in_background(channel: grpc.Channel, what: str) -> threading.Thread | None:
    """Close ``channel`` on a daemon thread of its own (None if none could start).

    ``Thread.start`` waits only for the new thread to be scheduled, never for gRPC.
    One thread per dropped channel, not a shared closer: a close that hangs (its
    callback thread stuck in someone else's callback) must not hold up the others.
    At interpreter exit no thread can start; the channel is then left to the process's
    end rather than closed where the caller may be gRPC's callback thread.
    """
    def run() -> None:
        try:
            channel.close()
        except Exception:  # noqa: BLE001 - a failed close leaks one channel; say so
            log.warning("closing the dropped channel to pump %s failed", what, exc_info=True)

    t = threading.Thread(target=run, name="pump-channel-close", daemon=True)
    try:
        t.start()
    except RuntimeError as exc:  # "can't create new thread at interpreter shutdown"
        log.debug("not closing the dropped channel to pump %s: %s", what, exc)
        return None
    return t
