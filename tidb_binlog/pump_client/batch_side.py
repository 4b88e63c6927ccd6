"""The narrow view of a pump client that the batched path gets: :class:`BatchSide`
implements :class:`~tidb_binlog.pump_client.batch.BatchClient` over a
:class:`~tidb_binlog.pump_client.client.PumpClient`, so :mod:`.batch` never reaches
into the client's private state and does not import the client."""

from __future__ import annotations

from concurrent.futures import Future

from tidb_binlog.binlog import Binlog
from tidb_binlog.pump_client.book import PumpEntry
from tidb_binlog.pump_client.transport import PumpChannel

__all__ = ["BatchSide"]


class BatchSide:
    """The :class:`~.batch.BatchClient` of one client: the narrow view the batched
    path and ``write_finish_nowait`` get instead of the client itself. Each member
    is one call into the client (the ``select``/``owner`` look-ups under its lock, as
    everywhere else in the client)."""

    __slots__ = ("_client",)

    def __init__(self, client):
        self._client = client  # the PumpClient (not imported: client.py imports this module)

    @property
    def cluster_id(self) -> int:
        return self._client.cluster_id

    @property
    def rpc_timeout_s(self) -> float:
        return self._client.rpc_timeout_s

    def rpc_timeout_for(self, nbytes: int) -> float:
        return self._client.rpc_timeout_for(nbytes)

    def closed(self) -> bool:
        return self._client._closed.is_set()

    def channel(self, entry: PumpEntry) -> PumpChannel:
        return self._client._channel(entry)

    def encode_prewrite(self, binlog: Binlog) -> bytes:
        return self._client._encode(binlog)

    def select(self, start_ts: int) -> PumpEntry | None:
        c = self._client
        with c._lock:
            return c._book.select(start_ts)

    def owner(self, start_ts: int) -> PumpEntry | None:
        c = self._client
        with c._lock:
            return c._book.owner(start_ts)

    def outcome(self, entry: PumpEntry, errmsg: str, *, remember_ts: int | None = None,
                forget_ts: int | None = None) -> str | None:
        return self._client._outcome(entry, errmsg, remember_ts=remember_ts,
                                     forget_ts=forget_ts)

    def write_prewrite(self, binlog: Binlog, payload: bytes, tried: dict[str, str]) -> str:
        return self._client._write_prewrite(binlog.start_ts, payload, tried)

    def give_up(self, binlog: Binlog, kind: str, reason: str, why: str) -> None:
        return self._client._give_up(binlog, kind, reason, why)

    def retry_later(self, binlog: Binlog, seq: int | None = None) -> Future:
        return self._client._retry_later(binlog, seq)

    def track(self, fut: Future, node_id: str) -> int:
        return self._client._track(fut, node_id)
