"""``TsoBatcher``: concurrent sessions' timestamp requests served by one TSO call.

PD's client does this (``tsoDispatcher``): requests that arrive while a TSO RPC is
in flight wait, and the next RPC asks for all of them at once (``count = n``) and
hands out the ``n`` consecutive timestamps. Here the waiting requests take turns
as the caller of the source instead of a dispatcher thread (leader/follower):

- a request is queued; if no call is in flight, its own thread becomes the
  *leader*: it takes the whole queue (itself included), calls
  ``source(len(queue))`` outside the lock and gives the i-th queued request
  ``first + i``, in queue order;
- a request that arrives while a call is in flight waits; when the call
  returns, the first still-queued request (if any) is made the next leader.

**Why the order guarantee holds.** A batch is the queue as it was *before* its
source call started, so every request in it was made before that call, and the
source (PD's TSO, our registry or :class:`~tidb_binlog.tso.TimestampOracle`)
allocates strictly above everything it returned earlier. A timestamp returned
to a request is therefore greater than every timestamp returned to anyone
before that request was made. No timestamp is ever cached or pre-fetched:
a request is never served by a call that started before it was queued. So a
commit_ts taken while the transaction's row locks are held is greater than the
commit_ts of every transaction whose COMMIT finished before (TiDB's requirement),
and timestamps are unique and increasing across all sessions sharing the
batcher, as they are across all callers of the source.

Errors: when the source raises, every request of that batch raises the same
exception (the caller retries, as after a failed PD call); queued requests
of later batches are unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tidb_binlog.errors import InvalidArgument, TSOError

__all__ = ["TsoBatcher", "DEFAULT_MAX_BATCH"]

DEFAULT_MAX_BATCH = 10_000  # PD client's maxBatchSize; the TSO hands out < 2^18 per call


class _Request:
    __slots__ = ("ts", "error", "lead")

    def __init__(self) -> None:
        self.ts: int | None = None
        self.error: BaseException | None = None
        self.lead = False


class TsoBatcher:
    """Wraps ``source(count) -> first ts`` (``RegistryClient.get_ts``,
    ``TimestampOracle.get_ts``); ``get_ts()`` is the Upstream's ``get_ts``."""

    def __init__(self, source: Callable[[int], int], *, max_batch: int = DEFAULT_MAX_BATCH):
        if max_batch < 1:
            raise InvalidArgument(f"max_batch must be at least 1, got {max_batch}")
        self._source = source
        self._max_batch = max_batch
        self._cv = threading.Condition()
        self._queue: list[_Request] = []
        self._busy = False  # a source call is in flight
        self.calls = 0  # source calls made (for tests and benches)
        self.served = 0  # timestamps handed out

    def get_ts(self) -> int:
        """One timestamp, allocated by a source call that started after this call."""
        req = _Request()
        with self._cv:
            self._queue.append(req)
            if self._busy:
                self._cv.wait_for(lambda: req.ts is not None or req.error is not None
                                  or req.lead)
                if not req.lead:
                    return self._result(req)
            self._busy = True
            batch = self._queue[:self._max_batch]
            del self._queue[:len(batch)]
        try:
            first = self._source(len(batch))
            if not isinstance(first, int) or first <= 0:
                raise TSOError(f"the TSO source returned {first!r} for {len(batch)} timestamps; "
                               "expected a positive int")
        except BaseException as exc:
            self._finish(batch, None, exc)
            raise
        self._finish(batch, first, None)
        return self._result(req)

    def _finish(self, batch: list[_Request], first: int | None, error: BaseException | None):
        with self._cv:
            for i, r in enumerate(batch):
                if error is None:
                    r.ts = first + i
                else:
                    r.error = error
            self.calls += 1
            if error is None:
                self.served += len(batch)
            if self._queue:
                self._queue[0].lead = True  # the next batch's caller
            else:
                self._busy = False
            self._cv.notify_all()

    @staticmethod
    def _result(req: _Request) -> int:
        if req.error is not None:
            raise req.error
        return req.ts

    def queued(self) -> int:
        """Requests waiting for the next source call (for tests)."""
        with self._cv:
            return len(self._queue)
