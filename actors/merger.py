"""MergerActor: the drainer pipeline's driver (see :mod:`actors.drainer` for the picture).

It keeps a fetch in flight to every pump, merges by commit_ts
(:class:`~tidb_binlog.drainer.merge.Merger`), and hands each ready batch to the
schema keeper; the keeper's result *ref* goes straight to the coordinator, so
translated rows never pass through the merger. At most ``max_inflight`` batches
are outstanding (backpressure). On a :class:`~actors.ray_calls.PipelineReset`
(an actor of the pipeline died and Ray restarted it) it replays from the
durable checkpoint.

Pumps are fetched one batch at a time each: the next fetch starts from the
previous batch's watermark as soon as it arrives, before the batch is merged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from actors.ray_calls import PipelineReset
from actors.ray_calls import RayCalls as _Ray
from tidb_binlog.drainer.merge import Merger

if TYPE_CHECKING:
    from actors.drainer import TaskSettings

__all__ = ["MergerActor"]

log = logging.getLogger(__name__)


class MergerActor:
    """Drives the pipeline: pulls every pump, merges by commit_ts, feeds keeper → coordinator.

    ``sources`` maps a pump's node id to a pump source (see
    :mod:`tidb_binlog.drainer.pump_source`) or a PumpActor handle.
    """

    def __init__(self, settings: TaskSettings, keeper, coordinator, pumps: dict, *,
                 autostart: bool = True):
        self.settings = settings
        self.keeper = keeper
        self.coordinator = coordinator
        self.pumps = dict(pumps)
        self.error: str | None = None
        self.state = "starting"
        self.resets = 0
        self.merged = 0
        self.positions: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="merger", daemon=True)
        if autostart:
            self._thread.start()

    # -- control ---------------------------------------------------------------------------
    def status(self) -> dict:
        return {"state": self.state, "error": self.error, "resets": self.resets,
                "merged": self.merged, "pump_positions": dict(self.positions)}

    def stop(self) -> dict:
        """Stop pulling, let the coordinator finish, save the final checkpoint."""
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is None:
            cp = _Ray.get(_Ray.call(self.coordinator, "close"))
            self.state = "stopped"
            return {"commit_ts": cp.commit_ts, "consistent": cp.consistent}
        return {"error": self.error}

    # -- loop ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._pipeline()
                return
            except PipelineReset as exc:
                self.resets += 1
                log.warning("pipeline reset (%s); replaying from the checkpoint", exc)
                time.sleep(0.5)
            except Exception as exc:  # the task stops; status() names the error
                if _Ray.is_actor_died(exc):
                    self.resets += 1
                    log.warning("a pipeline actor died (%s); replaying from the checkpoint", exc)
                    time.sleep(0.5)
                    continue
                self.error = f"{type(exc).__name__}: {exc}"
                self.state = "failed"
                log.error("replication task stopped: %s", self.error)
                return

    def _pipeline(self) -> None:
        cp = _Ray.get(_Ray.call(self.coordinator, "reset"))
        _Ray.get(_Ray.call(self.keeper, "reset", cp.schema_version))
        merger = Merger(start_ts=cp.commit_ts)
        fetchers = {name: _Fetcher(name, pump, cp.commit_ts, self.settings.pull_max_bytes)
                    for name, pump in self.pumps.items()}
        for name in fetchers:
            merger.add_source(name, cp.commit_ts)
        self.state = "running"
        seq = 0
        inflight: deque = deque()
        last_idle = 0.0
        while not self._stop.is_set():
            progressed = False
            for name, f in fetchers.items():
                for items, watermark in f.poll():
                    merger.push(name, items, watermark)
                    self.positions[name] = watermark
                    progressed = True
            ready = merger.pop_ready(self.settings.merge_batch)
            if ready:
                items = [(it.commit_ts, it.payload) for it in ready]
                translated = _Ray.call(self.keeper, "translate", items)
                inflight.append(_Ray.call(self.coordinator, "apply", seq, translated))
                seq += 1
                self.merged += len(ready)
                progressed = True
            while inflight and (len(inflight) >= self.settings.max_inflight
                                or _Ray.ready(inflight[0])):
                _Ray.get(inflight.popleft())
            now = time.monotonic()
            if not progressed:
                if not inflight and now - last_idle > 0.5:
                    _Ray.get(_Ray.call(self.coordinator, "idle"))
                    last_idle = now
                f_wait = [f for f in fetchers.values()]
                _Ray.wait_any([r for f in f_wait for r in f.refs()], timeout_s=0.05)
        while inflight:
            _Ray.get(inflight.popleft())


class _Fetcher:
    """One pump's pull loop: one fetch in flight, the next from the last watermark."""

    def __init__(self, name: str, pump, since_ts: int, max_bytes: int):
        self.name = name
        self.pump = pump
        self.since_ts = since_ts
        self.max_bytes = max_bytes
        self._pending = None

    def refs(self) -> list:
        return list(self._pending) if self._pending else []

    def poll(self) -> list[tuple[list, int]]:
        out = []
        if self._pending is not None:
            batch_ref, wm_ref = self._pending
            if not _Ray.ready(wm_ref):
                return out
            self._pending = None
            items, watermark = _Ray.get(batch_ref), _Ray.get(wm_ref)
            self.since_ts = max(self.since_ts, watermark)
            out.append((items, watermark))
        self._pending = _Ray.pull(self.pump, self.since_ts, self.max_bytes)
        return out


