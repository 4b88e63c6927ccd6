"""How one binlog reaches a pump: the channel per pump, one attempt and its booking,
the Prewrite's failover over the pumps and the Commit/Rollback's retries on the
prewrite's pump. :class:`WritePath` is a part of
:class:`~tidb_binlog.pump_client.client.PumpClient` (a base class of it).

Prewrite (``write_binlog`` of a ``Prewrite``; synchronous, raises)
    Sent to the pump the strategy picks. A failed attempt (RPC error or a
    non-empty errmsg) counts against that pump and the binlog goes to the next
    available pump at once; a retry interval (0.1 s) is slept only between
    rounds, when every available pump has failed it. Each attempt waits at most
    ``rpc_timeout_s`` plus the payload's transfer time at the throughput floor
    (see :mod:`.payload`). The client gives up when
    ``write_timeout_s`` (scaled the same way) has passed
    *and* every available pump was tried (TiDB's rule), or when no pump is
    available; it then tries each unavailable-but-online pump once, and finally
    raises :class:`~tidb_binlog.errors.UnavailableError` naming every pump it
    tried and its last error. A message the pump refuses as too large or
    malformed, and a cluster id mismatch, raise at once (retrying elsewhere
    cannot help). On success the client remembers which pump took ``start_ts``.

Commit / Rollback (never raises)
    Sent to the pump that took the prewrite, retried *only there* with
    exponential backoff (0.1 s doubling to 1 s) for up to ``commit_retry_s``
    (10 min), even while that pump is unavailable or restarting. When the budget
    is spent, the client is closed, the pump refuses the message, or no prewrite
    of that start_ts went through this client, the binlog is dropped with an
    error log and ``binlog_pump_client_commit_given_up_total{reason}``; the pump
    resolves the transaction itself after ``max-txn-timeout``.

What :class:`WritePath` uses of the client, set by its constructor: ``cluster_id``,
``rpc_timeout_s``, ``write_timeout_s``, ``commit_retry_s``, ``min_write_bytes_per_s``,
``stream_above_bytes``, ``_retry_interval_s``, ``_commit_backoff_max_s``,
``_max_message_size_bytes``, ``_tls``, ``_lock`` (guards ``_book`` and ``_channels``;
never held across an RPC), ``_book``, ``_channels``, ``_closed``.
"""

from __future__ import annotations

import logging
import time

import google_crc32c

from tidb_binlog.binlog import Binlog, encode
from tidb_binlog.errors import (
    BinlogError,
    ClusterIDMismatch,
    ProtocolError,
    UnavailableError,
    Unimplemented,
)
from tidb_binlog.pump_client import metrics
from tidb_binlog.pump_client.book import PumpEntry
from tidb_binlog.pump_client.payload import (
    LARGE_REQUEST_BYTES,
    SerializedRequest,
    scaled_timeout_s,
)
from tidb_binlog.pump_client.transport import PumpChannel, write_request_bytes

__all__ = ["WritePath"]

log = logging.getLogger("tidb_binlog.pump_client")


class WritePath:
    """The write path of :class:`~tidb_binlog.pump_client.client.PumpClient` (see the
    module docstring for the attributes it uses)."""

    # -- the prewrite's payload and deadlines ----------------------------------------

    def rpc_timeout_for(self, nbytes: int) -> float:
        """The deadline of one WriteBinlog attempt carrying ``nbytes``."""
        return scaled_timeout_s(self.rpc_timeout_s, nbytes, self.min_write_bytes_per_s)

    def write_timeout_for(self, nbytes: int) -> float:
        """The budget of a Prewrite of ``nbytes`` over all its attempts."""
        return scaled_timeout_s(self.write_timeout_s, nbytes, self.min_write_bytes_per_s)

    def _encode(self, binlog: Binlog) -> bytes:
        payload = encode(binlog)
        self._check_size(binlog.start_ts, len(payload))
        return payload

    def _check_size(self, start_ts: int, size: int) -> None:
        if size > self._max_message_size_bytes:
            raise ProtocolError(
                f"prewrite binlog start_ts={start_ts} is {size} bytes, above "
                f"max_message_size_bytes={self._max_message_size_bytes}; raise max-message-size "
                "on the pumps and the client, or split the transaction")

    def _prepared(self, payload: bytes):
        """A large payload as its serialized request (built once, sent by every attempt
        without a protobuf message or serialization copy); a small one as it is."""
        if len(payload) < LARGE_REQUEST_BYTES:
            return payload
        return SerializedRequest(write_request_bytes(self.cluster_id, [payload]), len(payload))

    # -- prewrite ------------------------------------------------------------------

    def _write_prewrite(self, start_ts: int, payload, tried: dict[str, str]) -> str:
        """``payload``: the marshalled Binlog, or a :class:`.payload.SerializedRequest`."""
        if self._closed.is_set():
            raise UnavailableError(f"the pump client is closed: the prewrite binlog of "
                                   f"start_ts={start_ts} was not written; the transaction must "
                                   "not commit")
        budget_s = self.write_timeout_for(len(payload))
        rpc_s = self.rpc_timeout_for(len(payload))
        deadline = time.monotonic() + budget_s
        attempt = len(tried)
        while not self._closed.is_set():
            with self._lock:
                entry = self._book.select(start_ts, attempt, tried.keys())
                available = self._book.available_count
            if entry is None:
                break
            if entry.node_id in tried:  # a new round over pumps that all failed
                self._closed.wait(self._retry_interval_s)
            timeout_s = min(rpc_s, max(deadline - time.monotonic(), 0.05))
            error = self._attempt(entry, payload, timeout_s, remember_ts=start_ts)
            if error is None:
                metrics.WRITE_OK["prewrite"].inc()
                return entry.node_id
            tried[entry.node_id] = error
            attempt += 1
            if time.monotonic() >= deadline and len(tried) >= available:
                break
        # TiDB's last resort: every pump the registry says is online, once more.
        with self._lock:
            last_resort = self._book.probe_candidates()
        for entry in last_resort:
            if self._closed.is_set():
                break
            self._channel(entry).reset()
            error = self._attempt(entry, payload, rpc_s)
            if error is None:
                with self._lock:
                    self._book.mark_available(entry.node_id)
                    self._book.remember(start_ts, entry.node_id)
                metrics.WRITE_OK["prewrite"].inc()
                return entry.node_id
            tried[entry.node_id] = error
        metrics.WRITE_TOTAL.labels("prewrite", "error").inc()
        detail = "; ".join(f"{node}: {err}" for node, err in tried.items()) or "no pump is online"
        raise UnavailableError(
            f"no pump took the prewrite binlog of start_ts={start_ts} ({len(payload)} bytes) "
            f"within {budget_s:g}s ({detail}); the transaction must not commit. "
            "Check that pumps are running and online (binlogctl -cmd pumps).")

    # -- one attempt -----------------------------------------------------------------

    def _attempt(self, entry: PumpEntry, payload: bytes, timeout_s: float, *,
                 remember_ts: int | None = None, forget_ts: int | None = None) -> str | None:
        """One WriteBinlog; None on success, else the error text (also booked).

        On success the prewrite's owner is recorded (``remember_ts``) or the
        commit's dropped (``forget_ts``) in the same lock section as the outcome.
        """
        try:
            channel = self._channel(entry)
            errmsg = None
            if 0 < self.stream_above_bytes <= len(payload) and channel.streams:
                try:
                    errmsg = self._stream(channel, payload, timeout_s)
                except Unimplemented:
                    errmsg = None   # another build of pump: WriteBinlog, in this attempt
            if errmsg is not None:
                pass
            elif isinstance(payload, SerializedRequest):
                errmsg = channel.write_request(payload.request, timeout_s)
            else:
                errmsg = channel.write(self.cluster_id, payload, timeout_s)
        except UnavailableError as exc:
            errmsg = str(exc)
        return self._outcome(entry, errmsg, remember_ts=remember_ts, forget_ts=forget_ts)

    def _stream(self, channel: PumpChannel, payload, timeout_s: float) -> str:
        """One WriteBinlogChunks of ``payload`` (a :class:`.payload.SerializedRequest`'s
        payload or bytes), sliced in chunks from the buffer it is in: no copy of it whole."""
        if isinstance(payload, SerializedRequest):
            view, crc = payload.payload_view(), payload.crc32c()
        else:
            view, crc = memoryview(payload), google_crc32c.value(bytes(payload))
        return channel.write_stream(self.cluster_id, view, crc, timeout_s)

    def _outcome(self, entry: PumpEntry, errmsg: str, *, remember_ts: int | None = None,
                 forget_ts: int | None = None) -> str | None:
        if not errmsg:
            with self._lock:
                if entry.errors:
                    self._book.record_success(entry.node_id)
                if remember_ts is not None:
                    self._book.remember(remember_ts, entry.node_id)
                elif forget_ts is not None:
                    self._book.forget(forget_ts)
            return None
        if "cluster ID are mismatch" in errmsg:
            raise ClusterIDMismatch(
                f"pump {entry.node_id} at {entry.addr} belongs to another cluster: {errmsg}; "
                f"this client uses cluster id {self.cluster_id}", got=self.cluster_id)
        metrics.RPC_ERRORS.labels(entry.node_id).inc()
        with self._lock:
            moved = self._book.record_failure(entry.node_id)
        if moved:
            metrics.PUMP_UNAVAILABLE.labels(entry.node_id).inc()
            log.warning("pump %s failed %d writes in a row, moved to unavailable: %s",
                        entry.node_id, entry.errors, errmsg)
        else:
            log.debug("write to pump %s failed: %s", entry.node_id, errmsg)
        return errmsg

    # -- commit / rollback -------------------------------------------------------

    def _write_finish(self, binlog: Binlog, payload: bytes, kind: str) -> str | None:
        with self._lock:
            entry = self._book.owner(binlog.start_ts)
        if entry is None:
            return self._give_up(binlog, kind, "no_prewrite",
                                 "no prewrite of this start_ts went through this client")
        deadline = time.monotonic() + self.commit_retry_s
        backoff_s = self._retry_interval_s
        error = "none: the client was closed before the first attempt"
        while True:
            if self._closed.is_set():  # close() is bounded: no new attempt once closed
                return self._give_up(binlog, kind, "closed", f"client closed; last error: {error}")
            try:
                error = self._attempt(entry, payload, self.rpc_timeout_s,
                                      forget_ts=binlog.start_ts)
            except BinlogError as exc:  # refused for good (too large, other cluster)
                return self._give_up(binlog, kind, "rejected", str(exc))
            if error is None:
                metrics.WRITE_OK[kind].inc()
                return entry.node_id
            if time.monotonic() >= deadline:
                return self._give_up(binlog, kind, "timeout",
                                     f"pump {entry.node_id} did not take it within "
                                     f"{self.commit_retry_s:g}s; last error: {error}")
            self._closed.wait(min(backoff_s, max(deadline - time.monotonic(), 0.0)))
            backoff_s = min(backoff_s * 2, self._commit_backoff_max_s)

    def _give_up(self, binlog: Binlog, kind: str, reason: str, why: str) -> None:
        with self._lock:
            self._book.forget(binlog.start_ts)
        metrics.COMMIT_GIVEN_UP.labels(reason).inc()
        metrics.WRITE_TOTAL.labels(kind, "given_up").inc()
        log.error("gave up the %s binlog of start_ts=%d commit_ts=%d: %s; the pump resolves "
                  "the transaction after max-txn-timeout", kind, binlog.start_ts,
                  binlog.commit_ts, why)
        return None

    # -- the channel per pump ----------------------------------------------------------

    def _channel(self, entry: PumpEntry) -> PumpChannel:
        channel = self._channels.get(entry.node_id)  # lock-free hit: the common case
        if channel is not None and channel.addr == entry.addr:
            return channel
        with self._lock:
            channel = self._channels.get(entry.node_id)
            if channel is None or channel.addr != entry.addr:
                if channel is not None:
                    channel.close()
                channel = PumpChannel(entry.node_id, entry.addr, tls=self._tls,
                                      max_message_size_bytes=self._max_message_size_bytes)
                self._channels[entry.node_id] = channel
            return channel

    def _drop_channels(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()  # on a background thread: never waits here
