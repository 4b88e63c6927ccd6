"""The registry's state: PD's etcd role (node records, cluster id) and its TSO.

This is the pure core behind ``cluster.registry.RegistryActor`` and
``tidb_binlog.testing.registry.InMemoryRegistry``. It is single-threaded (the
owner serialises calls) and does no waiting; watching is built on
:meth:`RegistryState.changes_since` by the owner.

Records
    One :class:`~tidb_binlog.node.NodeStatus` per node, keyed like TiDB Binlog's
    etcd layout: ``/tidb-binlog/v1/<kind>/<nodeID>`` with ``kind`` ``pumps`` or
    ``drainers``. :meth:`update_node` is create-or-update (TiDB writes with a
    plain put). Every change bumps one global ``revision``; each record keeps the
    revision that last changed it (etcd's ``mod_revision``). Records are never
    deleted: an ``offline`` node stays listed, as in TiDB.

State changes
    A new record may start in any state. An existing record may move only along
    :data:`ALLOWED_TRANSITIONS` (TiDB's state machine, plus "back to online",
    which a restarted or re-added node writes). Anything else raises
    :class:`~tidb_binlog.errors.StateError`; ``force=True`` (binlogctl's
    ``update-pump``/``update-drainer``) writes the state regardless.

Liveness (``isAlive``)
    Derived on every read, never stored: a node is alive iff its state is not
    ``offline`` and its ``updateTS`` (a TSO the node stamps on each heartbeat)
    is at most ``alive_timeout_s`` older than the registry's clock. A record
    written with ``updateTS == 0`` is stamped with a fresh TSO by the registry.
    Liveness going stale bumps no revision: watchers learn of it at their next
    read, like TiDB where ``isAlive`` is informational only.

TSO
    An embedded :class:`~tidb_binlog.tso.TimestampOracle` whose high-water mark
    lives in ``<data_dir>/tso``; :meth:`get_ts` hands out ``count`` consecutive
    timestamps and returns the first. Monotonic across restarts.

Persistence
    ``<data_dir>/registry.json`` is rewritten on every change: write to a
    temporary file, fsync, rename over the old one, fsync the directory. A
    restarted registry therefore has every record, the revision counter and the
    cluster id exactly as acknowledged. ``data_dir=None`` keeps everything in
    memory (unit tests).

KV
    A small string map (:meth:`kv_get`, :meth:`kv_put`) for facts that are not a
    node record, such as a drainer's service safe point. Changes bump the revision.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from tidb_binlog.errors import InvalidArgument, StateError, StorageError
from tidb_binlog.node import (
    CLOSING,
    DRAINER,
    OFFLINE,
    ONLINE,
    PAUSED,
    PAUSING,
    PUMP,
    STATES,
    NodeStatus,
)
from tidb_binlog.tso import TimestampOracle, extract_physical

__all__ = [
    "ROOT_PATH",
    "KINDS",
    "ALLOWED_TRANSITIONS",
    "DEFAULT_ALIVE_TIMEOUT_S",
    "SNAPSHOT_FILE",
    "TSO_FILE",
    "node_key",
    "analyze_node_id",
    "RegistryState",
]

ROOT_PATH = "/tidb-binlog/v1"
KINDS = (PUMP, DRAINER)

# Where an existing record may go next (staying in the same state is always allowed).
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    ONLINE: frozenset({PAUSING, PAUSED, CLOSING, OFFLINE}),
    PAUSING: frozenset({PAUSED, ONLINE}),
    PAUSED: frozenset({ONLINE, CLOSING, OFFLINE}),
    CLOSING: frozenset({OFFLINE, ONLINE}),
    OFFLINE: frozenset({ONLINE}),
}

# A pump heartbeats every 2 s and a drainer every 1 s: five missed pump beats.
DEFAULT_ALIVE_TIMEOUT_S = 10.0

# The registry snapshot. Invariant: it always holds every record, the revision and
# the cluster id as of the last acknowledged change (rewritten atomically on each one).
SNAPSHOT_FILE = "registry.json"
# The TSO high-water mark (TimestampOracle's file). Invariant: no timestamp at or
# above this mark was ever handed out, so a restart resumes strictly above it.
TSO_FILE = "tso"

_SNAPSHOT_VERSION = 1


def node_key(kind: str, node_id: str) -> str:
    """The etcd key of a node record: ``/tidb-binlog/v1/pumps/<nodeID>``."""
    _check_kind(kind)
    if not node_id:
        raise InvalidArgument("node_id must not be empty")
    return f"{ROOT_PATH}/{kind}/{node_id}"


def analyze_node_id(key: str) -> str:
    """The node id in a registry key; accepts TiDB's old ``/tidb-binlog/pumps/<id>`` too."""
    parts = key.rstrip("/").split("/")
    for kind in KINDS:
        if kind in parts:
            node_id = "/".join(parts[parts.index(kind) + 1:])
            if node_id:
                return node_id
    raise InvalidArgument(f"{key!r} is not a registry node key (expected {ROOT_PATH}/<pumps|drainers>/<nodeID>)")


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InvalidArgument(f"unknown node kind {kind!r}; expected one of {KINDS}")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RegistryState:
    """Node records, revision, cluster id, KV and TSO; optionally persisted to ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike | None = None, *,
                 alive_timeout_s: float = DEFAULT_ALIVE_TIMEOUT_S,
                 tso_window_ms: int = 3000, clock_ms: Callable[[], int] = _now_ms):
        if alive_timeout_s <= 0:
            raise InvalidArgument("alive_timeout_s must be positive")
        self._dir = Path(data_dir) if data_dir is not None else None
        self._alive_timeout_ms = int(alive_timeout_s * 1000)
        self._clock_ms = clock_ms
        # key -> (mod_revision, status as stored, without derived liveness)
        self._records: dict[str, tuple[int, NodeStatus]] = {}
        self._kv: dict[str, str] = {}
        self._revision = 0
        self._cluster_id = 0
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._load()
        if self._cluster_id == 0:
            # A random non-zero u64, generated once and persisted before first use.
            self._cluster_id = secrets.randbits(64) or 1
            self._persist()
        tso_path = self._dir / TSO_FILE if self._dir is not None else None
        self._tso = TimestampOracle(tso_path, window_ms=tso_window_ms, clock_ms=clock_ms)

    # -- identity and TSO ----------------------------------------------------

    @property
    def cluster_id(self) -> int:
        return self._cluster_id

    @property
    def revision(self) -> int:
        return self._revision

    def get_ts(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive timestamps; return the first."""
        return self._tso.get_ts(count)

    # -- node records --------------------------------------------------------

    def update_node(self, kind: str, status: NodeStatus, *, force: bool = False) -> int:
        """Create or update a node record; return the new revision.

        Raises StateError when the record exists and its state may not move to
        ``status.state`` (see :data:`ALLOWED_TRANSITIONS`), unless ``force``.
        """
        key = node_key(kind, status.node_id)
        if status.state not in STATES:
            raise StateError(f"unknown state {status.state!r} for {key}", state=status.state)
        old = self._records.get(key)
        if old is not None and not force:
            before = old[1].state
            if status.state != before and status.state not in ALLOWED_TRANSITIONS[before]:
                allowed = ", ".join(sorted(ALLOWED_TRANSITIONS[before]))
                raise StateError(
                    f"{kind[:-1]} {status.node_id} cannot move from {before} to {status.state} "
                    f"(allowed from {before}: {allowed}); an operator may force it "
                    "(binlogctl update-pump/update-drainer)", state=before)
        stored = status.copy(is_alive=True)
        if stored.update_ts == 0:
            stored.update_ts = self._tso.get_ts()
        self._apply(lambda: self._records.__setitem__(key, (self._revision, stored)),
                    lambda: self._records.__setitem__(key, old) if old is not None
                    else self._records.pop(key))
        return self._revision

    def node(self, kind: str, node_id: str) -> NodeStatus | None:
        entry = self._records.get(node_key(kind, node_id))
        return None if entry is None else self._with_liveness(entry[1])

    def nodes(self, kind: str) -> list[NodeStatus]:
        """Every record of ``kind``, ordered by node id, with ``is_alive`` derived."""
        _check_kind(kind)
        prefix = f"{ROOT_PATH}/{kind}/"
        return [self._with_liveness(st) for key, (_, st) in sorted(self._records.items())
                if key.startswith(prefix)]

    def changes_since(self, kind: str, revision: int) -> tuple[int, list[NodeStatus]]:
        """The current revision and the ``kind`` records changed after ``revision``.

        A ``revision`` above the current one (the caller saw a registry whose data
        was lost) reports every record, so the caller resynchronises.
        """
        _check_kind(kind)
        prefix = f"{ROOT_PATH}/{kind}/"
        if revision > self._revision:
            revision = -1
        changed = [self._with_liveness(st) for key, (mod, st) in sorted(self._records.items())
                   if key.startswith(prefix) and mod > revision]
        return self._revision, changed

    def _with_liveness(self, status: NodeStatus) -> NodeStatus:
        age_ms = self._clock_ms() - extract_physical(status.update_ts)
        alive = status.state != OFFLINE and age_ms <= self._alive_timeout_ms
        return status.copy(is_alive=alive)

    # -- KV --------------------------------------------------------------------

    def kv_get(self, key: str) -> str | None:
        return self._kv.get(key)

    def kv_put(self, key: str, value: str) -> int:
        """Store a string value; return the new revision."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument("registry KV keys and values are str")
        old = self._kv.get(key)
        self._apply(lambda: self._kv.__setitem__(key, value),
                    lambda: self._kv.__setitem__(key, old) if old is not None
                    else self._kv.pop(key))
        return self._revision

    # -- persistence -----------------------------------------------------------

    def _apply(self, change: Callable[[], None], undo: Callable[[], None]) -> None:
        """Bump the revision, make ``change`` and persist it; undo both if persisting fails."""
        self._revision += 1
        change()
        try:
            self._persist()
        except StorageError:
            undo()
            self._revision -= 1
            raise

    def _load(self) -> None:
        path = self._dir / SNAPSHOT_FILE
        if not path.exists():
            return
        try:
            doc = json.loads(path.read_text())
            if doc.get("version") != _SNAPSHOT_VERSION:
                raise StorageError(f"registry snapshot {path} has version "
                                   f"{doc.get('version')!r}, not {_SNAPSHOT_VERSION}: written by "
                                   "another build; run that build, or remove the directory to "
                                   "start a new cluster (new cluster id)")
            self._cluster_id = int(doc["clusterID"])
            self._revision = int(doc["revision"])
            self._kv = {str(k): str(v) for k, v in doc.get("kv", {}).items()}
            for key, entry in doc["nodes"].items():
                self._records[key] = (int(entry["modRevision"]), NodeStatus.from_json(entry["value"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(
                f"registry snapshot {path} is unreadable ({exc}); restore it from a backup, "
                "or remove the directory to start a new cluster (new cluster id)") from exc

    def _persist(self) -> None:
        if self._dir is None:
            return
        doc = {
            "version": _SNAPSHOT_VERSION,
            "clusterID": self._cluster_id,
            "revision": self._revision,
            "nodes": {key: {"modRevision": mod, "value": st.to_json()}
                      for key, (mod, st) in self._records.items()},
            "kv": self._kv,
        }
        path = self._dir / SNAPSHOT_FILE
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(doc, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StorageError(f"cannot persist the registry snapshot to {path}: {exc}") from exc
