"""Node states and status records shared by pumps, drainers and the registry.

A node (pump or drainer) publishes a :class:`NodeStatus` to the registry (PD's
etcd role in TiDB Binlog). The JSON form uses TiDB Binlog's field names so the
records read the same as ``/tidb-binlog/v1/pumps/<nodeID>`` values in etcd.

State machine (TiDB Binlog's): ``online`` ⇄ ``pausing`` → ``paused`` → ``online``;
``online`` → ``closing`` → ``offline``. Only an ``online`` pump accepts
Prewrite binlogs; a drainer merges every pump that is not ``offline``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Protocol

from tidb_binlog.errors import InvalidArgument

__all__ = [
    "ONLINE",
    "PAUSING",
    "PAUSED",
    "CLOSING",
    "OFFLINE",
    "STATES",
    "PUMP",
    "DRAINER",
    "NodeStatus",
    "RegistryClient",
    "TxnStatus",
    "TxnStatusResolver",
    "WATCH_STOP_CHECK_S",
]

ONLINE = "online"
PAUSING = "pausing"
PAUSED = "paused"
CLOSING = "closing"
OFFLINE = "offline"
STATES = (ONLINE, PAUSING, PAUSED, CLOSING, OFFLINE)

WATCH_STOP_CHECK_S = 0.1
"""How often a long-polling ``RegistryClient.watch`` looks at its ``stop`` event."""

PUMP = "pumps"
DRAINER = "drainers"


@dataclass
class NodeStatus:
    """One node's registry record (TiDB Binlog's ``node.Status``)."""

    node_id: str
    host: str
    state: str = ONLINE
    is_alive: bool = True
    score: int = 0
    label: dict | None = None
    max_commit_ts: int = 0
    update_ts: int = 0
    # What the node refuses now and why (a pump's disk guard), "" when nothing: not in
    # TiDB's record, so it is written as "errMsg" only when set
    err_msg: str = ""

    def __post_init__(self):
        if self.state not in STATES:
            raise InvalidArgument(f"unknown node state {self.state!r}; expected one of {STATES}")

    def to_json(self) -> str:
        d = {
            "nodeId": self.node_id, "host": self.host, "state": self.state,
            "isAlive": self.is_alive, "score": self.score, "label": self.label,
            "maxCommitTS": self.max_commit_ts, "updateTS": self.update_ts,
        }
        if self.err_msg:
            d["errMsg"] = self.err_msg
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str | bytes) -> NodeStatus:
        d = json.loads(text)
        return cls(node_id=d["nodeId"], host=d["host"], state=d["state"],
                   is_alive=d.get("isAlive", True), score=d.get("score", 0),
                   label=d.get("label"), max_commit_ts=d.get("maxCommitTS", 0),
                   update_ts=d.get("updateTS", 0), err_msg=d.get("errMsg", ""))

    def copy(self, **changes) -> NodeStatus:
        d = asdict(self)
        d.update(changes)
        return NodeStatus(**d)


class RegistryClient(Protocol):
    """What pumps, drainers and the pump client need from the registry (PD).

    ``kind`` is :data:`PUMP` or :data:`DRAINER`. The Ray implementation lives in
    ``cluster/``; an in-memory one for unit tests in ``tidb_binlog.testing``.
    """

    def cluster_id(self) -> int: ...

    def get_ts(self, count: int = 1) -> int: ...

    def update_node(self, kind: str, status: NodeStatus) -> None: ...

    def nodes(self, kind: str) -> list[NodeStatus]: ...

    def node(self, kind: str, node_id: str) -> NodeStatus | None: ...

    def watch(self, kind: str, since_revision: int, timeout_s: float,
              stop: threading.Event | None = None) -> tuple[int, list[NodeStatus]] | None:
        """Block until the ``kind`` records change after ``since_revision`` (or the
        timeout passes); return the new revision and the current records. Once
        ``stop`` is set (looked at every :data:`WATCH_STOP_CHECK_S` at least) it returns
        None at once, so a closing watcher never stays inside a registry call."""
        ...


@dataclass(frozen=True)
class TxnStatus:
    """What the upstream (TiKV in TiDB) says about a transaction by start_ts.

    ``state`` is ``committed`` (then ``commit_ts`` is set), ``rolled_back`` or
    ``unknown`` (still running, or the upstream cannot tell yet).
    """

    state: str
    commit_ts: int = 0
    detail: str = field(default="", compare=False)

    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    UNKNOWN = "unknown"


class TxnStatusResolver(Protocol):
    """Resolves a prewrite whose commit binlog never arrived (TiKV's role)."""

    def txn_status(self, start_ts: int, prewrite_key: bytes) -> TxnStatus: ...
