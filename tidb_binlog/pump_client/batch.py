"""The batched write path of :class:`~tidb_binlog.pump_client.client.PumpClient`.

For high-throughput callers (an upstream inside Ray writing many transactions):
the first attempt of every binlog in the batch is pipelined as gRPC futures over
the one channel per pump, and the replies are collected afterwards. Prewrites
are sent first and commits/rollbacks second, so a commit in the same batch as
its prewrite reaches the pump after it and goes to the pump that took it.

- A prewrite whose first attempt failed falls back to the client's retrying
  path (next pump, write timeout); its result carries the error if that fails.
- A commit/rollback whose first attempt failed is handed to the client's async
  retry pool (same pump, ``commit_retry_s``); its result carries that future
  in ``pending``. A commit is never reported as an error unless the pump
  refused it for good (too large, other cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidb_binlog.binlog import Binlog, BinlogType, encode
from tidb_binlog.errors import BinlogError, UnavailableError
from tidb_binlog.pump_client import metrics
from tidb_binlog.pump_client.book import PumpEntry

if TYPE_CHECKING:
    from tidb_binlog.pump_client.client import PumpClient

__all__ = ["WriteResult", "write_batch"]

_TYPE_NAMES = {BinlogType.PREWRITE: "prewrite", BinlogType.COMMIT: "commit",
               BinlogType.ROLLBACK: "rollback"}


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


def write_batch(client: PumpClient, binlogs: Sequence[Binlog]) -> list[WriteResult]:
    """Write a batch through ``client``; per-binlog results in input order."""
    results = [WriteResult() for _ in binlogs]
    prewrites = [i for i, b in enumerate(binlogs) if b.tp == BinlogType.PREWRITE]
    finishes = [i for i, b in enumerate(binlogs) if b.tp != BinlogType.PREWRITE]
    _prewrites(client, binlogs, prewrites, results)
    _finishes(client, binlogs, finishes, results)
    return results


def _prewrites(client: PumpClient, binlogs, indexes, results) -> None:
    inflight = []
    for i in indexes:
        try:
            payload = client._encode(binlogs[i])
        except BinlogError as exc:
            results[i].error = exc
            continue
        with client._lock:
            entry = client._book.select(binlogs[i].start_ts)
        if entry is None:
            inflight.append((i, payload, None, None))
            continue
        channel = client._channel(entry)
        inflight.append((i, payload, entry, channel.write_future(
            client.cluster_id, payload, client.rpc_timeout_s)))
    for i, payload, entry, fut in inflight:
        tried: dict[str, str] = {}
        try:
            if entry is not None:
                error = _finish_future(client, entry, fut)
                if error is None:
                    with client._lock:
                        client._book.remember(binlogs[i].start_ts, entry.node_id)
                    metrics.WRITE_OK["prewrite"].inc()
                    results[i].node_id = entry.node_id
                    continue
                tried[entry.node_id] = error
            results[i].node_id = client._write_prewrite(binlogs[i], payload, tried)
        except BinlogError as exc:
            results[i].error = exc


def _finishes(client: PumpClient, binlogs, indexes, results) -> None:
    inflight = []
    for i in indexes:
        with client._lock:
            entry = client._book.owner(binlogs[i].start_ts)
        payload = encode(binlogs[i])
        fut = None if entry is None else client._channel(entry).write_future(
            client.cluster_id, payload, client.rpc_timeout_s)
        inflight.append((i, entry, fut))
    for i, entry, fut in inflight:
        binlog = binlogs[i]
        try:
            error = None if entry is None else _finish_future(client, entry, fut)
        except BinlogError as exc:
            client._give_up(binlog, _TYPE_NAMES.get(binlog.tp, "other"), "rejected", str(exc))
            results[i].error = exc
            continue
        if entry is not None and error is None:
            with client._lock:
                client._book.forget(binlog.start_ts)
            metrics.WRITE_OK[_TYPE_NAMES.get(binlog.tp, "other")].inc()
            results[i].node_id = entry.node_id
        else:
            results[i].pending = client.write_binlog_async(binlog)


def _finish_future(client: PumpClient, entry: PumpEntry, fut) -> str | None:
    channel = client._channel(entry)
    try:
        errmsg = channel.result(fut)
    except UnavailableError as exc:
        errmsg = str(exc)
    return client._outcome(entry, errmsg)
