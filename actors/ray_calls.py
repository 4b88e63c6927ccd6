"""Every Ray API call of ``actors/`` and ``cluster/drainer.py``, in one module.

The actor classes are plain Python around the pipeline's plain objects
(:mod:`tidb_binlog.drainer.pipeline`); whatever they need from Ray (a remote call, a
wait, a lookup by name, an actor class made remote) is a function here, so:

- the shells and the pure core are importable and unit-tested without Ray (a test
  swaps the one object it needs: :class:`WorkerCalls`, :class:`PumpPullCalls`, ...);
- Ray's errors are translated in one place: a dead or restarting pipeline actor is a
  :class:`PipelineReset` (replay from the checkpoint), a pump actor that is gone an
  :class:`~tidb_binlog.errors.UnavailableError`, a remote
  :class:`~tidb_binlog.errors.BinlogError` arrives as itself.

``ray`` is imported here only. (Ray Serve keeps the same rule for its replicas.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import ray
import ray.util.metrics
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tidb_binlog.drainer.pipeline.gate import PipelineReset
from tidb_binlog.drainer.pipeline.names import pump_actor_name
from tidb_binlog.errors import BinlogError, InvalidArgument, ProtocolError, UnavailableError
from tidb_binlog.metrics_mirror import MetricsMirror
from tidb_binlog.packed import unpack

__all__ = ["RayCalls", "PipelineReset", "WorkerCalls", "PumpPullCalls", "PipelineCalls",
           "GetTimeoutError", "RayError", "RayTaskError", "RayActorError",
           "PumpPayloadSource"]

log = logging.getLogger(__name__)

GetTimeoutError = ray.exceptions.GetTimeoutError
RayError = ray.exceptions.RayError
"""Any error Ray raises (a dead actor, a timeout, a remote exception): for callers that
report it as it is rather than translate it (:meth:`RayCalls.call_within`)."""
RayTaskError = ray.exceptions.RayTaskError
"""A remote method raised (its ``cause`` is the exception): the registry client re-raises
a remote BinlogError as itself."""
RayActorError = ray.exceptions.RayActorError
READ_PAYLOAD_TIMEOUT_S = 120.0
"""How long the keeper waits for one range of a referenced binlog from its pump."""
_UNAVAILABLE = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.ObjectLostError)


class RayCalls:
    """The Ray calls of the drainer's shells and of ``cluster/drainer.py``."""

    # -- remote calls and their results ---------------------------------------------------
    @staticmethod
    def call(actor, method: str, *args):
        return getattr(actor, method).remote(*args)

    @staticmethod
    def call_n(actor, method: str, num_returns: int, *args) -> list:
        """A call whose result is ``num_returns`` objects (one ref each)."""
        refs = getattr(actor, method).options(num_returns=num_returns).remote(*args)
        return list(refs) if num_returns > 1 else [refs]

    @staticmethod
    def call_group(actor, method: str, group: str, *args):
        """A call in the actor's concurrency group ``group`` (``status``: answered while
        the actor is busy applying)."""
        return getattr(actor, method).options(concurrency_group=group).remote(*args)

    @staticmethod
    def get(ref):
        """The call's result; a remote BinlogError as itself, a dead actor (or a lost
        object) as :class:`PipelineReset`."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc
            while isinstance(cause, ray.exceptions.RayTaskError) and cause.cause is not None:
                cause = cause.cause  # a task whose argument (another task) failed nests
            if isinstance(cause, BinlogError):
                raise cause from None
            if isinstance(cause, _UNAVAILABLE):
                raise PipelineReset(f"a pipeline actor is unavailable: {cause}") from exc
            raise
        except _UNAVAILABLE as exc:
            # ObjectLostError: a routed payload whose owner (the merger) died
            raise PipelineReset(f"a pipeline actor is unavailable: {exc}") from exc

    @staticmethod
    def get_within(ref, timeout_s: float):
        """:meth:`get` within ``timeout_s``; :data:`GetTimeoutError` if not ready by then."""
        ready, _ = ray.wait([ref], timeout=max(timeout_s, 0.0))
        if not ready:
            raise GetTimeoutError(f"not ready within {timeout_s} s")
        return RayCalls.get(ref)

    @staticmethod
    def call_within(actor, method: str, *args, timeout_s: float):
        """``actor.method(*args)``'s result within ``timeout_s``, Ray's errors as they are
        (:data:`RayError`; :data:`GetTimeoutError` past the timeout): for launchers and
        tools that report them, where :meth:`get` would turn a dead actor into a
        pipeline reset."""
        return ray.get(getattr(actor, method).remote(*args), timeout=timeout_s)

    @staticmethod
    def call_unless_stopped(actor, method: str, *args, timeout_s: float,
                            stop: threading.Event, check_s: float):
        """:meth:`call_within`, looking at ``stop`` every ``check_s`` seconds while it
        waits: once set, returns None at once and leaves the call's result behind (for a
        long poll that must not outlive its caller's close)."""
        ref = getattr(actor, method).remote(*args)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            ready, _ = ray.wait([ref], timeout=max(min(left, check_s), 0.0))
            if ready:
                return ray.get(ref)
            if stop.is_set():
                return None
            if left <= 0:
                raise GetTimeoutError(f"{method} not answered within {timeout_s} s")

    @staticmethod
    def ready(ref) -> bool:
        done, _ = ray.wait([ref], timeout=0)
        return bool(done)

    @staticmethod
    def wait(refs: list, timeout_s: float | None, all_ready: bool = False) -> list:
        """The first ref to be ready (within ``timeout_s``); with ``all_ready``, every
        ref ready by then (``timeout_s = 0``: those ready now)."""
        done, _ = ray.wait(refs, num_returns=len(refs) if all_ready else 1,
                           timeout=timeout_s)
        return done

    @staticmethod
    def wait_any(refs: list, timeout_s: float) -> None:
        if refs:
            ray.wait(refs, num_returns=1, timeout=timeout_s)
        else:
            time.sleep(timeout_s)

    @staticmethod
    def resolve(value):
        """``value``, or what it refers to when it is an ObjectRef (or a list of one)."""
        if isinstance(value, ray.ObjectRef):
            return ray.get(value)
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], ray.ObjectRef):
            return ray.get(value[0])
        return value

    @staticmethod
    def is_actor_died(exc: BaseException) -> bool:
        return isinstance(exc, (ray.exceptions.RayActorError,
                                ray.exceptions.ActorUnavailableError))

    @staticmethod
    def status(actor, timeout_s: float = 10.0) -> dict:
        """``actor.status()`` in its ``status`` concurrency group, within ``timeout_s``."""
        return ray.get(actor.status.options(concurrency_group="status").remote(),
                       timeout=timeout_s)

    @staticmethod
    def gather_metrics(actors: list, timeout_s: float) -> list:
        """Each actor's ``metrics()`` (Prometheus text), from those answering in time."""
        refs = [a.metrics.remote() for a in actors]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        out = []
        for ref in done:
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayError as exc:
                log.warning("worker metrics unavailable: %s", exc)
        return out

    # -- actors: creating, finding, ending --------------------------------------------------
    @staticmethod
    def start_actor(cls, *args, options: dict, **kwargs):
        """A new actor of the plain class ``cls``: ``ray.remote(**options)(cls)``, its
        constructor called with ``args`` and ``kwargs``. ``options``: Ray's actor options
        (``max_restarts``, ``name``, ``namespace``, ``lifetime``, ``scheduling_strategy``,
        ``concurrency_groups``, ...); a None value is left out."""
        options = {k: v for k, v in options.items() if v is not None}
        return ray.remote(**options)(cls).remote(*args, **kwargs)

    @staticmethod
    def pinned(node_id: str | None = None):
        """A scheduling strategy that keeps an actor on ``node_id`` (default: this node)."""
        return NodeAffinitySchedulingStrategy(node_id or RayCalls.current_node_id(), soft=False)

    @staticmethod
    def alive_node_resources() -> list[dict]:
        """The total resources of each alive node of the cluster (custom ones included):
        whether some node can ever hold an actor that asks for a resource."""
        return [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]

    @staticmethod
    def current_node_id() -> str:
        return ray.get_runtime_context().get_node_id()

    @staticmethod
    def current_actor_name() -> str:
        """This actor's name (``pump-0``, ``orders-merger``), "" outside a named actor."""
        try:
            return ray.get_runtime_context().get_actor_name() or ""
        except Exception:  # not in an actor (a driver, a unit test)
            return ""

    @staticmethod
    def find_actor(name: str, namespace: str):
        """The named actor's handle, or None."""
        try:
            return ray.get_actor(name, namespace=namespace)
        except ValueError:
            return None

    @staticmethod
    def lookup(name: str, namespace: str, timeout_s: float = 60.0):
        """The named actor's handle, waiting up to ``timeout_s`` for it to be registered
        (a task's peers are created just before the actor that looks them up; a restart
        finds them at once). UnavailableError names the actor when it never appears."""
        deadline = time.monotonic() + timeout_s
        while True:
            actor = RayCalls.find_actor(name, namespace)
            if actor is not None:
                return actor
            if time.monotonic() > deadline:
                raise UnavailableError(f"no actor {name!r} in Ray namespace {namespace!r} "
                                       f"after {timeout_s:g} s: the replication task is "
                                       "incomplete (removed, or one of its actors was "
                                       "killed); see `ray list actors` and submit it again")
            time.sleep(0.2)

    @staticmethod
    def named_actors(namespace: str) -> list[str]:
        """The names of the live named actors in ``namespace``."""
        return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                if a.get("namespace") == namespace]

    @staticmethod
    def reconstructed() -> bool:
        """Whether this actor process is a restart (Ray reconstructed it)."""
        try:
            return ray.get_runtime_context().was_current_actor_reconstructed
        except Exception:  # not in an actor (unit tests)
            return False

    @staticmethod
    def kill(actor) -> None:
        ray.kill(actor, no_restart=True)

    @staticmethod
    def restart(actor) -> None:
        """Kill the actor's process and let Ray restart it (a fault injected on purpose)."""
        ray.kill(actor, no_restart=False)

    @staticmethod
    def get_actor(name: str, namespace: str):
        """The named actor's handle; Ray's ValueError when there is none (for callers
        that word that error themselves; :meth:`find_actor` returns None instead)."""
        return ray.get_actor(name, namespace=namespace)

    @staticmethod
    def actor_process(actor) -> tuple[str, int | None]:
        """The actor's state (``ALIVE``, ``RESTARTING``, ...) and current pid, from
        Ray's control store (the actor itself is not asked: it may be busy or
        restarting). A private Ray API: chaos only."""
        info = ray._private.state.actors(actor._actor_id.hex())  # private: may move
        return str(info.get("State")), (int(info["Pid"]) if info.get("Pid") else None)

    @staticmethod
    def actor_id(actor) -> str:
        return actor._actor_id.hex()

    # -- the driver: joining a cluster --------------------------------------------------------
    @staticmethod
    def is_initialized() -> bool:
        return ray.is_initialized()

    @staticmethod
    def init(**options) -> None:
        ray.init(**options)

    @staticmethod
    def shutdown() -> None:
        ray.shutdown()

    @staticmethod
    def session_dir() -> str:
        """This Ray session's directory (its ``logs/``); a private Ray API."""
        return ray._private.worker._global_node.get_session_dir_path()  # private: may move

    @staticmethod
    def gcs_address() -> str:
        return ray.get_runtime_context().gcs_address

    @staticmethod
    def recorded_cluster() -> str | None:
        """The cluster ``ray start`` recorded on this host (a private Ray API: None when
        it is missing or fails)."""
        try:
            from ray._private.services import find_bootstrap_address  # private: may move

            return find_bootstrap_address(None)
        except Exception as exc:
            log.debug("cannot read the recorded Ray cluster: %s", exc)
            return None


MIRROR_INTERVAL_S = 10.0
"""How often an actor copies its Prometheus metrics into ``ray.util.metrics``."""


def mirror_metrics(source: str, exposition: Callable[[], bytes],
                   interval_s: float = MIRROR_INTERVAL_S) -> MetricsMirror | None:
    """Copy ``exposition()`` (Prometheus text) into ``ray.util.metrics`` gauges (and
    histograms, same buckets: see :mod:`tidb_binlog.metrics_mirror`) tagged
    ``source`` every ``interval_s`` (first after 1 s), on a daemon thread of this actor,
    so the pump's and the drainer's metrics show in the Ray dashboard and Ray's
    Prometheus export. None (nothing started) outside Ray. A failing scrape is logged
    and retried on the next round."""
    if not ray.is_initialized():
        return None

    def make_gauge(name: str, description: str, tag_keys: tuple[str, ...]):
        return ray.util.metrics.Gauge(name, description=description[:200], tag_keys=tag_keys)

    def make_histogram(name: str, description: str, boundaries: tuple[float, ...],
                       tag_keys: tuple[str, ...]):
        return ray.util.metrics.Histogram(name, description=description[:200],
                                          boundaries=list(boundaries), tag_keys=tag_keys)

    mirror = MetricsMirror(make_gauge, source, make_histogram=make_histogram)

    def run() -> None:
        delay, failing = 1.0, False
        while True:
            time.sleep(delay)
            delay = interval_s
            try:
                mirror.update(exposition())
                failing = False
            except Exception as exc:  # noqa: BLE001 - metrics must never stop the actor
                (log.debug if failing else log.warning)(
                    "metrics of %s not mirrored to Ray (retried every %g s): %s", source,
                    interval_s, exc)
                failing = True

    threading.Thread(target=run, name="ray-metrics-mirror", daemon=True).start()
    return mirror


class WorkerCalls:
    """The coordinator's calls to its SQL workers
    (:class:`~tidb_binlog.drainer.sinks.mysql.coordinator.WorkerCalls`), over Ray."""

    def __init__(self, workers: Sequence):
        self.workers = list(workers)

    def __len__(self) -> int:
        return len(self.workers)

    def begin(self, epoch: int) -> None:
        refs = [w.begin.remote(epoch) for w in self.workers]
        for ref in refs:  # each after the calls sent to it before (Ray keeps the order)
            RayCalls.get(ref)

    def execute(self, worker: int, parts, epoch: int):
        return self.workers[worker].execute.remote(parts, epoch)

    def execute_slice(self, worker: int, payload, lo: int, hi: int, epoch: int):
        return self.workers[worker].execute_slice.remote(payload, lo, hi, epoch)

    def execute_ddl(self, worker: int, ddl, epoch: int):
        return RayCalls.get(self.workers[worker].execute_ddl.remote(ddl, epoch))

    def done(self, handles: list, block: bool) -> list:
        if block:
            return RayCalls.wait(handles, timeout_s=None)
        return RayCalls.wait(handles, timeout_s=0, all_ready=True)

    def result(self, handle):
        return RayCalls.get(handle)


class PumpPullCalls:
    """:class:`~tidb_binlog.drainer.source.pump_source.ActorPumpSource`'s calls to a PumpActor."""

    def pull(self, actor, since_commit_ts: int, max_bytes: int, timeout_s: float, *,
             ref_above: int = 0):
        """``(batch_ref, watermark_ref)`` of one ``PumpActor.pull``; the batch comes packed
        (:mod:`tidb_binlog.packed`), :meth:`get` of it unpacks. ``ref_above`` > 0: Commit
        binlogs of that many bytes or more come as ``BinlogRef`` items
        (:class:`PumpPayloadSource` reads them)."""
        extra = {"ref_above": ref_above} if ref_above > 0 else {}
        return actor.pull.options(num_returns=2).remote(since_commit_ts, max_bytes, timeout_s,
                                                        packed=True, **extra)

    def ready(self, refs: Sequence, timeout_s: float) -> set:
        """The refs already resolved, waiting up to ``timeout_s`` for the first one."""
        if not refs:
            return set()
        done, _ = ray.wait(list(refs), num_returns=1, timeout=timeout_s, fetch_local=False)
        if done:
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0, fetch_local=False)
        return set(done)

    def get(self, ref, what: str):
        try:
            return unpack(ray.get(ref))
        except BinlogError:
            raise
        except ray.exceptions.RayActorError as exc:
            raise UnavailableError(f"{what}: the pump actor is unavailable ({exc}); "
                                   "start fetching again from the last watermark") from exc


class PumpPayloadSource:
    """A :class:`~tidb_binlog.binlog_ref.ByteSource` over the PumpActor that serves a
    referenced binlog: :meth:`read` is one ``PumpActor.read_payload(commit_ts, offset,
    n)`` call. The actor is found by its name (``pump_actor_name(ref.node_id)``) in
    ``namespace``, the task's (where the merger found it: it asks for references only
    then), at the first read and again after a failed one. A pump actor that is gone,
    restarting or not answering within ``timeout_s`` is an
    :class:`~tidb_binlog.errors.UnavailableError` (the keeper turns it into a pipeline
    reset: replay from the checkpoint); an error the pump raised (the binlog is gone from
    its storage, a range outside it) arrives as itself and stops the task."""

    __slots__ = ("ref", "namespace", "timeout_s", "size", "_actor")

    def __init__(self, ref, namespace: str, timeout_s: float = READ_PAYLOAD_TIMEOUT_S):
        self.ref = ref
        self.namespace = namespace
        self.timeout_s = timeout_s
        self.size = ref.size
        self._actor = None

    def _what(self, offset: int, n: int) -> str:
        return (f"reading {n} bytes at {offset} of the binlog at commit_ts "
                f"{self.ref.commit_ts} from pump {self.ref.node_id}")

    def read(self, offset: int, n: int):
        n = max(0, min(n, self.size - offset))
        if offset < 0 or offset > self.size:
            raise InvalidArgument(f"{self._what(offset, n)}: outside its {self.size} bytes")
        if not n:
            return b""
        actor = self._actor
        if actor is None:
            name = pump_actor_name(self.ref.node_id)
            actor = self._actor = RayCalls.find_actor(name, self.namespace)
            if actor is None:
                raise UnavailableError(f"{self._what(offset, n)}: no actor {name!r} in Ray "
                                       f"namespace {self.namespace!r} (the pump is gone)")
        try:
            data = ray.get(actor.read_payload.remote(self.ref.commit_ts, offset, n),
                           timeout=self.timeout_s)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, BinlogError):
                raise exc.cause from None
            raise
        except (*_UNAVAILABLE, ray.exceptions.GetTimeoutError) as exc:
            self._actor = None  # looked up again: the pump may come back under its name
            raise UnavailableError(f"{self._what(offset, n)}: the pump actor is "
                                   f"unavailable ({type(exc).__name__})") from exc
        if type(data) is not bytes:  # out of band: a view over the object store, no copy
            data = memoryview(data)
        if len(data) != n:
            raise ProtocolError(f"{self._what(offset, n)}: the pump answered {len(data)} "
                                "bytes")
        return data


class PipelineCalls:
    """The task driver's calls to the keeper, the sink and the workers
    (:class:`~tidb_binlog.drainer.pipeline.driver.DriverCalls`), over Ray."""

    def __init__(self, keeper, sink, workers: Sequence = ()):
        self.keeper = keeper
        self.sink = sink
        self.workers = list(workers)
        self.pull_calls = PumpPullCalls()
        self._keeper_more = None  # the `more` ref of the last send(_routed), until read

    # -- the pipeline -------------------------------------------------------------------------
    def reset(self, replay: bool):
        return RayCalls.get(self.sink.reset.remote(replay))

    def reset_keeper(self, schema_version: int) -> int:
        return RayCalls.get(self.keeper.reset.remote(schema_version))

    def send(self, seq: int, items):
        translated, more = RayCalls.call_n(self.keeper, "translate_more", 2, items)
        self._keeper_more = more  # the keeper holds a large transaction's next chunks
        return self.sink.apply.remote(seq, translated)

    def send_routed(self, seq: int, items, worker_count: int):
        refs = RayCalls.call_n(self.keeper, "translate_routed", worker_count + 2, items,
                               worker_count)
        self._keeper_more = refs[-1]  # the keeper holds more (a large transaction's chunks)
        # the payload refs nested in a list: Ray hands them on unresolved
        return self.sink.apply_routed.remote(seq, refs[0], refs[1:-1])

    def keeper_more(self) -> bool:
        """Whether the keeper's last routed call left work in it (``more``); False while
        that call runs (:meth:`wait_for_pulls` wakes up when it ends)."""
        ref = self._keeper_more
        if ref is None or not RayCalls.ready(ref):
            return False
        self._keeper_more = None
        return bool(RayCalls.get(ref))

    def done(self, handle) -> bool:
        return RayCalls.ready(handle)

    def result(self, handle):
        return RayCalls.get(handle)

    def idle(self) -> int:
        return RayCalls.get(self.sink.idle.remote())

    def close(self):
        return RayCalls.get(self.sink.close.remote())

    def wait_for_pulls(self, refs: list, timeout_s: float) -> None:
        if self._keeper_more is not None:  # or the keeper's answer whether it holds more
            refs = [*refs, self._keeper_more]
        RayCalls.wait_any(refs, timeout_s)

    # -- around it ----------------------------------------------------------------------------
    def sink_status(self, timeout_s: float = 10.0) -> dict:
        return RayCalls.status(self.sink, timeout_s)

    def worker_metrics(self, timeout_s: float) -> list:
        return RayCalls.gather_metrics(self.workers, timeout_s)

    def find_actor(self, name: str, namespace: str):
        return RayCalls.find_actor(name, namespace)

    def restarted(self) -> bool:
        return RayCalls.reconstructed()

    def actor_died(self, exc: BaseException) -> bool:
        return RayCalls.is_actor_died(exc)
