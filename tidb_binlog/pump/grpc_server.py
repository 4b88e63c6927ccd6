"""The ``binlog.Pump`` gRPC service (TiDB's pump.proto) over a :class:`PumpNode`, on grpc.aio.

``WriteBinlog(WriteBinlogReq{clusterID, payload}) -> WriteBinlogResp{errmsg}``
    The node's rules, in order: cluster id ("cluster ID are mismatch, <got> vs
    <expected>"), payload decoding ("malformed binlog payload ..."), the empty probe
    (start_ts == commit_ts == 0: acknowledged, not stored), Prewrite only while
    online and after the start's Notify round ("no online: <state>"), then the
    storage ("no available space ..." for a Prewrite below the disk guard). A request whose
    deadline already passed when it is handled (the client gave up while it was being
    received) is not stored. Any refusal is an
    ``errmsg`` (never a gRPC error), stores nothing, and counts
    ``binlog_pump_loss_binlog_count``. The answer is sent only once the record is
    durable (after its group's fdatasync). A payload above
    ``max_message_size_bytes`` is refused by gRPC itself with
    ``RESOURCE_EXHAUSTED`` before it reaches us.

``PullBinlogs(PullBinlogReq{clusterID, startFrom.offset = last commit_ts})``
    Streams ``PullBinlogResp{entity{pos.offset = commit_ts, payload, meta{startTs,
    commitTs}}}`` (one Entity per message, TiDB's wire format) for every commit
    above ``offset`` in commit_ts order, each Commit carrying its prewrite's value,
    then waits for new commits on the storage's condition (no busy polling). Each
    stream reads its next batch on a prefetch thread while the current one is
    sent; a batch is read only after the previous one, so order and exactly-once
    hold across batches. The stream ends when the client cancels or the server
    stops. A start below the storage's gc_ts aborts with ``OUT_OF_RANGE`` and the
    purge message (TiDB silently clamps; we refuse so a drainer never skips binlogs
    unknowingly); a wrong cluster id aborts with ``FAILED_PRECONDITION``; a damaged
    acknowledged binlog aborts with ``DATA_LOSS`` and the storage's message naming its
    ts, after everything before it was sent (TiDB's pump also ends the stream with an
    error when it cannot read; the drainer stops there instead of skipping it). The
    codes are :func:`tidb_binlog.grpc_errors.status_of` of the errors, which the
    drainer's :func:`~tidb_binlog.grpc_errors.from_rpc_error` turns back into them.

``binlog_stream.PumpStream/WriteBinlogChunks(stream BinlogChunk) -> WriteBinlogChunksResp``
    Our own client-streaming write (pump_stream.proto) for large binlogs, used by our
    pump client only (TiDB keeps WriteBinlog): the first message carries clusterID,
    total_size and crc32c, every message up to 4 MiB of the binlog. Each chunk is
    written to a spill file as it arrives (:mod:`.stream_write`), never collected in
    memory; then size and crc32c are checked, and the node's rules and the storage's
    write (dedupe, group commit, fdatasync before the answer) run as for WriteBinlog,
    the value log appending the record from the file. Refusals are an ``errmsg`` as
    for WriteBinlog: a wrong cluster id and a paused pump (for a Prewrite) at the
    first message, a stream longer or shorter than announced, a checksum mismatch, a
    deadline passed. The spill file has no name and goes with the call (a crash or a
    cancel leaves nothing; ``<data-dir>/spill/`` is cleared at start-up).

Threads: the server runs on its own asyncio event loop thread (``pump-grpc``),
so the standalone process and the Ray actor (whose own threads stay free) host
it alike. A write costs that thread the request's decode, checks and framing,
then nothing until durable: the group-commit writer settles every request of
one fdatasync group with ONE ``loop.call_soon_threadsafe``. No thread pool and
no per-request thread hand-off (the threaded server paid three: poller →
handler thread → writer → handler thread), which is what the CPU per call went
to. (The in-memory test storage's async write is done at once, on the loop's thread.)

Transport: TLS when ``[security]`` names a certificate and key (with ``ssl-ca``
clients must present a certificate signed by it, and with ``cert-allowed-cn`` one of
those common names: :func:`tidb_binlog.security.refused_peer`), optionally also a unix socket
(insecure, local only), ``max_message_size_bytes`` as both receive and send limit.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from tidb_binlog.errors import (
    BinlogError,
    ClusterIDMismatch,
    ConfigError,
    DamagedBinlog,
    PurgedError,
)
from tidb_binlog.grpc_errors import abort
from tidb_binlog.proto import pump_pb2
from tidb_binlog.pump.stream_write import (
    SPILL_DIR_NAME,
    SpillFile,
    clear_spill_dir,
    looks_like_prewrite,
    parse_chunk,
)
from tidb_binlog.pump.transport import (
    MAX_GRPC_MESSAGE_BYTES,
    message_options,
    server_credentials,
)
from tidb_binlog.pump.wire import (
    EMPTY_WRITE_RESP,
    LARGE_PAYLOAD_BYTES,
    parse_write_request,
    pull_response_bytes,
)
from tidb_binlog.security import refused_peer

__all__ = ["PumpServicer", "PumpGrpcServer", "build_server", "method_handlers", "new_event_loop",
           "EVENT_LOOP_ENV", "stream_method_handlers"]

log = logging.getLogger(__name__)

SERVICE = "binlog.Pump"
STREAM_SERVICE = "binlog_stream.PumpStream"
EVENT_LOOP_ENV = "TIDB_BINLOG_EVENT_LOOP"
SLOW_RPC_S = 1.0
START_TIMEOUT_S = 30.0


def _load_malloc_trim():
    """glibc's ``malloc_trim`` (None elsewhere, e.g. musl or macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _load_malloc_trim()


def release_freed_memory() -> None:
    """Give memory glibc keeps after a large request back to the OS.

    gRPC's C core receives a message in many small buffers, allocated on its own
    threads' malloc arenas; once freed they stay in those arenas (a 400 MB Prewrite left
    400 MB of RSS behind), and a later pull, allocating on other threads, does not reuse
    them, so their sizes added up. ``malloc_trim(0)`` returns the free pages; it takes
    milliseconds and runs only after a large write, on an executor thread."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class PumpServicer:
    """Translates RPCs to :class:`~tidb_binlog.pump.node.PumpNode` calls and back.

    Both methods return serialized responses: register them with
    :func:`method_handlers` (pass-through response serializers), not with
    ``add_PumpServicer_to_server``.
    """

    def __init__(self, node, *, pull_wait_s: float = 0.5, pull_batch_bytes: int = 4 << 20,
                 prefetch_threads: int = 16, spill_dir: str | os.PathLike | None = None):
        self.node = node
        # Streamed binlogs are received into files here: <data-dir>/spill for a storage
        # with a directory (cleared of a crash's leftovers now), else a temporary dir.
        if spill_dir is None:
            data_dir = node.storage.dir
            spill_dir = Path(data_dir) / SPILL_DIR_NAME if data_dir is not None else \
                Path(tempfile.gettempdir())
            if data_dir is not None:
                clear_spill_dir(spill_dir)
        self.spill_dir = Path(spill_dir)
        self.metrics = node.metrics
        self.stopping = threading.Event()
        self.pull_wait_s = pull_wait_s
        self.pull_batch_bytes = pull_batch_bytes
        # Batch reads run here, one ahead of each stream (see _pull).
        self._prefetch = futures.ThreadPoolExecutor(max_workers=prefetch_threads,
                                                    thread_name_prefix="pump-pull")
        self._write_ok = self.metrics.rpc_duration_s.labels("WriteBinlog", "succ")
        self._write_fail = self.metrics.rpc_duration_s.labels("WriteBinlog", "fail")
        self._chunks_ok = self.metrics.rpc_duration_s.labels("WriteBinlogChunks", "succ")
        self._chunks_fail = self.metrics.rpc_duration_s.labels("WriteBinlogChunks", "fail")

    async def WriteBinlog(self, request, context):
        start_s = time.perf_counter()
        large = len(request.payload) >= LARGE_PAYLOAD_BYTES
        remaining_s = context.time_remaining()
        if remaining_s is not None and remaining_s <= 0:
            # The client gave up while the request was still arriving (a large one slower
            # than its deadline): it retries, so storing this copy would only cost the
            # write and fsync of its size. Nothing is stored; the answer goes nowhere.
            return self._failed(start_s, "deadline exceeded before the write: not stored "
                                "(the client gave up while the request was received)")
        try:
            durable = self.node.submit_binlog(request.clusterID, request.payload)
            if durable is not None:
                await durable
        except BinlogError as exc:
            return self._failed(start_s, str(exc))
        except Exception as exc:   # a bug or foreign error: still an answer, and logged
            log.exception("WriteBinlog failed unexpectedly")
            return self._failed(start_s, f"internal error: {type(exc).__name__}: {exc}")
        elapsed_s = time.perf_counter() - start_s
        if large:
            del request  # its bytes are ours to free; the trim runs after this returns
            asyncio.get_running_loop().run_in_executor(None, release_freed_memory)
        self._write_ok.observe(elapsed_s)
        if elapsed_s > SLOW_RPC_S:
            log.warning("WriteBinlog took %.3f s", elapsed_s)
        return EMPTY_WRITE_RESP

    def _failed(self, start_s: float, errmsg: str, method: str = "WriteBinlog") -> bytes:
        self.metrics.loss_binlog_count.inc()
        (self._write_fail if method == "WriteBinlog" else self._chunks_fail).observe(
            time.perf_counter() - start_s)
        log.warning("%s refused: %s", method, errmsg)
        # WriteBinlogChunksResp has WriteBinlogResp's wire form (errmsg = field 1)
        return pump_pb2.WriteBinlogResp(errmsg=errmsg).SerializeToString()

    async def WriteBinlogChunks(self, chunks, context):
        """The streaming write (module docstring): chunks into a spill file, checks,
        then the node and storage as for WriteBinlog; an ``errmsg`` for any refusal."""
        start_s = time.perf_counter()
        method = "WriteBinlogChunks"
        spill = None
        try:
            first = None
            async for chunk in chunks:
                if first is None:
                    first = chunk
                    self.node.check_cluster(chunk.cluster_id)
                    if looks_like_prewrite(chunk.data):
                        self.node.check_prewrite_accepted()  # before receiving the rest
                    spill = SpillFile(self.spill_dir)
                if spill.size + len(chunk.data) > first.total_size:
                    return self._failed(start_s, f"streamed binlog is longer than the "
                                        f"{first.total_size} bytes its stream announced: "
                                        "malformed stream; not stored", method)
                spill.write(chunk.data)
                chunk.data = chunk = None  # its message goes before the next one arrives
            if first is None:
                return self._failed(start_s, "empty stream: no BinlogChunk received; "
                                    "not stored", method)
            spill.check(first.total_size, first.crc32c)
            remaining_s = context.time_remaining()
            if remaining_s is not None and remaining_s <= 0:
                return self._failed(start_s, "deadline exceeded before the write: not stored "
                                    "(the client gave up while the stream was received)",
                                    method)
            durable = self.node.submit_binlog_file(first.cluster_id, spill)
            if durable is not None:
                await durable
        except BinlogError as exc:
            return self._failed(start_s, str(exc), method)
        except Exception as exc:   # a bug or foreign error: still an answer, and logged
            log.exception("WriteBinlogChunks failed unexpectedly")
            return self._failed(start_s, f"internal error: {type(exc).__name__}: {exc}", method)
        finally:
            if spill is not None:
                spill.discard()   # the file goes with its last reference (no name on disk)
        elapsed_s = time.perf_counter() - start_s
        self._chunks_ok.observe(elapsed_s)
        if elapsed_s > SLOW_RPC_S:
            log.warning("WriteBinlogChunks of %d bytes took %.3f s", first.total_size, elapsed_s)
        return EMPTY_WRITE_RESP

    def _read_ahead(self, since_commit_ts: int) -> tuple[int, list[bytes]]:
        """On a prefetch thread: the next batch above ``since_commit_ts`` as serialized
        ``PullBinlogResp`` messages, and the commit_ts of its last one."""
        batch, position = self.node.pull(since_commit_ts, self.pull_batch_bytes,
                                         self.pull_wait_s)
        # the next read starts at the position, past keys that served nothing (an
        # orphan commit): reading them again at once would spin
        messages = []
        for i, (ts, payload) in enumerate(batch):
            batch[i] = None  # each payload goes once its message is built (large ones)
            messages.append(pull_response_bytes(ts, payload))
        return position, messages

    async def PullBinlogs(self, request, context):
        """Yields serialized responses (see :mod:`.wire`); the read of the next batch
        runs on a prefetch thread while this one is sent."""
        start_s = time.perf_counter()
        try:
            self.node.check_cluster(request.clusterID)
        except ClusterIDMismatch as exc:
            self._pull_done(start_s, "fail")
            await abort(context, exc)
        last = request.startFrom.offset
        log.info("PullBinlogs from %s starting after commit_ts %d", context.peer(), last)
        loop = asyncio.get_running_loop()
        read, prefetch, stopping = self._read_ahead, self._prefetch, self.stopping
        ahead = loop.run_in_executor(prefetch, read, last)
        label = "succ"
        try:
            while not stopping.is_set():
                try:
                    last, messages = await ahead
                except PurgedError as exc:
                    log.error("drainer %s requested a purged binlog ts: %s", context.peer(), exc)
                    ahead = None
                    await abort(context, exc)
                except DamagedBinlog as exc:   # logged by the storage
                    ahead = None
                    await abort(context, exc)
                ahead = loop.run_in_executor(prefetch, read, last)
                for message in messages:
                    yield message
        except BaseException:          # a cancel by the client counts too (as before)
            label = "fail"
            raise
        finally:
            if ahead is not None:
                ahead.cancel()         # a read already running ends within pull_wait_s
            self._pull_done(start_s, label)

    def _pull_done(self, start_s: float, label: str) -> None:
        self.metrics.rpc_duration_s.labels("PullBinlogs", label).observe(
            time.perf_counter() - start_s)

    def close(self) -> None:
        """Release the prefetch threads (after the server stopped)."""
        self._prefetch.shutdown(wait=False, cancel_futures=True)


def _pass_through(message: bytes) -> bytes:
    return message


def method_handlers(servicer: PumpServicer,
                    allowed_cn: tuple[str, ...] = ()) -> dict[str, grpc.RpcMethodHandler]:
    """``binlog.Pump``'s two methods (TiDB's pump.proto) on one server: requests are
    parsed by protobuf (a large WriteBinlog request by :func:`.wire.parse_write_request`,
    its payload a view into the received bytes, not a copy), responses are the
    servicer's bytes as they are. With ``allowed_cn`` (``[security] cert-allowed-cn``)
    a TLS caller whose certificate has another common name gets ``PERMISSION_DENIED``
    (gRPC's Python server cannot check it in the handshake)."""
    write, pull = servicer.WriteBinlog, servicer.PullBinlogs
    if allowed_cn:
        write, pull = _cn_checked_unary(write, allowed_cn), _cn_checked_stream(pull, allowed_cn)
    return {
        "WriteBinlog": grpc.unary_unary_rpc_method_handler(
            write, request_deserializer=parse_write_request,
            response_serializer=_pass_through),
        "PullBinlogs": grpc.unary_stream_rpc_method_handler(
            pull, request_deserializer=pump_pb2.PullBinlogReq.FromString,
            response_serializer=_pass_through),
    }


def stream_method_handlers(servicer: PumpServicer, allowed_cn: tuple[str, ...] = ()
                           ) -> dict[str, grpc.RpcMethodHandler]:
    """``binlog_stream.PumpStream``'s method (pump_stream.proto, ours): chunks parsed by
    :func:`.stream_write.parse_chunk` (data a view, not a copy), the same common-name
    check as :func:`method_handlers`."""
    write = servicer.WriteBinlogChunks
    if allowed_cn:
        write = _cn_checked_unary(write, allowed_cn)
    return {
        "WriteBinlogChunks": grpc.stream_unary_rpc_method_handler(
            write, request_deserializer=parse_chunk, response_serializer=_pass_through),
    }


def _cn_checked_unary(method, allowed_cn):
    async def checked(request, context):
        why = refused_peer(context.auth_context(), allowed_cn)
        if why is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        return await method(request, context)
    return checked


def _cn_checked_stream(method, allowed_cn):
    async def checked(request, context):
        why = refused_peer(context.auth_context(), allowed_cn)
        if why is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        async for item in method(request, context):
            yield item
    return checked


def new_event_loop(kind: str | None = None) -> asyncio.AbstractEventLoop:
    """The server's event loop: ``uvloop`` when importable (``auto``), else asyncio's.

    ``kind`` defaults to the ``TIDB_BINLOG_EVENT_LOOP`` environment variable
    (``auto``, ``uvloop`` or ``asyncio``; ``auto`` when unset).
    """
    kind = kind or os.environ.get(EVENT_LOOP_ENV, "") or "auto"
    if kind not in ("auto", "uvloop", "asyncio"):
        raise ConfigError(f"{EVENT_LOOP_ENV}={kind!r}: expected auto, uvloop or asyncio",
                          key=EVENT_LOOP_ENV)
    if kind != "asyncio":
        try:
            # Optional: the pump falls back to asyncio's loop when uvloop is not installed.
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ConfigError(f"{EVENT_LOOP_ENV}=uvloop but uvloop is not installed: "
                                  "pip install uvloop, or use auto", key=EVENT_LOOP_ENV) from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class _LoopThread:
    """An event loop (:func:`new_event_loop`) running on its own daemon thread."""

    def __init__(self, name: str):
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro, timeout_s: float | None = None):
        """Run ``coro`` on the loop and return its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class PumpGrpcServer:
    """A started gRPC server on its own event loop thread.

    ``port`` is the bound TCP port (useful with port 0), ``addr`` its ``host:port``.
    """

    def __init__(self, server, servicer: PumpServicer, port: int, addr: str, socket_path: str,
                 loop_thread: _LoopThread):
        self.server = server
        self.servicer = servicer
        self.port = port
        self.addr = addr
        self.socket_path = socket_path
        self._loop_thread = loop_thread
        self._stopped = False

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop accepting, give in-flight RPCs ``grace_s``, cancel streams; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.servicer.stopping.set()
        try:
            self._loop_thread.call(self.server.stop(grace_s), grace_s + START_TIMEOUT_S)
        finally:
            self._loop_thread.close()
            self.servicer.close()


async def _start(servicer, addr: str, socket_path: str, creds, options,
                 allowed_cn: tuple[str, ...] = ()) -> tuple[object, int]:
    server = grpc.aio.server(options=options)
    handlers = method_handlers(servicer, allowed_cn)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
    stream_handlers = stream_method_handlers(servicer, allowed_cn)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(STREAM_SERVICE,
                                                                          stream_handlers),))
    server.add_registered_method_handlers(STREAM_SERVICE, stream_handlers)
    try:
        try:
            port = server.add_insecure_port(addr) if creds is None else \
                server.add_secure_port(addr, creds)
        except RuntimeError as exc:  # grpc's "Failed to bind ..." says no more than this
            log.debug("binding %s: %s", addr, exc)
            port = 0
        if port == 0:
            raise ConfigError(f"cannot listen on addr {addr!r} (in use or not a local address); "
                              "stop the process holding it or choose another addr (addr in "
                              "pump.toml or --addr)", key="addr")
        if socket_path:
            Path(socket_path).unlink(missing_ok=True)
            server.add_insecure_port(f"unix:{socket_path}")
        await server.start()
    except BaseException:
        await server.stop(None)
        raise
    return server, port


def build_server(node, addr: str, *, socket_path: str = "", security=None,
                 max_message_size_bytes: int = MAX_GRPC_MESSAGE_BYTES, max_workers: int = 128,
                 pull_wait_s: float = 0.5) -> PumpGrpcServer:
    """Bind and start the Pump service on ``addr`` (``host:port``; port 0 picks one).

    ``max_workers`` bounds the prefetch threads of concurrent PullBinlogs streams.
    """
    creds = server_credentials(security)
    servicer = PumpServicer(node, pull_wait_s=pull_wait_s, prefetch_threads=max_workers)
    loop_thread = _LoopThread("pump-grpc")
    try:
        server, port = loop_thread.call(
            _start(servicer, addr, socket_path, creds, message_options(max_message_size_bytes),
                   tuple(getattr(security, "cert_allowed_cn", ()) or ()) if creds else ()),
            START_TIMEOUT_S)
    except BaseException:
        loop_thread.close()
        servicer.close()
        raise
    host = addr.rsplit(":", 1)[0]
    bound = f"{host}:{port}"
    log.info("pump gRPC listening on %s%s%s", bound, " (TLS)" if creds else "",
             f" and unix:{socket_path}" if socket_path else "")
    return PumpGrpcServer(server, servicer, port, bound, socket_path, loop_thread)
