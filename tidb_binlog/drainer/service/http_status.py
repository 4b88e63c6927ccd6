"""The drainer's HTTP status API (TiDB's ``drainer/server.go``), stdlib only.

TiDB serves it on the drainer's one port with cmux; grpcio cannot share a
socket, so it listens on its own address (the Cistern port + 1 by default, like
the pump: ``tidb_binlog.http_server.derive_status_addr``).

=================================== ==========================================================
``GET /status``                      ``{"PumpPos": {nodeID: ts}, "Synced": bool, "LastTS":
                                     <checkpoint ts>, "TsMap": ""}``
``GET /commit_ts``                   ``{"message": "get drainer's latest ts success!", "code":
                                     200, "data": {"ts": <latest commit ts>}}``
``PUT /state/{nodeID}/{action}``     ``pause`` or ``close``, only for this drainer's node id:
                                     ``on_action(action)`` (which must only start the work),
                                     then ``{"message": "apply action X success!", "code": 200}``;
                                     refused with ``code`` 400 and the reason
``GET /metrics``                     Prometheus text of ``metrics_provider()``
=================================== ==========================================================

``status_provider()`` returns a :class:`DrainerStatus` (the shell gathers it from
its actors).  ``Synced`` is true once nothing was synced for
``synced_check_time_s`` (``synced-check-time``, 5 minutes): TiDB's meaning, "the
drainer has caught up and is idle".
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tidb_binlog.drainer.service.metrics import CONTENT_TYPE_LATEST
from tidb_binlog.errors import BinlogError
from tidb_binlog.http_server import HttpServer, Request, Response, json_response

__all__ = ["DrainerStatus", "DrainerStatusServer", "status_document", "ACTIONS"]

log = logging.getLogger(__name__)

ACTIONS = ("pause", "close")


@dataclass(frozen=True)
class DrainerStatus:
    """What ``GET /status`` and ``GET /commit_ts`` report."""

    checkpoint_ts: int
    last_sync_s: float                  # wall-clock time of the last item synced (or start)
    pump_positions: dict[str, int] = field(default_factory=dict)
    latest_commit_ts: int | None = None  # the last commit_ts synced; checkpoint_ts when None


def status_document(status: DrainerStatus, now_s: float, synced_check_time_s: float) -> dict:
    return {
        "PumpPos": dict(status.pump_positions),
        "Synced": now_s - status.last_sync_s >= synced_check_time_s,
        "LastTS": status.checkpoint_ts,
        "TsMap": "",
    }


class DrainerStatusServer:
    """The API above on ``addr`` (``host:port``, port 0 picks one), on its own thread
    (:class:`tidb_binlog.http_server.HttpServer`: unknown routes 404, failures 500)."""

    def __init__(self, addr: str, *, node_id: str,
                 status_provider: Callable[[], DrainerStatus],
                 metrics_provider: Callable[[], bytes] | None = None,
                 on_action: Callable[[str], None] | None = None,
                 synced_check_time_s: float = 300.0,
                 wall_clock: Callable[[], float] = time.time,
                 ssl_context: ssl.SSLContext | None = None, allowed_cn: tuple[str, ...] = ()):
        self.node_id = node_id
        self.status_provider = status_provider
        self.metrics_provider = metrics_provider
        self.on_action = on_action
        self.synced_check_time_s = synced_check_time_s
        self.wall_clock = wall_clock
        self._http = HttpServer(addr, self._route, name="drainer-http",
                                ssl_context=ssl_context, allowed_cn=allowed_cn)
        self.httpd = self._http.httpd
        self.port = self._http.port
        self.addr = self._http.addr

    def _route(self, req: Request) -> Response | None:
        parts = req.parts
        if req.method == "GET" and parts == ["status"]:
            doc = status_document(self.status_provider(), self.wall_clock(),
                                  self.synced_check_time_s)
            return json_response(200, doc)
        if req.method == "GET" and parts == ["commit_ts"]:
            st = self.status_provider()
            ts = st.checkpoint_ts if st.latest_commit_ts is None else st.latest_commit_ts
            return json_response(200, {"message": "get drainer's latest ts success!",
                                       "code": 200, "data": {"ts": ts}})
        if req.method == "PUT" and len(parts) == 3 and parts[0] == "state":
            return self._action(parts[1], parts[2])
        if req.method == "GET" and parts == ["metrics"]:
            if self.metrics_provider is None:
                return json_response(404, {"message": "no metrics registered", "code": 404})
            return Response(200, self.metrics_provider(), CONTENT_TYPE_LATEST)
        return None

    def _action(self, node_id: str, action: str) -> Response:
        if node_id != self.node_id:
            return json_response(400, {"message": f"node {node_id!r} is not this drainer "
                                       f"({self.node_id!r}); send the action to that drainer",
                                       "code": 400})
        if action not in ACTIONS:
            return json_response(400, {"message": f"unknown action {action!r}; use one of "
                                       f"{list(ACTIONS)}", "code": 400})
        if self.on_action is None:
            return json_response(400, {"message": "this drainer does not accept actions",
                                       "code": 400})
        try:
            self.on_action(action)
        except BinlogError as exc:
            return json_response(400, {"message": str(exc), "code": 400})
        return json_response(200, {"message": f"apply action {action} success!", "code": 200})

    def start(self) -> DrainerStatusServer:
        self._http.start()
        log.info("drainer HTTP status listening on %s", self.addr)
        return self

    def stop(self) -> None:
        self._http.stop()
