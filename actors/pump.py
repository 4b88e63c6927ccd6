"""PumpActor: the pump as a Ray actor, pinned to the node that holds its data dir.

:class:`PumpActor` is a plain class around a running pump
(:func:`tidb_binlog.pump.server.open_pump`: storage, node, gRPC and HTTP
servers), so TiDB and the pump client write to it over gRPC exactly as to a
standalone pump. :func:`start_pump_actor` is the one factory that makes it
remote, and every Ray API call goes through :mod:`actors.ray_calls`, so the plain
class is usable (and testable) without Ray.

- Placement: ``NodeAffinitySchedulingStrategy(<node id>, soft=False)`` (the
  caller's node by default): the data dir lives on that node's disk. On a multi-node
  cluster give ``resources`` instead: a custom resource only the pump's machine offers
  (``ray start --resources='{"pump-host-1": 1}'``). A node id is gone for good when its
  node dies (the machine rejoins under a new one), so a pinned pump cannot come back; a
  resource comes back with the machine, and Ray keeps the pump's restart pending until
  a node offering it joins, then reruns ``__init__`` there, on the same data dir
  (``tests/ray/test_multinode.py``).
- Crashes: ``max_restarts`` (default -1, unlimited); Ray reruns ``__init__``
  with the same config, which reopens the same ``data_dir`` (the storage
  recovers; the node id stays in ``data_dir/.node``). Those arguments (config,
  registry client, upstream resolver) pickle to about 1 KiB, so Ray keeps them in the
  actor's record, not in the object store: a restart needs nothing from the driver that
  created the actor (gone, for a detached pump). Calls are retried
  ``max_task_retries`` times across a restart; ``pull`` is idempotent.
- Threads: ``max_concurrency`` calls run at once, so a long-polling ``pull``
  does not block ``status``. The gRPC server (``grpc.aio``) runs on its own
  event-loop thread inside the actor process, as in the standalone pump, so
  TiDB's writes never wait for an actor call slot.

``pull(since_commit_ts, max_bytes, timeout_s) -> (batch, watermark)``:
``batch`` is one ``list[tuple[int, bytes]]`` of ``(commit_ts, payload)`` in
ascending commit_ts (payload = the marshalled Commit binlog with its prewrite
value filled, or a fake binlog), at most about ``max_bytes``. ``watermark`` is
an ``int``: every binlog this pump will serve with commit_ts <= watermark is in
the batch or at or below ``since_commit_ts``. With nothing new the call
long-polls up to ``timeout_s`` (default 1 s) and returns an empty batch.
With ``packed=True`` the batch comes as one ``bytes``
(:func:`tidb_binlog.packed.pack`; :func:`~tidb_binlog.packed.unpack` restores
it), which Ray moves several times cheaper than a list of tuples: the drainer's
pump feeds ask for that.
Call it as ``actor.pull.options(num_returns=2).remote(...)`` to get
``(batch_ref, watermark_ref)``: the batch then stays in the object store, owned
by the caller (so it outlives a pump crash), and can be handed to another actor
without passing through the caller.

Large transactions by reference: ``pull(..., ref_above=N)`` (N > 0; default 0 =
every payload whole) serves a Commit whose payload is N bytes or more as
``(commit_ts, BinlogRef(node_id, commit_ts, start_ts, size))``
(:mod:`tidb_binlog.binlog_ref`) instead of its bytes; the pump never builds that
payload. At most one reference per batch, as its last item, counted as a small item
against ``max_bytes``; packed batches carry it as any other value.
``read_payload(commit_ts, offset, size)`` returns bytes ``[offset, offset+size)`` of
that payload (byte for byte what a whole pull would have served), read from the
value log by ``commit_ts`` on every call: idempotent, so Ray retries it across a pump
restart (``max_task_retries``) like ``pull``. It comes out of band, as a
``pickle.PickleBuffer``: Ray writes it straight into the object store and
``ray.get`` gives the caller a read-only buffer over it (``memoryview()`` it), so
the caller holds only the object store's pages (measured with 64 MiB: +0 private,
+1x shared; a ``bytes`` return costs the caller +1x private on top). Errors are
``tidb_binlog.errors`` naming the pump and the commit_ts: PurgedError (at or below
gc_ts), StorageError (nothing served there: pull again), ProtocolError (a range
outside the payload), CorruptRecord, UnavailableError (the pump is stopped).
"""

from __future__ import annotations

import os
import pickle

from actors.process import setup_actor_logging
from actors.ray_calls import RayCalls, mirror_metrics
from tidb_binlog.drainer.pipeline.names import pump_actor_name
from tidb_binlog.errors import InvalidArgument
from tidb_binlog.node import NodeStatus
from tidb_binlog.packed import pack
from tidb_binlog.pump.server import open_pump

__all__ = ["PumpActor", "start_pump_actor"]

DEFAULT_PULL_TIMEOUT_S = 1.0


class PumpActor:
    """A running pump (storage, node, gRPC and HTTP servers) for one data dir."""

    def __init__(self, config, *, registry=None, resolver=None, storage_factory=None):
        setup_actor_logging()  # node_id on every log line (actors/process.py)
        storage = storage_factory(config) if storage_factory is not None else None
        self._proc = open_pump(config, registry=registry, resolver=resolver, storage=storage)
        self._mirror = mirror_metrics(pump_actor_name(self._proc.node.node_id),
                                      self._metrics_text)

    def _metrics_text(self) -> bytes:
        node = self._proc.node
        node.metrics.observe_storage(node.storage)
        return node.metrics.exposition()

    def mirrored_metrics(self) -> dict:
        """What was last copied into ``ray.util.metrics``: ``(name, tags) -> value``."""
        return dict(self._mirror.values) if self._mirror is not None else {}

    @property
    def node(self):
        return self._proc.node

    def address(self) -> str:
        """The gRPC ``host:port`` TiDB / the pump client writes to."""
        return self._proc.addr

    def status_address(self) -> str:
        return self._proc.status_addr

    def status(self) -> NodeStatus:
        return self._proc.node.status()

    def pull(self, since_commit_ts: int, max_bytes: int = 4 << 20,
             timeout_s: float = DEFAULT_PULL_TIMEOUT_S, packed: bool = False,
             ref_above: int = 0):
        batch, watermark = self._proc.node.pull(since_commit_ts, max_bytes, timeout_s,
                                                ref_above)
        if packed:
            return pack(batch), watermark
        return batch, watermark

    def read_payload(self, commit_ts: int, offset: int, size: int) -> pickle.PickleBuffer:
        """Bytes ``[offset, offset+size)`` of the payload served at ``commit_ts`` (what a
        ``BinlogRef`` from :meth:`pull` names), out of band (see the module doc)."""
        return pickle.PickleBuffer(self._proc.node.read_payload(commit_ts, offset, size))

    def pause(self) -> str:
        return self._proc.node.apply_action(self._proc.node.node_id, "pause")

    def close(self) -> str:
        """Start going offline (closing → offline once every drainer caught up)."""
        return self._proc.node.apply_action(self._proc.node.node_id, "close")

    def stop(self) -> None:
        """Graceful stop: paused, servers down, storage closed (the actor stays)."""
        self._proc.stop()

    def pid(self) -> int:
        return os.getpid()


def start_pump_actor(config, *, name: str | None = None, namespace: str | None = None,
                     registry=None, resolver=None, storage_factory=None,
                     node_id: str | None = None, max_restarts: int = -1,
                     max_task_retries: int = 3, max_concurrency: int = 16,
                     num_cpus: float = 0, lifetime: str | None = None,
                     resources: dict[str, float] | None = None):
    """Create a PumpActor pinned to ``node_id`` (default: the caller's node), or, with
    ``resources`` (custom resources, e.g. ``{"pump-host-1": 1}``), placed on a node
    offering them (see the module doc: the way to survive a node's death)."""
    if resources and node_id is not None:
        raise InvalidArgument("place a pump either by node_id or by resources, not both")
    return RayCalls.start_actor(
        PumpActor, config, registry=registry, resolver=resolver,
        storage_factory=storage_factory, options=dict(
            max_restarts=max_restarts, max_task_retries=max_task_retries,
            max_concurrency=max_concurrency, num_cpus=num_cpus, name=name,
            namespace=namespace, lifetime=lifetime, resources=resources or None,
            scheduling_strategy=None if resources else RayCalls.pinned(node_id)))
