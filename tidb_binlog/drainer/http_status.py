"""The drainer's HTTP status API (TiDB's ``drainer/server.go``), stdlib only.

TiDB serves it on the drainer's one port with cmux; grpcio cannot share a
socket, so it listens on its own address (the Cistern port + 1 by default, like
the pump: ``tidb_binlog.pump.http_status.derive_status_addr``).

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

import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from tidb_binlog.drainer.metrics import CONTENT_TYPE_LATEST
from tidb_binlog.errors import BinlogError

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


class _Handler(BaseHTTPRequestHandler):
    owner: DrainerStatusServer = None  # set on a subclass per server
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        log.debug("http %s " + fmt, self.address_string(), *args)

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, doc) -> None:
        self._send(code, json.dumps(doc).encode(), "application/json")

    def _route(self, method: str) -> None:
        path = urlsplit(self.path).path
        parts = [p for p in path.split("/") if p]
        owner = self.owner
        try:
            if method == "GET" and parts == ["status"]:
                doc = status_document(owner.status_provider(), owner.wall_clock(),
                                      owner.synced_check_time_s)
                return self._json(200, doc)
            if method == "GET" and parts == ["commit_ts"]:
                st = owner.status_provider()
                ts = st.checkpoint_ts if st.latest_commit_ts is None else st.latest_commit_ts
                return self._json(200, {"message": "get drainer's latest ts success!",
                                        "code": 200, "data": {"ts": ts}})
            if method == "PUT" and len(parts) == 3 and parts[0] == "state":
                return self._action(parts[1], parts[2])
            if method == "GET" and parts == ["metrics"]:
                if owner.metrics_provider is None:
                    return self._json(404, {"message": "no metrics registered", "code": 404})
                return self._send(200, owner.metrics_provider(), CONTENT_TYPE_LATEST)
        except Exception as exc:
            log.exception("HTTP %s %s failed", method, self.path)
            return self._json(500, {"message": f"{type(exc).__name__}: {exc}", "code": 500})
        return self._json(404, {"message": f"no route for {method} {path}", "code": 404})

    def _action(self, node_id: str, action: str) -> None:
        owner = self.owner
        if node_id != owner.node_id:
            return self._json(400, {"message": f"node {node_id!r} is not this drainer "
                                    f"({owner.node_id!r}); send the action to that drainer",
                                    "code": 400})
        if action not in ACTIONS:
            return self._json(400, {"message": f"unknown action {action!r}; use one of "
                                    f"{list(ACTIONS)}", "code": 400})
        if owner.on_action is None:
            return self._json(400, {"message": "this drainer does not accept actions",
                                    "code": 400})
        try:
            owner.on_action(action)
        except BinlogError as exc:
            return self._json(400, {"message": str(exc), "code": 400})
        return self._json(200, {"message": f"apply action {action} success!", "code": 200})

    def do_GET(self):
        self._route("GET")

    def do_PUT(self):
        self._route("PUT")

    def do_POST(self):
        self._route("POST")


class _Server(ThreadingHTTPServer):
    """Threaded HTTP server; TLS handshakes run in the connection's own thread."""

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def finish_request(self, request, client_address):
        if self.ssl_context is not None:
            request = self.ssl_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        log.warning("HTTP connection from %s failed", client_address, exc_info=True)


class DrainerStatusServer:
    """The API above on ``addr`` (``host:port``, port 0 picks one), on its own thread."""

    def __init__(self, addr: str, *, node_id: str,
                 status_provider: Callable[[], DrainerStatus],
                 metrics_provider: Callable[[], bytes] | None = None,
                 on_action: Callable[[str], None] | None = None,
                 synced_check_time_s: float = 300.0,
                 wall_clock: Callable[[], float] = time.time,
                 ssl_context: ssl.SSLContext | None = None):
        self.node_id = node_id
        self.status_provider = status_provider
        self.metrics_provider = metrics_provider
        self.on_action = on_action
        self.synced_check_time_s = synced_check_time_s
        self.wall_clock = wall_clock
        host, _, port = addr.rpartition(":")
        handler = type("DrainerStatusHandler", (_Handler,), {"owner": self})
        self.httpd = _Server((host, int(port)), handler)
        self.httpd.ssl_context = ssl_context
        self.port = self.httpd.server_address[1]
        self.addr = f"{host}:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.1,),
                                        name="drainer-http", daemon=True)

    def start(self) -> DrainerStatusServer:
        self._thread.start()
        log.info("drainer HTTP status listening on %s", self.addr)
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
