"""The registry and TSO as a named, detached Ray actor (PD's role), and its client.

:class:`RegistryActor` is a plain async class that owns a
:class:`tidb_binlog.registry.RegistryState`; :data:`_ACTOR_OPTIONS` are its Ray
options (detached, ``max_restarts=-1``, retried calls, no CPU). Every Ray call goes
through :mod:`actors.ray_calls`.
Ray restarts a crashed actor with the same ``data_dir``, so it reloads every
record, the revision, the cluster id and the TSO high-water mark.

``watch(kind, since_revision, timeout_s)`` long-polls on an ``asyncio.Condition``
that every change notifies: clients learn of changes without polling, and many
watchers cost one coroutine each.

:class:`RayRegistryClient` implements :class:`tidb_binlog.node.RegistryClient`
and is the only code that calls the registry actor: it pickles (an actor
handle and a timeout), so it can be handed to other actors, and it turns Ray's
failures into :class:`~tidb_binlog.errors.UnavailableError`.

Example::

    reg = get_or_create_registry("/data/registry", namespace="tidb-binlog")
    reg.update_node(PUMP, NodeStatus("pump-1", "10.0.0.1:8250"))
    ts = reg.get_ts(100)        # 100 consecutive timestamps from ts
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading

from actors.ray_calls import GetTimeoutError, RayActorError, RayCalls, RayError, RayTaskError
from tidb_binlog.drainer.pipeline.names import DEFAULT_NAMESPACE
from tidb_binlog.errors import BinlogError, UnavailableError
from tidb_binlog.node import WATCH_STOP_CHECK_S, NodeStatus
from tidb_binlog.registry import DEFAULT_ALIVE_TIMEOUT_S, RegistryState

__all__ = [
    "REGISTRY_NAME",
    "DEFAULT_NAMESPACE",
    "RegistryActor",
    "RayRegistryClient",
    "get_or_create_registry",
    "connect_registry",
]

REGISTRY_NAME = "tidb-binlog-registry"
# Extra seconds a client waits for a reply beyond the call's own work (a restart
# of the actor reloads a small JSON file; this only bounds a hung cluster).
_CALL_TIMEOUT_S = 60.0


class RegistryActor:
    """The registry state behind an async actor interface (one event loop, no locks)."""

    def __init__(self, data_dir: str, alive_timeout_s: float = DEFAULT_ALIVE_TIMEOUT_S):
        self._state = RegistryState(data_dir, alive_timeout_s=alive_timeout_s)
        self._changed: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        # Created on first use, inside the actor's event loop.
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()

    async def cluster_id(self) -> int:
        return self._state.cluster_id

    async def revision(self) -> int:
        return self._state.revision

    async def get_ts(self, count: int = 1) -> int:
        return self._state.get_ts(count)

    async def update_node(self, kind: str, status: NodeStatus, force: bool = False) -> int:
        revision = self._state.update_node(kind, status, force=force)
        await self._notify()
        return revision

    async def nodes(self, kind: str) -> list[NodeStatus]:
        return self._state.nodes(kind)

    async def node(self, kind: str, node_id: str) -> NodeStatus | None:
        return self._state.node(kind, node_id)

    async def watch(self, kind: str, since_revision: int,
                    timeout_s: float) -> tuple[int, list[NodeStatus]]:
        cond = self._condition()

        def changed() -> bool:
            return bool(self._state.changes_since(kind, since_revision)[1])

        async with cond:
            if not changed() and timeout_s > 0:
                try:
                    await asyncio.wait_for(cond.wait_for(changed), timeout_s)
                except TimeoutError:
                    pass  # the long poll ended without a change: report the current records
        return self._state.revision, self._state.nodes(kind)

    async def kv_get(self, key: str) -> str | None:
        return self._state.kv_get(key)

    async def kv_put(self, key: str, value: str) -> int:
        revision = self._state.kv_put(key, value)
        await self._notify()
        return revision

    async def ping(self) -> str:
        return "ok"


_ACTOR_OPTIONS = dict(
    num_cpus=0,
    max_restarts=-1,
    max_task_retries=-1,
    max_concurrency=1000,  # every watcher holds a slot while it waits
    lifetime="detached",
    get_if_exists=True,  # a running registry is reused (it keeps its own data_dir)
)
"""The registry actor's Ray options (name, namespace and resources added per start)."""


class RayRegistryClient:
    """``RegistryClient`` over the registry actor; picklable, every Ray call inside."""

    def __init__(self, actor, *, call_timeout_s: float = _CALL_TIMEOUT_S,
                 namespace: str | None = None):
        self.actor = actor
        self._call_timeout_s = call_timeout_s
        # The Ray namespace the registry lives in: the cluster's pumps (PumpActors) and
        # drainers are named there, so a drainer started from this client finds them.
        self.namespace = namespace

    def __reduce__(self):
        return (RayRegistryClient, (self.actor,),
                {"_call_timeout_s": self._call_timeout_s, "namespace": self.namespace})

    def _call(self, method: str, *args, extra_timeout_s: float = 0.0,
              stop: threading.Event | None = None):
        timeout_s = self._call_timeout_s + extra_timeout_s
        try:
            if stop is not None:
                return RayCalls.call_unless_stopped(self.actor, method, *args,
                                                    timeout_s=timeout_s, stop=stop,
                                                    check_s=WATCH_STOP_CHECK_S)
            return RayCalls.call_within(self.actor, method, *args, timeout_s=timeout_s)
        except RayTaskError as exc:
            if isinstance(exc.cause, BinlogError):
                raise exc.cause from exc  # the registry refused (StateError, TSOError, ...)
            raise
        except (RayActorError, GetTimeoutError) as exc:
            raise UnavailableError(f"the registry actor did not answer {method}: {exc}") from exc
        except RayError as exc:
            raise UnavailableError(f"registry call {method} failed: {exc}") from exc

    def cluster_id(self) -> int:
        return self._call("cluster_id")

    def revision(self) -> int:
        return self._call("revision")

    def get_ts(self, count: int = 1) -> int:
        return self._call("get_ts", count)

    def update_node(self, kind: str, status: NodeStatus, *, force: bool = False) -> None:
        self._call("update_node", kind, status, force)

    def nodes(self, kind: str) -> list[NodeStatus]:
        return self._call("nodes", kind)

    def node(self, kind: str, node_id: str) -> NodeStatus | None:
        return self._call("node", kind, node_id)

    def watch(self, kind: str, since_revision: int, timeout_s: float,
              stop: threading.Event | None = None) -> tuple[int, list[NodeStatus]] | None:
        return self._call("watch", kind, since_revision, timeout_s, extra_timeout_s=timeout_s,
                          stop=stop)

    def kv_get(self, key: str) -> str | None:
        return self._call("kv_get", key)

    def kv_put(self, key: str, value: str) -> None:
        self._call("kv_put", key, value)


def get_or_create_registry(data_dir: str | os.PathLike, *, namespace: str = DEFAULT_NAMESPACE,
                           name: str = REGISTRY_NAME,
                           alive_timeout_s: float = DEFAULT_ALIVE_TIMEOUT_S,
                           resources: dict[str, float] | None = None) -> RayRegistryClient:
    """Start the detached registry actor (or reuse the running one) and return its client.

    Needs ``ray.init()`` first. An existing actor keeps its own ``data_dir``.
    ``resources`` places it on a multi-node cluster: ``data_dir`` is on one machine's
    disk, so a restart must land there too, e.g. ``{"node:__internal_head__": 0.001}``
    keeps it on the head node (cluster/README.md, "A cluster with ray up").
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    try:
        actor = RayCalls.start_actor(RegistryActor, data_dir, alive_timeout_s, options={
            **_ACTOR_OPTIONS, "name": name, "namespace": namespace, "resources": resources})
    except RayError as exc:
        raise UnavailableError(f"cannot start the registry actor {namespace}/{name}: {exc}") from exc
    client = RayRegistryClient(actor, namespace=namespace)
    client._call("ping")  # surfaces a failing constructor (unreadable snapshot) here
    return client


def connect_registry(*, namespace: str = DEFAULT_NAMESPACE,
                     name: str = REGISTRY_NAME) -> RayRegistryClient:
    """The client of a running registry actor; UnavailableError if there is none."""
    try:
        actor = RayCalls.get_actor(name, namespace)
    except ValueError as exc:
        raise UnavailableError(
            f"no registry actor {name!r} in Ray namespace {namespace!r}; start one with "
            "cluster.registry.get_or_create_registry(data_dir)") from exc
    return RayRegistryClient(actor, namespace=namespace)


def join_registry(namespace: str = DEFAULT_NAMESPACE, name: str = REGISTRY_NAME,
                  address: str = "auto") -> RayRegistryClient:
    """Join a running Ray cluster (``address``) and return its registry client.

    For plain processes (the standalone pump, binlogctl) that follow a registry
    actor started elsewhere; keeps the ``ray`` import out of the pure core.
    """
    if not RayCalls.is_initialized():
        reason = _nothing_answers(address)
        if reason is not None:  # ray.init would retry such an address for minutes
            raise UnavailableError(
                f"no Ray cluster answers at {address} ({reason}); pass the cluster's GCS "
                "address (--ray-address host:port or $RAY_ADDRESS, as `ray start --head` "
                "prints it)")
        try:
            RayCalls.init(address=address, namespace=namespace, log_to_driver=False)
        except ConnectionError as exc:
            where = "on this host" if address == "auto" else f"at {address}"
            raise UnavailableError(
                f"no Ray cluster {where} to find the registry in ({exc}); start the cluster "
                "(`ray up` / `ray start`) or pass its GCS address (--ray-address host:port "
                "or $RAY_ADDRESS)") from exc
    return connect_registry(namespace=namespace, name=name)


def _nothing_answers(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing listens at a ``host:port`` address; None when something does or the
    address is not host:port (``auto``, ``ray://...``: ray.init decides)."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)
