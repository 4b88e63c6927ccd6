"""The batched write path of :class:`~tidb_binlog.pump_client.client.PumpClient`.

For high-throughput callers (an upstream's commit sender handing over whatever
Commit binlogs queued up, an upstream inside Ray writing many transactions).
Prewrites are sent first and commits/rollbacks second, so a commit in the same
batch as its prewrite reaches the pump after it and goes to the pump that took it.
The first attempts of each group are

- sent one after another as blocking calls when there are fewer than
  ``PIPELINE_MIN_BINLOGS`` of them: a blocking call is gRPC Python's cheapest
  (its completion reaches the calling thread directly), while a ``.future()``
  crosses gRPC's poller, the channel's spin thread and the waiting thread, which
  measured 1.3-1.8x the client CPU per call for batches of 1-4
  (bench/pump_client.py); a small batch costs a few round trips of latency, and
  the caller's next batch grows meanwhile;
- pipelined as gRPC futures over the one channel per pump otherwise, the
  replies collected afterwards.

- A prewrite whose first attempt failed falls back to the client's retrying
  path (next pump, write timeout); its result carries the error if that fails.
- A commit/rollback whose first attempt failed is handed to the client's async
  retry pool (same pump, ``commit_retry_s``); its result carries that future
  in ``pending``. A commit is never reported as an error unless the pump
  refused it for good (too large, other cluster).

:func:`write_finish_nowait` is the one-binlog form for a committing session: the
first attempt is a gRPC future started on the caller's thread and finished in
gRPC's completion callback, so no thread of ours is woken per binlog and no single
sender thread carries every session's commits. Bare generated stub, 16 threads, real
pump: 245-256 us of client CPU per binlog against 293-310 through a sender thread;
through the whole client (``bench/pump_client.py``, modes nowait / async) the
difference is within the noise (282-313 against 279-294 us).

What this path needs from the client is declared by :class:`BatchClient`: the
client hands these functions an object with exactly those members (its
:class:`~.batch_side.BatchSide`), so they never reach into the client's private state, and this
module does not import the client (the client imports it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from tidb_binlog.binlog import Binlog, BinlogType, encode
from tidb_binlog.errors import BinlogError, UnavailableError
from tidb_binlog.pump_client import metrics
from tidb_binlog.pump_client.book import PumpEntry
from tidb_binlog.pump_client.transport import PumpChannel

__all__ = ["BatchClient", "WriteResult", "write_batch", "write_finish_nowait",
           "PIPELINE_MIN_BINLOGS", "COMPLETION_GRACE_S"]

# Below this many first attempts in a group, send them as sequential blocking calls.
PIPELINE_MIN_BINLOGS = 4

# How long past a call's deadline a waiter still waits for gRPC to deliver its
# completion before treating the call as lost (a stuck callback thread, not a slow pump).
COMPLETION_GRACE_S = 5.0

_TYPE_NAMES = {BinlogType.PREWRITE: "prewrite", BinlogType.COMMIT: "commit",
               BinlogType.ROLLBACK: "rollback"}


class BatchClient(Protocol):
    """What the batched path and ``write_finish_nowait`` use of the pump client.

    Every member may run on gRPC's callback thread (from ``write_finish_nowait``'s
    ``done``) except ``write_prewrite``, so none of the others may wait for anything
    but the client's lock (see the README's threading model).
    """

    @property
    def cluster_id(self) -> int: ...

    @property
    def rpc_timeout_s(self) -> float:
        """The deadline of one attempt of a small binlog (a Commit/Rollback)."""

    def rpc_timeout_for(self, nbytes: int) -> float:
        """The deadline of one attempt carrying ``nbytes`` (scaled with the payload)."""

    def closed(self) -> bool:
        """``close()`` has begun: new work is given up, not started."""

    def channel(self, entry: PumpEntry) -> PumpChannel:
        """The one channel to ``entry``'s pump (dialled on first use)."""

    def encode_prewrite(self, binlog: Binlog) -> bytes:
        """The payload; ``ProtocolError`` when it exceeds the message size limit."""

    def select(self, start_ts: int) -> PumpEntry | None:
        """The pump the strategy picks for a new prewrite (None: none available)."""

    def owner(self, start_ts: int) -> PumpEntry | None:
        """The pump that took the prewrite of ``start_ts`` (None: not through us)."""

    def outcome(self, entry: PumpEntry, errmsg: str, *, remember_ts: int | None = None,
                forget_ts: int | None = None) -> str | None:
        """Book one attempt's answer: None when taken (owner remembered/forgotten), else
        the error text; raises ``ClusterIDMismatch`` for another cluster's pump."""

    def write_prewrite(self, binlog: Binlog, payload: bytes, tried: dict[str, str]) -> str:
        """The retrying prewrite path (next pump, write timeout); the node id or raises."""

    def give_up(self, binlog: Binlog, kind: str, reason: str, why: str) -> None:
        """Drop a Commit/Rollback for good: logged and counted."""

    def retry_later(self, binlog: Binlog, seq: int | None = None) -> Future:
        """The Commit/Rollback retry on the client's pool, tracked for flush/close."""

    def track(self, fut: Future, node_id: str) -> int:
        """Count ``fut`` as in flight to ``node_id``; its flush sequence number."""


@dataclass
class WriteResult:
    """One binlog of a ``write_binlogs`` batch: the pump that took it, or the error.

    ``pending`` is set for a Commit/Rollback whose first attempt failed: it is
    being retried in the background and resolves to the node id (or None if
    given up).
    """

    node_id: str | None = None
    error: BinlogError | None = None
    pending: Future | None = None


def write_batch(client: BatchClient, binlogs: Sequence[Binlog]) -> list[WriteResult]:
    """Write a batch through ``client``; per-binlog results in input order."""
    results = [WriteResult() for _ in binlogs]
    prewrites = [i for i, b in enumerate(binlogs) if b.tp == BinlogType.PREWRITE]
    finishes = [i for i, b in enumerate(binlogs) if b.tp != BinlogType.PREWRITE]
    _prewrites(client, binlogs, prewrites, results)
    _finishes(client, binlogs, finishes, results)
    return results


def _first_attempts(client: BatchClient, targets: list[tuple[PumpEntry, bytes, int]], *,
                    prewrite: bool) -> list[str | BinlogError | None]:
    """Send ``(entry, payload, start_ts)`` once each; per target None (taken and
    booked), the error text (retryable), or the BinlogError refusing it for good."""
    if not targets:
        return []
    raw: list[str | BinlogError] = []
    if len(targets) < PIPELINE_MIN_BINLOGS:
        for entry, payload, _ in targets:
            try:
                raw.append(client.channel(entry).write(client.cluster_id, payload,
                                                        client.rpc_timeout_for(len(payload))))
            except BinlogError as exc:
                raw.append(exc)
    else:
        inflight = []
        longest_s = 0.0
        for entry, payload, _ in targets:
            channel = client.channel(entry)
            timeout_s = client.rpc_timeout_for(len(payload))
            longest_s = max(longest_s, timeout_s)
            try:
                inflight.append((channel, channel.write_future(client.cluster_id, payload,
                                                               timeout_s)))
            except BinlogError as exc:
                inflight.append((None, exc))
        wait_s = longest_s + COMPLETION_GRACE_S
        for channel, fut in inflight:
            try:
                raw.append(fut if channel is None else channel.result(fut, wait_s))
            except BinlogError as exc:
                raw.append(exc)
    out: list[str | BinlogError | None] = []
    for (entry, _, start_ts), r in zip(targets, raw, strict=True):
        if isinstance(r, UnavailableError):
            r = str(r)
        if isinstance(r, BinlogError):
            out.append(r)
            continue
        try:
            out.append(client.outcome(entry, r, remember_ts=start_ts if prewrite else None,
                                       forget_ts=None if prewrite else start_ts))
        except BinlogError as exc:  # another cluster's pump
            out.append(exc)
    return out


def _prewrites(client: BatchClient, binlogs, indexes, results) -> None:
    targets, unrouted = [], []
    for i in indexes:
        try:
            payload = client.encode_prewrite(binlogs[i])
        except BinlogError as exc:
            results[i].error = exc
            continue
        entry = client.select(binlogs[i].start_ts)
        if entry is None:
            unrouted.append((i, payload))
        else:
            targets.append((i, entry, payload))
    outcomes = _first_attempts(client, [(e, p, binlogs[i].start_ts) for i, e, p in targets],
                               prewrite=True)
    retries = list(unrouted)
    for (i, entry, payload), outcome in zip(targets, outcomes, strict=True):
        if outcome is None:
            metrics.WRITE_OK["prewrite"].inc()
            results[i].node_id = entry.node_id
        elif isinstance(outcome, BinlogError):
            results[i].error = outcome
        else:
            retries.append((i, payload, {entry.node_id: outcome}))
    for i, payload, *tried in retries:  # the client's retrying path: next pump, deadline
        try:
            results[i].node_id = client.write_prewrite(binlogs[i], payload,
                                                        tried[0] if tried else {})
        except BinlogError as exc:
            results[i].error = exc


def _finishes(client: BatchClient, binlogs, indexes, results) -> None:
    targets, retries = [], []
    for i in indexes:
        entry = client.owner(binlogs[i].start_ts)
        if entry is None:
            retries.append(i)  # the async path gives it up as "no_prewrite"
        else:
            targets.append((i, entry, encode(binlogs[i])))
    outcomes = _first_attempts(client, [(e, p, binlogs[i].start_ts) for i, e, p in targets],
                               prewrite=False)
    for (i, entry, _), outcome in zip(targets, outcomes, strict=True):
        kind = _TYPE_NAMES.get(binlogs[i].tp, "other")
        if outcome is None:
            metrics.WRITE_OK[kind].inc()
            results[i].node_id = entry.node_id
        elif isinstance(outcome, BinlogError):
            client.give_up(binlogs[i], kind, "rejected", str(outcome))
            results[i].error = outcome
        else:
            retries.append(i)
    for i in sorted(retries):
        results[i].pending = client.retry_later(binlogs[i])


def write_finish_nowait(client: BatchClient, binlog: Binlog) -> Future:
    """Start one Commit/Rollback; the Future resolves to its :class:`WriteResult` when
    the first attempt is done: ``node_id`` (taken), ``pending`` (retried on the
    client's pool, as ``write_binlog_async``) or ``error`` (refused for good)."""
    kind = _TYPE_NAMES.get(binlog.tp, "other")
    out: Future = Future()
    entry = client.owner(binlog.start_ts)
    if entry is None or kind == "prewrite" or client.closed():
        # the async path gives it up (no prewrite, closed) or retries it
        out.set_result(WriteResult(pending=client.retry_later(binlog)))
        return out
    channel = client.channel(entry)
    started = time.monotonic()
    try:
        call = channel.write_future(client.cluster_id, encode(binlog), client.rpc_timeout_s)
    except BinlogError:  # the channel was reset under us: the retrying path
        out.set_result(WriteResult(pending=client.retry_later(binlog)))
        return out
    seq = client.track(out, entry.node_id)  # flush()/close() wait for it and its retry

    def done(call_future) -> None:
        # On gRPC's callback thread (the channel's): nothing here may wait. A failed
        # call's UNAVAILABLE resets the channel, which hands the close to a thread of its
        # own (transport.close_in_background); the retry is queued on the client's pool
        # and tracked under the same flush number before ``out`` resolves. ``out``'s own
        # callbacks (the caller's) run here too and must be as short.
        try:
            try:
                errmsg = channel.result(call_future)
            except UnavailableError as exc:
                errmsg = str(exc)
            error = client.outcome(entry, errmsg, forget_ts=binlog.start_ts)
        except BinlogError as exc:  # refused for good (too large, other cluster)
            client.give_up(binlog, kind, "rejected", str(exc))
            out.set_result(WriteResult(error=exc))
            return
        except BaseException as exc:
            out.set_exception(exc)  # never leave the caller's future unresolved
            raise
        if error is None:
            metrics.WRITE_OK[kind].inc()
            metrics.WRITE_SECONDS[kind].observe(time.monotonic() - started)
            out.set_result(WriteResult(node_id=entry.node_id))
        else:
            out.set_result(WriteResult(pending=client.retry_later(binlog, seq)))

    call.add_done_callback(done)
    return out
